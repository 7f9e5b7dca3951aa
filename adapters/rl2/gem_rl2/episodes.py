"""RL2's text-level env interface on gem's episode engine.

RL2 (rl-square 0.0.2) owns generation and tokens: for each dataset row it calls the
module given as ``rollout.env_path``::

    state_text, extra_info = await reset(extra_info)           # the first prompt, as text
    response = await step(state_text, action_text, extra_info)  # after every generation
    # response: {"next_state", "reward", "score", "done", "extra_info"}

and tokenizes ``state_text`` itself. When ``next_state`` starts with ``state_text +
action_text`` it appends the encoded remainder to the same token sequence (one sequence
per episode); otherwise it starts a new one. Each turn's reward lands on that turn's
last generated token.

:class:`RL2Episodes` plays each row as an :class:`~gem_core.episode.EpisodeSession` in
message mode, keyed by an episode id it adds to ``extra_info``: the env made from the
row (id, seed, kwargs), the message history, cut generations, ``max_turns`` and
truncation, ``start_state_id`` and per-turn rewards are the core's rules. The text it
returns extends ``state + action`` by :meth:`gem_core.chat.ChatRenderer.bridge_text`,
the same template text whose tokens the engine appends in token mode, so RL2 continues
one sequence per episode whatever the template does to earlier turns.

Stopped or cut: SGLang's own ``meta_info.finish_reason`` decides (``"stop"``, ``"length"``,
``"abort"``), carried to ``step`` by :mod:`gem_rl2.finish` (RL2 itself passes only the
text); a reason the engine's generate contract does not take (``None``, ``"error"``,
anything else) is a :class:`~gem_core.errors.GenerateContractError` naming the episode.
SGLang tests the length before the stop token, so a reply whose last allowed token is
its stop token comes back as ``"length"``: with that last sampled id a stop token, it is
complete (the engine's rule for token ids). An abort ends the episode without a turn.

Where the stop token is: RL2 keeps the sampled ids (the stop token included) but hands
the env only the decoded text. The launcher asks SGLang to keep special tokens in the
text (``skip_special_tokens=false``; RL2's config already has ``no_stop_trim=true``). The
stop is taken off the action before the env sees it, and left out of the bridge when the
template would write it again (``<|im_end|>``), so it is in the sequence once, as sampled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.api import make
from gem_core.chat import ChatRenderer
from gem_core.core import AsyncEnv, to_async
from gem_core.episode import (
    CutPolicy,
    EnvErrorPolicy,
    EpisodeEngine,
    EpisodeLimits,
    EpisodeSession,
    Generation,
    failed_by_env,
)
from gem_core.errors import ConfigError, GenerateContractError, TrajectoryError
from gem_core.rl.types import Episode
from gem_rl2.env_errors import ENV_ERROR_REWARD, error_reward, record
from gem_rl2.env_errors import drain as drain_env_errors

__all__ = [
    "ENV_ERROR_REWARD",
    "EPISODE_KEY",
    "SETTINGS_ENV",
    "RL2Episodes",
    "Settings",
    "default_episodes",
    "drain_env_errors",
]

#: The key this module adds to RL2's ``extra_info`` to find the episode on ``step``.
EPISODE_KEY = "gem_episode_id"
#: Environment variable with the JSON :class:`Settings` (``gem-rl2-train`` sets it from RL2's config).
SETTINGS_ENV = "GEM_RL2_SETTINGS"
# Finished episodes kept for inspection (tests, logging); the oldest are dropped.
_FINISHED_KEPT = 4096

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """What the env module needs from RL2's config; ``gem-rl2-train`` writes it to :data:`SETTINGS_ENV`.

    Attributes:
        tokenizer: Path or hub id of the tokenizer (RL2's ``rollout.server_args.model_path``).
        max_turns: RL2's ``rollout.max_turns``: the session cuts the episode at the same turn
            (marking it truncated), so both sides agree on where it ends.
        on_cut: What a cut generation becomes (:data:`gem_core.episode.CutPolicy`).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments.
        on_env_error: ``"end"`` (default): an env that raises in ``reset`` or ``step`` ends
            only its episode, which trains nothing (see :data:`ENV_ERROR_REWARD`);
            ``"raise"``: the error propagates and RL2's rollout fails.
    """

    tokenizer: str
    max_turns: int
    on_cut: CutPolicy = "invalid"
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    on_env_error: EnvErrorPolicy = "end"

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """Parse the JSON written by ``gem-rl2-train``.

        Raises:
            ConfigError: Not a JSON object, or missing/unknown keys.
        """
        data = _load_json(text, SETTINGS_ENV, dict)
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(
                f"{SETTINGS_ENV}: {exc}; expected keys tokenizer, max_turns, on_cut, chat_template_kwargs, on_env_error"
            ) from None

    def to_json(self) -> str:
        """The JSON form (for :data:`SETTINGS_ENV`)."""
        return json.dumps(
            {
                "tokenizer": self.tokenizer,
                "max_turns": self.max_turns,
                "on_cut": self.on_cut,
                "chat_template_kwargs": dict(self.chat_template_kwargs),
                "on_env_error": self.on_env_error,
            }
        )


@dataclass(frozen=True)
class Row:
    """One dataset row's episode: read from RL2's ``extra_info`` (see :mod:`gem_rl2.dataset`)."""

    env_id: str
    seed: int | None
    env_kwargs: dict[str, Any]
    wrappers: list[Any]
    options: dict[str, Any] | None
    system_prompt: str | None

    @classmethod
    def from_extra_info(cls, extra_info: Mapping[str, Any]) -> Row:
        """Read a row; JSON strings (as Parquet stores them) and plain values are both accepted.

        Raises:
            ConfigError: No ``env_id``, or a field of the wrong kind.
        """
        env_id = extra_info.get("env_id")
        if not isinstance(env_id, str) or not env_id:
            raise ConfigError(
                f"RL2 row has no env_id in extra_info (got keys {sorted(extra_info)}); build the dataset with "
                "gem-rl2-dataset, or give each row extra_info={'env_id': ..., 'seed': ...}"
            )
        seed = extra_info.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"extra_info seed must be an int or null, got {seed!r} for {env_id}")
        return cls(
            env_id=env_id,
            seed=seed,
            env_kwargs=_json_field(extra_info, "env_kwargs", dict, {}),
            # JSON has no tuples: a wrapper given as [name, kwargs] becomes (name, kwargs) again
            wrappers=[tuple(w) if isinstance(w, list) else w for w in _json_field(extra_info, "wrappers", list, [])],
            options=_json_field(extra_info, "options", dict, None),
            system_prompt=extra_info.get("system_prompt") or None,
        )


def _json_field(extra_info: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = extra_info.get(key)
    if value is None or value == "":
        return default
    # Parquet rows carry JSON text (one schema for every row); plain values are taken as they are.
    return _load_json(value, f"extra_info {key}", kind) if isinstance(value, str) else _check_kind(value, key, kind)


def _load_json(text: str, what: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what} is not JSON ({exc}): {text[:200]!r}") from None
    return _check_kind(value, what, kind)


def _check_kind(value: Any, what: str, kind: type) -> Any:
    if not isinstance(value, kind):
        raise ConfigError(f"{what} must be a JSON {kind.__name__}, got {value!r}")
    return value


@dataclass
class _Live:
    session: EpisodeSession
    env: AsyncEnv


class RL2Episodes:
    """The episodes RL2 is playing: ``reset``/``step`` in RL2's format, each a core :class:`EpisodeSession`.

    Args:
        tokenizer: The policy's tokenizer (its chat template renders the text).
        settings: Turn limit and cut policy (``settings.tokenizer`` is not loaded here).
        extra_stop_texts: More texts that end a stopped reply: the model's other eos
            tokens (``generation_config.eos_token_id``, which SGLang stops on as well).
    """

    def __init__(self, tokenizer: Any, settings: Settings, extra_stop_texts: Sequence[str] = ()) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        # Message mode: RL2 owns the tokens; the engine owns the rules.
        self.engine = EpisodeEngine(
            None,
            EpisodeLimits(max_turns=settings.max_turns, on_cut=settings.on_cut, on_env_error=settings.on_env_error),
        )
        self.renderer = ChatRenderer(tokenizer, settings.chat_template_kwargs)
        self.stop_texts = _stop_texts(tokenizer, self.renderer, extra_stop_texts)
        self.stop_ids = _stop_ids(tokenizer, self.stop_texts)
        self._live: dict[str, _Live] = {}
        self.finished: OrderedDict[str, Episode] = OrderedDict()

    # ------------------------------------------------------------------ RL2's interface

    async def reset(self, extra_info: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start the row's episode; return the first prompt text and ``extra_info`` with the episode id.

        An env that raises in ``reset`` (``on_env_error="end"``) still gets a prompt (the
        system prompt, if any, and an empty user message): RL2 generates one turn from it,
        and ``step`` ends the episode at once.
        """
        row = Row.from_extra_info(extra_info)
        # Building an env may load data: off the event loop, like its steps.
        env = to_async(await asyncio.to_thread(_make_env, row), in_thread=True)
        session = self.engine.session(env_id=row.env_id, seed=row.seed, system_prompt=row.system_prompt)
        session.episode_id = f"{session.start_state_id}#{uuid.uuid4().hex[:16]}"
        try:
            observation, _ = await env.reset(seed=row.seed, options=row.options)
            session.begin(observation)
        except Exception as exc:
            if self.settings.on_env_error == "raise":
                await env.close()
                raise
            self._env_failed(session, exc, "reset")
        except BaseException:
            await env.close()
            raise
        self._live[session.episode_id] = _Live(session, env)
        messages = session.messages or (
            [{"role": "system", "content": session.system_prompt}] * bool(session.system_prompt)
        )
        if session.done:  # reset failed: a placeholder prompt for the one turn RL2 will generate
            messages = [*messages, {"role": "user", "content": ""}]
        return self.renderer.render(messages), {**extra_info, EPISODE_KEY: session.episode_id}

    async def step(
        self,
        state_text: str,
        action_text: str,
        extra_info: Mapping[str, Any],
        finish_reason: object,
        last_token_id: int | None = None,
    ) -> dict[str, Any]:
        """Play one generated turn; return RL2's step dict (``next_state`` extends ``state_text + action_text``).

        ``finish_reason`` is SGLang's (``meta_info.finish_reason["type"]``) and ``last_token_id``
        the last sampled id (see :mod:`gem_rl2.finish`); the env module passes both.

        An env that raises (``on_env_error="end"``) ends its episode: the step returns
        ``done`` with reward :data:`ENV_ERROR_REWARD` and score 0, the error is kept in
        the episode's metadata; the other episodes of the batch go on.

        Raises:
            TrajectoryError: ``extra_info`` names no live episode (``reset`` was not called
                through this module, or the episode already ended).
            GenerateContractError: The server's ``text`` is not a ``str``, or its finish reason is
                not one the engine takes; the episode is ended and its env closed.
        """
        episode_id = extra_info.get(EPISODE_KEY)
        live = self._live.get(episode_id) if isinstance(episode_id, str) else None
        if live is None:
            raise TrajectoryError(
                f"RL2 step for episode {episode_id!r}, which is not running here: reset() must come from this "
                "env module (rows without a 'prompt' column), and a finished episode takes no more steps"
            )
        session = live.session
        reply, stop = self._split_stop(action_text, last_token_id)
        if finish_reason == "length" and last_token_id in self.stop_ids:
            finish_reason = "stop"  # its stop token was the last one allowed: complete (SGLang tests length first)
        action = None
        turns = len(session.turns)
        if not session.done:  # done already: reset failed
            session.request()
            try:  # a non-str text or a reason the engine does not take: the contract's typed error
                action = session.accept(Generation(text=reply, finish_reason=finish_reason))  # type: ignore[arg-type]
            except GenerateContractError:  # the episode cannot go on (and has no record): close its env
                await self._close(self._live.pop(session.episode_id))
                raise
        if action is not None:
            try:
                session.observe(*await live.env.step(action))
            except Exception as exc:
                self._env_failed(session, exc, "step")
                if self.settings.on_env_error == "raise":
                    await self._finish(session.episode_id)
                    raise
        if session.done:
            episode_id = session.episode_id
            await self._finish(episode_id)
            if failed_by_env(self.finished[episode_id]):
                return _response(state_text + action_text, error_reward(), True, extra_info, score=0.0)
            # an abort adds no turn: this step earned nothing (the last turn's reward went out with its own step)
            reward = session.turns[-1].reward if len(session.turns) > turns else 0.0
            return _response(state_text + action_text, reward, True, extra_info)
        bridge = self.renderer.bridge_text([session.messages[-1]])
        if stop is not None and bridge.startswith(stop):  # the template's footer: sampled already
            bridge = bridge[len(stop) :]
        return _response(state_text + action_text + bridge, session.turns[-1].reward, False, extra_info)

    # ------------------------------------------------------------------ helpers

    @property
    def running(self) -> int:
        """Episodes begun and not yet ended."""
        return len(self._live)

    def _env_failed(self, session: EpisodeSession, exc: Exception, phase: str) -> None:
        session.fail(exc, phase)  # one broken env must not end the others' rollouts
        log.info("gem env %s failed in %s: %s: %s", phase, session.episode_id, type(exc).__name__, exc)

    def _split_stop(self, action_text: object, last_token_id: int | None) -> tuple[Any, str | None]:
        """The reply without its stop text, and the stop token's text if one was sampled last.

        The last sampled id decides when known: not a stop token, no stop (whatever the text
        ends with); a stop token whose text the server left out (special tokens skipped), the
        reply is the whole text and the stop still keeps the bridge from writing it again.
        Without the id, a stop text at the end of the text is taken for the stop token.
        """
        if not isinstance(action_text, str):
            return action_text, None
        if last_token_id is not None:  # the ids decide: text may spell a stop token out of ordinary tokens
            stop = self.stop_ids.get(last_token_id)
            if stop is None:
                return action_text, None
            return (action_text[: -len(stop)] if action_text.endswith(stop) else action_text), stop
        for stop in self.stop_texts:
            if action_text.endswith(stop):
                return action_text[: -len(stop)], stop
        return action_text, None

    async def _finish(self, episode_id: str) -> None:
        live = self._live.pop(episode_id)
        episode = self.finished[episode_id] = live.session.episode()
        if failed_by_env(episode):
            record(episode)
        while len(self.finished) > _FINISHED_KEPT:
            self.finished.popitem(last=False)
        await self._close(live)

    @staticmethod
    async def _close(live: _Live) -> None:
        try:
            await live.env.close()
        except Exception as exc:  # a failing close must not lose the finished episode
            log.warning("closing the env of %s failed: %s: %s", live.session.episode_id, type(exc).__name__, exc)


def _make_env(row: Row) -> Any:
    return make(row.env_id, wrappers=row.wrappers or None, **row.env_kwargs)


def _response(
    next_state: str, reward: float, done: bool, extra_info: Mapping[str, Any], score: float | None = None
) -> dict[str, Any]:
    # RL2 sums `score` per episode for its logs; the per-turn reward is the natural score.
    score = reward if score is None else score
    return {"next_state": next_state, "reward": reward, "score": score, "done": done, "extra_info": dict(extra_info)}


def _stop_texts(tokenizer: Any, renderer: ChatRenderer, extra: Sequence[str]) -> list[str]:
    """Texts that end a generation that stopped: the eos token(s) and the template's end-of-turn token."""
    texts: list[str] = [t for t in dict.fromkeys(extra) if t]
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos:
        texts.append(eos)
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    footer_ids = tokenizer.encode(renderer.bridge_text([{"role": "user", "content": "x"}]), add_special_tokens=False)
    if footer_ids:
        first = tokenizer.convert_ids_to_tokens(footer_ids[0]) if hasattr(tokenizer, "convert_ids_to_tokens") else None
        if isinstance(first, str) and first in special:
            texts.append(first)
    return sorted(set(texts), key=lambda t: (-len(t), t))  # the longest match wins


def _stop_ids(tokenizer: Any, texts: Sequence[str]) -> dict[int, str]:
    """The stop texts that are single tokens, by id: a reply whose last sampled id is one of them stopped."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    ids: dict[int, str] = {}
    for text in texts:
        token = tokenizer.convert_tokens_to_ids(text) if hasattr(tokenizer, "convert_tokens_to_ids") else None
        if isinstance(token, int) and token != unknown:
            ids[token] = text
    return ids


def _generation_eos_texts(path: str, tokenizer: Any) -> list[str]:
    """The model's eos tokens from ``generation_config.json`` (SGLang stops on each), as text; none if absent."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(path)
    except OSError:  # a tokenizer-only directory has no generation config
        return []
    ids = config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return [str(tokenizer.convert_ids_to_tokens(int(i))) for i in ids]


_DEFAULT: tuple[str, RL2Episodes] | None = None


def default_episodes() -> RL2Episodes:
    """The process's :class:`RL2Episodes`, built from :data:`SETTINGS_ENV` on first use (rebuilt if it changes).

    Raises:
        ConfigError: :data:`SETTINGS_ENV` is not set (launch with ``gem-rl2-train``).
    """
    global _DEFAULT
    text = os.environ.get(SETTINGS_ENV)
    if not text:
        raise ConfigError(
            f"{SETTINGS_ENV} is not set: launch RL2 with gem-rl2-train (it sets it from rollout.max_turns and "
            "the model path), or export it as JSON, e.g. "
            '{"tokenizer": "Qwen/Qwen3-1.7B", "max_turns": 8, "on_cut": "invalid"}'
        )
    if _DEFAULT is None or _DEFAULT[0] != text:
        from transformers import AutoTokenizer

        settings = Settings.from_json(text)
        tokenizer = AutoTokenizer.from_pretrained(settings.tokenizer, trust_remote_code=True)
        _DEFAULT = (text, RL2Episodes(tokenizer, settings, _generation_eos_texts(settings.tokenizer, tokenizer)))
    return _DEFAULT[1]
