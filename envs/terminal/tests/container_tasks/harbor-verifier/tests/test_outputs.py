import json
import sys
from pathlib import Path

import tomli_w  # installed by the verifier (uvx -w): the image does not have it
import tomllib


def test_runs_on_the_images_python():
    assert sys.version_info[:2] == (3, 13)


def test_total_and_count():
    got = tomllib.loads(Path("/srv/shop/total.toml").read_text())
    items = json.loads(Path("/srv/shop/items.json").read_text())
    want = {"total": round(sum(i["price"] for i in items), 2), "count": len(items)}
    assert got == want, tomli_w.dumps(got)
