"""The per-transition and the per-episode token-in/token-out layouts, with a real HF tokenizer built locally."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.errors import RLInputError, TemplatePrefixError, TrajectoryError
from gem_core.rl.advantages import rebn_advantages, reinforce_advantages, reinforce_pp_advantages
from gem_core.rl.layouts import (
    check_template_prefix,
    episode_to_sequence,
    episode_to_transitions,
    episodes_to_sequences,
    episodes_to_transitions,
    render_ids,
)
from gem_core.rl.types import Episode, Turn
from gem_core.testing_tokenizers import build_chat_tokenizer, synthetic_chat_episode

pytest.importorskip("transformers", reason="the test extra installs transformers")


@functools.cache
def tokenizer(template: str = "chatml") -> Any:
    return build_chat_tokenizer(template)


ACTIONS = ["My guess is 8.", "<think>\nLower, so halve.\n</think>\n\n4", "\\boxed{6}"]
REPLIES = ["Lower than 8.", "Higher than 4.", "Correct!"]
REWARDS = [0.0, -0.1, 1.0]


def three_turns(**kwargs: Any) -> Episode:
    return synthetic_chat_episode(tokenizer(), ACTIONS, REPLIES, REWARDS, **kwargs)


def generated_tokens(seq: Any) -> np.ndarray:
    return seq.input_ids[seq.loss_mask == 1]


# --------------------------------------------------------------------------- token in / token out


def test_sequence_equals_the_template_rendering_of_the_whole_conversation() -> None:
    tok = tokenizer()
    episode = three_turns()
    seq = episode_to_sequence(episode, tok)
    conversation = [*episode.turns[-1].prompt_messages, {"role": "assistant", "content": ACTIONS[-1]}]  # type: ignore[misc]
    rendered = render_ids(tok, conversation, add_generation_prompt=False)
    # The template closes the last answer with "<|im_end|>\n"; the model stopped at <|im_end|>.
    assert rendered == [*seq.input_ids.tolist(), *tok.encode("\n", add_special_tokens=False)]


def test_generated_ids_survive_untouched_even_when_not_canonical() -> None:
    tok = tokenizer()
    eos = tok.eos_token_id
    # The model spelled its answers one character per token, which encode() would never produce.
    generated = [[tok.convert_tokens_to_ids(c) for c in action if c.isalnum()] + [eos] for action in ACTIONS]
    assert all(g != [*tok.encode(a, add_special_tokens=False), eos] for g, a in zip(generated, ACTIONS, strict=True))
    episode = three_turns(generated_ids=generated)
    seq = episode_to_sequence(episode, tok, advantages=[1.0, 2.0, 3.0])
    for (start, end), ids in zip(seq.turn_spans, generated, strict=True):
        assert seq.input_ids[start:end].tolist() == ids
    assert generated_tokens(seq).tolist() == [i for ids in generated for i in ids]
    # Nothing outside the spans is marked as generated.
    mask = np.zeros(seq.num_tokens, dtype=np.int8)
    for start, end in seq.turn_spans:
        mask[start:end] = 1
    assert np.array_equal(mask, seq.loss_mask)


def test_rewards_advantages_and_logprobs_sit_on_their_turns_tokens() -> None:
    episode = three_turns()
    seq = episode_to_sequence(episode, tokenizer(), advantages=[0.5, -1.0, 2.0])
    assert seq.token_advantages is not None and seq.token_logprobs is not None
    for turn, advantage, (start, end) in zip(episode.turns, [0.5, -1.0, 2.0], seq.turn_spans, strict=True):
        assert (seq.token_advantages[start:end] == advantage).all()
        assert seq.token_logprobs[start:end].tolist() == turn.action_logprobs
        assert seq.token_rewards[end - 1] == turn.reward
    assert seq.token_rewards.sum() == pytest.approx(sum(REWARDS))
    off = seq.loss_mask == 0
    assert (
        not seq.token_advantages[off].any() and not seq.token_logprobs[off].any() and not seq.token_rewards[off].any()
    )
    assert seq.prompt_length == seq.turn_spans[0][0]
    assert seq.num_generated_tokens == sum(len(t.action_token_ids or []) for t in episode.turns)
    assert seq.response_length == seq.num_tokens - seq.prompt_length
    assert episode_to_sequence(episode, tokenizer()).token_advantages is None


def test_prefix_of_the_sequence_is_each_turns_prompt() -> None:
    # With canonical ids (what encode() gives plus the stop token) the sequence up to a turn's
    # tokens is exactly the prompt the per-transition layout renders for that turn.
    episode = three_turns()
    seq = episode_to_sequence(episode, tokenizer())
    for (start, _), sample in zip(seq.turn_spans, episode_to_transitions(episode, [0, 0, 0], tokenizer()), strict=True):
        assert seq.input_ids[:start].tolist() == sample.prompt_ids


def test_a_generation_cut_before_its_stop_token_is_closed_by_the_template() -> None:
    tok = tokenizer()
    episode = three_turns(with_stop_token=False)
    seq = episode_to_sequence(episode, tok)
    _start, end = seq.turn_spans[0]
    after = seq.input_ids[end : seq.turn_spans[1][0]].tolist()
    im_end_newline = tok.encode("<|im_end|>\n", add_special_tokens=False)
    assert after[: len(im_end_newline)] == im_end_newline
    assert not seq.loss_mask[end : seq.turn_spans[1][0]].any()


def test_recorded_prompt_token_ids_are_used_without_a_tokenizer() -> None:
    tok = tokenizer()
    via_messages = three_turns()
    seq = episode_to_sequence(via_messages, tok)
    # A token-in/token-out runner records each turn's prompt ids: the sequence up to that turn.
    turns = [
        Turn(
            observation=t.observation,
            action=t.action,
            reward=t.reward,
            prompt_token_ids=seq.input_ids[:start].tolist(),
            action_token_ids=t.action_token_ids,
        )
        for t, (start, _) in zip(via_messages.turns, seq.turn_spans, strict=True)
    ]
    episode = Episode(turns, start_state_id="s")
    from_tokens = episode_to_sequence(episode)
    assert np.array_equal(from_tokens.input_ids, seq.input_ids)
    assert np.array_equal(from_tokens.loss_mask, seq.loss_mask)
    assert from_tokens.token_logprobs is None
    # A runner that re-rendered the history breaks the prefix: a typed error names the turn.
    turns[2].prompt_token_ids = [*seq.input_ids[: seq.turn_spans[1][0]].tolist(), 7, 7, 7]
    with pytest.raises(TemplatePrefixError, match="turn 2: prompt_token_ids") as info:
        episode_to_sequence(Episode(turns, start_state_id="s"))
    assert info.value.turn == 2


def test_template_that_drops_earlier_reasoning_keeps_what_the_model_saw() -> None:
    tok = tokenizer("chatml_drop_think")
    episode = synthetic_chat_episode(tok, ACTIONS, REPLIES, REWARDS)
    seq = episode_to_sequence(episode, tok)  # bridged turn by turn: the history is never re-rendered
    for turn, (start, end) in zip(episode.turns, seq.turn_spans, strict=True):
        assert seq.input_ids[start:end].tolist() == turn.action_token_ids  # <think> kept where it was generated
    # Same tokens as with the verbatim template: the two templates differ only in how they re-render history.
    verbatim = episode_to_sequence(synthetic_chat_episode(tokenizer(), ACTIONS, REPLIES, REWARDS), tokenizer())
    assert seq.input_ids.tolist() == verbatim.input_ids.tolist()
    assert check_template_prefix(tok).rewrites_history
    assert not check_template_prefix(tokenizer()).rewrites_history


class _CountingTemplate:
    """A template whose header counts the messages: earlier text depends on what follows."""

    name_or_path = "tiny/counting"

    def __init__(self) -> None:
        self.inner = tokenizer()

    def apply_chat_template(self, messages: Any, **kwargs: Any) -> str:
        return f"[{len(messages)} messages]" + self.inner.apply_chat_template(messages, **kwargs)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        return list(self.inner.encode(text, **kwargs))

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return str(self.inner.decode(ids, **kwargs))


def test_a_template_that_cannot_be_bridged_names_itself_and_the_fallback() -> None:
    with pytest.raises(TemplatePrefixError, match=r"_CountingTemplate\('tiny/counting'\).*context='rerender'"):
        check_template_prefix(_CountingTemplate())


def test_history_rewritten_by_the_runner_is_a_prefix_error() -> None:
    episode = three_turns()
    messages = episode.turns[2].prompt_messages
    assert messages is not None
    messages[1] = {"role": "user", "content": "a different first prompt"}
    with pytest.raises(TemplatePrefixError, match="turn 2: prompt_messages do not extend") as info:
        episode_to_sequence(episode, tokenizer())
    assert info.value.turn == 2


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            lambda t: setattr(t, "action_token_ids", None) or setattr(t, "action_logprobs", None),
            TrajectoryError,
            "no action_token_ids",
        ),
        (
            lambda t: setattr(t, "action_token_ids", []) or setattr(t, "action_logprobs", None),
            TrajectoryError,
            "no tokens",
        ),
        (lambda t: setattr(t, "prompt_messages", None), TrajectoryError, "every turn needs"),
    ],
    ids=["no-generated-ids", "empty-generation", "no-prompt"],
)
def test_sequence_input_errors(change: Any, error: type[Exception], message: str) -> None:
    episode = three_turns()
    change(episode.turns[1])
    with pytest.raises(error, match=message):
        episode_to_sequence(episode, tokenizer())


def test_sequence_needs_a_tokenizer_for_messages_and_matching_advantages() -> None:
    with pytest.raises(RLInputError, match="pass a tokenizer"):
        episode_to_sequence(three_turns())
    with pytest.raises(RLInputError, match="3 turns but 2 advantages"):
        episode_to_sequence(three_turns(), tokenizer(), advantages=[1.0, 2.0])
    with pytest.raises(TrajectoryError, match="no turns"):
        episode_to_sequence(Episode([], start_state_id="s"), tokenizer())


# --------------------------------------------------------------------------- per transition


def test_transitions_one_sample_per_turn() -> None:
    episode = three_turns()
    samples = episode_to_transitions(episode, [1.0, 2.0, 3.0], tokenizer())
    assert [s.advantage for s in samples] == [1.0, 2.0, 3.0]
    assert [s.reward for s in samples] == REWARDS
    for sample, turn in zip(samples, episode.turns, strict=True):
        assert sample.response_ids == turn.action_token_ids
        assert sample.response_logprobs == turn.action_logprobs
        assert not sample.retokenized
        assert sample.prompt_ids == render_ids(tokenizer(), turn.prompt_messages or [], add_generation_prompt=True)
        assert sample.num_tokens == len(sample.prompt_ids) + len(sample.response_ids)


def test_transitions_reencode_text_only_when_ids_are_missing_and_say_so() -> None:
    episode = three_turns()
    episode.turns[0].action_token_ids = None
    episode.turns[0].action_logprobs = None
    sample = episode_to_transitions(episode, [0.0, 0.0, 0.0], tokenizer())[0]
    assert sample.retokenized and sample.response_logprobs is None
    assert sample.response_ids == tokenizer().encode(ACTIONS[0], add_special_tokens=False)
    with pytest.raises(RLInputError, match="pass a tokenizer"):
        episode_to_transitions(episode, [0.0, 0.0, 0.0])
    bare = Episode([Turn("o", "a", 0.0, action_token_ids=[1])], start_state_id="s")
    with pytest.raises(TrajectoryError, match="neither prompt_token_ids nor prompt_messages"):
        episode_to_transitions(bare, [0.0])


# --------------------------------------------------------------------------- the two layouts agree

WORDS = ["guess", "8", "lower", "higher", "<think>", "</think>", "\n", " ", "reveal", "(2, 3)", "ok", "é", "🙂"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map("".join)


@st.composite
def chat_episodes(draw: st.DrawFn, index: int = 0) -> Episode:
    n = draw(st.integers(1, 5))
    actions = [draw(texts) for _ in range(n)]
    replies = [draw(texts) for _ in range(n)]
    rewards = [draw(st.floats(-1, 1, allow_nan=False)) for _ in range(n)]
    return synthetic_chat_episode(
        tokenizer(),
        actions,
        replies,
        rewards,
        start_state_id=f"s{draw(st.integers(0, 2))}",
        episode_id=f"ep{index}",
        with_stop_token=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(chat_episodes(), min_size=1, max_size=4), st.floats(0.5, 1.0))
def test_both_layouts_give_the_same_per_token_advantages(episodes: list[Episode], gamma: float) -> None:
    advantages = rebn_advantages(episodes, gamma)
    samples = episodes_to_transitions(episodes, advantages, tokenizer())
    sequences = episodes_to_sequences(episodes, tokenizer(), advantages=advantages)
    per_transition = np.concatenate([np.full(len(s.response_ids), s.advantage) for s in samples])
    per_episode = np.concatenate([seq.token_advantages[seq.loss_mask == 1] for seq in sequences])  # type: ignore[index]
    np.testing.assert_array_equal(per_transition, per_episode)
    # ...on the same tokens, the model's own
    assert (
        np.concatenate([s.response_ids for s in samples]).tolist()
        == np.concatenate([generated_tokens(seq) for seq in sequences]).tolist()
    )
    # Both layouts train on every generated token; the sequence layout never processes more tokens.
    assert sum(s.num_tokens for s in samples) >= sum(seq.num_tokens for seq in sequences)
    assert sum(len(s.response_ids) for s in samples) == sum(seq.num_generated_tokens for seq in sequences)


def test_one_turn_costs_the_same_in_both_layouts() -> None:
    episode = synthetic_chat_episode(tokenizer(), ["8"], ["Correct!"], [1.0])
    (sample,) = episode_to_transitions(episode, [1.0], tokenizer())
    seq = episode_to_sequence(episode, tokenizer())
    assert sample.num_tokens == seq.num_tokens


def test_reinforce_pp_on_sequences_with_gamma_one_equals_per_turn_returns() -> None:
    # With gamma 1 every generated token of turn t carries G_t: the token-level estimator before
    # whitening agrees with the turn-level returns placed on the turn's tokens.
    episodes = [three_turns(), synthetic_chat_episode(tokenizer(), ["8", "4"], ["Lower.", "Yes."], [0.2, 0.7])]
    returns = reinforce_advantages(episodes, gamma=1.0)
    sequences = episodes_to_sequences(episodes, tokenizer(), advantages=returns)
    token_level = reinforce_pp_advantages(
        [s.token_rewards for s in sequences], [s.loss_mask for s in sequences], gamma=1.0, eps=0.0
    )
    placed = np.concatenate([s.token_advantages[s.loss_mask == 1] for s in sequences])  # type: ignore[index]
    whitened = (placed - placed.mean()) / placed.std(ddof=1)
    np.testing.assert_allclose(
        np.concatenate([a[s.loss_mask == 1] for a, s in zip(token_level, sequences, strict=True)]), whitened
    )


def test_batch_helpers_check_lengths() -> None:
    with pytest.raises(RLInputError, match="advantages for 1 episodes"):
        episodes_to_transitions([three_turns(), three_turns()], [[0, 0, 0]], tokenizer())
    with pytest.raises(RLInputError, match="advantages for 1 episodes"):
        episodes_to_sequences([three_turns(), three_turns()], tokenizer(), advantages=[[0, 0, 0]])


def test_episodes_read_back_from_jsonl_give_the_same_samples(tmp_path: Any) -> None:
    from gem_core.rl.types import read_jsonl, write_jsonl

    episodes = [three_turns(), synthetic_chat_episode(tokenizer(), ["8"], ["Correct!"], [1.0], episode_id="ep-1")]
    write_jsonl(episodes, tmp_path / "episodes.jsonl")
    loaded = read_jsonl(tmp_path / "episodes.jsonl")
    advantages = rebn_advantages(loaded, 0.9)
    for before, after in zip(
        episodes_to_sequences(episodes, tokenizer(), advantages=rebn_advantages(episodes, 0.9)),
        episodes_to_sequences(loaded, tokenizer(), advantages=advantages),
        strict=True,
    ):
        assert np.array_equal(before.input_ids, after.input_ids)
        assert np.array_equal(before.token_advantages, after.token_advantages)  # type: ignore[arg-type]
        assert np.array_equal(before.token_logprobs, after.token_logprobs)  # type: ignore[arg-type]
