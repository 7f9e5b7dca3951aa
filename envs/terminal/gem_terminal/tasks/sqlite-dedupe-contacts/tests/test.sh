#!/bin/bash
# Harbor's verifier contract: writes 1 to /logs/verifier/reward.txt when every check below passes, else 0
# (the first failing check ends the script under set -e, leaving the 0).
# /app/crm.db against its rows deduplicated here, inserts tried on a copy; dedupe.sql run as the agent on a
# database drawn now.
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
SCHEMA = """CREATE TABLE contacts (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT);
CREATE TABLE notes (id INTEGER PRIMARY KEY, contact_id INTEGER NOT NULL REFERENCES contacts(id), body TEXT NOT NULL);
"""


def crm(rng, n):
    """Contacts whose emails repeat in other cases and with spaces around (some missing), and notes on them."""
    people = [f"p{rng.randrange(10**6)}@{rng.choice(['x.org', 'Mail.COM'])}" for _ in range(max(1, n // 3))]
    contacts = []
    for cid in sorted(rng.sample(range(1, 20 * n), n)):
        email = rng.choice(people)
        email = rng.choice([email, email.upper(), email.title(), " " + email, email + "  "]) if rng.random() < 0.9 else None
        contacts.append((cid, f"contact {cid}", email))
    notes = [(i, rng.choice(contacts)[0], f"note {i}") for i in range(1, 2 * n)]
    return contacts, notes


def deduped(contacts, notes):
    keep, rows = {}, []
    for cid, name, email in sorted(contacts):
        key = email.strip().lower() if email is not None else ("null", cid)
        if key not in keep:
            keep[key] = cid
            rows.append([cid, name, email.strip().lower() if email is not None else None])
    mapped = {cid: keep[email.strip().lower() if email is not None else ("null", cid)] for cid, _, email in contacts}
    return {"contacts": rows, "notes": [[i, mapped[c], b] for i, c, b in notes]}

import random as _random

#: The rows, then inserts tried on a copy: a repeat of a kept email in another form must fail, two contacts
#: without email and a new email must not.
PROBE = """import json, os, sqlite3, sys
src = sqlite3.connect(sys.argv[1])
rows = {"contacts": src.execute("SELECT id, name, email FROM contacts ORDER BY id").fetchall(),
        "notes": src.execute("SELECT id, contact_id, body FROM notes ORDER BY id").fetchall()}
copy = sqlite3.connect(sys.argv[2])
src.backup(copy)
tries = {}
for label, email in [("repeat", sys.argv[3]), ("null-1", None), ("null-2", None), ("new", "brand-new@example.org")]:
    try:
        with copy:
            copy.execute("INSERT INTO contacts (name, email) VALUES (?, ?)", (label, email))
        tries[label] = "ok"
    except sqlite3.IntegrityError:
        tries[label] = "refused"
print(json.dumps({**rows, "tries": tries}))"""


def check(db, contacts, notes, what):
    kept = [e for _, _, e in contacts if e is not None]
    repeat = "  " + kept[0].strip().upper() + " " if kept else "nobody@example.org"
    got = json.loads(as_owner("python3", "-I", "-c", PROBE, db, os.path.join(WORK, f"copy-{rng.randrange(10**9)}.db"), repeat))
    want = deduped(contacts, notes)
    expect({"contacts": got["contacts"], "notes": got["notes"]}, want, f"{what}: the rows")
    expect(got["tries"], {"repeat": "refused" if kept else "ok", "null-1": "ok", "null-2": "ok", "new": "ok"}, f"{what}: inserts")


check("/app/crm.db", *crm(_random.Random(13), 40), "/app/crm.db")
if not os.path.isfile("/app/dedupe.sql"):
    sys.exit("no /app/dedupe.sql")
shutil.copy("/app/dedupe.sql", os.path.join(WORK, "dedupe.sql"))
os.chmod(os.path.join(WORK, "dedupe.sql"), 0o644)
contacts, notes = crm(rng, rng.randrange(3, 60))
db = fresh("crm.db", SCHEMA + inserts("contacts", contacts) + inserts("notes", notes))
as_agent("python3", "-I", "-c", SCRIPT, os.path.join(WORK, "dedupe.sql"), db)
check(db, contacts, notes, "dedupe.sql on a database drawn now")
PY
echo 1 > /logs/verifier/reward.txt
