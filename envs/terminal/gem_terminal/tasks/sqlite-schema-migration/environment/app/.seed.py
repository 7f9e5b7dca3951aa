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

import random
import sqlite3

users, posts = people(random.Random(11), 30)
con = sqlite3.connect("/app/app.db")
con.executescript(V1)
con.executemany("INSERT INTO users VALUES (?, ?, ?)", users)
con.executemany("INSERT INTO posts VALUES (?, ?, ?)", posts)
con.commit()
