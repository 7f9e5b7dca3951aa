#!/bin/bash
set -e
cd /app/shop
git reset -q HEAD~1
sed -i '/print("DEBUG/d' src/cart.py
git add src && git commit -qm 'cart: add discount'
git add docs && git commit -qm 'docs: document discount'
