#!/bin/bash
set -e
sort -u /app/names.txt > /app/unique.txt
