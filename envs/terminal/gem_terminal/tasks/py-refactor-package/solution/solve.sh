#!/bin/bash
set -e
mkdir -p /app/shop
cat > /app/shop/models.py <<'PY'
"""What a cart holds."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    name: str
    price: int  # cents
    qty: int = 1

    @property
    def subtotal(self):
        return self.price * self.qty
PY
cat > /app/shop/pricing.py <<'PY'
"""What a cart costs."""

SHIPPING = 499
FREE_SHIPPING_FROM = 5000


def _discount(subtotal, items, coupon):
    if coupon == "SAVE10":
        return subtotal // 10
    if coupon == "BULK" and sum(i.qty for i in items) >= 10:
        return subtotal * 5 // 100
    if coupon and coupon.startswith("FLAT") and coupon[4:].isdigit():
        return min(int(coupon[4:]) * 100, subtotal)
    return 0


def total(items, coupon=None):
    """The amount to pay in cents: items, minus the coupon, plus shipping below the free-shipping line."""
    subtotal = sum(i.subtotal for i in items)
    subtotal -= _discount(subtotal, items, coupon)
    if coupon == "FREESHIP" or subtotal >= FREE_SHIPPING_FROM or not items:
        return subtotal
    return subtotal + SHIPPING
PY
cat > /app/shop/__init__.py <<'PY'
"""A shop's cart pricing."""

from shop.models import Item
from shop.pricing import total

__all__ = ["Item", "total"]
PY
rm /app/shop.py
