#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's query runs as the agent, on shops drawn now (one with a tie, one with few buyers).
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
NAMES = ["Ada", "Bea", "Cy", "Dov", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kit", "Lou", "Max", "Ned"]
SCHEMA = """CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     status TEXT NOT NULL, placed_at TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id), product TEXT NOT NULL,
                          quantity INTEGER NOT NULL, unit_price REAL NOT NULL);
"""


def shop(rng, ties=False, few=False):
    """(customers, orders, items) of a random shop; prices are quarters, so float sums are exact."""
    names = rng.sample(NAMES, 4 if few else 10)
    customers = [(i + 1, n) for i, n in enumerate(names)]
    orders, items = [], []
    for cid, _ in customers:
        for _ in range(rng.randrange(0 if few else 1, 6)):
            year = rng.choice([2023, 2024, 2024, 2024, 2025])
            day = rng.choice(["01-01 00:00:00", "03-15 12:30:00", "07-04 09:00:00", "12-31 23:59:59"])
            status = rng.choice(["paid", "paid", "paid", "cancelled", "pending"])
            oid = len(orders) + 1
            orders.append((oid, cid, status, f"{year}-{day}"))
            for _ in range(rng.randrange(1, 4)):
                items.append((oid, rng.choice(["pen", "ink", "pad", "map"]), rng.randrange(1, 6), rng.randrange(1, 400) / 4))
    if ties:  # a second customer with exactly the orders of the first: equal totals
        src, dst = customers[0][0], customers[1][0]
        for oid, cid, status, when in list(orders):
            if cid == src:
                new = len(orders) + 1
                orders.append((new, dst, status, when))
                items += [(new, p, q, u) for o, p, q, u in list(items) if o == oid]
    return customers, orders, items


def want(customers, orders, items):
    paid = {o: c for o, c, s, when in orders if s == "paid" and when.startswith("2024-")}
    totals = {}
    for o, _, q, u in items:
        if o in paid:
            totals[paid[o]] = totals.get(paid[o], 0) + q * u
    names = dict(customers)
    return sorted(((names[c], round(t, 2)) for c, t in totals.items()), key=lambda r: (-r[1], r[0]))[:3]


if not os.path.isfile("/app/top_customers.sql"):
    sys.exit("no /app/top_customers.sql")
shutil.copy("/app/top_customers.sql", os.path.join(WORK, "q.sql"))
os.chmod(os.path.join(WORK, "q.sql"), 0o644)
for round_, kind in enumerate(["plain", "ties", "few", "plain"]):
    customers, orders, items = shop(rng, ties=kind == "ties", few=kind == "few")
    script = SCHEMA + inserts("customers", customers) + inserts("orders", orders) + inserts("order_items", items)
    db = fresh(f"shop{round_}.db", script)
    got = json.loads(as_agent("python3", "-I", "-c", QUERY, os.path.join(WORK, "q.sql"), db))
    expected = want(customers, orders, items)
    expect([r[0] for r in got], [r[0] for r in expected], f"names ({kind})")
    if any(len(r) != 2 or not isinstance(r[1], (int, float)) or abs(r[1] - w[1]) > 0.005 for r, w in zip(got, expected)):
        sys.exit(f"totals ({kind}): wanted {expected}, got {got}")
PY
echo 1 > /logs/verifier/reward.txt
