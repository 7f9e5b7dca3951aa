import unittest

from shop.cart import total_price


class CartTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(total_price([1.0, 2.5]), 3.5)

    def test_discount(self):
        self.assertEqual(total_price([10.0, 10.0], discount=0.25), 15.0)


if __name__ == "__main__":
    unittest.main()
