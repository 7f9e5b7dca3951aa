def tiles(n):
    return [i * i for i in range(n)]
