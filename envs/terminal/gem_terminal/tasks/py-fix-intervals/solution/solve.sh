#!/bin/bash
set -e
cat > /app/intervals.py <<'PY'
def merge(intervals):
    """The union of [start, end] pairs, as disjoint sorted pairs (the input is left as it is)."""
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return result
PY
