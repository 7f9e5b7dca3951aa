#!/bin/bash
set -e
sed -i 's/^    /\t/' /app/Makefile
cd /app && make
