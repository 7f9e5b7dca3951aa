"""A worker: heartbeats every 0.2 s; in one of them a bug turns the loop into a busy one."""

import os
import sys
import time

name = sys.argv[1]
beat = f"/app/run/{name}.beat"
broken = os.environ.get("WORKER_SEED", "") == name
while True:
    with open(beat, "w") as fh:
        fh.write(str(time.time()))
    if broken:
        while True:
            pass
    time.sleep(0.2)
