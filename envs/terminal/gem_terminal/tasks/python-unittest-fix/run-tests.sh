#!/bin/bash
# Exit 0 when the task is solved.
set -e
cd /app
cd shop
python3 -m unittest -q 2>&1 | tail -n 3
python3 -m unittest -q
cmp tests/test_cart.py /tests/test_cart.py
