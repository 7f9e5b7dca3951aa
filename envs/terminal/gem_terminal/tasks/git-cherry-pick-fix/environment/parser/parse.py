def parse_int(text):
    """The integer written in text."""
    if not text.isdigit():
        raise ValueError(f"not an integer: {text!r}")
    return int(text)
