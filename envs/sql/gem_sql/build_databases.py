"""Writes the bundled databases as SQL text, and the Spider/BIRD-format samples: ``python -m gem_sql.build_databases``.

Every table is filled from a ``random.Random`` with a fixed seed per database, so the output is
the same on every machine and Python version (only ``randrange``/``choice``/``random`` are used,
whose streams Python keeps stable). The shipped ``databases/*.sql`` files are this script's output;
a test regenerates them and compares. Some columns hold NULLs on purpose (a customer without an
email, an employee without a manager, a loan not yet returned) for the NULL-handling questions.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

__all__ = ["BIRD_SAMPLE", "DATABASES", "SPIDER_SAMPLE", "build_all", "build_samples", "render"]

Row = tuple[object, ...]
Table = tuple[str, str, Sequence[Row]]  # name, column definitions, rows

FIRST = ["Ada", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Mona"]
LAST = ["Abbott", "Berg", "Costa", "Diaz", "Eriksen", "Fischer", "Garcia", "Haas", "Ito", "Jensen", "Kovac", "Lund"]
CITIES = ["Berlin", "Lisbon", "Oslo", "Madrid", "Vienna", "Prague"]


def _names(rng: random.Random, n: int) -> list[str]:
    pairs = [f"{f} {last}" for f in FIRST for last in LAST]
    rng.shuffle(pairs)
    return pairs[:n]


def _day(rng: random.Random, start: date, span_days: int) -> str:
    return (start + timedelta(days=rng.randrange(span_days))).isoformat()


def shop(rng: random.Random) -> list[Table]:
    customers = []
    for i, name in enumerate(_names(rng, 40), 1):
        email = None if rng.random() < 0.2 else name.lower().replace(" ", ".") + "@example.com"
        customers.append((i, name, rng.choice(CITIES), email, _day(rng, date(2021, 1, 1), 730)))
    catalog = {
        "books": ["Atlas", "Cookbook", "Novel", "Poetry", "Biography"],
        "toys": ["Kite", "Puzzle", "Robot", "Yo-yo"],
        "kitchen": ["Kettle", "Pan", "Knife", "Blender", "Toaster"],
        "garden": ["Hose", "Rake", "Shovel"],
        "office": ["Stapler", "Lamp", "Chair", "Desk"],
    }
    products: list[Row] = []
    for category, items in catalog.items():
        for item in items:
            products.append((len(products) + 1, item, category, round(rng.randrange(300, 20000) / 100, 2)))
    orders, items_rows = [], []
    statuses = ["shipped", "shipped", "shipped", "pending", "cancelled"]
    for order_id in range(1, 121):
        customer = rng.randrange(1, 36)  # customers 36..40 never order
        orders.append((order_id, customer, _day(rng, date(2023, 1, 1), 365), rng.choice(statuses)))
        for product in sorted(rng.sample(range(1, len(products) + 1), rng.randrange(1, 4))):
            price = products[product - 1][3]
            items_rows.append((order_id, product, rng.randrange(1, 6), price))
    return [
        (
            "customers",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, email TEXT, joined TEXT",
            customers,
        ),
        (
            "products",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL",
            products,
        ),
        (
            "orders",
            "id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), "
            "order_date TEXT, status TEXT",
            orders,
        ),
        (
            "order_items",
            "order_id INTEGER REFERENCES orders(id), product_id INTEGER REFERENCES products(id), "
            "quantity INTEGER NOT NULL, unit_price REAL NOT NULL, PRIMARY KEY (order_id, product_id)",
            items_rows,
        ),
    ]


def school(rng: random.Random) -> list[Table]:
    departments = ["Mathematics", "Physics", "History", "Biology", "Literature"]
    teachers = [
        (i, name, departments[(i - 1) % len(departments)], rng.randrange(40, 90) * 1000)
        for i, name in enumerate(_names(rng, 12), 1)
    ]
    titles = [
        ("Algebra", 1),
        ("Calculus", 1),
        ("Statistics", 6),
        ("Mechanics", 2),
        ("Optics", 7),
        ("Ancient Rome", 3),
        ("Modern Europe", 8),
        ("Genetics", 4),
        ("Ecology", 9),
        ("Poetry", 5),
        ("Drama", 10),
        ("Astronomy", 2),
    ]
    courses = [(i, title, teacher, rng.choice([3, 4, 5])) for i, (title, teacher) in enumerate(titles, 1)]
    students = []
    for i, name in enumerate(_names(rng, 50), 1):
        advisor = None if rng.random() < 0.25 else rng.randrange(1, 13)
        students.append((i, name, rng.randrange(9, 13), rng.randrange(2006, 2011), advisor))
    enrollments = []
    for student in range(1, 47):  # students 47..50 take no course
        for course in sorted(rng.sample(range(1, 13), rng.randrange(1, 5))):
            score = None if rng.random() < 0.1 else rng.randrange(40, 101)
            enrollments.append((student, course, score))
    return [
        ("teachers", "id INTEGER PRIMARY KEY, name TEXT NOT NULL, department TEXT NOT NULL, salary INTEGER", teachers),
        (
            "courses",
            "id INTEGER PRIMARY KEY, title TEXT NOT NULL, teacher_id INTEGER REFERENCES teachers(id), credits INTEGER",
            courses,
        ),
        (
            "students",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, grade_level INTEGER, birth_year INTEGER, "
            "advisor_id INTEGER REFERENCES teachers(id)",
            students,
        ),
        (
            "enrollments",
            "student_id INTEGER REFERENCES students(id), course_id INTEGER REFERENCES courses(id), score INTEGER, "
            "PRIMARY KEY (student_id, course_id)",
            enrollments,
        ),
    ]


def flights(rng: random.Random) -> list[Table]:
    airports = [
        ("BER", "Brandenburg", "Berlin", "Germany"),
        ("MUC", "Franz Josef Strauss", "Munich", "Germany"),
        ("LIS", "Humberto Delgado", "Lisbon", "Portugal"),
        ("OSL", "Gardermoen", "Oslo", "Norway"),
        ("MAD", "Barajas", "Madrid", "Spain"),
        ("BCN", "El Prat", "Barcelona", "Spain"),
        ("VIE", "Schwechat", "Vienna", "Austria"),
        ("PRG", "Vaclav Havel", "Prague", "Czechia"),
    ]
    airlines = [
        (1, "Northwind Air", "Norway"),
        (2, "Iberia Blue", "Spain"),
        (3, "Danube Jet", "Austria"),
        (4, "Spree Wings", "Germany"),
        (5, "Atlantic Hop", "Portugal"),
    ]
    codes = [a[0] for a in airports]
    flight_rows = []
    statuses = ["on time", "on time", "on time", "delayed", "cancelled"]
    for i in range(1, 81):
        origin, destination = rng.sample(codes, 2)
        departure = f"{_day(rng, date(2024, 3, 1), 60)} {rng.randrange(6, 22):02d}:{rng.choice([0, 15, 30, 45]):02d}"
        flight_rows.append(
            (
                i,
                f"F{100 + i}",
                rng.randrange(1, 6),
                origin,
                destination,
                departure,
                rng.randrange(60, 240),
                round(rng.randrange(4000, 40000) / 100, 2),
                rng.choice(statuses),
            )
        )
    passengers = []
    for i, name in enumerate(_names(rng, 60), 1):
        level = None if rng.random() < 0.5 else rng.choice(["silver", "gold", "platinum"])
        passengers.append((i, name, rng.choice(["Germany", "Spain", "Norway", "Portugal", "Austria"]), level))
    bookings = []
    for booking_id in range(1, 201):
        bookings.append(
            (booking_id, rng.randrange(1, 56), rng.randrange(1, 81), rng.choice(["economy", "economy", "business"]))
        )
    return [
        ("airports", "code TEXT PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, country TEXT NOT NULL", airports),
        ("airlines", "id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL", airlines),
        (
            "flights",
            "id INTEGER PRIMARY KEY, number TEXT NOT NULL, airline_id INTEGER REFERENCES airlines(id), "
            "origin TEXT REFERENCES airports(code), destination TEXT REFERENCES airports(code), departure TEXT, "
            "duration_min INTEGER, price REAL, status TEXT",
            flight_rows,
        ),
        (
            "passengers",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, nationality TEXT, frequent_flyer_level TEXT",
            passengers,
        ),
        (
            "bookings",
            "id INTEGER PRIMARY KEY, passenger_id INTEGER REFERENCES passengers(id), "
            "flight_id INTEGER REFERENCES flights(id), seat_class TEXT",
            bookings,
        ),
    ]


def library(rng: random.Random) -> list[Table]:
    authors = [
        (1, "Mira Solberg", 1950, "Norway"),
        (2, "Tomas Ruiz", 1962, "Spain"),
        (3, "Anna Weber", 1975, "Germany"),
        (4, "Joao Pires", 1948, "Portugal"),
        (5, "Lena Hofer", 1981, "Austria"),
        (6, "Karel Novak", 1969, "Czechia"),
        (7, "Sofia Marin", 1990, "Spain"),
        (8, "Erik Dahl", 1955, "Norway"),
    ]
    genres = ["fiction", "mystery", "science", "history", "poetry"]
    words = ["Silent", "River", "Glass", "Winter", "Garden", "Harbor", "Shadow", "Letters", "Stone", "Light"]
    books = []
    for i in range(1, 41):
        title = f"{rng.choice(words)} {rng.choice(words)} {i}"
        books.append(
            (i, title, rng.randrange(1, 8), rng.choice(genres), rng.randrange(1970, 2024), rng.randrange(90, 700))
        )
    members = [
        (i, name, _day(rng, date(2018, 1, 1), 1800), rng.choice(CITIES)) for i, name in enumerate(_names(rng, 30), 1)
    ]
    loans = []
    for i in range(1, 151):
        start = date(2024, 1, 1) + timedelta(days=rng.randrange(300))
        returned = None if rng.random() < 0.15 else (start + timedelta(days=rng.randrange(3, 40))).isoformat()
        loans.append((i, rng.randrange(1, 41), rng.randrange(1, 27), start.isoformat(), returned))
    return [
        ("authors", "id INTEGER PRIMARY KEY, name TEXT NOT NULL, birth_year INTEGER, country TEXT", authors),
        (
            "books",
            "id INTEGER PRIMARY KEY, title TEXT NOT NULL, author_id INTEGER REFERENCES authors(id), genre TEXT, "
            "published_year INTEGER, pages INTEGER",
            books,
        ),
        ("members", "id INTEGER PRIMARY KEY, name TEXT NOT NULL, joined TEXT, city TEXT", members),
        (
            "loans",
            "id INTEGER PRIMARY KEY, book_id INTEGER REFERENCES books(id), member_id INTEGER REFERENCES members(id), "
            "loan_date TEXT NOT NULL, return_date TEXT",
            loans,
        ),
    ]


def hr(rng: random.Random) -> list[Table]:
    departments = [
        (1, "Engineering", "Berlin", 900000),
        (2, "Sales", "Madrid", 400000),
        (3, "Marketing", "Lisbon", 250000),
        (4, "Finance", "Vienna", 300000),
        (5, "Support", "Prague", 150000),
        (6, "Research", "Oslo", 500000),
    ]
    titles = ["Engineer", "Analyst", "Manager", "Specialist", "Associate"]
    employees = []
    for i, name in enumerate(_names(rng, 45), 1):
        department = None if i in (44, 45) else (i - 1) % 5 + 1  # Research has nobody; two have no department
        manager = None if i <= 5 else rng.randrange(1, 6)
        salary = rng.randrange(35, 140) * 1000
        employees.append((i, name, department, manager, _day(rng, date(2012, 1, 1), 4000), salary, rng.choice(titles)))
    projects = []
    for i, name in enumerate(["Apollo", "Borealis", "Cobalt", "Delta", "Ember", "Fjord", "Granite", "Helix"], 1):
        end = None if i % 3 == 0 else _day(rng, date(2025, 1, 1), 365)
        projects.append((i, name, rng.randrange(1, 7), _day(rng, date(2023, 1, 1), 500), end))
    assignments = []
    for employee in range(1, 41):
        for project in sorted(rng.sample(range(1, 9), rng.randrange(0, 3))):
            assignments.append((employee, project, rng.randrange(5, 41)))
    return [
        ("departments", "id INTEGER PRIMARY KEY, name TEXT NOT NULL, location TEXT, budget INTEGER", departments),
        (
            "employees",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER REFERENCES departments(id), "
            "manager_id INTEGER REFERENCES employees(id), hire_date TEXT, salary INTEGER, title TEXT",
            employees,
        ),
        (
            "projects",
            "id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER REFERENCES departments(id), "
            "start_date TEXT, end_date TEXT",
            projects,
        ),
        (
            "assignments",
            "employee_id INTEGER REFERENCES employees(id), project_id INTEGER REFERENCES projects(id), "
            "hours_per_week INTEGER, PRIMARY KEY (employee_id, project_id)",
            assignments,
        ),
    ]


#: ``name -> (seed, builder)``: one seed per database so adding one never changes another.
DATABASES: dict[str, tuple[int, Callable[[random.Random], list[Table]]]] = {
    "shop": (101, shop),
    "school": (202, school),
    "flights": (303, flights),
    "library": (404, library),
    "hr": (505, hr),
}


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def render(tables: Sequence[Table]) -> str:
    """The SQL text that creates and fills ``tables``."""
    lines = ["BEGIN;"]
    for name, columns, rows in tables:
        lines.append(f"CREATE TABLE {name} ({columns});")
        lines += [f"INSERT INTO {name} VALUES ({', '.join(_literal(v) for v in row)});" for row in rows]
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def build_all() -> dict[str, str]:
    """``{database name: SQL text}`` of every bundled database."""
    return {name: render(build(random.Random(seed))) for name, (seed, build) in DATABASES.items()}


#: The Spider- and BIRD-format samples (``samples/``): ``(db_id, SQL text)`` and questions.
SPIDER_SAMPLE: dict[str, Any] = {
    "databases": {
        "pets": (
            "CREATE TABLE owners (owner_id INTEGER PRIMARY KEY, name TEXT, city TEXT);\n"
            "CREATE TABLE pets (pet_id INTEGER PRIMARY KEY, owner_id INTEGER REFERENCES owners(owner_id), "
            "kind TEXT, age INTEGER, weight REAL);\n"
            "INSERT INTO owners VALUES (1, 'Ana', 'Porto'), (2, 'Bo', 'Oslo'), (3, 'Cy', 'Porto');\n"
            "INSERT INTO pets VALUES (1, 1, 'dog', 3, 12.5), (2, 1, 'cat', 5, 4.2), (3, 2, 'dog', 1, 8.0), "
            "(4, 3, 'fish', 2, 0.1), (5, 3, 'dog', 7, 20.3);\n"
        ),
        "concerts": (
            "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);\n"
            "CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(singer_id), "
            "year INTEGER, venue TEXT);\n"
            "INSERT INTO singer VALUES (1, 'Joy', 'France', 31), (2, 'Rui', 'Portugal', 45), "
            "(3, 'Ida', 'France', 27);\n"
            "INSERT INTO concert VALUES (1, 1, 2014, 'Arena'), (2, 1, 2015, 'Hall'), (3, 2, 2015, 'Arena');\n"
        ),
    },
    "questions": [
        ("pets", "How many dogs are there?", "SELECT count(*) FROM pets WHERE kind = 'dog'"),
        ("pets", "List the names of owners from Porto.", "SELECT name FROM owners WHERE city = 'Porto'"),
        ("pets", "What is the average age of each kind of pet?", "SELECT kind, avg(age) FROM pets GROUP BY kind"),
        ("concerts", "List singer names ordered by age descending.", "SELECT name FROM singer ORDER BY age DESC"),
        (
            "concerts",
            "Which singers have no concert?",
            "SELECT name FROM singer WHERE singer_id NOT IN (SELECT singer_id FROM concert)",
        ),
    ],
}
BIRD_SAMPLE: dict[str, Any] = {
    "databases": {
        "cards": (
            "CREATE TABLE cards (id INTEGER PRIMARY KEY, name TEXT, rarity TEXT, power TEXT, artist TEXT);\n"
            "INSERT INTO cards VALUES (1, 'Owl', 'mythic', '3', 'Kay'), (2, 'Fox', 'common', '*', 'Lee'), "
            "(3, 'Elk', 'mythic', '5', 'Lee'), (4, 'Bat', 'rare', NULL, 'Kay');\n"
        ),
    },
    "questions": [
        (
            "cards",
            "How many mythic cards are there?",
            "mythic refers to rarity = 'mythic'",
            "SELECT COUNT(id) FROM cards WHERE rarity = 'mythic'",
            "simple",
        ),
        (
            "cards",
            "Which artists drew a card with unknown power?",
            "unknown power refers to power IS NULL or power = '*'",
            "SELECT DISTINCT artist FROM cards WHERE power IS NULL OR power = '*'",
            "moderate",
        ),
        ("cards", "Name the cards by Lee.", "", "SELECT name FROM cards WHERE artist = 'Lee'", "simple"),
    ],
}


def _write_database(path: Path, sql: str) -> None:
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.executescript(sql)
    finally:
        conn.close()


def build_samples(out: Path) -> None:
    """Write the Spider-format sample to ``out/spider`` and the BIRD-format one to ``out/bird``."""
    import json

    spider, bird = out / "spider", out / "bird"
    tables = []
    for db_id, sql in SPIDER_SAMPLE["databases"].items():
        _write_database(spider / "database" / db_id / f"{db_id}.sqlite", sql)
        tables.append({"db_id": db_id})
    (spider / "tables.json").write_text(json.dumps(tables, indent=1) + "\n", encoding="utf-8")
    dev = [{"db_id": d, "question": q, "query": s} for d, q, s in SPIDER_SAMPLE["questions"]]
    (spider / "dev.json").write_text(json.dumps(dev, indent=1) + "\n", encoding="utf-8")
    for db_id, sql in BIRD_SAMPLE["databases"].items():
        _write_database(bird / "dev_databases" / db_id / f"{db_id}.sqlite", sql)
    rows = [
        {"question_id": i, "db_id": d, "question": q, "evidence": e, "SQL": s, "difficulty": h}
        for i, (d, q, e, s, h) in enumerate(BIRD_SAMPLE["questions"])
    ]
    (bird / "dev.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "databases"
    out.mkdir(parents=True, exist_ok=True)
    for name, text in build_all().items():
        (out / f"{name}.sql").write_text(text, encoding="utf-8")
        print(f"{out / name}.sql: {len(text)} bytes")
    build_samples(out.parent / "samples")
