"""Install gem's ReBN and step guards into OpenRLHF, in whichever process imports the modules they change.

OpenRLHF computes advantages in its ``PPOTrainer`` Ray actor and the loss in its model
actors, processes the launcher never runs code in. :func:`install` is therefore Ray's
``worker_process_setup_hook`` (``gem-openrlhf-train`` sets it for the job): it runs
first in every worker and makes sure, at once if the module is loaded, otherwise the
moment it is imported, that

* ``openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker``:
  ``make_experience_batch`` refuses a step OpenRLHF would not train whole
  (:func:`gem_openrlhf.steps.guard_make_experience_batch`), and, when
  :data:`ESTIMATOR_ENV` is ``rebn``, ``compute_advantages_and_returns`` is
  :func:`gem_openrlhf.rebn.compute_advantages_and_returns`;
* ``openrlhf.utils.loss_utils._optimizer_step_loss_norm`` never divides by a zero count
  (:func:`gem_openrlhf.steps.nonzero_loss_norm`);
* ``openrlhf.trainer.ray.ppo_actor.ActorPPOTrainer.training_step`` never reports zero
  action tokens to ``ppo_train``'s metric averages (:func:`gem_openrlhf.steps.nonempty_metric_weight`).

Workers that never import them (vLLM actors) pay nothing and load none of their heavy imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

__all__ = [
    "ACTOR_MODULE",
    "ESTIMATOR_ENV",
    "LOSS_MODULE",
    "TARGET_MODULE",
    "apply",
    "apply_loss_guard",
    "apply_metric_guard",
    "install",
    "is_patched",
]

#: Environment variable that turns gem's estimator on in every worker (``rebn``).
ESTIMATOR_ENV = "GEM_OPENRLHF_ESTIMATOR"
#: The module whose ``RemoteExperienceMaker`` gets the step guard and ReBN.
TARGET_MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
#: The module whose loss normaliser gets the zero-count guard.
LOSS_MODULE = "openrlhf.utils.loss_utils"
#: The module whose actor trainer gets the zero-token metric guard.
ACTOR_MODULE = "openrlhf.trainer.ray.ppo_actor"
_ESTIMATORS = ("rebn",)


def apply(module: ModuleType) -> None:
    """The step guard, and ReBN when :data:`ESTIMATOR_ENV` asks, on ``module.RemoteExperienceMaker`` (idempotent)."""
    from gem_openrlhf.rebn import compute_advantages_and_returns
    from gem_openrlhf.steps import guard_make_experience_batch

    maker = module.RemoteExperienceMaker
    if not getattr(maker.make_experience_batch, "gem_guard", False):
        maker._openrlhf_make_experience_batch = maker.make_experience_batch
        maker.make_experience_batch = guard_make_experience_batch(maker.make_experience_batch)
    wanted = os.environ.get(ESTIMATOR_ENV, "").strip() in _ESTIMATORS
    if wanted and maker.compute_advantages_and_returns is not compute_advantages_and_returns:
        maker._openrlhf_compute_advantages_and_returns = maker.compute_advantages_and_returns
        maker.compute_advantages_and_returns = compute_advantages_and_returns


def apply_loss_guard(module: ModuleType) -> None:
    """Make ``module._optimizer_step_loss_norm`` (OpenRLHF's ``loss_utils``) never return a zero count (idempotent)."""
    from gem_openrlhf.steps import nonzero_loss_norm

    if not getattr(module._optimizer_step_loss_norm, "gem_guard", False):
        module._optimizer_step_loss_norm = nonzero_loss_norm(module._optimizer_step_loss_norm)


def apply_metric_guard(module: ModuleType) -> None:
    """Make ``module.ActorPPOTrainer.training_step`` (OpenRLHF's ``ppo_actor``) never report 0 tokens (idempotent)."""
    from gem_openrlhf.steps import nonempty_metric_weight

    trainer = module.ActorPPOTrainer
    if not getattr(trainer.training_step, "gem_guard", False):
        trainer._openrlhf_training_step = trainer.training_step
        trainer.training_step = nonempty_metric_weight(trainer.training_step)


_APPLY = {TARGET_MODULE: apply, LOSS_MODULE: apply_loss_guard, ACTOR_MODULE: apply_metric_guard}


def is_patched() -> bool:
    """Whether this process's ``RemoteExperienceMaker`` (if imported) computes ReBN."""
    from gem_openrlhf.rebn import compute_advantages_and_returns

    module = sys.modules.get(TARGET_MODULE)
    return module is not None and module.RemoteExperienceMaker.compute_advantages_and_returns is (
        compute_advantages_and_returns
    )


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's patch (:func:`apply` or :func:`apply_loss_guard`)."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self.inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _APPLY[module.__name__](module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds :data:`TARGET_MODULE` and :data:`LOSS_MODULE` through the other finders and wraps their loaders."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in _APPLY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Ray's ``worker_process_setup_hook``: the step guards, and ReBN if :data:`ESTIMATOR_ENV` asks for it.

    Raises:
        gem_core.errors.ConfigError: :data:`ESTIMATOR_ENV` names an unknown estimator.
    """
    estimator = os.environ.get(ESTIMATOR_ENV, "").strip()
    if estimator and estimator not in _ESTIMATORS:
        from gem_core.errors import ConfigError

        raise ConfigError(f"{ESTIMATOR_ENV}={estimator!r}; gem's estimators are {', '.join(_ESTIMATORS)}")
    for name, patch in _APPLY.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
    if not all(name in sys.modules for name in _APPLY) and not any(
        isinstance(finder, _PatchOnImport) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _PatchOnImport())
