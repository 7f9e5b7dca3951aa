"""The worker: waits for work until it is told to stop (SIGTERM)."""

import signal
import sys
import time

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
