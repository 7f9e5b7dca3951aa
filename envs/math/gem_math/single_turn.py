"""Moved to :mod:`gem_dataset_env.single_turn` (shared with the QA and code envs); re-exported for old imports."""

from gem_dataset_env.single_turn import DatasetEnv, DatasetEnvConfig

__all__ = ["DatasetEnv", "DatasetEnvConfig"]
