"""gem-code's registrations: GEM's code ids plus an offline sample (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path

from gem_core.hookspecs import hookimpl
from gem_core.registry import EnvSpec

#: ``(id, hub dataset, split, description)``; columns ``problem`` and ``tests``.
HUB_DATASETS: tuple[tuple[str, str, str, str], ...] = (
    ("code:CodeContest", "axon-rl/CodeContest", "train", "CodeContests problems with merged tests."),
    ("code:Taco8k", "axon-rl/TACO-8k", "train", "TACO programming problems (8k)."),
    ("code:PrimeIntellect15k", "axon-rl/PrimeIntellect-15k", "train", "PrimeIntellect verifiable code (15k)."),
    ("eval:CodeContest", "axon-rl/CodeContest", "test", "CodeContests test split."),
)


@hookimpl
def register_envs() -> list[EnvSpec]:
    specs = [
        EnvSpec(
            id=env_id,
            entry_point="gem_code.env:CodeEnv",
            kwargs={"path": path, "split": split, "label": env_id},
            description=f"{text} Hub dataset {path} (split {split}); pass path= for a local copy.",
            tags=("single-turn", "code", "hub", "eval" if env_id.startswith("eval:") else "train"),
            cpu_bound=True,
        )
        for env_id, path, split, text in HUB_DATASETS
    ]
    specs.append(
        EnvSpec(
            id="code:Sample-v0",
            entry_point="gem_code.env:CodeEnv",
            kwargs={"path": str(Path(__file__).parent / "samples" / "code.jsonl"), "label": "code:Sample-v0"},
            description="6 stdin/stdout problems shipped with gem-code; runs offline.",
            tags=("single-turn", "code", "offline"),
            cpu_bound=True,
        )
    )
    return specs
