"""Worker of ``test_learner.py::test_rank_splits``: one learner rank of a two-rank gloo group.

Each rank plays the learner's round for every split: its own episodes through
``process_feedback_data``, then the collective ``prepare_round`` (ReBN statistics over both
ranks) and the rank-count all-reduce that sizes the padding; it writes what it got to JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(rank: int, store: str, splits_json: str, out: str) -> None:
    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).parent / "standins" / "inference"))
    from conftest import _make_learner
    from gem_oat import learner as learner_module
    from test_learner import episodes_of

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    results = []
    for split in json.loads(splits_json):
        learner = _make_learner(gamma=0.9, rollout_batch_size_per_device=64, rollout_batch_size=128)
        learner.process_feedback_data(episodes_of(split[rank]))
        batch = learner.prepare_round()
        most = learner_module._max_over_ranks(len(batch))
        results.append({"advantages": [t.info["advantages"] for t in batch], "most": most})
    Path(out).write_text(json.dumps(results))
    dist.barrier()  # both ranks done; the process exit ends the group (destroying a file-store group can hang)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
