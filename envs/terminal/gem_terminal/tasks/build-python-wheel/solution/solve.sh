#!/bin/bash
set -e
cd /app/tally
# the packages live under src/, the entry point is main, and the stopword list must travel with them
python3 - <<'PY'
text = open("pyproject.toml").read()
text = text.replace('tally = "tally.cli:run"', 'tally = "tally.cli:main"')
text = text.replace('packages = ["tally"]\n', 'packages = ["tally"]\npackage-dir = {"" = "src"}\n\n[tool.setuptools.package-data]\ntally = ["data/*.txt"]\n')
open("pyproject.toml", "w").write(text)
PY
rm -rf /app/dist build src/*.egg-info
# setuptools' own bdist_wheel writes the wheel in place (pip's PEP 517 build renames it across folders,
# which gem's sandbox refuses)
python3 -c 'from setuptools import setup; setup()' -q bdist_wheel -d /app/dist >/dev/null 2>&1
ls /app/dist/*.whl
