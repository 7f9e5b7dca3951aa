"""gem-verl: train LLM agents on gem environments with verl 0.9.

* :class:`gem_verl.agent_loop.GemEnvAgentLoop` (agent name ``gem_env_agent``): plays one
  multi-turn env episode per dataset row through verl's LLM server, token in / token out.
* :func:`gem_verl.advantage.compute_rebn_advantage` (``algorithm.adv_estimator=rebn``):
  per-turn returns with ``algorithm.gamma``, ReBN over every turn of the batch.
* :mod:`gem_verl.dataset`: the Parquet rows verl's trainer reads, from env ids and seeds.
* :mod:`gem_verl.options`: the verl options that interact with multi-turn episodes and
  ReBN, checked when ``main_ppo`` validates its config (before any model loads), and the
  per-episode metrics in ``reward_extra_info`` (DAPO's ``filter_groups``).

Both names are registered by the ``verl.plugins`` entry point (:mod:`gem_verl.plugin`)
whenever verl is imported. This module imports nothing heavy.
"""

__version__ = "0.1.0"
