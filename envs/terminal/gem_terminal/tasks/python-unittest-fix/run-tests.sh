#!/bin/bash
# Exit 0 when the task is solved.
# The pristine tests run from /tests with the agent's package after the standard library on sys.path
# (-P, append): no file of the agent's can shadow unittest. The last line must be the marker, so code
# that exits early with status 0 (os._exit(0) on import) does not pass.
set -e
cmp /app/shop/tests/test_cart.py /tests/test_cart.py
out=$(cd /tests && python3 -P - <<'PY'
import sys
import unittest

sys.path.append("/app/shop")
sys.path.append("/tests")
import test_cart

result = unittest.TextTestRunner(verbosity=1).run(unittest.defaultTestLoader.loadTestsFromModule(test_cart))
if result.wasSuccessful() and result.testsRun == 2:
    print("cart tests: 2 passed")
PY
)
echo "$out"
test "$(echo "$out" | tail -n 1)" = "cart tests: 2 passed"
