#!/bin/bash
set -e
cat > /app/wordfreq.py <<'PY'
"""Count words (runs of ASCII letters, lower-cased) in files or stdin."""

import argparse
import re
import sys
from collections import Counter


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--top", type=positive, default=10)
    parser.add_argument("--min-length", type=positive, default=1)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    texts = []
    if not args.files:
        texts.append(sys.stdin.read())
    for name in args.files:
        try:
            with open(name, encoding="utf-8", errors="replace") as fh:
                texts.append(fh.read())
        except OSError as exc:
            print(f"wordfreq: cannot read {name}: {exc.strerror}", file=sys.stderr)
            return 1
    words = (w.lower() for text in texts for w in re.findall(r"[A-Za-z]+", text))
    counts = Counter(w for w in words if len(w) >= args.min_length)
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: args.top]:
        print(count, word)
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY
