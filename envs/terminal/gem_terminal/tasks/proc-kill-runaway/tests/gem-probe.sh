# The workers still running: exactly two, and neither busy (CPU time sampled twice, 0.3 s apart).
python3 -I - <<'PY'
import os
import time


def workers():
    found = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                words = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"/app/worker.py" in words and fields[0] != "Z":
            found[entry] = int(fields[11]) + int(fields[12])
    return found


before = workers()
time.sleep(0.3)
after = workers()
assert len(before) == 2 and set(after) == set(before), (before, after)
assert all(after[pid] - before[pid] < 5 for pid in after), (before, after)
print("probe ok")
PY
