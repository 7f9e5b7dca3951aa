SCHEMA = """CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, kind TEXT NOT NULL,
                     ts INTEGER NOT NULL, payload TEXT);
CREATE INDEX idx_kind ON events(kind);
"""


def events(rng, n):
    return [(i, rng.randrange(1, 200), rng.choice(["view", "click", "buy", "login"]), rng.randrange(0, 10**6),
             "x" * rng.randrange(0, 40)) for i in range(1, n + 1)]

import random
import sqlite3

con = sqlite3.connect("/app/events.db")
con.executescript(SCHEMA)
con.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", events(random.Random(3), 4000))
con.commit()
