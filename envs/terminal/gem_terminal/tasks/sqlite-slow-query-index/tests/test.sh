#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# The query's plan on /app/events.db (its rows unchanged), and index.sql run as the agent on a database drawn now.
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
SCHEMA = """CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, kind TEXT NOT NULL,
                     ts INTEGER NOT NULL, payload TEXT);
CREATE INDEX idx_kind ON events(kind);
"""


def events(rng, n):
    return [(i, rng.randrange(1, 200), rng.choice(["view", "click", "buy", "login"]), rng.randrange(0, 10**6),
             "x" * rng.randrange(0, 40)) for i in range(1, n + 1)]

import hashlib
import re

FINGERPRINT = "SELECT count(*), sum(id * ts % 1000003), total(length(payload)), sum(user_id), group_concat(DISTINCT kind) FROM events"
INSPECT = """import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
query = open(sys.argv[2]).read()
print(json.dumps({
    "plan": [r[-1] for r in con.execute("EXPLAIN QUERY PLAN " + query, {"user": 7, "since": 5000})],
    "indexes": [[n, [c[2] for c in con.execute(f"PRAGMA index_info('{n}')")]] for _, n, *_ in con.execute("PRAGMA index_list(events)")],
    "fingerprint": list(con.execute(sys.argv[3]).fetchone()),
}))"""


def fast(got, what):
    """The plan searches an index on both conditions and sorts nothing; idx_kind is gone."""
    plan = " | ".join(got["plan"])
    if len(got["plan"]) != 1 or not re.fullmatch(r"SEARCH events USING (COVERING )?INDEX \w+ \(user_id=\? AND ts>\?\)", got["plan"][0]):
        sys.exit(f"{what}: the plan is {plan!r}")
    if any(columns == ["kind"] for _, columns in got["indexes"]):
        sys.exit(f"{what}: an index on kind alone is left: {got['indexes']}")


with open("/app/queries/recent.sql", "rb") as fh:
    expect(hashlib.sha256(fh.read()).hexdigest(), "194e6ce9c6b75b0b7f8bb028939b8c6bd64198017d93e909209770439c0aa48a", "/app/queries/recent.sql (unchanged)")
shutil.copy("/app/queries/recent.sql", os.path.join(WORK, "recent.sql"))
os.chmod(os.path.join(WORK, "recent.sql"), 0o644)
got = json.loads(as_owner("python3", "-I", "-c", INSPECT, "/app/events.db", os.path.join(WORK, "recent.sql"), FINGERPRINT))
expect(got["fingerprint"], [4000, 2009003322, 77650.0, 395810, 'click,view,buy,login'], "/app/events.db's rows (unchanged)")
fast(got, "/app/events.db")
if not os.path.isfile("/app/queries/index.sql"):
    sys.exit("no /app/queries/index.sql")
shutil.copy("/app/queries/index.sql", os.path.join(WORK, "index.sql"))
os.chmod(os.path.join(WORK, "index.sql"), 0o644)
rows = events(rng, rng.randrange(50, 400))
db = fresh("events.db", SCHEMA + inserts("events", rows))
as_agent("python3", "-I", "-c", SCRIPT, os.path.join(WORK, "index.sql"), db)
fast(json.loads(as_agent("python3", "-I", "-c", INSPECT, db, os.path.join(WORK, "recent.sql"), FINGERPRINT)), "index.sql on a database drawn now")
PY
echo 1 > /logs/verifier/reward.txt
