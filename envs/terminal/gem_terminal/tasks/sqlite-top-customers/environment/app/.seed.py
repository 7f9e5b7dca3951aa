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

import random
import sqlite3

customers, orders, items = shop(random.Random(7))
con = sqlite3.connect("/app/shop.db")
con.executescript(SCHEMA)
con.executemany("INSERT INTO customers VALUES (?, ?)", customers)
con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
con.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?)", items)
con.commit()
