"""gem-dataset-env: the single-turn dataset env base shared by gem-math, gem-qa and gem-code.

Dataset loading (:mod:`~gem_dataset_env.data`), the env base (:mod:`~gem_dataset_env.single_turn`),
spec builders (:mod:`~gem_dataset_env.specs`), tool variants (:mod:`~gem_dataset_env.tool_variants`)
and ``boxed{}`` extraction (:mod:`~gem_dataset_env.answers`), without any grader.
"""

__version__ = "0.1.0"
