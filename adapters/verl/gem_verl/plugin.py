"""verl plugin: registers the ``gem_env_agent`` agent loop and the ``rebn`` advantage estimator.

``import verl`` loads every ``verl.plugins`` entry point (``VERL_USE_EXTERNAL_PLUGINS``,
default ``auto``), in the driver and in every Ray worker that imports verl, so no user
code is needed. verl logs a failing plugin only at debug level, so a failure here is
also logged as a warning before it propagates.
"""

from __future__ import annotations

import logging

__all__ = ["register"]

_logger = logging.getLogger(__name__)


def register() -> None:
    """Register both names with verl (idempotent: re-registering the same objects is allowed)."""
    from verl.experimental.agent_loop.agent_loop import register as register_agent_loop
    from verl.trainer.ppo.core_algos import register_adv_est

    from gem_verl.advantage import ESTIMATOR_NAME, compute_rebn_advantage
    from gem_verl.agent_loop import AGENT_NAME, GemEnvAgentLoop

    register_agent_loop(AGENT_NAME)(GemEnvAgentLoop)
    register_adv_est(ESTIMATOR_NAME)(compute_rebn_advantage)


try:
    register()
except Exception:
    _logger.warning("gem_verl: registering with verl failed", exc_info=True)
    raise
