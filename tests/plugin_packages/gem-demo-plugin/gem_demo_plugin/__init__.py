"""A minimal third-party env package: the layout a gem plugin author copies."""
