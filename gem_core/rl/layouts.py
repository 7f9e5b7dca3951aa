"""Turn episodes into training samples, in one of two layouts.

**Per transition** (GEM's layout, :func:`episode_to_transitions`): one sample per
turn; the prompt is the whole history at that turn, the response that turn's
generated tokens, and the turn's advantage sits on every response token. Simple and
works with any chat template, but the history is processed again at every turn, so
tokens grow quadratically with the number of turns.

**Per episode, token in / token out** (:func:`episode_to_sequence`): one sequence per
episode. The model's generated token ids are kept exactly as sampled (never decoded
and re-encoded); each env reply is appended as the chat template's *delta* for the new
messages; ``loss_mask`` is 1 only on generated tokens; each turn's advantage is on
that turn's tokens and its reward on the turn's last token. Tokens grow linearly.

Episodes played by the episode engine (:mod:`gem_core.episode`) record each turn's
exact context, so the sequence is read off them. Episodes that record only messages are
bridged turn by turn through :class:`~gem_core.chat.ChatRenderer`, the same path the
engine uses, so templates that rewrite history (Qwen3 drops earlier ``<think>``
blocks) work in both: the history is never re-rendered. Probe a template once at
start-up with :func:`check_template_prefix`.

Tokenizers are duck-typed: anything with Hugging Face's
``apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`` and
``encode(text, add_special_tokens=False)`` works. Chat templates are rendered to
text and encoded, which behaves the same across transformers versions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gem_core.chat import HISTORY_PROBE, ChatRenderer, ChatTokenizer, Message, render_ids
from gem_core.errors import RLInputError, TemplatePrefixError, TrajectoryError
from gem_core.multimodal import Image
from gem_core.rl.types import Episode, PrefixView, Turn

__all__ = [
    "ChatTokenizer",
    "EpisodeSequence",
    "TransitionSample",
    "check_template_prefix",
    "episode_segments",
    "episode_to_segments",
    "episode_to_sequence",
    "episode_to_transitions",
    "episodes_to_segments",
    "episodes_to_sequences",
    "episodes_to_transitions",
    "render_ids",
]


@dataclass(slots=True)
class TransitionSample:
    """One turn as one training sample (per-transition layout).

    Attributes:
        prompt_ids: The history at this turn, as the policy saw it.
        response_ids: The tokens generated this turn.
        advantage: This turn's advantage; it applies to every response token.
        reward: This turn's reward.
        response_logprobs: Sampling log-probabilities of ``response_ids``, if recorded.
        episode_id: The episode this turn belongs to.
        start_state_id: The episode's start state (group id).
        turn_index: Position of the turn in its episode.
        retokenized: ``response_ids`` came from encoding the action text, because the
            turn did not record generated ids (logprobs then no longer line up).
        response_policy_versions: The policy version that sampled each of ``response_ids``
            (``Turn.policy_versions``), if recorded (never for re-encoded ids). With
            ``response_logprobs`` (the behaviour logprobs) it is what off-policy
            corrections and staleness filters read (:mod:`gem_core.rl.offpolicy`).
        prompt_images: The images of ``prompt_ids``, in token order (``Turn.prompt_images``:
            an engine with a processor); ``None`` for a text prompt. A trainer encodes them
            with the same processor for the model's pixel inputs.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    reward: float
    response_logprobs: list[float] | None
    episode_id: str
    start_state_id: str
    turn_index: int
    retokenized: bool = False
    response_policy_versions: list[int] | None = None
    prompt_images: list[Image] | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens the trainer processes for this sample (prompt + response)."""
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass(slots=True)
class EpisodeSequence:
    """One episode as one token sequence (token-in/token-out layout).

    Attributes:
        input_ids: Prompt, then each turn's generated ids and the env's reply, as int64.
        loss_mask: 1 on generated tokens, 0 on prompt and env tokens (int8).
        token_rewards: Each turn's reward on its last generated token, 0 elsewhere.
        token_advantages: Each turn's advantage on all its generated tokens, 0 elsewhere;
            ``None`` when no advantages were given.
        token_logprobs: Sampling (behaviour) log-probabilities on generated tokens, 0
            elsewhere; ``None`` unless every turn recorded them.
        turn_spans: ``(start, end)`` of each turn's generated tokens in ``input_ids``.
        prompt_length: Length of the first prompt (everything before turn 0's tokens).
        episode_id: The episode's id.
        start_state_id: The episode's start state (group id).
        token_policy_versions: The policy version that sampled each generated token
            (``Turn.policy_versions``), -1 on prompt and env tokens (int64); ``None``
            unless every turn recorded versions. See :mod:`gem_core.rl.offpolicy`.
        images: The images of ``input_ids``, in token order (the last turn's
            ``prompt_images``: every image of the sequence is in its last prompt); ``None``
            for a text episode.
    """

    input_ids: npt.NDArray[np.int64]
    loss_mask: npt.NDArray[np.int8]
    token_rewards: npt.NDArray[np.float64]
    token_advantages: npt.NDArray[np.float64] | None
    token_logprobs: npt.NDArray[np.float64] | None
    turn_spans: list[tuple[int, int]]
    prompt_length: int
    episode_id: str
    start_state_id: str
    token_policy_versions: npt.NDArray[np.int64] | None = None
    images: list[Image] | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens the trainer processes for this episode."""
        return int(self.input_ids.shape[0])

    @property
    def num_generated_tokens(self) -> int:
        """Tokens with ``loss_mask == 1``."""
        return int(self.loss_mask.sum())

    @property
    def response_length(self) -> int:
        """Tokens after the first prompt (generated plus env replies)."""
        return self.num_tokens - self.prompt_length


def _advantages_for(episode: Episode, advantages: npt.ArrayLike) -> npt.NDArray[np.float64]:
    array = np.asarray(advantages, dtype=np.float64).reshape(-1)
    if array.shape[0] != episode.num_turns:
        raise RLInputError(
            f"episode {episode.episode_id!r} has {episode.num_turns} turns but {array.shape[0]} advantages; "
            "give one advantage per turn"
        )
    if not np.isfinite(array).all():
        raise RLInputError(f"advantages of episode {episode.episode_id!r} hold NaN or inf")
    return array


# --------------------------------------------------------------------------- per transition


def _prompt_ids(turn: Turn, index: int, tokenizer: ChatTokenizer | None, kwargs: Mapping[str, Any] | None) -> list[int]:
    if turn.prompt_token_ids is not None:
        return list(turn.prompt_token_ids)
    if turn.prompt_messages is None:
        raise TrajectoryError(f"turn {index} has neither prompt_token_ids nor prompt_messages; record one of them")
    if tokenizer is None:
        raise RLInputError(f"turn {index} has only prompt_messages; pass a tokenizer to render them")
    return render_ids(tokenizer, turn.prompt_messages, add_generation_prompt=True, chat_template_kwargs=kwargs)


def episode_to_transitions(
    episode: Episode,
    advantages: npt.ArrayLike,
    tokenizer: ChatTokenizer | None = None,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[TransitionSample]:
    """Per-transition layout: one sample per turn.

    Args:
        episode: The episode.
        advantages: One advantage per turn (e.g. from :func:`~gem_core.rl.advantages.rebn_advantages`).
        tokenizer: Renders ``prompt_messages`` and encodes actions of turns without
            recorded token ids; not needed when every turn recorded its ids.
        chat_template_kwargs: Extra arguments for ``apply_chat_template`` (e.g. ``enable_thinking``).

    Returns:
        One :class:`TransitionSample` per turn.
    """
    adv = _advantages_for(episode, advantages)
    samples: list[TransitionSample] = []
    for index, turn in enumerate(episode.turns):
        retokenized = turn.action_token_ids is None
        if retokenized:
            if tokenizer is None:
                raise RLInputError(f"turn {index} has no action_token_ids; pass a tokenizer to encode the action text")
            response = list(tokenizer.encode(turn.action, add_special_tokens=False))
        else:
            response = list(turn.action_token_ids or [])
        samples.append(
            TransitionSample(
                prompt_ids=_prompt_ids(turn, index, tokenizer, chat_template_kwargs),
                response_ids=response,
                advantage=float(adv[index]),
                reward=turn.reward,
                response_logprobs=None if retokenized or turn.action_logprobs is None else list(turn.action_logprobs),
                episode_id=episode.episode_id,
                start_state_id=episode.start_state_id,
                turn_index=index,
                retokenized=retokenized,
                response_policy_versions=(
                    None if retokenized or turn.policy_versions is None else list(turn.policy_versions)
                ),
                prompt_images=None if turn.prompt_images is None else list(turn.prompt_images),
            )
        )
    return samples


def episodes_to_transitions(
    episodes: Sequence[Episode],
    advantages: Sequence[npt.ArrayLike],
    tokenizer: ChatTokenizer | None = None,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[TransitionSample]:
    """:func:`episode_to_transitions` over a batch, flattened (episode order, then turn order)."""
    if len(advantages) != len(episodes):
        raise RLInputError(f"got advantages for {len(advantages)} episodes, but {len(episodes)} episodes")
    return [
        sample
        for episode, adv in zip(episodes, advantages, strict=True)
        for sample in episode_to_transitions(episode, adv, tokenizer, chat_template_kwargs=chat_template_kwargs)
    ]


# --------------------------------------------------------------------------- per episode, token in / token out


def _starts_with(ids: Sequence[int], prefix: Sequence[int]) -> bool:
    return len(ids) >= len(prefix) and list(ids[: len(prefix)]) == list(prefix)


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _bridge_from_messages(
    renderer: ChatRenderer, history: list[Message], next_history: list[Message], generated: Sequence[int], turn: int
) -> list[int]:
    """The ids between turn ``turn - 1``'s generated tokens and turn ``turn``'s: footer, env messages, prompt.

    ``history`` is the earlier turn's prompt; ``next_history`` must extend it by that
    turn's assistant message plus the env's new messages.
    """
    n = len(history)
    if next_history[:n] != history:
        raise TemplatePrefixError(
            f"turn {turn}: prompt_messages do not extend turn {turn - 1}'s (message "
            f"{_first_difference_messages(history, next_history)} differs); the history was rewritten, so no "
            "single sequence can hold both turns. Use episode_to_transitions for this episode.",
            turn=turn,
        )
    if len(next_history) <= n or next_history[n].get("role") != "assistant":
        raise TrajectoryError(
            f"turn {turn}: prompt_messages[{n}] must be the previous turn's assistant message, "
            f"got {next_history[n] if len(next_history) > n else 'nothing'}"
        )
    return renderer.bridge_ids(next_history[n + 1 :], generated)


def _first_difference_messages(a: Sequence[Message], b: Sequence[Message]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def episode_to_sequence(
    episode: Episode,
    tokenizer: ChatTokenizer | None = None,
    *,
    advantages: npt.ArrayLike | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> EpisodeSequence:
    """Per-episode token-in/token-out layout: the whole episode as one sequence.

    Two sources are supported, chosen per episode:

    * every turn recorded ``prompt_token_ids`` (a token-in/token-out runner): the
      sequence is read off them; each turn's prompt must extend the previous prompt
      plus its generated ids, so no tokenizer is needed;
    * otherwise every turn needs ``prompt_messages`` and a ``tokenizer``: env replies
      are appended as the template's delta for the new messages, and the part of the
      template's end-of-answer marker the model did not generate (e.g. the newline
      after ``<|im_end|>``) is inserted with loss mask 0.

    Generated ids (``action_token_ids``, required) are copied as they are.

    Args:
        episode: The episode (at least one turn).
        tokenizer: Needed for the messages source.
        advantages: One advantage per turn, placed on the turn's generated tokens.
        chat_template_kwargs: Extra arguments for ``apply_chat_template``.

    Raises:
        TemplatePrefixError: The template (or the recorded prompts) rewrite earlier
            turns; the error's ``turn`` names the first such turn. Fall back to
            :func:`episode_to_transitions`.
        TrajectoryError: A turn lacks generated ids or prompts.
    """
    adv = None if advantages is None else _advantages_for(episode, advantages)
    turns = episode.turns
    if not turns:
        raise TrajectoryError(f"episode {episode.episode_id!r} has no turns")
    for index, turn in enumerate(turns):
        if turn.action_token_ids is None:
            raise TrajectoryError(
                f"turn {index} has no action_token_ids; the token-in/token-out layout needs the generated ids "
                "(use episode_to_transitions to train on re-encoded text)"
            )
        if not turn.action_token_ids:
            raise TrajectoryError(f"turn {index} generated no tokens, so its reward has no token to sit on")
    token_mode = all(t.prompt_token_ids is not None for t in turns)
    renderer: ChatRenderer | None = None
    if token_mode:
        prompt = list(turns[0].prompt_token_ids or [])
    else:
        if any(t.prompt_messages is None for t in turns):
            raise TrajectoryError("every turn needs prompt_token_ids, or every turn needs prompt_messages")
        if tokenizer is None:
            raise RLInputError("these turns record prompt_messages only; pass a tokenizer to render them")
        renderer = ChatRenderer(tokenizer, chat_template_kwargs)
        prompt = renderer.prompt_ids(turns[0].prompt_messages or [])

    ids: list[int] = list(prompt)
    # With the engine's records every prompt is a view of one context: ``ids[:on_shared]`` is
    # known to equal it, so each turn only checks its own new tokens (linear, not turns x context).
    first = turns[0].prompt_token_ids
    shared = first if isinstance(first, PrefixView) else None
    on_shared = len(ids) if shared is not None else 0
    spans: list[tuple[int, int]] = []
    for index, turn in enumerate(turns):
        generated = list(turn.action_token_ids or [])
        spans.append((len(ids), len(ids) + len(generated)))
        ids.extend(generated)
        if index + 1 == len(turns):
            break
        following = turns[index + 1]
        if renderer is None:
            view = following.prompt_token_ids
            if (
                shared is not None
                and shared.shares_items(view)
                and view is not None
                and len(view) >= len(ids)
                and view[on_shared : len(ids)] == ids[on_shared:]
            ):
                ids.extend(view[len(ids) :])
                on_shared = len(ids)
                continue
            next_prompt = list(view or [])
            if not _starts_with(next_prompt, ids):
                raise TemplatePrefixError(
                    f"turn {index + 1}: prompt_token_ids do not start with turn {index}'s prompt plus its generated "
                    f"ids (first difference at token {_first_difference(next_prompt, ids)}); the runner re-rendered "
                    "the history. Fall back to episode_to_transitions.",
                    turn=index + 1,
                )
            ids.extend(next_prompt[len(ids) :])
            on_shared = len(ids) if shared is not None and shared.shares_items(view) else 0
        else:
            ids.extend(
                _bridge_from_messages(
                    renderer,
                    list(turn.prompt_messages or []),
                    list(following.prompt_messages or []),
                    generated,
                    index + 1,
                )
            )

    n = len(ids)
    loss_mask = np.zeros(n, dtype=np.int8)
    token_rewards = np.zeros(n, dtype=np.float64)
    token_advantages = None if adv is None else np.zeros(n, dtype=np.float64)
    with_logprobs = all(t.action_logprobs is not None for t in turns)
    token_logprobs = np.zeros(n, dtype=np.float64) if with_logprobs else None
    with_versions = all(t.policy_versions is not None for t in turns)
    token_versions = np.full(n, -1, dtype=np.int64) if with_versions else None
    for index, ((start, end), turn) in enumerate(zip(spans, turns, strict=True)):
        loss_mask[start:end] = 1
        token_rewards[end - 1] = turn.reward
        if token_advantages is not None and adv is not None:
            token_advantages[start:end] = adv[index]
        if token_logprobs is not None:
            token_logprobs[start:end] = turn.action_logprobs or []
        if token_versions is not None:
            token_versions[start:end] = turn.policy_versions or []
    return EpisodeSequence(
        input_ids=np.asarray(ids, dtype=np.int64),
        loss_mask=loss_mask,
        token_rewards=token_rewards,
        token_advantages=token_advantages,
        token_logprobs=token_logprobs,
        turn_spans=spans,
        prompt_length=spans[0][0],
        episode_id=episode.episode_id,
        start_state_id=episode.start_state_id,
        token_policy_versions=token_versions,
        images=None if turns[-1].prompt_images is None else list(turns[-1].prompt_images),
    )


def episodes_to_sequences(
    episodes: Sequence[Episode],
    tokenizer: ChatTokenizer | None = None,
    *,
    advantages: Sequence[npt.ArrayLike] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[EpisodeSequence]:
    """:func:`episode_to_sequence` over a batch."""
    if advantages is not None and len(advantages) != len(episodes):
        raise RLInputError(f"got advantages for {len(advantages)} episodes, but {len(episodes)} episodes")
    return [
        episode_to_sequence(
            episode,
            tokenizer,
            advantages=None if advantages is None else advantages[i],
            chat_template_kwargs=chat_template_kwargs,
        )
        for i, episode in enumerate(episodes)
    ]


def episode_segments(episode: Episode) -> list[tuple[int, int]]:
    """Where an episode's token context stays consistent: ``[start, end)`` turn ranges, in order.

    A new segment starts at every turn whose ``prompt_token_ids`` do not start with the previous
    turn's prompt plus its generated ids (a branch point: the harness or runner re-rendered,
    rewrote or truncated the history). An episode without branch points is one segment.

    Raises:
        TrajectoryError: a turn lacks ``prompt_token_ids`` or ``action_token_ids``.
    """
    bounds: list[tuple[int, int]] = []
    start = 0
    previous: list[int] | None = None
    for index, turn in enumerate(episode.turns):
        if turn.prompt_token_ids is None or turn.action_token_ids is None:
            raise TrajectoryError(
                f"turn {index} lacks prompt_token_ids or action_token_ids; segments are read off recorded token ids"
            )
        if previous is not None and not _starts_with(turn.prompt_token_ids, previous):
            bounds.append((start, index))
            start = index
        previous = [*turn.prompt_token_ids, *turn.action_token_ids]
    if episode.turns:
        bounds.append((start, len(episode.turns)))
    return bounds


def episode_to_segments(
    episode: Episode,
    *,
    advantages: npt.ArrayLike | None = None,
) -> list[EpisodeSequence]:
    """Token in / token out with branch points: one :class:`EpisodeSequence` per consistent segment.

    Episodes captured from black-box harnesses (``gem gateway``) may re-write their history
    between calls; :func:`episode_to_sequence` refuses those. Here each segment of
    :func:`episode_segments` becomes its own sequence (its first prompt is that turn's whole
    prompt, loss mask 0), so every generated token is trained exactly once, as sampled.
    Compute returns and advantages on the whole episode first and pass them here: a segment
    before the last branch point gets its share of the final reward through them (its own
    ``token_rewards`` hold only its turns' rewards).

    Args:
        episode: An episode whose turns record ``prompt_token_ids`` and ``action_token_ids``.
        advantages: One advantage per turn of the whole episode.

    Returns:
        The segments' sequences in order; ``episode_id`` of segment ``k > 0`` is ``"{episode_id}#k"``.
    """
    adv = None if advantages is None else _advantages_for(episode, advantages)
    sequences = []
    for number, (start, end) in enumerate(episode_segments(episode)):
        part = Episode(
            episode.turns[start:end],
            start_state_id=episode.start_state_id,
            episode_id=episode.episode_id if number == 0 else f"{episode.episode_id}#{number}",
            env_id=episode.env_id,
            seed=episode.seed,
            metadata=episode.metadata,
        )
        sequences.append(episode_to_sequence(part, advantages=None if adv is None else adv[start:end]))
    return sequences


def episodes_to_segments(
    episodes: Sequence[Episode], *, advantages: Sequence[npt.ArrayLike] | None = None
) -> list[EpisodeSequence]:
    """:func:`episode_to_segments` over a batch, flattened (episode order, then segment order)."""
    if advantages is not None and len(advantages) != len(episodes):
        raise RLInputError(f"got advantages for {len(advantages)} episodes, but {len(episodes)} episodes")
    return [
        sequence
        for i, episode in enumerate(episodes)
        for sequence in episode_to_segments(episode, advantages=None if advantages is None else advantages[i])
    ]


# The chat module's history probe (assistant turns with <think> blocks), ending in a tool reply.
_PROBE_CONVERSATION: list[Message] = [*HISTORY_PROBE[:-1], {**HISTORY_PROBE[-1], "role": "tool"}]


def check_template_prefix(
    tokenizer: ChatTokenizer,
    messages: Sequence[Message] | None = None,
    *,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> ChatRenderer:
    """Check once, at trainer start-up, that a template supports token-in/token-out episodes.

    Builds the :class:`~gem_core.chat.ChatRenderer` (which probes the template) and
    bridges every turn of a multi-turn conversation (by default one with ``<think>``
    blocks, which some templates drop from history, and a tool message). Templates that
    rewrite history pass: the bridges never re-render it (see
    :attr:`~gem_core.chat.ChatRenderer.rewrites_history`).

    Returns:
        The renderer, to share with the episode engine.

    Raises:
        TemplatePrefixError: The template cannot be bridged; the message names the
            template and the fallback (re-render every turn, per-transition samples).
    """
    conversation = list(messages if messages is not None else _PROBE_CONVERSATION)
    renderer = ChatRenderer(tokenizer, chat_template_kwargs)
    cuts = [i for i, m in enumerate(conversation) if m.get("role") == "assistant"]
    if not cuts:
        raise RLInputError("the probe conversation needs at least one assistant message")
    ids = renderer.prompt_ids(conversation[: cuts[0]])
    for turn, cut in enumerate(cuts, start=1):
        following = cuts[turn] if turn < len(cuts) else len(conversation)
        answer = list(tokenizer.encode(str(conversation[cut].get("content", "")), add_special_tokens=False))
        ids += answer + renderer.bridge_ids(conversation[cut + 1 : following], answer)
    return renderer
