def total(prices):
    return sum(prices)


def discounted(prices, percent):
    return total(prices) * (100 - percent) / 100
