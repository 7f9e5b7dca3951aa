import re
import sys
from collections import Counter
from importlib import resources


def stopwords():
    text = resources.files("tally").joinpath("data/stopwords.txt").read_text()
    return {line.strip() for line in text.splitlines() if line.strip()}


def main():
    skip = stopwords()
    counts = Counter(w for w in re.findall(r"[a-z]+", sys.stdin.read().lower()) if w not in skip)
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        print(count, word)
    return 0
