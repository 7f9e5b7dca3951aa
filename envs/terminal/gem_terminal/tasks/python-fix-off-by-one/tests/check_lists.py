import sys
sys.path.append("/app")  # after the standard library: nothing of the agent's shadows it
from lists import last_n
assert last_n([1, 2, 3, 4], 2) == [3, 4], last_n([1, 2, 3, 4], 2)
assert last_n([1, 2, 3], 3) == [1, 2, 3]
assert last_n([1, 2, 3], 1) == [3]
assert last_n([1, 2], 0) == []
print("last_n: all checks passed")
