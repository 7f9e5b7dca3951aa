"""gem environments in oat (``oat-llm`` 0.2.4): a multi-turn actor on the episode engine, and ReBN in float64.

* :class:`gem_oat.actor.GemOatActor` (a ``PPOMultiTurnActor``): ``collect_experience``
  plays episodes with :class:`gem_core.episode.EpisodeEngine`, one batched vLLM call per
  turn, and returns them as lists of ``oat.types.Transition``.
* :class:`gem_oat.learner.GemOatLearner` (a ``PPOMultiTurnLearner``): trains each round on
  exactly the transitions its collect steps kept, with per-turn returns and the core's ReBN
  (float64, exact zeros for equal returns) over exactly that set; survives empty steps.
* ``python -m gem_oat.train``: the launcher, oat's own flags plus env ids.

The pure conversions (:mod:`gem_oat.convert`, :mod:`gem_oat.rebn`) need only ``oat.types``;
the actor, learner and launcher import oat's trainer (vLLM, DeepSpeed, launchpad).
"""

__version__ = "0.1.0"
