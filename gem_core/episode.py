"""The episode engine: one episode from ``reset`` to its end, the same way for every runner and trainer.

Everything between a trainer's "generate" and its sample format lives here, once:

* the message history and the **token context** (token in, token out: sampled ids are
  appended as they are, never decoded and re-encoded; each env reply is appended as a
  small per-turn bridge rendered by :class:`~gem_core.chat.ChatRenderer`, so a turn
  costs the same at turn 1 and turn 64, and templates that rewrite history work);
* the **budgets**: ``max_turns``, the per-turn generation cap ``max_turn_tokens`` and
  the episode budget ``max_episode_tokens`` (everything after the first prompt:
  generated tokens, footers and env replies);
* **cut generations**: a reply that stopped at its token limit (``finish_reason ==
  "length"``) is not a valid action. By default (``on_cut="invalid"``, GEM's rule) the
  env gets :data:`INVALID_ACTION` instead, which every env treats as a malformed action
  with its own penalty; ``"pass"`` sends the cut text anyway; ``"truncate"`` ends the
  episode there (reward 0, truncated) without stepping the env;
* **truncation flags** (the env's, ``max_turns``, the episode budget) and the
  ``start_state_id`` (:func:`~gem_core.rl.types.start_state_id`);
* **env errors**: an exception from ``env.reset`` or ``env.step`` (a flaky grader, a tool
  server that died) either propagates (``on_env_error="raise"``, the default) or ends
  only that episode (``"end"``, what the trainer adapters use): ``end_reason == "error"``,
  the error kept in its metadata, its finished turns kept, every other episode of the
  batch untouched. ``generate`` errors (the trainer's own inference) always propagate;
  ``KeyboardInterrupt`` and ``asyncio.CancelledError`` are never caught;
* the records: :class:`~gem_core.rl.types.Turn` and :class:`~gem_core.rl.types.Episode`.
  Each turn's prompt (``prompt_token_ids``, or ``prompt_messages`` in message mode) is
  a :class:`~gem_core.rl.types.PrefixView` of the context (history), which only grows
  by appending: the turns share it, so an episode's records grow linearly with its
  length (a copy per turn would grow with turns x context).

An episode is an :class:`EpisodeSession`, a small state machine::

    session.begin(observation)          # after env.reset
    while not session.done:
        request = session.request()     # prompt ids / messages and the token limit of this turn
        action = session.accept(generation)   # the policy's answer -> the text for env.step (or None)
        if action is not None:
            session.observe(*env.step(action))

Drivers run it: :meth:`EpisodeEngine.play` (async, one episode, a per-request
``generate``: verl, OpenRLHF), :meth:`EpisodeEngine.play_batch` (sync, many episodes,
one batched ``generate`` call per turn: TRL) and :class:`gem_core.runner.EpisodeRunner`
(async, many in flight, batched).
"""

from __future__ import annotations

import itertools
import math
import operator
import reprlib
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args

from gem_core.chat import ChatRenderer, ChatTokenizer, Message, render_ids, tail_overlap
from gem_core.core import AsyncEnv, Env, to_async
from gem_core.errors import ConfigError, GenerateContractError, ImageError, PolicyLagError, TrajectoryError
from gem_core.multimodal import Content, Image, Observation, message_images, to_message_content
from gem_core.rl.types import Episode, PrefixView, Turn, start_state_id
from gem_core.vision import ImageInputs, ImageProcessorTokenizer

__all__ = [
    "INVALID_ACTION",
    "AsyncGenerate",
    "BatchGenerate",
    "CutPolicy",
    "EnvErrorPolicy",
    "EpisodeEngine",
    "EpisodeJob",
    "EpisodeLimits",
    "EpisodeSession",
    "Generation",
    "TurnRequest",
    "check_batch",
    "cut_at_stop",
    "describe_request",
    "env_error_report",
    "failed_by_env",
]

#: Sent to ``env.step`` in place of a cut generation (GEM's sentinel); envs treat it as a malformed action.
INVALID_ACTION = "<\uff5cINVALID_ACTION\uff5c>"  # fullwidth bars, as GEM writes it

#: What to do with a generation cut at its token limit.
CutPolicy = Literal["invalid", "pass", "truncate"]
#: What an exception from ``env.reset`` / ``env.step`` does: ``"raise"`` propagates it out of
#: the driver (after marking the session failed); ``"end"`` ends that episode only, with
#: ``end_reason == "error"`` and the error in its metadata.
EnvErrorPolicy = Literal["raise", "end"]
#: How the context grows: ``"delta"`` appends per-turn bridges (token in, token out);
#: ``"rerender"`` re-renders the whole history every turn (fallback for templates that
#: cannot be bridged; contexts then do not extend each other, so per-transition samples only).
ContextMode = Literal["delta", "rerender"]


@dataclass(slots=True)
class Generation:
    """What a policy or inference server returned for one :class:`TurnRequest`.

    Attributes:
        token_ids: The generated ids, including the stop token if the server returns it.
            Required when the engine has a tokenizer (token mode).
        text: The generated text; decoded from ``token_ids`` (special tokens skipped)
            when ``None``. Required without a tokenizer (message mode).
        logprobs: Sampling log-probabilities, one per ``token_ids`` entry.
        finish_reason: ``"stop"`` (the model ended its turn), ``"length"`` (cut at the
            token limit) or ``"abort"`` (the server gave up, e.g. for a weight update: the
            episode ends here, without a turn; with partial rollouts, ``max_resumes``,
            the ids generated so far are kept and the turn is resumed). vLLM and OpenAI
            call it ``finish_reason``, verl ``stop_reason``.
            vLLM's ``"repetition"`` counts as a cut; ``"error"`` or any other reason is
            refused with a :class:`~gem_core.errors.GenerateContractError`.
        extra: Server-specific fields the adapter needs back (verl's ``extra_fields``),
            kept per turn in :attr:`EpisodeSession.generations`, never in the records.
        policy_version: The version of the weights that sampled these tokens, when the
            server knows it; ``None``: the engine's :attr:`EpisodeEngine.policy_version`
            when the request was made. The continuous scheduler refuses a version outside
            [the oldest version of the requests in flight, the current one].
        request_id: The :attr:`TurnRequest.request_id` this answers. When given it must be
            the request's (else a :class:`~gem_core.errors.GenerateContractError`: an answer
            meant for another request); the continuous scheduler's ``batch_generate``
            must give it, so answers reordered, duplicated or missing in a batch are caught.
    """

    token_ids: list[int] | None = None
    text: str | None = None
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    extra: dict[str, Any] = field(default_factory=dict)
    policy_version: int | None = None
    request_id: str | None = None


def cut_at_stop(
    ids: Sequence[int],
    stop_ids: Sequence[int] | set[int],
    max_tokens: int | None,
    logprobs: Sequence[float] | None = None,
) -> Generation:
    """A :class:`Generation` from raw sampled ids that may run past the first stop token (``model.generate``).

    Keeps the ids up to and including the first stop token (``finish_reason="stop"``);
    with no stop token, the reply was cut (``"length"``) if it used ``max_tokens``,
    else it ended because the sequence did (``"stop"``).
    """
    stops = set(stop_ids)
    for i, token in enumerate(ids):
        if token in stops:
            return Generation(
                token_ids=list(ids[: i + 1]),
                logprobs=None if logprobs is None else list(logprobs[: i + 1]),
                finish_reason="stop",
            )
    reason = "length" if max_tokens is not None and len(ids) >= max_tokens else "stop"
    return Generation(token_ids=list(ids), logprobs=None if logprobs is None else list(logprobs), finish_reason=reason)


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """One turn's call to the policy.

    Attributes:
        episode_index: Which episode of the driver's batch asks (position in its job list).
        turn: 0-based turn number in the episode.
        prompt_ids: The whole token context (token mode), to generate from; ``None`` in message
            mode. A fresh list per request (the turn's record keeps a view of the context).
        messages: The chat history (system, user, assistant, tool messages). Shared with
            the session: read it, do not change it.
        max_tokens: Most tokens this turn may generate (the per-turn cap and what is left
            of the episode budget); ``None`` for no limit.
        env_id: The episode's env id (names it in errors), when known.
        seed: The episode's reset seed, when known.
        resume_from: Partial rollouts: how many ids at the end of ``prompt_ids`` this turn
            already generated before its request was aborted (0: a fresh turn). The server
            continues that reply from the ids as they are (nothing re-encoded); ``max_tokens``
            is what is left of the turn's cap.
        request_id: Unique in the process (``"{episode_id}/turn{T}/r{serial}"``; a resumed
            turn's continuation gets a new one). An answer that carries it back
            (:attr:`Generation.request_id`) is checked against it.
        images: The images of the context, in the order their tokens appear in ``prompt_ids``
            (token mode with a processor); empty for a text-only episode.
        image_inputs: The processor's features of those images, one entry per piece of the
            context that brought images (first prompt, bridges), in order; join them with
            :func:`~gem_core.vision.merge_image_inputs` for the model's forward.
    """

    episode_index: int
    turn: int
    prompt_ids: list[int] | None
    messages: list[Message]
    max_tokens: int | None
    env_id: str | None = None
    seed: int | None = None
    resume_from: int = 0
    request_id: str = ""
    images: Sequence[Image] = ()
    image_inputs: Sequence[ImageInputs] = ()


def _finish_problem(reason: str) -> str:
    """What is wrong with a finish reason the engine does not take (for a :class:`GenerateContractError`)."""
    if reason == "error":
        return (
            "finish_reason 'error': the inference engine failed this request (see its log), so there is no "
            "reply to score; retry the request or raise instead of returning it"
        )
    return (
        f"finish_reason {reason!r} is not one of {sorted(_FINISH_REASONS)}; map the server's reason to "
        "'stop' (ended its turn), 'length' (cut at the limit) or 'abort' (no usable reply)"
    )


def describe_request(request: TurnRequest) -> str:
    """The episode a request is for, as ``"env_id seed=S turn=T"`` (how contract errors name episodes)."""
    return f"{request.env_id or 'env'} seed={request.seed} turn={request.turn}"


#: What an episode whose tokens are too many policy versions old does (``max_policy_lag``):
#: ``"drop"`` ends it (``end_reason == "stale"``: not for training; the continuous scheduler
#: replays its job under the current weights); ``"raise"`` raises :class:`~gem_core.errors.PolicyLagError`.
StalePolicy = Literal["drop", "raise"]


#: Numbers the requests of the process, so request ids are unique even for jobs sharing an episode id.
_REQUEST_SERIAL = itertools.count()

#: What a generate must return, per mode; quoted by every :class:`~gem_core.errors.GenerateContractError`.
_CONTRACT = {
    True: (
        "a generate must return, per request, a Generation with token_ids (ints in [0, vocabulary size)), "
        "logprobs None or one finite float per id, and finish_reason 'stop', 'length', 'abort' "
        "(or vLLM's 'repetition', a cut)"
    ),
    False: "a generate must return, per request, the reply text (a str) or a Generation with text=str",
}
#: The finish reasons a generate may report, and what each is to the engine. vLLM's ``"repetition"``
#: (its repetition detector stopped the reply) is a cut; ``"error"`` and any reason not here are refused
#: by :func:`_finish_problem`, because scoring a failed or unknown request as a reply is silently wrong.
_FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "repetition": "length"}
_TOKEN_MODE = "this engine has a tokenizer (token in, token out); return the sampled ids"
_BATCH_CONTRACT = "; a batched generate returns a list with one answer per request, in request order"


def _shown(value: object) -> str:
    """``value`` for an error message: its type and a short repr."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def check_batch(outputs: object, requests: Sequence[TurnRequest], *, token_mode: bool) -> list[Any]:
    """The answers of a batched ``generate`` as a list, one per request; a :class:`GenerateContractError` otherwise.

    Only the batch's shape is checked here (a list-like of the right length); each answer is
    checked by :meth:`EpisodeSession.check` of its episode.
    """
    if isinstance(outputs, (str, bytes, Mapping, Generation)) or not isinstance(outputs, Iterable):
        problem = f"a batched generate returned {_shown(outputs)}, not a list of answers"
    else:
        outputs = list(outputs)
        if len(outputs) == len(requests):
            return outputs
        problem = f"a batched generate returned {len(outputs)} answers for {len(requests)} requests"
    names = [describe_request(r) for r in requests]
    raise GenerateContractError(
        f"{problem} (episodes: {', '.join(names)}); {_CONTRACT[token_mode]}{_BATCH_CONTRACT}", episodes=names
    )


#: ``await generate(request) -> Generation``: one request at a time (verl's server, OpenRLHF's engine).
AsyncGenerate = Callable[[TurnRequest], Awaitable[Union[Generation, str]]]
#: ``generate(requests) -> generations``: one call for every episode waiting for a turn (TRL).
BatchGenerate = Callable[[list[TurnRequest]], Sequence[Union[Generation, str]]]


@dataclass(frozen=True, slots=True)
class EpisodeLimits:
    """The budgets and rules of an episode.

    Attributes:
        max_turns: Cut an episode after this many turns (its last turn gets ``truncated``).
        max_turn_tokens: Most tokens one turn may generate.
        max_episode_tokens: Most tokens after the first prompt (generated, footers, env
            replies), e.g. verl's ``response_length`` or TRL's ``max_completion_length``.
            When an env reply would leave no room for another generated token, the
            episode ends after the current turn, ``truncated``. Token mode only.
        max_context_tokens: Most tokens in the whole context, first prompt included
            (OpenRLHF's ``max_len``); enforced like ``max_episode_tokens``. Token mode only.
        on_cut: What a generation cut at its token limit becomes (see the module doc).
        system_prompt: A system message opening every conversation.
        on_env_error: What an exception from ``env.reset`` or ``env.step`` (or an env
            reply the engine cannot take, e.g. a first prompt over ``max_context_tokens``)
            does. ``"raise"`` (default): the driver marks the session failed and re-raises
            it. ``"end"``: the episode ends right there (``end_reason == "error"``, the
            finished turns kept, the turn whose step raised dropped, the error in
            :attr:`EpisodeSession.metadata`) and the driver goes on with the other
            episodes exactly as if this one had ended normally. Errors of ``generate``
            always propagate.
        max_resumes: Partial rollouts (token mode): how many times one turn's generation
            may come back ``"abort"`` (the server aborted it for a weight update) and be
            resumed: the ids so far are kept and the next request continues them (prompt =
            context + those ids, :attr:`TurnRequest.resume_from`). ``0`` (default): an abort
            ends the episode (``end_reason == "abort"``), as does one past this bound.
        max_policy_lag: Most policy versions an episode may fall behind: before each request
            (and when the continuous scheduler hands a finished episode out), the current
            :attr:`EpisodeEngine.policy_version` minus the oldest version of any token the
            episode generated must be at most this. ``None``: no bound.
        on_stale: What breaking ``max_policy_lag`` does (see :data:`StalePolicy`).
    """

    max_turns: int | None = None
    max_turn_tokens: int | None = None
    max_episode_tokens: int | None = None
    max_context_tokens: int | None = None
    on_cut: CutPolicy = "invalid"
    system_prompt: str | None = None
    on_env_error: EnvErrorPolicy = "raise"
    max_resumes: int = 0
    max_policy_lag: int | None = None
    on_stale: StalePolicy = "drop"

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_turn_tokens", "max_episode_tokens", "max_context_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name} must be an int >= 1 or None, got {value!r}")
        for name, value in (("max_resumes", self.max_resumes), ("max_policy_lag", self.max_policy_lag)):
            if (value is not None or name == "max_resumes") and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
        if self.on_stale not in get_args(StalePolicy):
            raise ConfigError(f"on_stale must be one of {get_args(StalePolicy)}, got {self.on_stale!r}")
        if self.on_cut not in get_args(CutPolicy):
            raise ConfigError(f"on_cut must be one of {get_args(CutPolicy)}, got {self.on_cut!r}")
        if self.on_env_error not in get_args(EnvErrorPolicy):
            raise ConfigError(f"on_env_error must be one of {get_args(EnvErrorPolicy)}, got {self.on_env_error!r}")


@dataclass(slots=True)
class EpisodeJob:
    """One episode for a batch driver: the env to play and how to reset it.

    Attributes:
        env: The env (sync for :meth:`EpisodeEngine.play_batch`).
        env_id: Its registered id (names the start state); defaults to ``env.spec.id``.
        seed: ``reset`` seed.
        options: ``reset`` options.
        episode_id: A unique id; defaults to ``"{start_state_id}#{index}"``.
        system_prompt: Overrides the engine's system prompt for this episode.
    """

    env: Env | AsyncEnv
    env_id: str | None = None
    seed: int | None = None
    options: dict[str, Any] | None = None
    episode_id: str | None = None
    system_prompt: str | None = None


class EpisodeSession:
    """One episode being played: history, token context, budgets, records. Built by :meth:`EpisodeEngine.session`.

    Attributes:
        turns: The finished turns.
        messages: The chat history (the assistant messages hold the decoded replies).
        context: The token context in token mode: first prompt, then per turn the
            generated ids and the bridge to the next prompt. It only grows by appending
            (the turns' ``prompt_token_ids`` are views of it): read it, do not change it.
        prompt_length: Length of the first prompt in ``context``.
        generations: The policy's :class:`Generation` per turn (for ``extra`` fields).
        done: The episode ended.
        end_reason: Why it ended: ``"env"`` (terminated or truncated by the env),
            ``"max_turns"``, ``"budget"``, ``"cut"`` (``on_cut="truncate"``), ``"abort"``,
            ``"error"`` (an exception, see :meth:`fail`), ``"stale"`` (dropped by
            ``max_policy_lag``: not for training), ``"not_acted"`` (a multi-agent seat the game
            ended before it acted: no turns).
        metadata: Extra facts copied into the episode's metadata; after :meth:`fail`:
            ``error`` (``"Type: message"``), ``error_type``, ``error_message``,
            ``error_traceback`` (the last frames, short) and ``error_phase``
            (``"reset"``, ``"step"`` or ``"generate"``).
        error: The exception that ended the episode, or ``None``.
    """

    def __init__(
        self,
        engine: EpisodeEngine,
        *,
        env_id: str | None,
        seed: int | None,
        episode_id: str | None = None,
        index: int = 0,
        system_prompt: str | None = None,
    ) -> None:
        self.engine = engine
        self.env_id = env_id
        self.seed = seed
        self.index = index
        self.start_state_id = start_state_id(env_id, seed)
        self.episode_id = episode_id or f"{self.start_state_id}#{index}"
        self.system_prompt = system_prompt if system_prompt is not None else engine.limits.system_prompt
        self.turns: list[Turn] = []
        self.messages: list[Message] = []
        self.context: list[int] | None = None
        #: Token mode with a processor: the context's images in token order, and their features per piece.
        self.images: list[Image] = []
        self.image_inputs: list[ImageInputs] = []
        self.prompt_length = 0
        self.generations: list[Generation] = []
        self.done = False
        self.end_reason: str | None = None
        self.metadata: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._observation: Observation | None = None
        self._used = 0  # tokens after the first prompt
        self._pending: dict[str, Any] | None = None
        self._policy_s: list[float] = []
        self._env_s: list[float] = []
        self._requested_at = 0.0
        self._episode: Episode | None = None
        #: Seconds ``env.reset`` took (set by the drivers).
        self.reset_s = 0.0
        # partial rollouts: what this turn generated before aborts, and where each abort happened
        self._partial_ids: list[int] = []
        self._partial_logprobs: list[float] | None = []
        self._partial_versions: list[int] = []
        self._resumed_at: list[int] = []
        self._request_version = 0
        self._request_id = ""
        self._oldest_version: int | None = None  # of any token this episode generated
        #: Generations aborted and resumed over the episode.
        self.resumes = 0

    # ------------------------------------------------------------------ the state machine

    def begin(self, observation: Observation) -> None:
        """Start from ``reset``'s observation: the first user message and, in token mode, the first prompt."""
        if self._observation is not None:
            raise RuntimeError(f"episode {self.episode_id} has already begun")
        self._observation = _as_observation(observation)
        if self.system_prompt:
            self.messages.append({"role": "system", "content": self.system_prompt})
        self.messages.append({"role": "user", "content": to_message_content(self._observation)})
        if self.engine.token_mode:
            self.context, images, inputs = self.engine.first_prompt(self.messages)
            self._add_images(images, inputs)
            self.prompt_length = len(self.context)
            cap = self.engine.limits.max_context_tokens
            if cap is not None and self.prompt_length >= cap:
                raise TrajectoryError(
                    f"episode {self.episode_id}: the first prompt has {self.prompt_length} tokens, so "
                    f"max_context_tokens={cap} leaves no room to generate; raise the context limit "
                    "(e.g. OpenRLHF's --data.max_len) or shorten the system prompt"
                )

    def request(self) -> TurnRequest:
        """This turn's request to the policy (after an abort with ``max_resumes``: its continuation)."""
        if self.done or self._observation is None or self._pending is not None:
            raise RuntimeError(f"episode {self.episode_id} is not waiting for a generation")
        if not self._resumed_at:  # a continuation's time counts from the turn's first request
            self._requested_at = time.perf_counter()
        self._request_version = self.engine.policy_version
        self._request_id = f"{self.episode_id}/turn{len(self.turns)}/r{next(_REQUEST_SERIAL)}"
        # A list for the server (vLLM and friends want one); gone after the call, unlike a record.
        return TurnRequest(
            episode_index=self.index,
            turn=len(self.turns),
            prompt_ids=None if self.context is None else [*self.context, *self._partial_ids],
            messages=self.messages,
            max_tokens=self._max_tokens(),
            env_id=self.env_id,
            seed=self.seed,
            resume_from=len(self._partial_ids),
            request_id=self._request_id,
            images=PrefixView(self.images) if self.images else (),
            image_inputs=PrefixView(self.image_inputs) if self.image_inputs else (),
        )

    def _add_images(self, images: Sequence[Image], inputs: ImageInputs) -> None:
        if images:
            self.images.extend(images)
            self.image_inputs.append(inputs)

    @property
    def policy_lag(self) -> int:
        """Current policy version minus the oldest version of any token this episode generated (0 before any)."""
        oldest = self._oldest_version
        return 0 if oldest is None else self.engine.policy_version - oldest

    def enforce_policy_lag(self, *, finished: bool = False) -> bool:
        """Check ``max_policy_lag``; whether the episode may go on (drivers call it before each request).

        Args:
            finished: Check an episode that has ended (a scheduler about to hand it out);
                one that failed or was dropped already is left as it is.

        Returns:
            ``True`` within the bound (or without one); ``False`` when the episode is done
            (when not ``finished``) or was just dropped (``on_stale="drop"``: ``end_reason == "stale"``).

        Raises:
            PolicyLagError: Under ``on_stale="raise"`` (the session is marked failed first).
        """
        bound = self.engine.limits.max_policy_lag
        if finished:
            if not self.done or self.end_reason in ("error", "stale"):
                return False
        elif self.done:
            return False
        if bound is None or self.policy_lag <= bound:
            return True
        problem = (
            f"episode {self.episode_id} ({self.label()}): its oldest token was sampled by policy version "
            f"{self._oldest_version}, now {self.engine.policy_version}: {self.policy_lag} versions behind, "
            f"max_policy_lag={bound}; raise the bound, update weights less often, or on_stale='drop'"
        )
        if self.engine.limits.on_stale == "raise":
            exc = PolicyLagError(problem)
            self.fail(exc, "policy_lag")
            raise exc
        self._drop_partial()
        self.metadata.update({"policy_lag": self.policy_lag, "stale": problem})
        self._finish("stale")
        return False

    def accept(self, generation: Generation | str) -> str | None:
        """Take the policy's answer; return the action for ``env.step``, or ``None`` if the episode ended instead.

        Raises:
            GenerateContractError: The answer breaks the generate contract (see :meth:`check`);
                nothing of it was taken.
        """
        return self._take(self.check(generation))

    def label(self) -> str:
        """This episode as ``"env_id seed=S turn=T"`` (how contract errors name it)."""
        return f"{self.env_id or 'env'} seed={self.seed} turn={len(self.turns)}"

    def check(self, generation: object) -> Generation:
        """Check one answer of ``generate`` against the contract; return it normalised (a new :class:`Generation`).

        Token mode: ``token_ids`` ints (``operator.index``: numpy and torch integers pass) in
        ``[0, vocabulary size)``; ``logprobs`` ``None`` or one finite float per id. Message
        mode: a ``str`` or a ``Generation`` whose ``text`` is a ``str``. ``finish_reason`` a ``str``.
        The checks are C-level passes (``map``, ``min``/``max``, ``sum``): a few microseconds a turn.

        Raises:
            GenerateContractError: What was wrong, naming the episode and the contract.
        """
        if self.done or self._pending is not None:
            raise RuntimeError(f"episode {self.episode_id} is not waiting for a generation")
        token_mode = self.engine.token_mode
        if isinstance(generation, str):
            if not token_mode:
                return Generation(text=generation)
            problem = f"generate returned text, but {_TOKEN_MODE}"
        elif not isinstance(generation, Generation):
            problem = f"generate returned {_shown(generation)}"
        else:
            checked = self._normalise(generation)
            if isinstance(checked, Generation):
                return checked
            problem = checked
        raise GenerateContractError(
            f"episode {self.episode_id} ({self.label()}): {problem}; {_CONTRACT[token_mode]}", episodes=[self.label()]
        )

    def _normalise(self, gen: Generation) -> Generation | str:
        """``gen`` normalised (ids ``int``, logprobs ``float``, fresh lists), or what is wrong with it."""
        text: object = gen.text  # typed str, but a generate may put anything there
        reason: object = gen.finish_reason
        if text is not None and not isinstance(text, str):
            return f"text is {_shown(text)}, not a str"
        if not isinstance(reason, str):
            return f"finish_reason is {_shown(reason)}, not a str"
        finish = _FINISH_REASONS.get(reason)
        if finish is None:
            return _finish_problem(reason)
        ids: list[int] | None = None
        if self.engine.token_mode:
            if gen.token_ids is None:
                return f"generate returned no token_ids, but {_TOKEN_MODE}"
            try:
                ids = list(map(operator.index, gen.token_ids))
            except TypeError:
                return f"token_ids must be a list of ints, got {_shown(gen.token_ids)}"
            vocab = self.engine.vocab_size
            if ids and (min(ids) < 0 or (vocab is not None and max(ids) >= vocab)):
                bad = next(t for t in ids if t < 0 or (vocab is not None and t >= vocab))
                return f"token id {bad} is outside the tokenizer's vocabulary [0, {vocab})"
        elif gen.text is None:
            return "generate returned no text; return the reply text"
        logprobs: list[float] | None = None
        if gen.logprobs is not None:
            try:
                logprobs = list(map(float, gen.logprobs))
            except (TypeError, ValueError):
                return f"logprobs must be a list of floats, got {_shown(gen.logprobs)}"
            if ids is not None and len(logprobs) != len(ids):
                return f"{len(logprobs)} logprobs for {len(ids)} generated tokens"
            if not math.isfinite(sum(logprobs)):  # one pass; the slow scan only names the culprit
                bad_at = next((i for i, x in enumerate(logprobs) if not math.isfinite(x)), None)
                if bad_at is not None:
                    return f"logprob {logprobs[bad_at]} at position {bad_at} is not finite"
        answered: object = gen.request_id
        if answered is not None and answered != self._request_id:
            return (
                f"the answer carries request id {reprlib.repr(answered)}, but this episode's request is "
                f"{self._request_id!r}: an answer meant for another request (a batch's answers reordered, "
                "duplicated or missing); return each request's answer with its own request_id"
            )
        version: Any = gen.policy_version  # typed int, but a generate may put anything there
        if version is not None:
            try:
                version = operator.index(version)
            except TypeError:
                return f"policy_version must be an int or None, got {_shown(gen.policy_version)}"
        return Generation(
            token_ids=ids,
            text=gen.text,
            logprobs=logprobs,
            finish_reason=finish,
            extra=gen.extra,
            policy_version=version,
            request_id=gen.request_id,
        )

    def _take(self, gen: Generation) -> str | None:
        """Apply a checked answer (from :meth:`check`): the action for ``env.step``, or ``None``."""
        policy_s = time.perf_counter() - self._requested_at
        max_tokens = self._max_tokens()
        ids = gen.token_ids
        logprobs = gen.logprobs
        if ids is not None and max_tokens is not None and len(ids) > max_tokens:  # a server that ignored the limit
            ids, logprobs = ids[:max_tokens], None if logprobs is None else logprobs[:max_tokens]
            gen.token_ids, gen.logprobs = ids, logprobs
            gen.finish_reason = "length"
        if not self.engine.token_mode:
            ids = None
        version = self._request_version if gen.policy_version is None else gen.policy_version
        if ids is not None and self._resumed_at:  # the continuation of an aborted generation: join the parts
            ids, logprobs = self._join_partial(gen, ids, logprobs, version)
        if gen.finish_reason == "abort" and ids is not None and len(self._resumed_at) < self.engine.limits.max_resumes:
            if max_tokens is None or len(ids) - len(self._partial_ids) < max_tokens:
                self._suspend(ids, logprobs, version)
                return None
            gen.finish_reason = "length"  # aborted just as it used the turn's cap: a cut reply
        if gen.finish_reason == "abort" or (ids is not None and not ids):
            # Nothing usable was generated: no token could carry this turn's reward.
            self._drop_partial()
            self._policy_s.append(policy_s)
            self._finish("abort")
            return None
        versions = None
        if ids is not None:
            versions = [*self._partial_versions, *[version] * (len(ids) - len(self._partial_versions))]
            self._oldest_version = min(versions + ([] if self._oldest_version is None else [self._oldest_version]))
        resumed_at = list(self._resumed_at) or None
        self._drop_partial()
        text = gen.text if gen.text is not None else self.engine.decode(ids or [])
        if gen.finish_reason == "length" and ids and ids[-1] in self.engine.stop_token_ids:
            # The reply ended with its stop token exactly at the limit: complete, not cut (vLLM V1
            # checks the length before the stop token and reports "length" for it).
            gen.finish_reason = "stop"
        cut = gen.finish_reason == "length"
        action = INVALID_ACTION if cut and self.engine.limits.on_cut == "invalid" else text
        self.generations.append(gen)
        self._policy_s.append(policy_s)
        self._pending = {
            "action": action,
            "text": text,
            "ids": ids,
            "logprobs": logprobs,
            "finish_reason": gen.finish_reason,
            "versions": versions,
            "resumed_at": resumed_at,
            # Views, not copies: the context and history only grow by appending, so each
            # turn's prompt stays a prefix of them (in "rerender" mode each turn has its own context).
            "prompt_ids": None if self.context is None else PrefixView(self.context),
            "prompt_messages": None if self.engine.token_mode else PrefixView(self.messages),
            "prompt_images": PrefixView(self.images) if self.images else None,
            "env_started": time.perf_counter(),
        }
        self.messages.append({"role": "assistant", "content": text})
        if self.context is not None and ids is not None:
            self.context.extend(ids)
            self._used += len(ids)
        if cut and self.engine.limits.on_cut == "truncate":
            self._record(0.0, False, True, "", {"cut": True})
            self._finish("cut")
            return None
        return action

    def observe(
        self, observation: Observation, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        """Take ``env.step``'s result for the accepted action and prepare the next turn (or end)."""
        if self._pending is None:
            raise RuntimeError(f"episode {self.episode_id} has no action waiting for the env's answer")
        self._env_s.append(time.perf_counter() - self._pending["env_started"])
        observation = _as_observation(observation)
        terminated, truncated = bool(terminated), bool(truncated)
        self._record(float(reward), terminated, truncated, observation, dict(info))
        if terminated or truncated:
            self._finish("env")
            return
        limits = self.engine.limits
        if limits.max_turns is not None and len(self.turns) >= limits.max_turns:
            self.turns[-1].truncated = True
            self._finish("max_turns")
            return
        message: Message = {
            "role": "tool" if info.get("tool_calls") else "user",
            "content": to_message_content(observation),
        }
        self.messages.append(message)
        if self.context is not None:
            generated = self.turns[-1].action_token_ids or []
            if self.engine.context_mode == "rerender":
                bridge, images, inputs = self.engine.first_prompt(self.messages)
                self.context = bridge
                self.images, self.image_inputs = [], []  # a new context: its images are all re-encoded
                self._add_images(images, inputs)
            else:
                bridge, images, inputs = self.engine.bridge(message, generated)
                room = self._room()
                if room is not None and len(bridge) >= room:  # no room left for a generated token
                    self.messages.pop()
                    self.turns[-1].truncated = True
                    self._finish("budget")
                    return
                self.context.extend(bridge)
                self._add_images(images, inputs)
                self._used += len(bridge)
        self._observation = observation

    def fail(self, exc: BaseException, phase: str | None = None) -> None:
        """End the episode because of ``exc``: keep the finished turns, drop the turn that was waiting for the env.

        Idempotent: a session that already failed keeps its first error.

        Args:
            exc: The exception.
            phase: Where it happened: ``"reset"``, ``"step"`` or ``"generate"``.
        """
        if self.end_reason == "error":
            return
        pending, self._pending = self._pending, None
        self._drop_partial()
        if pending is not None:  # accepted, but the env never answered: no reward, so no turn
            self.generations.pop()
            self._policy_s.pop()
            self.messages.pop()
            ids = pending["ids"]
            if self.context is not None and ids is not None:
                del self.context[len(self.context) - len(ids) :]
                self._used -= len(ids)
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-_TRACEBACK_FRAMES)
        self.error = exc
        self.metadata.update(
            {
                "error": f"{type(exc).__name__}: {exc}",
                "error_type": type(exc).__name__,
                "error_message": str(exc),
                "error_traceback": "".join(frames)[-_TRACEBACK_CHARS:],
                "error_phase": phase,
            }
        )
        self._finish("error")

    @property
    def policy_seconds(self) -> list[float]:
        """Seconds the policy took, per turn."""
        return list(self._policy_s)

    @property
    def env_seconds(self) -> list[float]:
        """Seconds ``env.step`` took, per turn."""
        return list(self._env_s)

    @property
    def cut_turns(self) -> int:
        """Turns whose generation was cut at the token limit."""
        return sum(t.stop_reason == "length" for t in self.turns)

    def episode(self) -> Episode:
        """The finished episode as a :class:`~gem_core.rl.types.Episode` record."""
        if not self.done:
            raise RuntimeError(f"episode {self.episode_id} has not ended")
        if self._episode is not None:
            return self._episode
        self._episode = Episode(
            turns=self.turns,
            start_state_id=self.start_state_id,
            episode_id=self.episode_id,
            env_id=self.env_id,
            seed=self.seed,
            metadata={
                **self.metadata,
                "index": self.index,
                "end_reason": self.end_reason,
                "cut_turns": self.cut_turns,
                "reset_s": self.reset_s,
                "policy_s": self._policy_s,
                "env_s": self._env_s,
                "resumes": self.resumes,
            },
        )
        return self._episode

    # ------------------------------------------------------------------ internals

    def _join_partial(
        self, gen: Generation, ids: list[int], logprobs: list[float] | None, version: int
    ) -> tuple[list[int], list[float] | None]:
        """The ids and logprobs generated before the aborts, then ``gen``'s (written back on ``gen``)."""
        joined = [*self._partial_ids, *ids]
        both = self._partial_logprobs is not None and logprobs is not None
        joined_logprobs = [*self._partial_logprobs, *logprobs] if both else None  # type: ignore[misc]
        gen.token_ids, gen.logprobs = joined, joined_logprobs
        return joined, joined_logprobs

    def _suspend(self, ids: list[int], logprobs: list[float] | None, version: int) -> None:
        """Keep an aborted generation (already joined to earlier parts) for its continuation."""
        new = len(ids) - len(self._partial_versions)
        self._partial_versions.extend([version] * new)
        if new and (self._oldest_version is None or version < self._oldest_version):
            self._oldest_version = version
        self._partial_ids = ids
        self._partial_logprobs = logprobs
        self._resumed_at.append(len(ids))
        self.resumes += 1

    def _drop_partial(self) -> None:
        self._partial_ids, self._partial_logprobs, self._partial_versions, self._resumed_at = [], [], [], []

    def _room(self) -> int | None:
        """Tokens the context may still grow by under the episode and context budgets (``None``: no budget)."""
        limits = self.engine.limits
        if self.context is None:
            return None
        rooms = []
        if limits.max_episode_tokens is not None:
            rooms.append(limits.max_episode_tokens - self._used)
        if limits.max_context_tokens is not None:
            rooms.append(limits.max_context_tokens - len(self.context))
        return min(rooms) if rooms else None

    def _max_tokens(self) -> int | None:
        """What this request may generate: the turn's cap and the budgets, less what an aborted part already used."""
        cap = self.engine.limits.max_turn_tokens
        room = self._room()
        if room is not None:
            cap = room if cap is None else min(cap, room)
        return None if cap is None else cap - len(self._partial_ids)

    def _record(
        self, reward: float, terminated: bool, truncated: bool, next_obs: Observation, info: dict[str, Any]
    ) -> None:
        pending, self._pending = self._pending, None
        assert pending is not None and self._observation is not None
        self.turns.append(
            Turn(
                observation=self._observation,
                action=pending["action"],
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                next_observation=next_obs,
                info=info,
                prompt_messages=pending["prompt_messages"],
                prompt_token_ids=pending["prompt_ids"],
                prompt_images=pending["prompt_images"],
                action_token_ids=pending["ids"],
                action_logprobs=pending["logprobs"],
                stop_reason=pending["finish_reason"],
                policy_versions=pending["versions"],
                resumed_at=pending["resumed_at"],
            )
        )

    def _finish(self, reason: str) -> None:
        self.done = True
        self.end_reason = reason


#: A failed episode keeps the last frames of its traceback, at most this many characters.
_TRACEBACK_FRAMES = 4
_TRACEBACK_CHARS = 2000


class EpisodeEngine:
    """Plays episodes: builds sessions that share one tokenizer, template probe and set of limits.

    Args:
        tokenizer: A tokenizer with a chat template: token mode (contexts are token ids,
            ``generate`` returns ids). ``None``: message mode (``generate`` gets messages
            and returns text), for API-style policies.
        limits: Budgets and rules (:class:`EpisodeLimits`); keyword arguments of it may
            be given directly instead (``max_turns=8``).
        chat_template_kwargs: Extra ``apply_chat_template`` arguments.
        context: ``"delta"`` (default) or ``"rerender"`` (see :data:`ContextMode`).
        renderer: A prebuilt :class:`~gem_core.chat.ChatRenderer` to share.
        stop_token_ids: Tokens that end a turn (default: the tokenizer's ``eos_token_id``).
            A reply reported as ``"length"`` that ends with one of them is complete: some
            servers (vLLM V1) check the length limit before the stop token.
        vocab_size: Ids a generation may hold are ``[0, vocab_size)`` (the generate
            contract); default ``len(tokenizer)`` (added tokens included), else its
            ``vocab_size``; ``None`` when it has neither (then only negative ids are refused).
        processor: A vision-language model's processor (e.g. ``Qwen2VLProcessor``), instead of
            ``tokenizer``: token mode where observations may hold images. Text goes through its
            chat template and tokenizer as for a text model; each message with images is
            encoded by the processor, which places the image tokens (see :mod:`gem_core.vision`).
            An :class:`~gem_core.vision.ImageProcessorTokenizer` may be given as ``tokenizer``
            instead (to choose its ``image_loader``).

    Raises:
        TemplatePrefixError: At construction (the start-up probe), when the template
            cannot be bridged; the message names the template and the fallback.
        ConfigError: Bad limits.
    """

    def __init__(
        self,
        tokenizer: ChatTokenizer | None = None,
        limits: EpisodeLimits | None = None,
        *,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        context: ContextMode = "delta",
        renderer: ChatRenderer | None = None,
        stop_token_ids: Sequence[int] | None = None,
        vocab_size: int | None = None,
        processor: Any = None,
        **limit_kwargs: Any,
    ) -> None:
        if processor is not None:
            if tokenizer is not None:
                raise ConfigError("give tokenizer= or processor= (a VLM's processor holds its tokenizer), not both")
            tokenizer = ImageProcessorTokenizer(processor)
        #: Encodes messages with images (token mode with a processor); ``None``: text only.
        self.image_encoder = tokenizer if isinstance(tokenizer, ImageProcessorTokenizer) else None
        if limits is not None and limit_kwargs:
            raise ConfigError("give limits=EpisodeLimits(...) or its fields as keywords, not both")
        try:
            self.limits = limits if limits is not None else EpisodeLimits(**limit_kwargs)
        except TypeError as exc:
            raise ConfigError(f"unknown episode setting: {exc}") from None
        if context not in get_args(ContextMode):
            raise ConfigError(f"context must be one of {get_args(ContextMode)}, got {context!r}")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.context_mode: ContextMode = context
        if stop_token_ids is None:
            eos = getattr(tokenizer, "eos_token_id", None)
            stop_token_ids = [eos] if isinstance(eos, int) else []
        #: Tokens that end a turn: a reply ending in one at the token limit is complete, not cut.
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        #: Generated ids must lie in ``[0, vocab_size)``; ``None``: no upper bound known.
        self.vocab_size = vocab_size if vocab_size is not None else _vocabulary_size(tokenizer)
        self.renderer: ChatRenderer | None = None
        if tokenizer is not None and context == "delta":
            self.renderer = renderer or ChatRenderer(tokenizer, self.chat_template_kwargs)
        #: The version of the weights generating now; a trainer bumps it after each weight update
        #: (:meth:`gem_core.scheduling.RolloutScheduler.update_policy` does). Each turn records
        #: the version per token (:attr:`~gem_core.rl.types.Turn.policy_versions`).
        self.policy_version = 0

    @property
    def token_mode(self) -> bool:
        """Whether contexts are token ids (a tokenizer was given)."""
        return self.tokenizer is not None

    def first_prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The token ids of ``messages`` and the generation prompt."""
        assert self.tokenizer is not None
        if self.renderer is not None:
            return self.renderer.prompt_ids(messages)
        return render_ids(
            self.tokenizer, messages, add_generation_prompt=True, chat_template_kwargs=self.chat_template_kwargs
        )

    def first_prompt(self, messages: Sequence[Message]) -> tuple[list[int], list[Image], ImageInputs]:
        """The ids of ``messages`` and the generation prompt, with their images and the images' features."""
        images = [image for m in messages for image in message_images(m.get("content"))]
        if not images:
            return self.first_prompt_ids(messages), [], {}
        encoder = self._require_image_encoder(len(images))
        text = self.renderer.render(messages) if self.renderer is not None else None
        if text is None:
            assert self.tokenizer is not None
            from gem_core.chat import render_text

            text = render_text(
                self.tokenizer, messages, add_generation_prompt=True, chat_template_kwargs=self.chat_template_kwargs
            )
        ids, inputs = encoder.encode_with_images(text, images)
        return ids, images, inputs

    def bridge(self, message: Message, generated: Sequence[int]) -> tuple[list[int], list[Image], ImageInputs]:
        """The ids that follow ``generated`` for the new ``message``, with its images and their features.

        Only the new message is rendered and encoded: the images already in the context keep
        their ids and features.
        """
        assert self.renderer is not None
        images = message_images(message.get("content"))
        if not images:
            return self.bridge_ids([message], generated), [], {}
        encoder = self._require_image_encoder(len(images))
        ids, inputs = encoder.encode_with_images(self.renderer.bridge_text([message]), images)
        return ids[tail_overlap(generated, ids) :], images, inputs

    def _require_image_encoder(self, count: int) -> ImageProcessorTokenizer:
        if self.image_encoder is None:
            raise ImageError(
                f"an observation holds {count} image(s), but this engine has a text tokenizer: build it with "
                "EpisodeEngine(processor=AutoProcessor.from_pretrained(vlm)) to place image tokens, or use "
                "message mode (no tokenizer) with a server that takes image parts"
            )
        return self.image_encoder

    def bridge_ids(self, new_messages: Sequence[Message], generated: Sequence[int]) -> list[int]:
        """The ids that follow ``generated`` so the context ends with ``new_messages`` and a generation prompt."""
        assert self.renderer is not None
        return self.renderer.bridge_ids(new_messages, generated)

    def decode(self, ids: Sequence[int]) -> str:
        """The action text of generated ids (special tokens skipped)."""
        assert self.tokenizer is not None
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def session(
        self,
        *,
        env_id: str | None = None,
        seed: int | None = None,
        episode_id: str | None = None,
        index: int = 0,
        system_prompt: str | None = None,
    ) -> EpisodeSession:
        """A new :class:`EpisodeSession` (call its :meth:`~EpisodeSession.begin` after ``reset``)."""
        return EpisodeSession(
            self, env_id=env_id, seed=seed, episode_id=episode_id, index=index, system_prompt=system_prompt
        )

    # ------------------------------------------------------------------ drivers

    async def play(
        self,
        env: Env | AsyncEnv,
        generate: AsyncGenerate,
        *,
        env_id: str | None = None,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        episode_id: str | None = None,
        index: int = 0,
        system_prompt: str | None = None,
        before_generate: Callable[[], Awaitable[None]] | None = None,
        session: EpisodeSession | None = None,
    ) -> EpisodeSession:
        """Play one episode with an async per-request ``generate``; return the finished session.

        A sync env is stepped in a worker thread, so the event loop (and the other
        episodes on it) never waits for it.

        Args:
            env: The env.
            generate: ``await generate(request) -> Generation`` (or the reply text in message mode).
            env_id: Names the start state; defaults to ``env.spec.id``.
            seed: ``reset`` seed.
            options: ``reset`` options.
            episode_id: A unique id of this rollout.
            index: Position in the caller's batch (``TurnRequest.episode_index``).
            system_prompt: Overrides the engine's system prompt.
            before_generate: Awaited before each generate call (e.g. a pause between batches).
            session: A session from :meth:`session` to play into (the caller keeps the
                turns played so far if the episode fails); built here when ``None``.

        Raises:
            Exception: Whatever ``generate`` raised, and whatever the env raised under
                ``on_env_error="raise"`` (the session is marked failed and the exception
                carries a note naming the episode). Under ``"end"`` an env error ends the
                episode instead and the failed session is returned.
        """
        aenv = env if isinstance(env, AsyncEnv) else to_async(env, in_thread=True)
        if session is None:
            session = self.session(
                env_id=env_id or _spec_id(env),
                seed=seed,
                episode_id=episode_id,
                index=index,
                system_prompt=system_prompt,
            )
        try:
            try:
                started = time.perf_counter()
                observation, _ = await aenv.reset(seed=seed, options=options)
                session.reset_s = time.perf_counter() - started
                session.begin(observation)
            except Exception as exc:
                self._env_failed(session, exc, "reset")
            while not session.done:
                if before_generate is not None:
                    await before_generate()
                if not session.enforce_policy_lag():
                    break
                request = session.request()
                generation = await generate(request)
                action = session.accept(generation)
                if action is not None:
                    try:
                        session.observe(*await aenv.step(action))
                    except Exception as exc:
                        self._env_failed(session, exc, "step")
        except Exception as exc:  # generate's (or an env's under "raise"); CancelledError is no Exception
            _mark_failed(session, exc, "generate")
            raise
        return session

    def play_batch(self, jobs: Sequence[EpisodeJob], generate: BatchGenerate) -> list[EpisodeSession]:
        """Play many episodes in lockstep with one batched ``generate`` call per turn; return sessions in job order.

        Each turn, every episode still running sends its request in one list (so a
        trainer's ``model.generate`` or vLLM batch gets them all); episodes that end
        drop out. Envs are stepped one after the other in this thread (async envs are
        run to completion through :func:`~gem_core.core.to_sync`).

        Under ``on_env_error="end"`` an episode whose env raises ends there and drops out;
        the others play on as if it had ended normally.

        Raises:
            Exception: The first error of ``generate`` (or of an env under
                ``on_env_error="raise"``), with a note naming the episode.
        """
        from gem_core.core import to_sync

        sessions: list[EpisodeSession] = []
        envs: list[Env] = []
        for index, job in enumerate(jobs):
            env = to_sync(job.env) if isinstance(job.env, AsyncEnv) else job.env
            session = self.session(
                env_id=job.env_id or _spec_id(job.env),
                seed=job.seed,
                episode_id=job.episode_id,
                index=index,
                system_prompt=job.system_prompt,
            )
            try:
                started = time.perf_counter()
                observation = env.reset(seed=job.seed, options=job.options)[0]
                session.reset_s = time.perf_counter() - started
                session.begin(observation)
            except Exception as exc:
                self._env_failed(session, exc, "reset")
            sessions.append(session)
            envs.append(env)
        while True:
            active = [s for s in sessions if not s.done and s.enforce_policy_lag()]
            if not active:
                return sessions
            requests = [s.request() for s in active]
            try:
                # The whole batch is checked before any env is stepped: a bad answer leaves every env as it was.
                outputs = check_batch(generate(requests), requests, token_mode=self.token_mode)
                generations = _check_all(active, outputs)
            except Exception as exc:  # generate raised, or broke the contract: the trainer's side
                if not isinstance(exc, GenerateContractError):  # that one names its episodes already
                    names = ", ".join(map(describe_request, requests))
                    add_note(exc, f"in the batched generate call for episodes {names}")
                for session in active:
                    session.fail(exc, "generate")
                raise
            for session, generation in zip(active, generations, strict=True):
                action = session._take(generation)
                if action is None:
                    continue
                try:
                    session.observe(*envs[session.index].step(action))
                except Exception as exc:
                    self._env_failed(session, exc, "step")

    def _env_failed(self, session: EpisodeSession, exc: Exception, phase: str) -> None:
        """An env raised in ``phase``: end its episode (``on_env_error="end"``) or re-raise."""
        _mark_failed(session, exc, phase)
        if self.limits.on_env_error == "raise":
            raise exc


def failed_by_env(episode: Episode | Mapping[str, Any]) -> bool:
    """Whether an env error ended ``episode`` (``on_env_error="end"``): the adapters keep it out of training.

    Takes an :class:`~gem_core.rl.types.Episode` or its metadata (a mapping with
    ``end_reason`` and ``error_phase``, e.g. a per-sample summary an adapter stored).
    """
    meta = episode.metadata if isinstance(episode, Episode) else episode
    return meta.get("end_reason") == "error" and meta.get("error_phase") in ("reset", "step")


def env_error_report(
    episodes: Sequence[Episode | Mapping[str, Any]], *, total: int | None = None, shown: int = 5
) -> str | None:
    """The one warning line of a batch in which env errors ended episodes; ``None`` when none did.

    Names env id, seed, phase and error of the first ``shown`` failed episodes, e.g.
    ``"2 of 16 episodes ended by an env error (no loss weight, left out of the advantage
    statistics): core:Maze-v0 seed=3 in step: TimeoutError: grader timed out; ..."``.
    Takes episodes, or mappings with ``env_id``, ``seed`` and the metadata keys;
    ``total`` is the batch size when ``episodes`` holds only some of them (the failed ones).
    """
    rows = [{"env_id": e.env_id, "seed": e.seed, **e.metadata} if isinstance(e, Episode) else e for e in episodes]
    failed = [row for row in rows if failed_by_env(row)]
    if not failed:
        return None
    named = "; ".join(
        f"{row.get('env_id')} seed={row.get('seed')} in {row.get('error_phase')}: {row.get('error')}"
        for row in failed[:shown]
    )
    more = f"; and {len(failed) - shown} more" if len(failed) > shown else ""
    batch = len(rows) if total is None else total
    return (
        f"{len(failed)} of {batch} episodes ended by an env error (no loss weight, left out of the "
        f"advantage statistics): {named}{more}"
    )


def _check_all(sessions: Sequence[EpisodeSession], outputs: Sequence[Any]) -> list[Generation]:
    """Each session's answer checked; one :class:`GenerateContractError` naming every episode with a bad answer."""
    checked: list[Generation] = []
    failed: list[GenerateContractError] = []
    for session, output in zip(sessions, outputs, strict=True):
        try:
            checked.append(session.check(output))
        except GenerateContractError as exc:
            failed.append(exc)
    if not failed:
        return checked
    if len(failed) == 1:
        raise failed[0]
    raise GenerateContractError(
        f"{len(failed)} answers of a batched generate break the contract: " + " | ".join(map(str, failed)),
        episodes=[name for exc in failed for name in exc.episodes],
    )


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where Python has it (3.11+)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _mark_failed(session: EpisodeSession, exc: BaseException, phase: str) -> None:
    """Fail ``session`` once and name the episode on ``exc`` (a no-op for an already failed one)."""
    if session.error is exc:
        return
    add_note(exc, f"in episode {session.episode_id} ({session.start_state_id}, turn {len(session.turns)})")
    session.fail(exc, phase)


def _vocabulary_size(tokenizer: Any) -> int | None:
    """How many ids ``tokenizer`` can decode: ``len()`` (HF: added tokens included), else ``vocab_size``."""
    if tokenizer is None:
        return None
    try:
        return len(tokenizer)
    except TypeError:
        size = getattr(tokenizer, "vocab_size", None)
        return size if isinstance(size, int) and size > 0 else None


def _as_observation(observation: Any) -> Observation:
    """An env's observation as the engine keeps it: a :class:`Content` as it is, anything else as ``str``."""
    return observation if isinstance(observation, Content) else str(observation)


def _spec_id(env: Any) -> str | None:
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None)
