"""verl plugin: registers the ``gem_env_agent`` agent loop and the ``rebn`` advantage estimator, lazily.

``import verl`` loads every ``verl.plugins`` entry point (``VERL_USE_EXTERNAL_PLUGINS``,
default ``auto``) in the driver and in every Ray worker that imports verl. So this
module must stay light: it imports only the standard library, and registers each name
when verl itself imports the module that holds the registry:

* ``verl.experimental.agent_loop.agent_loop`` (heavy: the LLM server client pulls in
  fastapi and uvicorn): the ``gem_env_agent`` loop, and the legacy ``AgentLoopWorker``'s
  post-processing that carries its per-token fields (:mod:`gem_verl.async_hook`);
* ``verl.trainer.ppo.core_algos``: the ``rebn`` estimator;
* ``verl.trainer.ppo.v1.trainer_base``: the hook that hands ``rebn`` the explicit turn
  boundaries (:mod:`gem_verl.trainer_hook`);
* ``verl.trainer.ppo.ray_trainer`` and ``verl.experimental.separation.ray_trainer``: the
  same for the one-step-off and fully-async trainers (:mod:`gem_verl.async_hook`);
* ``verl.utils.config``: its ``validate_config`` (``main_ppo`` calls it before Ray or any
  model starts) also runs :func:`gem_verl.options.check_trainer_config` on configs that
  train with gem.

A module already imported when the plugin loads is handled at once. A failing
registration is logged as an error (verl logs failing plugins only at debug level)
and does not break verl's import; verl then reports the name as unknown.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = [
    "AFTER_IMPORT",
    "AGENT_NAME",
    "GATEWAY_AGENT_NAME",
    "register",
    "register_agent_loop",
    "register_config_check",
    "register_estimator",
    "register_legacy_advantage_hook",
    "register_trainer_hook",
]

_logger = logging.getLogger(__name__)

#: The name rows select in their ``agent_name`` column (or ``rollout.agent.default_agent_loop``).
AGENT_NAME = "gem_env_agent"
#: Rows whose episodes a black-box agent program plays through gem gateway (:mod:`gem_verl.gateway_loop`).
GATEWAY_AGENT_NAME = "gem_gateway_agent"


def register_agent_loop(module: ModuleType) -> None:
    """Register ``gem_env_agent`` in verl's agent-loop registry (``module`` is verl's ``agent_loop``).

    The entry is what verl's ``register`` decorator (and its ``agent_loop_config_path``
    files) write: the class path hydra instantiates. The class itself is not imported
    here: :mod:`gem_verl.agent_loop` imports verl's agent-loop module, so importing it
    from this hook would be circular when it is the first to import verl's.
    """
    module._agent_loop_registry[AGENT_NAME] = {"_target_": "gem_verl.agent_loop.GemEnvAgentLoop"}
    # multi-agent games: one sample per trained seat (gem_verl.multiagent)
    module._agent_loop_registry["gem_multiagent_agent"] = {"_target_": "gem_verl.multiagent.GemMultiAgentLoop"}
    module._agent_loop_registry[GATEWAY_AGENT_NAME] = {"_target_": "gem_verl.gateway_loop.GatewayAgentLoop"}
    from gem_verl.async_hook import install_worker

    install_worker(module)


def register_estimator(module: ModuleType) -> None:
    """Register ``rebn`` with verl's advantage estimators (``module`` is ``core_algos``); idempotent."""
    from gem_verl.advantage import ESTIMATOR_NAME, compute_rebn_advantage

    if module.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_rebn_advantage:
        module.register_adv_est(ESTIMATOR_NAME)(compute_rebn_advantage)
    from gem_verl import roles

    roles.register(module)  # role_rebn, role_grpo: multi-agent samples


def register_trainer_hook(module: ModuleType) -> None:
    """Install the turn-boundary hook in verl's v1 trainer (``module`` is ``trainer_base``)."""
    from gem_verl import roles
    from gem_verl.trainer_hook import install

    install(module)
    roles.install(module)


def register_legacy_advantage_hook(module: ModuleType) -> None:
    """Give ``rebn`` the turn boundaries in ``compute_advantage`` of the one-step-off / fully-async trainers."""
    from gem_verl.async_hook import install_trainer

    install_trainer(module)


def register_config_check(module: ModuleType) -> None:
    """Wrap ``validate_config`` of ``verl.utils.config`` with gem's option check (idempotent).

    ``main_ppo`` binds the name with ``from verl.utils.config import validate_config``
    when it is imported, which is after ``import verl`` has loaded this plugin.
    """
    from gem_verl.options import check_trainer_config, uses_gem

    original = module.validate_config
    if getattr(original, "__gem_verl_hook__", False):
        return

    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        if uses_gem(config):
            check_trainer_config(config)
        return original(config, *args, **kwargs)

    validate_config.__gem_verl_hook__ = True  # type: ignore[attr-defined]
    module.validate_config = validate_config


#: What to run once verl has imported each module.
AFTER_IMPORT: dict[str, Callable[[ModuleType], None]] = {
    "verl.experimental.agent_loop.agent_loop": register_agent_loop,
    "verl.trainer.ppo.core_algos": register_estimator,
    "verl.trainer.ppo.v1.trainer_base": register_trainer_hook,
    # the one-step-off and fully-async trainers call the name their base module imported from ray_trainer
    "verl.trainer.ppo.ray_trainer": register_legacy_advantage_hook,
    "verl.experimental.separation.ray_trainer": register_legacy_advantage_hook,
    "verl.utils.config": register_config_check,
}


def _run(name: str, module: ModuleType) -> None:
    try:
        AFTER_IMPORT[name](module)
    except Exception:
        _logger.error("gem_verl: registering with %s failed", name, exc_info=True)


class _RunAfter(importlib.abc.Loader):
    """Executes a module with its own loader, then runs gem's registration for it."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _run(self._name, module)

    def __getattr__(self, name: str) -> Any:  # resource readers, get_source, ...: the real loader's
        return getattr(self._loader, name)


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """Finds the watched modules with the other finders and wraps their loaders (nothing else is touched)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in AFTER_IMPORT:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _RunAfter(spec.loader, fullname)
            return spec
        return None


def register() -> None:
    """Run the registrations for the watched modules already imported; watch the others (idempotent)."""
    if not any(isinstance(finder, _AfterImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImportFinder())
    for name in AFTER_IMPORT:
        module = sys.modules.get(name)
        if module is not None:
            _run(name, module)


register()
