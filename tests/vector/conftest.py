from __future__ import annotations

import sys
from pathlib import Path

# worker processes import the test envs by module name; spawn copies sys.path to them
_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
