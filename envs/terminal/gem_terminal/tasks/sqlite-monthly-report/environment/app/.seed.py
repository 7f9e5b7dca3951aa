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

import random
import sqlite3

con = sqlite3.connect("/app/sales.db")
con.executescript(SCHEMA)
con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", sales(random.Random(17), 300, {2, 9}))
con.commit()
