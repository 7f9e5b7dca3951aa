"""verifiers loads a taskset by import name: the test taskset (``gem_vf_toy``) must be importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
