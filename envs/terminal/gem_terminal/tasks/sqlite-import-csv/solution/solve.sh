#!/bin/bash
set -e
cat > /app/import_csv.py <<'PY'
import csv
import sqlite3
import sys

csv_path, db_path = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db_path)
con.execute(
    "CREATE TABLE IF NOT EXISTS products (sku TEXT PRIMARY KEY, name TEXT NOT NULL, price REAL, qty INTEGER)"
)
with open(csv_path, newline="", encoding="utf-8") as fh:
    for row in csv.DictReader(fh):
        price = float(row["price"]) if row["price"] != "" else None
        qty = int(row["qty"]) if row["qty"] != "" else None
        con.execute("INSERT OR REPLACE INTO products VALUES (?, ?, ?, ?)", (row["sku"].strip(), row["name"], price, qty))
con.commit()
PY
python3 /app/import_csv.py /app/data/products.csv /app/inventory.db
