#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The agent's report runs as the agent, on databases drawn now (months without sales, other years).
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
SCHEMA = """CREATE TABLE orders (id INTEGER PRIMARY KEY, placed_at TEXT NOT NULL, amount_cents INTEGER NOT NULL,
                     status TEXT NOT NULL);
"""


def sales(rng, n, empty_months):
    """Orders of 2023 to 2025 (mostly 2024), paid or refunded, none in ``empty_months`` of 2024."""
    rows = []
    while len(rows) < n:
        year = rng.choice([2023, 2024, 2024, 2024, 2025])
        month = rng.randrange(1, 13)
        if year == 2024 and month in empty_months:
            continue
        day = rng.choice([1, 15, 28]) if month == 2 else rng.choice([1, 15, 30])
        when = f"{year}-{month:02d}-{day:02d} {rng.choice(['00:00:00', '12:30:00', '23:59:59'])}"
        rows.append((len(rows) + 1, when, rng.randrange(1, 100000), rng.choice(["paid", "paid", "paid", "refunded"])))
    return rows


def report(rows):
    want = []
    for month in range(1, 13):
        paid = [a for _, when, a, s in rows if s == "paid" and when.startswith(f"2024-{month:02d}-")]
        want.append([f"2024-{month:02d}", sum(paid) / 100, len(paid)])
    return want


if not os.path.isfile("/app/report.sql"):
    sys.exit("no /app/report.sql")
shutil.copy("/app/report.sql", os.path.join(WORK, "report.sql"))
os.chmod(os.path.join(WORK, "report.sql"), 0o644)
for n, empty in [(rng.randrange(40, 400), set(rng.sample(range(1, 13), 3))), (5, set(range(1, 13))), (1, set())]:
    rows = sales(rng, n, empty)
    db = fresh(f"sales{n}.db", SCHEMA + inserts("orders", rows))
    got = json.loads(as_agent("python3", "-I", "-c", QUERY, os.path.join(WORK, "report.sql"), db))
    want = report(rows)
    if len(got) != 12 or any(
        len(g) != 3 or g[0] != w[0] or g[2] != w[2] or not isinstance(g[1], (int, float)) or abs(g[1] - w[1]) > 0.005
        for g, w in zip(got, want)
    ):
        sys.exit(f"{n} orders, 2024 months without sales {sorted(empty)}: wanted {want}, got {got}")
PY
echo 1 > /logs/verifier/reward.txt
