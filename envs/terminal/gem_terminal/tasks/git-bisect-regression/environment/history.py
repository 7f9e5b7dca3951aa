"""Writes the repository's history as a git fast-import stream: 41 commits, one of which (at a place
drawn here) breaks median() for lists of even length.
"""

import random
import sys
import time

GOOD = "return (s[n // 2 - 1] + s[n // 2]) / 2"
BAD = "return s[n // 2 - 1] + s[n // 2] // 2"
out = sys.stdout.buffer
source = open("stats.py").read()
checker = open("check.py").read()
bad = random.randrange(4, 38)
when = int(time.time()) - 41 * 3600


def data(text: str) -> None:
    raw = text.encode()
    out.write(b"data %d\n%s\n" % (len(raw), raw))


for step in range(41):
    if step == bad:
        source = source.replace(GOOD, BAD)
    elif step:
        source += f"\n\ndef scaled_{step}(xs):\n    return [x * {step} for x in xs]\n"
    out.write(b"commit refs/heads/main\n")
    out.write(b"committer dev <dev@example.com> %d +0000\n" % (when + step * 3600))
    data(f"stats: step {step}" if step else "stats: mean and median")
    out.write(b"M 100644 inline stats.py\n")
    data(source)
    if not step:
        out.write(b"M 100644 inline check.py\n")
        data(checker)
