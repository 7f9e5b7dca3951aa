#!/bin/bash
set -e
printf '\ntest:\n\tpython3 test_util.py\n' >> /app/Makefile
sed -i 's/return s\[::-1\]\[::-1\]/return s[::-1]/' /app/util.py
