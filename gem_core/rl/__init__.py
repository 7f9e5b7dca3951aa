"""RL core: trajectory records, per-turn returns, advantage estimators, sample layouts, off-policy corrections.

Everything here is plain numpy; :mod:`gem_core.rl.torch_utils` holds optional tensor
helpers and imports torch only when used.
"""
