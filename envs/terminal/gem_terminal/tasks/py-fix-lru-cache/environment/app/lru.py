class LRUCache:
    """A least-recently-used cache."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.data = {}
        self.order = []

    def get(self, key, default=None):
        if key in self.data:
            return self.data[key]
        return default

    def put(self, key, value):
        if len(self.data) >= self.capacity:
            oldest = self.order.pop(0)
            del self.data[oldest]
        self.data[key] = value
        self.order.append(key)

    def __len__(self):
        return len(self.data)

    def keys(self):
        return list(self.order)
