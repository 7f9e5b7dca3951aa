#!/bin/bash
set -e
cd /go/wordcount
sed -i 's/len(strings.Split(line, " "))/len(strings.Fields(line))/' main.go
go build -o /usr/local/bin/wordcount .
