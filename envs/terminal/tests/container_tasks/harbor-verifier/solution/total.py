import json
import sys
from pathlib import Path

items = json.loads(Path(sys.argv[1]).read_text())
print(f"total = {round(sum(float(i['price']) for i in items), 2)}")
print(f"count = {len(items)}")
