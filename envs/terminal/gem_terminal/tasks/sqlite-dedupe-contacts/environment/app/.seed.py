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

import random
import sqlite3

contacts, notes = crm(random.Random(13), 40)
con = sqlite3.connect("/app/crm.db")
con.executescript(SCHEMA)
con.executemany("INSERT INTO contacts VALUES (?, ?, ?)", contacts)
con.executemany("INSERT INTO notes VALUES (?, ?, ?)", notes)
con.commit()
