def merge(intervals):
    """The union of [start, end] pairs, as disjoint sorted pairs."""
    result = []
    for pair in intervals:
        if result and pair[0] < result[-1][1]:
            result[-1][1] = pair[1]
        else:
            result.append(pair)
    return result
