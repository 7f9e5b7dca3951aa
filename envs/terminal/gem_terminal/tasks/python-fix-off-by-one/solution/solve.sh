#!/bin/bash
set -e
sed -i 's/items\[-n - 1:\]/items[-n:] if n > 0 else []/' /app/lists.py
