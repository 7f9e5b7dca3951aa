"""A shop's cart pricing (everything in one file, for now)."""

from dataclasses import dataclass

SHIPPING = 499
FREE_SHIPPING_FROM = 5000


@dataclass(frozen=True)
class Item:
    name: str
    price: int  # cents
    qty: int = 1

    @property
    def subtotal(self):
        return self.price * self.qty


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
