def total_price(prices, discount=0.0):
    total = sum(prices)
    return total
