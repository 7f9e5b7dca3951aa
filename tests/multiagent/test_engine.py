"""Multi-agent episodes on the episode engine: a session per seat, self-play, scripted seats, token in/out per seat."""

from __future__ import annotations

import pytest

from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.errors import ConfigError
from gem_core.multiagent import MultiAgentEnv
from gem_core.multiagent.engine import Scripted, play_multiagent
from gem_core.multiagent.reference import NimEnv, RockPaperScissorsEnv
from gem_core.rl.roles import role_rebn_advantages
from gem_core.testing_tokenizers import build_chat_tokenizer


def _take(n: int):
    def generate(request: TurnRequest) -> str:
        return str(n)

    return generate


def _optimal(env: MultiAgentEnv, agent: str, observation: str) -> str:
    nim = env.unwrapped
    assert isinstance(nim, NimEnv)
    return str(nim.optimal_move())


def test_self_play_gives_one_record_per_seat_with_its_own_chat() -> None:
    env = NimEnv(low=7, high=7)
    result = play_multiagent(EpisodeEngine(), env, _take(1), seed=0, env_id="core:Nim-v0")
    episodes = result.episodes
    assert set(episodes) == {"first", "second"}
    first, second = episodes["first"], episodes["second"]
    assert [len(first.turns), len(second.turns)] == [4, 3]  # 7 stones, one at a time: first takes the last
    assert first.total_reward == 1.0 and second.total_reward == -1.0  # second's loss lands on its last turn
    assert second.turns[-1].reward == -1.0 and second.turns[-1].terminated
    assert first.start_state_id == second.start_state_id == "core:Nim-v0/seed=0"
    assert first.metadata["seat"] == "first" and second.metadata["outcome"] == "loss"
    # the second seat's first prompt holds its briefing and the first move
    assert "You move second" in second.turns[0].observation and "first took 1" in second.turns[0].observation
    # the second seat's next observation joins its own move's result and the reply
    assert "second took 1; 5 left" in second.turns[0].next_observation
    assert "first took 1; 4 left" in second.turns[0].next_observation
    advantages = role_rebn_advantages([first, second])  # roles from the seats
    assert all(a.size for a in advantages)


def test_a_scripted_seat_has_no_record_and_the_model_seat_learns_its_loss() -> None:
    result = play_multiagent(
        EpisodeEngine(), NimEnv(low=5, high=5), {"first": _take(2), "second": Scripted(_optimal)}, seed=0
    )
    assert set(result.episodes) == {"first"}
    assert result.returns == {"first": -1.0, "second": 1.0} and result.outcomes["second"] == "win"


def test_simultaneous_games_step_every_seat_at_once() -> None:
    replies = {"player_0": _fixed("rock"), "player_1": _fixed("paper")}
    result = play_multiagent(EpisodeEngine(), RockPaperScissorsEnv(rounds=3), replies, seed=1)
    assert result.returns == {"player_0": -3.0, "player_1": 3.0}
    assert [t.reward for t in result.episodes["player_0"].turns] == [-1.0, -1.0, -1.0]


def _fixed(text: str):
    return lambda request: text


def test_token_in_token_out_per_seat() -> None:
    tok = build_chat_tokenizer()
    engine = EpisodeEngine(tok, max_turn_tokens=8)
    prompts: dict[str, list[list[int]]] = {"first": [], "second": []}

    def generate(request: TurnRequest) -> Generation:
        seat = "first" if request.episode_index == 0 else "second"
        assert request.prompt_ids is not None
        prompts[seat].append(list(request.prompt_ids))
        return Generation(token_ids=[*tok.encode("1", add_special_tokens=False), tok.eos_token_id])

    result = play_multiagent(engine, NimEnv(low=6, high=6), generate, seed=0)
    for seat, seen in prompts.items():
        episode = result.episodes[seat]
        for earlier, later, turn in zip(seen, seen[1:], episode.turns, strict=False):
            # each prompt extends the seat's previous prompt by the ids it generated (never re-encoded)
            assert later[: len(earlier)] == earlier
            assert later[len(earlier) : len(earlier) + len(turn.action_token_ids or [])] == turn.action_token_ids
    assert prompts["first"][0] != prompts["second"][0]  # separate contexts


def test_a_seat_that_runs_out_of_turns_stops_the_game_for_all() -> None:
    result = play_multiagent(EpisodeEngine(max_turns=2), NimEnv(low=12, high=12), _take(1), seed=0)
    assert result.stopped_by == "first"
    first, second = result.episodes["first"], result.episodes["second"]
    assert first.truncated and second.truncated
    assert second.metadata["stopped_by"] == "first"


def test_config_errors_name_the_seats() -> None:
    with pytest.raises(ConfigError, match="second"):
        play_multiagent(EpisodeEngine(), NimEnv(), {"first": _take(1)})
    with pytest.raises(ConfigError, match="ghost"):
        play_multiagent(EpisodeEngine(), NimEnv(), _take(1), system_prompts={"ghost": "x"})


def test_a_failing_policy_marks_the_sessions_failed() -> None:
    def broken(request: TurnRequest) -> str:
        raise RuntimeError("server down")

    env = NimEnv()
    with pytest.raises(RuntimeError, match="server down"):
        play_multiagent(EpisodeEngine(), env, {"first": _take(1), "second": broken}, seed=0)
