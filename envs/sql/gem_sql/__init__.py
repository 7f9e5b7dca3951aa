"""gem-sql: database envs (``sql:*``) on read-only SQLite, scored by the answer query's execution result."""

__version__ = "0.1.0"
