"""``GemOatActor``: oat's multi-turn actor, with episodes played by the core's episode engine.

oat's ``PPOMultiTurnActor.step`` calls :meth:`GemOatActor.collect_experience`, logs
episode statistics and ships the episodes to the learner through plasma. Here each
collect step plays ``episodes_per_step`` episodes in lockstep
(:meth:`gem_core.episode.EpisodeEngine.play_batch`): every turn, the prompts of all
running episodes go to vLLM in one ``LLM.generate`` call (through oat's own
``ActorBase.generate``, so LoRA requests work as in oat), each with its own token limit.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from oat.algorithms.ppo_multiturn import PPOMultiTurnActor
from oat.types import Transition

import gem_core
from gem_core.episode import (
    EpisodeEngine,
    EpisodeJob,
    EpisodeSession,
    Generation,
    TurnRequest,
    describe_request,
    env_error_report,
    failed_by_env,
)
from gem_core.errors import TrajectoryError
from gem_oat.args import SEED_STRIDE, GemOatArgs, check_args, episode_limits, parse_env_kwargs, parse_env_wrappers
from gem_oat.convert import generation_from_vllm, session_transitions

__all__ = ["GemOatActor"]

_logger = logging.getLogger(__name__)


class GemOatActor(PPOMultiTurnActor):
    """Plays gem episodes with oat's vLLM engine and returns them as oat ``Transition`` s."""

    args: GemOatArgs

    def init(self, actor_id: int, save_path: str) -> None:
        check_args(self.args)  # before vLLM loads the model
        super().init(actor_id, save_path)  # vLLM, sampling params (logprobs=1), plasma client
        self.engine = EpisodeEngine(self.tokenizer, episode_limits(self.args))
        self.env_kwargs = parse_env_kwargs(self.args.env_kwargs)
        self.env_wrappers = parse_env_wrappers(self.args.env_wrappers)
        self._episode_counter = itertools.count()
        self.last_sessions: list[EpisodeSession] = []  # the sessions of the latest collect step
        # The tokens that end a reply: vLLM stops at the tokenizer's EOS and at stop_token_ids.
        self._stop_ids = {int(t) for t in (self.sampling_params.stop_token_ids or [])}
        if self.tokenizer.eos_token_id is not None:
            self._stop_ids.add(int(self.tokenizer.eos_token_id))

    # ------------------------------------------------------------------ oat's hooks

    def step(self, prompts: Any = None, formatted_prompts: Any = None, references: Any = None) -> Any:
        """Oat's ``PPOMultiTurnActor.step`` (ignores oat's prompt batch), also for a step that keeps no episode.

        oat's own averages the episodes' lengths and returns with ``np.mean`` (NaN and a
        warning for none); here the three episode metrics are left out then. Every
        transition's ``info`` gets the step's metrics (oat's collector averages them), and
        the episodes go to the learner through oat's plasma client.
        """
        del prompts, formatted_prompts, references
        episodes, info = self.collect_experience()
        if episodes:
            info["actor/mean_episode_len"] = float(np.mean([len(ep) for ep in episodes]))
            info["actor/mean_episode_return"] = float(np.mean([sum(t.rewards for t in ep) for ep in episodes]))
            # oat's measure: a final reward of exactly 1 is a success.
            info["actor/mean_episode_success"] = float(np.mean([ep[-1].rewards == 1 for ep in episodes]))
        for episode in episodes:
            for transition in episode:
                transition.info.update(info)
        return self.ipc_client.serialize_ipc(episodes)

    def collect_experience(self) -> tuple[list[list[Transition]], dict[str, Any]]:
        """Play ``episodes_per_step`` episodes; return them (one list of transitions each) and metrics.

        Episode ``k`` of this actor uses env ``env_ids[k % len(env_ids)]`` and seed
        ``env_seed + actor_id * SEED_STRIDE + k``. An episode whose first generation came
        back empty or aborted has no turn to learn from and is left out (counted in
        ``actor/gem_dropped_episodes``). So is an episode an env error ended
        (``--on_env_error end``): the learner never sees it, so it has no loss weight and is
        not in ReBN's statistics; it counts in ``actor/gem_env_errors`` (and in the
        dropped ones), and the step logs one warning naming the failed episodes.
        """
        args = self.args
        jobs = []
        for _ in range(args.episodes_per_step):
            k = next(self._episode_counter)
            env_id = args.env_ids[k % len(args.env_ids)]
            seed = args.env_seed + self.actor_id * SEED_STRIDE + k
            env = gem_core.make(env_id, wrappers=self.env_wrappers or None, **self.env_kwargs)
            jobs.append(EpisodeJob(env=env, env_id=env_id, seed=seed))
        started = time.perf_counter()
        try:
            sessions = self.engine.play_batch(jobs, self.generate_turn)
        finally:
            for job in jobs:
                _close(job.env)
        records = [s.episode() for s in sessions]
        failed = [failed_by_env(record) for record in records]
        episodes = [[] if f else session_transitions(s, self.tokenizer) for s, f in zip(sessions, failed, strict=True)]
        kept = [ep for ep in episodes if ep]
        self.last_sessions = sessions
        report = env_error_report(records)
        if report is not None:
            _logger.warning("gem_oat actor %s: %s", self.actor_id, report)
        info = self._metrics(sessions, time.perf_counter() - started, len(episodes) - len(kept))
        info["actor/gem_env_errors"] = float(sum(failed))
        return kept, info

    # ------------------------------------------------------------------ generation

    def generate_turn(self, requests: Sequence[TurnRequest]) -> list[Generation]:
        """One vLLM call for this turn of every running episode, each with its own ``max_tokens``."""
        params = []
        for request in requests:
            p = self.sampling_params.clone()
            p.n = 1  # one episode per prompt; oat's num_samples is for single-turn prompts
            if request.max_tokens is not None:
                p.max_tokens = request.max_tokens
            params.append(p)
        outputs = self.generate([list(r.prompt_ids or []) for r in requests], params)
        generations = []
        # not strict: too few outputs are the generate contract's error, naming the whole batch
        for request, output in zip(requests, outputs, strict=False):
            try:
                generations.append(generation_from_vllm(output, self._stop_ids))
            except TrajectoryError as exc:  # name the episode in the message: Python 3.10 has no exception notes
                raise TrajectoryError(f"episode {describe_request(request)}: {exc}") from None
        return generations

    @staticmethod
    def _metrics(sessions: Sequence[EpisodeSession], seconds: float, dropped: int) -> dict[str, Any]:
        turns = [len(s.turns) for s in sessions]
        ends: dict[str, int] = {}
        for s in sessions:
            ends[str(s.end_reason)] = ends.get(str(s.end_reason), 0) + 1
        info: dict[str, Any] = {
            "actor/gem_collect_time": seconds,
            "actor/gem_episodes": float(len(sessions)),
            "actor/gem_dropped_episodes": float(dropped),
            "actor/gem_mean_turns": float(np.mean(turns)) if turns else 0.0,
            "actor/gem_cut_turns": float(sum(s.cut_turns for s in sessions)),
        }
        for reason in ("env", "max_turns", "budget", "cut", "abort", "error"):
            info[f"actor/gem_end_{reason}"] = float(ends.get(reason, 0))
        return info


def _close(env: Any) -> None:
    try:
        env.close()
    except Exception as exc:  # an env that raised may not close either; the other episodes are kept
        _logger.warning("closing a gem env failed: %s: %s", type(exc).__name__, exc)
