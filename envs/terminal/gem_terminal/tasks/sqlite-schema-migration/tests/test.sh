#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# /app/app.db against its rows migrated here; the agent's migration run as the agent on databases drawn now.
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
FIRST = ["Ann", "Bo", "Cleo", "Dana", "Emil", "Mary Ann", "Jean Luc", "Zoe"]
LAST = ["Smith", "van der Berg", "O'Neil", "Li", ""]
V1 = """CREATE TABLE users (id INTEGER PRIMARY KEY, full_name TEXT NOT NULL, email TEXT);
CREATE TABLE posts (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id), title TEXT NOT NULL);
PRAGMA user_version = 1;
"""


def people(rng, n):
    """Version-1 rows: names with 1 to 4 words, emails in mixed case with spaces around, some missing."""
    users, posts, seen = [], [], set()
    for uid in rng.sample(range(1, 10 * n), n):
        name = (rng.choice(FIRST) + " " + rng.choice(LAST)).strip()
        email = None
        if rng.random() < 0.85:
            local = name.split()[0].lower() + str(uid)
            email = rng.choice(["", " ", "  "]) + rng.choice([local, local.upper(), local.title()]) + "@Example.ORG" + rng.choice(["", " "])
        users.append((uid, name, email))
    for pid in range(1, 2 * n):
        posts.append((pid, rng.choice(users)[0], f"post {pid}"))
    return sorted(users), posts

import random as _random

DUMP = """import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
indexes = [(n, u, [c[2] for c in con.execute(f"PRAGMA index_info('{n}')")]) for _, n, u, *_ in con.execute("PRAGMA index_list(users)")]
print(json.dumps({
    "version": con.execute("PRAGMA user_version").fetchone()[0],
    "columns": [c[1] for c in con.execute("PRAGMA table_info(users)")],
    "indexes": sorted(i for i in indexes if not i[0].startswith("sqlite_autoindex")),
    "users": con.execute("SELECT * FROM users ORDER BY id").fetchall(),
    "posts": con.execute("SELECT * FROM posts ORDER BY id").fetchall(),
}))"""


def migrated(users, posts):
    rows = []
    for uid, name, email in users:
        first, _, last = name.partition(" ")
        rows.append([uid, first, last, email.strip().lower() if email is not None else None])
    return {"version": 2, "columns": ["id", "first_name", "last_name", "email"],
            "indexes": [["users_email", 1, ["email"]]], "users": rows, "posts": [list(p) for p in posts]}


got = json.loads(as_owner("python3", "-I", "-c", DUMP, "/app/app.db"))
expect(got, migrated(*people(_random.Random(11), 30)), "/app/app.db")
if not os.path.isfile("/app/migrations/002.sql"):
    sys.exit("no /app/migrations/002.sql")
shutil.copy("/app/migrations/002.sql", os.path.join(WORK, "002.sql"))
os.chmod(os.path.join(WORK, "002.sql"), 0o644)
for n in (1, rng.randrange(5, 60)):
    users, posts = people(rng, n)
    db = fresh(f"v1-{n}.db", V1 + inserts("users", users) + inserts("posts", posts))
    as_agent("python3", "-I", "-c", SCRIPT, os.path.join(WORK, "002.sql"), db)
    expect(json.loads(as_agent("python3", "-I", "-c", DUMP, db)), migrated(users, posts), f"a version-1 database of {n} users")
PY
echo 1 > /logs/verifier/reward.txt
