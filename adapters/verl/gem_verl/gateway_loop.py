"""A verl agent loop whose episodes a black-box agent program plays through ``gem gateway``.

:class:`GatewayAgentLoop` (registered as ``gem_gateway_agent``) serves verl's LLM server
behind a :class:`gem_gateway.capture.Gateway` on loopback for one episode, runs the
configured harness (``+gem.harness=my_module:run_agent``: trainer code that starts the agent
program with the session's base URL and returns its reward, :mod:`gem_gateway.harness`) in a
worker thread, and returns the captured episode as verl samples: **one sample per consistent
segment** (:func:`gem_core.rl.layouts.episode_segments`). An agent program that rewrote its
history (a branch point) gives several samples, each token sampled trained exactly once, in
the context the model sampled it in.

Each sample's turns carry their own rewards; the last turn of a segment before a branch point
also carries ``gamma`` times the return of the turn after it, so the per-row returns ``rebn``
computes (``G_k = r_k + gamma * G_{k+1}``, :mod:`gem_verl.advantage`) equal the whole episode's.

Needs ``gem-gateway`` (``pip install -e plugins/gateway``).
"""

from __future__ import annotations

import importlib
from typing import Any
from uuid import uuid4

from gem_core.episode import Generation, TurnRequest
from gem_core.errors import ConfigError, TrajectoryError
from gem_core.rl.layouts import episode_segments, episode_to_sequence
from gem_core.rl.returns import discounted_returns
from gem_core.rl.types import Episode
from gem_verl.agent_loop import EpisodeRequest, GemAgentLoopOutput, GemEnvAgentLoop, merge_extra_fields
from gem_verl.options import episode_metrics
from gem_verl.plugin import GATEWAY_AGENT_NAME

__all__ = ["GATEWAY_AGENT_NAME", "GatewayAgentLoop", "load_harness", "segment_outputs"]


def load_harness(path: str | None) -> Any:
    """The harness function named ``"module:function"`` (``+gem.harness``).

    Raises:
        ConfigError: no path, a malformed one, or nothing callable there.
    """
    if not path or ":" not in path:
        raise ConfigError(
            f"gem_gateway_agent needs +gem.harness='module:function' (the trainer code that runs the agent program "
            f"against the session's base URL and returns its reward), got {path!r}"
        )
    module_name, _, attribute = path.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"+gem.harness={path!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not callable(found):
        raise ConfigError(f"+gem.harness={path!r} is a {type(found).__name__}, not a function")
    return found


def segment_outputs(episode: Episode, gamma: float, extra: dict[str, Any], metrics: Any) -> list[GemAgentLoopOutput]:
    """One verl sample per consistent segment of a captured episode (see the module docstring).

    Raises:
        TrajectoryError: the episode has no turns.
    """
    if not episode.turns:
        raise TrajectoryError(f"episode {episode.episode_id!r} has no turns: the agent program made no call")
    returns = discounted_returns(episode, gamma)
    outputs = []
    for number, (first, end) in enumerate(episode_segments(episode)):
        part = Episode(
            episode.turns[first:end],
            start_state_id=episode.start_state_id,
            episode_id=episode.episode_id,
            env_id=episode.env_id,
            seed=episode.seed,
        )
        sequence = episode_to_sequence(part)
        start = sequence.prompt_length
        size = len(sequence.input_ids) - start
        turn_ids, rewards, versions = [-1] * size, [0.0] * size, [-1] * size
        for local, (begin, stop) in enumerate(sequence.turn_spans):
            turn = part.turns[local]
            turn_ids[begin - start : stop - start] = [local] * (stop - begin)
            reward = float(turn.reward)
            if local == len(part.turns) - 1 and end < len(episode.turns):
                reward += gamma * float(returns[end])  # the rest of the episode, past the branch point
            rewards[stop - start - 1] = reward
            if turn.policy_versions is not None:
                versions[begin - start : stop - start] = list(turn.policy_versions)
        outputs.append(
            GemAgentLoopOutput(
                prompt_ids=sequence.input_ids[:start].tolist(),
                response_ids=sequence.input_ids[start:].tolist(),
                response_mask=sequence.loss_mask[start:].astype(int).tolist(),
                response_logprobs=None if sequence.token_logprobs is None else sequence.token_logprobs[start:].tolist(),
                token_rewards=rewards,
                turn_ids=turn_ids,
                policy_versions=versions,
                reward_score=episode.total_reward,
                num_turns=2 * part.num_turns,
                metrics=metrics,
                extra_fields={**extra, "gem_segment": number},
            )
        )
    return outputs


class GatewayAgentLoop(GemEnvAgentLoop):
    """Plays one episode with the configured black-box harness through the gateway; verl samples out.

    Reads what :class:`~gem_verl.agent_loop.GemEnvAgentLoop` reads, and from the ``gem``
    section ``harness`` (required), ``harness_timeout_s``, ``tool_parser`` and ``max_calls``.
    ``max_turn_tokens`` (else ``rollout.response_length``) caps each call; every call's prompt
    plus reply fits ``rollout.prompt_length + rollout.response_length``. The row's
    ``extra_info["gem"]`` names the env and seed the harness plays.

    Raises:
        ConfigError: At construction: no or a bad ``+gem.harness``, an unknown ``+gem.tool_parser``
            (and what the base class refuses).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.harness = load_harness(self.gem_config.harness)
        from gem_gateway.tool_parsers import get_parser

        get_parser(self.gem_config.tool_parser, self.tokenizer)  # an unknown parser fails here, not per episode

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:  # type: ignore[override]  # verl v1 takes a list
        """Run the harness for the row ``kwargs`` and return one sample per segment of its episode."""
        from gem_gateway.capture import Gateway, GatewayLimits
        from gem_gateway.harness import capture
        from gem_gateway.server import serve

        request = EpisodeRequest.from_row(kwargs)
        request_id = uuid4().hex  # one sticky session on the server for the whole episode
        seen: list[Any] = []

        async def generate(turn: TurnRequest) -> Generation:
            return await self._generate(request_id, turn, sampling_params, seen)

        cap = self.gem_config.max_turn_tokens or self.response_length
        limits = GatewayLimits(
            max_sessions=1,
            max_calls_per_session=self.gem_config.max_calls,
            request_timeout_s=self.gem_config.harness_timeout_s,
            default_max_tokens=cap,
            max_tokens_cap=cap,
            max_context_tokens=max(cap, self.prompt_length + self.response_length),
        )
        gateway = Gateway(
            generate,
            self.tokenizer,
            model_name="policy",
            tool_parser=self.gem_config.tool_parser,
            limits=limits,
            chat_template_kwargs=self.apply_chat_template_kwargs or {},
        )
        version = kwargs.get("global_steps")
        gateway.policy_version = int(version) if isinstance(version, int) else 0
        async with serve(gateway) as url:
            episode = await capture(
                gateway,
                url,
                request_id,
                self.harness,
                env_id=request.env_id,
                seed=request.seed,
                extra={"options": request.options, "env_kwargs": request.env_kwargs},
                timeout_s=self.gem_config.harness_timeout_s,
            )
        extra = merge_extra_fields([dict(o.extra_fields or {}) for o in seen])
        summary = self._summary(episode)
        summary["branch_points"] = list(episode.metadata.get("branch_points") or [])
        extra.update(
            {
                "turn_scores": [t.reward for t in episode.turns],
                "tool_rewards": [],
                "reward_extra_info": episode_metrics(summary),
                "gem": summary,
            }
        )
        return list(segment_outputs(episode, self.gamma, extra, self._metrics(episode, seen)))
