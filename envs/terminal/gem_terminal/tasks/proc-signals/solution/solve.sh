#!/bin/bash
set -e
cat > /app/worker.py <<'PY'
"""A worker that reloads its label on SIGHUP, reports on SIGUSR1 and stops cleanly on SIGTERM."""

import signal
import sys

conf_path, log_path = sys.argv[1:3]
log = open(log_path, "a", buffering=1)
pending = []


def read_label():
    with open(conf_path) as fh:
        for line in fh:
            if line.startswith("label="):
                return line.strip().split("=", 1)[1]
    return ""


for number in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM):
    signal.signal(number, lambda signum, frame: pending.append(signum))
label = read_label()
log.write(f"started label={label}\n")
while True:
    signal.pause()
    while pending:
        signum = pending.pop(0)
        if signum == signal.SIGHUP:
            label = read_label()
            log.write(f"reloaded label={label}\n")
        elif signum == signal.SIGUSR1:
            log.write(f"status label={label}\n")
        else:
            log.write("stopped\n")
            sys.exit(0)
PY
