"""Install gem's ReBN into OpenRLHF's experience maker, in whichever process imports it.

OpenRLHF computes advantages in its ``PPOTrainer`` Ray actor, a process the launcher
never runs code in. :func:`install` is therefore Ray's ``worker_process_setup_hook``
(``gem-openrlhf-train`` sets it for the job): it runs first in every worker and, when
:data:`ESTIMATOR_ENV` is ``rebn``, makes sure that
``openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker.compute_advantages_and_returns``
is :func:`gem_openrlhf.rebn.compute_advantages_and_returns`: at once if the module is
loaded, otherwise the moment it is imported. Workers that never import it (vLLM
actors, model shards) pay nothing and load none of its heavy imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["ESTIMATOR_ENV", "TARGET_MODULE", "apply", "install", "is_patched"]

#: Environment variable that turns gem's estimator on in every worker (``rebn``).
ESTIMATOR_ENV = "GEM_OPENRLHF_ESTIMATOR"
#: The module whose ``RemoteExperienceMaker`` gets ReBN.
TARGET_MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
_ESTIMATORS = ("rebn",)


def apply(module: ModuleType) -> None:
    """Put ReBN on ``module.RemoteExperienceMaker`` (idempotent)."""
    from gem_openrlhf.rebn import compute_advantages_and_returns

    maker = module.RemoteExperienceMaker
    if maker.compute_advantages_and_returns is not compute_advantages_and_returns:
        maker._openrlhf_compute_advantages_and_returns = maker.compute_advantages_and_returns
        maker.compute_advantages_and_returns = compute_advantages_and_returns


def is_patched() -> bool:
    """Whether this process's ``RemoteExperienceMaker`` (if imported) computes ReBN."""
    from gem_openrlhf.rebn import compute_advantages_and_returns

    module = sys.modules.get(TARGET_MODULE)
    return module is not None and module.RemoteExperienceMaker.compute_advantages_and_returns is (
        compute_advantages_and_returns
    )


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then :func:`apply`."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self.inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        apply(module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds :data:`TARGET_MODULE` through the other finders and wraps its loader."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname != TARGET_MODULE:
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
    """Ray's ``worker_process_setup_hook``: patch OpenRLHF in this process if :data:`ESTIMATOR_ENV` asks for it.

    Raises:
        gem_core.errors.ConfigError: :data:`ESTIMATOR_ENV` names an unknown estimator.
    """
    estimator = os.environ.get(ESTIMATOR_ENV, "").strip()
    if not estimator:
        return
    if estimator not in _ESTIMATORS:
        from gem_core.errors import ConfigError

        raise ConfigError(f"{ESTIMATOR_ENV}={estimator!r}; gem's estimators are {', '.join(_ESTIMATORS)}")
    module = sys.modules.get(TARGET_MODULE)
    if module is not None:
        apply(module)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
