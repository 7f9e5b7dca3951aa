#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# /app/inventory.db against the CSV read here; the agent's importer run as the agent on files drawn now.
set -eo pipefail
echo 0 > /logs/verifier/reward.txt
# gem runs the agent's programs through as-agent (as the agent's uid, in a child process); where there is
# none (Harbor), a stand-in on PATH runs them directly, for this script and the programs it starts alike.
command -v as-agent >/dev/null || { shim=$(mktemp -d) && printf '#!/bin/sh\nexec "$@"\n' > "$shim/as-agent" && chmod 755 "$shim/as-agent" && PATH="$shim:$PATH"; }
python3 -I - <<'PY'
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile

WORK = tempfile.mkdtemp()
os.chmod(WORK, 0o777)  # the agent's uid writes its databases here
rng = random.SystemRandom()


def as_agent(*args):
    """Run a program as the agent; its stdout (the check fails when it fails)."""
    run = subprocess.run(["as-agent", *args], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        sys.exit(f"{args[:3]} exited {run.returncode}: {run.stderr[-800:]}")
    return run.stdout


def as_owner(*args):
    """Run one of the checker's programs on the agent's files as their owner: directly where the checker is root
    (a container, Harbor), else as the agent (gem's sandbox: the checker's uid may not read private files)."""
    if os.getuid() == 0:
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    return as_agent(*args)


def fresh(name, script):
    """A database of the checker's at WORK/name built by ``script``, writable by the agent."""
    path = os.path.join(WORK, name)
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    os.chmod(path, 0o666)
    return path


def expect(got, want, what):
    if got != want:
        sys.exit(f"{what}: wanted {str(want)[:600]}, got {str(got)[:600]}")


def sql_literal(value):
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def inserts(table, rows):
    return "".join(f"INSERT INTO {table} VALUES ({', '.join(sql_literal(v) for v in row)});\n" for row in rows)


#: Runs one SQL statement (the file in argv[1]) on the database argv[2]; prints the rows as JSON.
QUERY = "import json, sqlite3, sys\ncon = sqlite3.connect(sys.argv[2])\nprint(json.dumps(con.execute(open(sys.argv[1]).read()).fetchall()))"
#: Runs an SQL script (argv[1]) on the database argv[2].
SCRIPT = "import sqlite3, sys\ncon = sqlite3.connect(sys.argv[2])\ncon.executescript(open(sys.argv[1]).read())\ncon.commit()"
import csv as _csv
import io as _io

WORDS = ["bolt", "nut, hex", 'say "cheese"', "line\nbreak", "washer", "gear", "  spaced  ", "ünïcode"]


def catalogue(rng, n):
    """A products CSV (text) with quoted commas, quotes and newlines, empty fields, padded and repeated skus."""
    out = _io.StringIO()
    writer = _csv.writer(out, lineterminator="\n")
    writer.writerow(["sku", "name", "price", "qty"])
    skus = [f"SKU-{rng.randrange(1000, 9999)}" for _ in range(max(1, n // 2))]
    for _ in range(n):
        price = rng.choice(["", str(rng.randrange(1, 5000) / 100), str(rng.randrange(1, 90)), "0.50"])
        qty = rng.choice(["", str(rng.randrange(0, 500)), "007"])
        writer.writerow([rng.choice(["", " ", "  "]) + rng.choice(skus) + rng.choice(["", " "]), rng.choice(WORDS), price, qty])
    return out.getvalue()


def imported(text, rows=None):
    """What the import leaves: {sku: (sku, name, price, qty, typeof(price), typeof(qty))}."""
    rows = dict(rows or {})
    for rec in _csv.DictReader(_io.StringIO(text)):
        sku = rec["sku"].strip()
        price = float(rec["price"]) if rec["price"] != "" else None
        qty = int(rec["qty"]) if rec["qty"] != "" else None
        rows[sku] = [sku, rec["name"], price, qty, "real" if price is not None else "null", "integer" if qty is not None else "null"]
    return rows

import hashlib

DUMP = """import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
print(json.dumps({
    "columns": [list(c) for c in con.execute("PRAGMA table_info(products)")],
    "rows": con.execute("SELECT sku, name, price, qty, typeof(price), typeof(qty) FROM products ORDER BY sku").fetchall(),
}))"""
COLUMNS = [[0, "sku", "TEXT", 0, None, 1], [1, "name", "TEXT", 1, None, 0], [2, "price", "REAL", 0, None, 0],
           [3, "qty", "INTEGER", 0, None, 0]]


def check(db, rows, what):
    got = json.loads(as_owner("python3", "-I", "-c", DUMP, db))
    expect(got["columns"], COLUMNS, f"{what}: the products table's columns")
    expect(got["rows"], [rows[k] for k in sorted(rows)], f"{what}: the rows")


with open("/app/data/products.csv", "rb") as fh:
    expect(hashlib.sha256(fh.read()).hexdigest(), "9ec759a71553d01c0cac0f749ed023d75e2e320a52d7f9289feee17448b08fc1", "/app/data/products.csv (unchanged)")
with open("/app/data/products.csv", newline="") as fh:
    check("/app/inventory.db", imported(fh.read()), "/app/inventory.db")
db = os.path.join(WORK, "new.db")
rows = {}
for step in range(2):  # a fresh database, then a second file into the same one (repeated skus replaced)
    text = catalogue(rng, rng.randrange(1, 40))
    path = os.path.join(WORK, f"in{step}.csv")
    with open(path, "w", newline="") as fh:
        fh.write(text)
    os.chmod(path, 0o644)
    as_agent("python3", "/app/import_csv.py", path, db)
    rows = imported(text, rows)
    check(db, rows, f"import {step + 1} of a file drawn now")
PY
echo 1 > /logs/verifier/reward.txt
