#!/bin/bash
# The stand-in as golang:1.24 has it: go on PATH, GOPATH=/go; the checker's own test beside the program,
# and the binary the agent rebuilt in /usr/local/bin.
cp /tests/count_test.go /go/wordcount/count_test.go
cd /go/wordcount
ok=1
[ "$GOPATH" = /go ] || { echo "GOPATH is '$GOPATH'"; ok=0; }
go test ./... || ok=0
[ "$(printf 'a  b\t c \n' | /usr/local/bin/wordcount)" = 3 ] || { echo "the installed wordcount counts wrong"; ok=0; }
echo $ok > /logs/verifier/reward.txt
