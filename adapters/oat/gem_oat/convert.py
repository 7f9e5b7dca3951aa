"""Conversions between vLLM outputs, engine sessions and oat ``Transition`` s.

Only ``oat.types`` is imported (torch, no GPU), so these run wherever oat's package does.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from typing import Any

from oat.types import Transition

from gem_core.episode import EpisodeSession, Generation
from gem_core.errors import TrajectoryError
from gem_core.rl.types import Episode, Turn

__all__ = ["episode_from_transitions", "generation_from_vllm", "session_transitions"]

# vLLM's finish reasons mapped onto the engine's: anything else (a stop string, EOS, a stop token) is "stop".


def generation_from_vllm(output: Any, stop_ids: Collection[int] = ()) -> Generation:
    """The engine's :class:`Generation` from one vLLM ``RequestOutput`` (its first completion).

    Token ids are taken as sampled (the stop token included, as vLLM returns it), the
    log-probability of each sampled token is read from vLLM's per-token dicts, and
    ``finish_reason`` ``"length"`` marks a cut generation, except when the last sampled
    token is one of ``stop_ids``: vLLM's V1 engine tests the length cap before the stop
    token, so a reply that ends exactly at ``max_tokens`` with its stop token is reported
    as ``"length"`` although it is complete (the V0 engine says ``"stop"``).

    Raises:
        TrajectoryError: No completion, or logprobs that do not cover the sampled tokens
            (sampling parameters without ``logprobs``).
    """
    if not output.outputs:
        raise TrajectoryError(f"vLLM request {output.request_id} returned no completion")
    completion = output.outputs[0]
    # vLLM's reason goes through: the engine's generate contract takes "stop", "length",
    # "abort" and "repetition" (a cut) and refuses "error", None or anything else, naming the episode.
    finish: Any = None if completion.finish_reason is None else str(completion.finish_reason)
    try:
        ids = [operator.index(t) for t in completion.token_ids]
    except TypeError:  # not a sequence of ints: the contract refuses it (int() would truncate a float id)
        return Generation(token_ids=completion.token_ids, finish_reason=finish)
    logprobs = None
    if completion.logprobs is not None:
        try:
            logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids, strict=True)]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise TrajectoryError(
                f"vLLM request {output.request_id}: logprobs do not cover the sampled tokens "
                f"({type(exc).__name__}: {exc}); sample with SamplingParams(logprobs=1)"
            ) from None
    if finish == "length" and ids and ids[-1] in stop_ids:
        finish = "stop"
    return Generation(
        token_ids=ids,
        text=completion.text,
        logprobs=logprobs,
        finish_reason=finish,
        extra={"stop_reason": completion.stop_reason, "cumulative_logprob": completion.cumulative_logprob},
    )


def session_transitions(session: EpisodeSession, tokenizer: Any) -> list[Transition]:
    """One finished episode as oat ``Transition`` s, one per turn.

    ``prompt_ids`` is the exact context the model was prompted with (token in, token
    out), ``response_ids`` / ``response_logprobs`` what it sampled, ``rewards`` the env's
    reward for that turn and ``done`` whether the episode ended there (terminated,
    truncated, or its last turn). ``action`` is the text sent to the env
    (:data:`~gem_core.episode.INVALID_ACTION` for a cut generation), ``response`` the
    generated text. ``info`` holds numbers only (oat averages every info key into its
    metrics): ``gem/turn``, ``gem/terminated`` and ``gem/truncated``.

    Raises:
        TrajectoryError: A turn without prompt ids, generated ids or logprobs (oat's
            PPO loss needs the sampling policy's logprobs).
    """
    episode = session.episode()
    turns = episode.turns
    out: list[Transition] = []
    for index, (turn, generation) in enumerate(zip(turns, session.generations, strict=True)):
        where = f"episode {episode.episode_id} turn {index}"
        if turn.prompt_token_ids is None or turn.action_token_ids is None:
            raise TrajectoryError(f"{where}: no token ids; play with a tokenizer (token mode)")
        if turn.action_logprobs is None:
            raise TrajectoryError(f"{where}: no logprobs; oat's PPO loss needs them (SamplingParams(logprobs=1))")
        cut = turn.stop_reason == "length"
        out.append(
            Transition(
                obs=turn.observation,
                action=turn.action,
                rewards=float(turn.reward),
                done=bool(turn.terminated or turn.truncated or index == len(turns) - 1),
                prompt=str(tokenizer.decode(turn.prompt_token_ids, skip_special_tokens=False)),
                prompt_ids=list(turn.prompt_token_ids),
                response=generation.text
                if generation.text is not None
                else str(tokenizer.decode(turn.action_token_ids)),
                response_ids=list(turn.action_token_ids),
                response_logprobs=list(turn.action_logprobs),
                response_is_truncated=cut,
                # The engine's rule: a generation cut at its token limit is not a well-formed action.
                action_is_formatted=not cut,
                loss_mask=True,
                info={
                    "gem/turn": float(index),
                    "gem/terminated": float(turn.terminated),
                    "gem/truncated": float(turn.truncated),
                },
            )
        )
    return out


def episode_from_transitions(
    transitions: Sequence[Transition], *, start_state_id: str, env_id: str | None = None, seed: int | None = None
) -> Episode:
    """The core's :class:`Episode` record of one oat episode (for layouts, JSONL and the conformance suite)."""
    turns = [
        Turn(
            observation=t.obs,
            action=t.action,
            reward=float(t.rewards),
            terminated=bool(t.info.get("gem/terminated", t.done)),
            truncated=bool(t.info.get("gem/truncated", 0.0)),
            prompt_token_ids=list(t.prompt_ids),
            action_token_ids=list(t.response_ids),
            action_logprobs=list(t.response_logprobs),
            stop_reason="length" if t.response_is_truncated else "stop",
        )
        for t in transitions
    ]
    return Episode(turns=turns, start_state_id=start_state_id, env_id=env_id, seed=seed)
