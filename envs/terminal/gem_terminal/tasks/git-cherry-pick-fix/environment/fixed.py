def parse_int(text):
    """The integer written in text: an optional sign, digits, and spaces around them."""
    body = text.strip()
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not digits.isdigit() or not digits.isascii():
        raise ValueError(f"not an integer: {text!r}")
    return -int(digits) if body.startswith("-") else int(digits)
