// Command wordcount prints how many words its standard input holds.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Count returns the number of words in text.
func Count(text string) int {
	total := 0
	scanner := bufio.NewScanner(strings.NewReader(text))
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" {
			continue
		}
		total += len(strings.Split(line, " "))
	}
	return total
}

func main() {
	data, err := os.ReadFile("/dev/stdin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(Count(string(data)))
}
