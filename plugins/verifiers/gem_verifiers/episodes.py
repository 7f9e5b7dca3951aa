"""verifiers (``verifiers.v1``) episodes as ``gem_core.rl`` episodes.

verifiers drives whole episodes itself: ``Env.run_episode(task, ctx)`` returns a ``verifiers.v1.Episode``
whose traces (one per agent run) hold a message graph. Each root-to-leaf path of a trace
(``Trace.branches``) is one training sample: its nodes' ``token_ids`` concatenate to the exact
sequence the model saw, ``mask`` marks the tokens the model sampled and ``logprobs`` their
log-probabilities.

:func:`to_gem_episodes` turns every branch into one :class:`gem_core.rl.Episode`: one
:class:`~gem_core.rl.Turn` per sampled assistant node, with

* ``prompt_token_ids``: every token before the node plus the node's own unsampled scaffold
  (the generation prompt), ``action_token_ids``: its sampled tokens, ``action_logprobs``: theirs;
* ``observation``: the messages since the previous model turn (the task prompt, tool results,
  user turns; system messages stay in ``prompt_messages`` only), ``action``: the reply's text,
  ``next_observation``: what followed it;
* ``reward``: verifiers scores a whole trace (its named, weighted rewards): the trace's total
  reward is on the last turn, 0 on the others, so gem's returns and per-turn ReBN apply;
* ``Episode.metadata["verifiers"]``: the rewards by name (score and weight), metrics, stop
  condition, ok/errors, the trace's and episode's ids, the agent, the task key and the branch;
* ``start_state_id``: the env, the task and the agent's seat: a group (GRPO's, ReBN's per-state
  statistics) holds one seat's rollouts of one task, never both players of a two-player game.

verifiers records errors at three levels: the episode (its own ``run``/``finalize``), each trace
(an agent's run: a provider's 502, a harness crash) and each model call. A failed episode's
:class:`VerifiersEpisodeFailed` names every one, with where it was recorded.

A branch whose sampled tokens are not one suffix of its node (the layout every verifiers
renderer writes) or whose logprobs do not match them raises :class:`VerifiersTraceError`; a
trace from verifiers' relay (eval) client carries no token ids: that raises too, unless
``require_tokens=False`` (text-only turns).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from gem_core.errors import TrajectoryError
from gem_core.rl.types import Episode, Turn

__all__ = [
    "VerifiersEpisodeFailed",
    "VerifiersTraceError",
    "episode_errors",
    "message_text",
    "run_episodes",
    "to_gem_episodes",
]


class VerifiersTraceError(TrajectoryError):
    """A verifiers trace cannot become a gem episode as it is (the message names the trace, node and fix)."""


class VerifiersEpisodeFailed(TrajectoryError):
    """A verifiers episode did not complete (``ok`` is False); its errors are in the message."""


def message_text(message: Any) -> str:
    """The text of a verifiers message: its content (text parts joined) and, for a reply, its tool calls as JSON."""
    content = getattr(message, "content", None)
    text = "".join(getattr(part, "text", "") for part in content) if isinstance(content, list) else content or ""
    for call in getattr(message, "tool_calls", None) or ():
        text += f"\n<tool_call>{json.dumps({'name': call.name, 'arguments': call.arguments})}</tool_call>"
    return text


def _error_text(error: Any) -> str:
    status = getattr(error, "status_code", None)
    return f"{error.type}: {error.message}" + (f" (HTTP {status})" if status is not None else "")


def episode_errors(episode: Any, *, only: Any = None) -> list[tuple[str, str]]:
    """Every error a verifiers episode recorded, as ``(where, "Type: message (HTTP status)")``, oldest level first.

    The levels: the episode's own errors, each trace's (``trace <id> (<agent>)``) and each of its
    model calls' (``trace <id> (<agent>), model call <i>``). An error recorded at two levels (a
    call's failure is often the trace's too) is listed once, where it was first met.

    Args:
        episode: A ``verifiers.v1.Episode``.
        only: A trace: its own errors and its calls' after the episode's (for one branch's metadata).
    """
    found: list[tuple[str, str]] = []
    seen: set[str] = set()

    def add(where: str, error: Any) -> None:
        text = _error_text(error)
        if text not in seen:
            seen.add(text)
            found.append((where, text))

    for error in episode.errors:
        add("episode", error)
    for trace in episode.traces:
        if only is not None and trace is not only:
            continue
        where = f"trace {trace.id} ({trace.agent.name})"
        for error in trace.errors:
            add(where, error)
        for index, call in enumerate(trace.calls):
            if call.error is not None:
                add(f"{where}, model call {index}", call.error)
    return found


def _observation(messages: Sequence[Any]) -> str:
    # the system prompt is the policy's, not the env's: it stays in prompt_messages only
    return "\n".join(message_text(m) for m in messages if m.role != "system")


def _chat(messages: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"role": m.role, "content": message_text(m)} for m in messages]


def _stop_reason(call: Any) -> str | None:
    reason = getattr(call, "finish_reason", None) if call is not None else None
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"  # "tool_calls" ended the turn as the model chose


def _rewards(trace: Any) -> dict[str, dict[str, float] | None]:
    return {
        name: None if r is None else {"score": float(r.score), "weight": float(r.weight)}
        for name, r in trace.rewards.items()
    }


def _branch_turns(trace: Any, branch: Any, *, require_tokens: bool, where: str) -> list[Turn]:
    calls = {c.node: c for c in trace.calls if c.node is not None}
    index_of = {id(node): i for i, node in enumerate(trace.nodes)}
    turns: list[Turn] = []
    tokens: list[int] = []
    pending: list[Any] = []  # messages since the last model turn
    history: list[Any] = []
    for node in branch.nodes:
        if not node.sampled:
            pending.append(node.message)
            history.append(node.message)
            tokens.extend(node.token_ids)
            continue
        node_where = f"{where}, node {index_of.get(id(node), '?')}"
        if len(node.mask) != len(node.token_ids):
            raise VerifiersTraceError(
                f"{node_where}: mask has {len(node.mask)} entries for {len(node.token_ids)} tokens"
            )
        sampled = sum(node.mask)
        if node.token_ids and (not sampled or not all(node.mask[len(node.mask) - sampled :])):
            raise VerifiersTraceError(
                f"{node_where}: the sampled tokens are not one suffix of the node (mask {node.mask!r}); "
                "gem's turns need scaffold first, then the model's tokens"
            )
        if not node.token_ids and require_tokens:
            raise VerifiersTraceError(
                f"{node_where}: the model's reply carries no token ids: the trace came from verifiers' relay "
                "(eval) client; run with a TrainClientConfig (renderer + vLLM generate) for token traces, or pass "
                "require_tokens=False for text-only episodes"
            )
        if node.token_ids and len(node.logprobs) != sampled:
            raise VerifiersTraceError(f"{node_where}: {len(node.logprobs)} logprobs for {sampled} sampled tokens")
        cut = len(node.token_ids) - sampled
        call = calls.get(index_of.get(id(node), -1))
        if turns:
            turns[-1].next_observation = _observation(pending)
        turns.append(
            Turn(
                observation=_observation(pending),
                action=message_text(node.message),
                reward=0.0,
                prompt_messages=_chat(history),
                prompt_token_ids=[*tokens, *node.token_ids[:cut]] if node.token_ids else None,
                action_token_ids=list(node.token_ids[cut:]) if node.token_ids else None,
                action_logprobs=[float(x) for x in node.logprobs] if node.token_ids else None,
                stop_reason=_stop_reason(call),
            )
        )
        pending = []
        history.append(node.message)
        tokens.extend(node.token_ids)
    if turns and pending:
        turns[-1].next_observation = _observation(pending)
    return turns


def to_gem_episodes(
    episode: Any,
    *,
    require_tokens: bool = True,
    trainable_only: bool = True,
    on_failed: Literal["raise", "keep"] = "raise",
) -> list[Episode]:
    """One gem episode per branch of every trace of a verifiers episode.

    Args:
        episode: A ``verifiers.v1.Episode`` (what ``Env.run_episode`` returns).
        require_tokens: Raise :class:`VerifiersTraceError` for a reply without token ids (a relay-client
            trace); ``False`` gives text-only turns (``prompt_token_ids`` etc. ``None``).
        trainable_only: Skip branches and traces verifiers marks untrainable (a judge's trace,
            abandoned compaction attempts).
        on_failed: An episode whose ``ok`` is False: ``"raise"`` :class:`VerifiersEpisodeFailed`
            naming its errors; ``"keep"`` convert what it has (``metadata["verifiers"]["ok"]`` False).

    Returns:
        The episodes, traces in completion order, branches in order. Branches with no model turn are skipped.

    Raises:
        VerifiersEpisodeFailed: the episode failed and ``on_failed="raise"``.
        VerifiersTraceError: a branch's token layout cannot become turns (the message names trace and node).
    """
    if not episode.ok and on_failed == "raise":
        errors = "; ".join(f"{where}: {text}" for where, text in episode_errors(episode))
        failed = [f"{t.id} ({t.agent.name}, stop condition {t.stop_condition!r})" for t in episode.traces if not t.ok]
        raise VerifiersEpisodeFailed(
            f"verifiers episode {episode.id} did not complete: "
            f"{errors or 'no error recorded on the episode, its traces or their model calls'}; "
            f"failed traces: {', '.join(failed) or 'none'}. Pass on_failed='keep' to convert what it has"
        )
    env_id = episode.env.id or None
    key = episode.task.key or episode.task.hash or ""
    out: list[Episode] = []
    for trace in episode.traces:
        if trainable_only and not trace.agent.trainable:
            continue
        for branch in trace.branches:
            if trainable_only and not branch.trainable:
                continue
            where = f"trace {trace.id} ({trace.agent.name}), branch {branch.index}"
            turns = _branch_turns(trace, branch, require_tokens=require_tokens, where=where)
            if not turns:
                continue
            last = turns[-1]
            if not math.isfinite(trace.reward):
                raise VerifiersTraceError(f"{where}: the trace's reward is {trace.reward}; gem needs a finite reward")
            last.reward = float(trace.reward)
            last.truncated = bool(trace.is_truncated)
            last.terminated = not last.truncated and bool(trace.is_completed)
            last.info = {"stop_condition": trace.stop_condition}
            out.append(
                Episode(
                    turns=turns,
                    # one group per seat: the two players of a game never share a baseline
                    start_state_id=f"verifiers:{env_id or '?'}/{key}@{trace.agent.name}",
                    episode_id=f"{episode.id}/{trace.id}/{branch.index}",
                    env_id=env_id,
                    metadata={
                        "verifiers": {
                            "episode_id": episode.id,
                            "trace_id": trace.id,
                            "agent": trace.agent.name,
                            "branch": branch.index,
                            "task_key": episode.task.key,
                            "task_type": episode.task.type,
                            "rewards": _rewards(trace),
                            "reward": float(trace.reward),
                            "metrics": {k: (None if v is None else float(v)) for k, v in trace.metrics.items()},
                            "stop_condition": trace.stop_condition,
                            "is_truncated": bool(trace.is_truncated),
                            "ok": bool(trace.ok and episode.ok),
                            "errors": [text for _, text in episode_errors(episode, only=trace)],
                            "info": dict(trace.info),
                        }
                    },
                )
            )
    return out


async def run_episodes(
    env: Any,
    tasks: Iterable[Any],
    ctx: Any,
    *,
    rollouts_per_task: int = 1,
    **convert: Any,
) -> list[list[Episode]]:
    """Run verifiers episodes with the env's own ``serving()`` and ``run_episode``, converted per episode.

    Args:
        env: A ``verifiers.v1.Env`` (``verifiers.v1.load_environment(EnvConfig(...))``).
        tasks: ``verifiers.v1.Task`` objects (e.g. from ``env.taskset``).
        ctx: The ``verifiers.v1.ModelContext`` (model, client config, sampling).
        rollouts_per_task: Episodes per task (a GRPO group).
        **convert: Options of :func:`to_gem_episodes`.

    Returns:
        One list of gem episodes per verifiers episode, tasks in order, each task's rollouts together.
    """
    import asyncio

    tasks = list(tasks)
    async with env.serving():
        results = await asyncio.gather(
            *(env.run_episode(task, ctx) for task in tasks for _ in range(rollouts_per_task))
        )
    return [to_gem_episodes(result, **convert) for result in results]
