#!/bin/bash
set -e
sed -i 's/def add(a, b)$/def add(a, b):/' /app/calc.py
