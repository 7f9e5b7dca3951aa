"""What the RL2 adapter adds to an RL2 step: ``rebn`` next to RL2's own estimators, and the env module per turn.

Needs the ``rl2`` tox env (RL2 0.0.2 and the adapter installed):

    .tox/rl2/bin/python bench/rl2.py [--episodes 512] [--turns 8] [--turn-tokens 256] [--repeats 7]

1. Advantages: a batch in RL2's own layout (built with RL2's ``state_dict_to_tensor_dict``
   and ``pack_tensor_dicts``: one sequence per episode, ``turns`` generated spans with env
   text between them, a reward on each span's last token) through RL2's
   ``compute_advantages`` with ``reinforce`` and ``gae`` (RL2's own) and through the
   launcher's wrapper with ``rebn``. Medians and the ratio to ``rebn``.
2. The env module: a whole episode through :class:`gem_rl2.episodes.RL2Episodes` (make,
   reset, steps, close; session bookkeeping, chat-template text, env calls in worker
   threads) next to the same env made, reset, stepped with the same actions and closed
   bare, per turn. Medians over episodes and the ratio.

GEM (``gem-llm``) ships no RL2 code in a package to run side by side (its RL2 example is
a script in its repository), so the comparison is with RL2's own estimators and the bare env.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
import wandb
from gem_rl2.advantages import compute_advantages_with_rebn
from gem_rl2.episodes import RL2Episodes, Settings
from omegaconf import OmegaConf
from RL2.datasets import pack_tensor_dicts, state_dict_to_tensor_dict
from RL2.utils.algorithms import compute_advantages

from gem_core.api import make
from gem_core.testing_tokenizers import build_chat_tokenizer


def rl2_batch(episodes: int, turns: int, turn_tokens: int) -> tuple[dict[str, Any], Any]:
    generator = torch.Generator().manual_seed(0)
    tensor_dicts = []
    for _ in range(episodes):
        states: list[int] = []
        actions: list[int] = []
        mask: list[int] = []
        rewards: list[float] = []
        for _ in range(turns):
            env_text = torch.randint(3, 30_000, (turn_tokens // 2,), generator=generator).tolist()
            reply = torch.randint(3, 30_000, (turn_tokens,), generator=generator).tolist()
            states += env_text + reply
            actions += [0] * len(env_text) + reply
            mask += [0] * len(env_text) + [1] * len(reply)
            reward = float(torch.randint(0, 3, (1,), generator=generator)) - 1.0
            rewards += [0.0] * (len(env_text) + len(reply) - 1) + [reward]
        state_dict = {"states": states, "actions": actions, "action_mask": mask, "logps": [0.0] * len(states)}
        tensor_dicts.append(state_dict_to_tensor_dict({**state_dict, "rewards": rewards}))
    packed = pack_tensor_dicts(tensor_dicts)
    packed["values"] = torch.zeros(packed["states"].shape)  # gae reads a critic's values
    return packed, torch.arange(episodes + 1)


def time_advantages(batch: dict[str, Any], cu_seqs: Any, estimator: str, repeats: int) -> float:
    config = OmegaConf.create(
        {"estimator": estimator, "gamma": 0.9, "lamda": 1.0, "responses_per_prompt": 1}
        | {"global_norm": True, "norm_var": True}
    )
    compute = compute_advantages_with_rebn(compute_advantages)
    samples = []
    for _ in range(repeats):
        copy = {k: v.clone() for k, v in batch.items()}
        started = time.perf_counter()
        compute(config, copy, cu_seqs, 1)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def time_env_module(episodes: int) -> tuple[float, float, int]:
    """Median seconds per turn through RL2Episodes and through the bare env, and the turns played."""
    table = RL2Episodes(build_chat_tokenizer("chatml"), Settings(tokenizer="unused", max_turns=32))
    row = {"env_id": "core:NumberGuess-v0", "env_kwargs": '{"max_turns": 8}'}
    module_turns: list[float] = []
    played: list[list[str]] = []

    async def play(seed: int) -> None:
        started = time.perf_counter()
        state, info = await table.reset({**row, "seed": seed})
        actions: list[str] = []
        done = False
        while not done:
            action = f"My guess is {len(actions) * 2 + 1}"
            out = await table.step(state, action + "<|im_end|>", info)
            actions.append(action)
            state, info, done = out["next_state"], out["extra_info"], out["done"]
        module_turns.append((time.perf_counter() - started) / len(actions))
        played.append(actions)

    async def play_all() -> None:
        for seed in range(episodes):
            await play(seed)

    asyncio.run(play_all())
    bare_turns = []
    for seed, actions in enumerate(played):
        started = time.perf_counter()
        env = make("core:NumberGuess-v0", max_turns=8)
        env.reset(seed=seed)
        for action in actions:
            env.step(action)
        env.close()
        bare_turns.append((time.perf_counter() - started) / len(actions))
    return statistics.median(module_turns), statistics.median(bare_turns), sum(len(a) for a in played)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--turn-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--env-episodes", type=int, default=200)
    args = parser.parse_args()

    with socket.socket() as s:  # RL2's timing decorator asks for the rank and logs to wandb
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("WANDB_MODE", "disabled")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    wandb.init(mode="disabled")

    batch, cu_seqs = rl2_batch(args.episodes, args.turns, args.turn_tokens)
    medians = {name: time_advantages(batch, cu_seqs, name, args.repeats) for name in ("rebn", "reinforce", "gae")}
    print(
        f"advantages: {args.episodes} episodes x {args.turns} turns x {args.turn_tokens} generated tokens, "
        f"sequence length {batch['states'].shape[1]}, median of {args.repeats}"
    )
    for name, median in medians.items():
        print(f"  {name:10s} {median * 1e3:9.2f} ms   x{median / medians['rebn']:.2f} of rebn")

    module, bare, turns = time_env_module(args.env_episodes)
    print(f"env module: core:NumberGuess-v0, {args.env_episodes} episodes, {turns} turns, median per turn")
    print(f"  RL2Episodes  {module * 1e6:9.1f} us")
    print(f"  bare env     {bare * 1e6:9.1f} us   module / bare x{module / bare:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
