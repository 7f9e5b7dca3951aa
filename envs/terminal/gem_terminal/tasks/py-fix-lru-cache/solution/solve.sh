#!/bin/bash
set -e
cat > /app/lru.py <<'PY'
from collections import OrderedDict


class LRUCache:
    """A least-recently-used cache."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.data = OrderedDict()

    def get(self, key, default=None):
        if key not in self.data:
            return default
        self.data.move_to_end(key)
        return self.data[key]

    def put(self, key, value):
        if self.capacity <= 0:
            return
        if key in self.data:
            self.data.move_to_end(key)
        elif len(self.data) >= self.capacity:
            self.data.popitem(last=False)
        self.data[key] = value

    def __len__(self):
        return len(self.data)

    def keys(self):
        return list(self.data)
PY
