package main

import "testing"

func TestCount(t *testing.T) {
	cases := map[string]int{
		"one two three\n":        3,
		"  lead and trail  \n":   3,
		"tab\tseparated\twords":  3,
		"a  b   c\n\nd\n":        4,
		"":                       0,
		"   \n\t\n":              0,
	}
	for text, want := range cases {
		if got := Count(text); got != want {
			t.Errorf("Count(%q) = %d, want %d", text, got, want)
		}
	}
}
