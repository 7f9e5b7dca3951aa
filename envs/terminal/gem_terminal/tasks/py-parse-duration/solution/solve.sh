#!/bin/bash
set -e
cat > /app/duration.py <<'PY'
"""Durations like 1h30m: parse to seconds and format back."""

import re

UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
PATTERN = re.compile(r"\s*" + "".join(rf"(?:(\d+){u}\s*)?" for u, _ in UNITS), re.ASCII)


def parse_duration(text):
    match = PATTERN.fullmatch(text)
    if not match or not any(match.groups()) or text.strip() != text.strip().rstrip() or re.search(r"\d\s+[dhms]", text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(value) * size for value, (_, size) in zip(match.groups(), UNITS) if value)


def format_duration(seconds):
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    parts = []
    for unit, size in UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
PY
