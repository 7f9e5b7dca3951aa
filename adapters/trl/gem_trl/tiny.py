"""A tiny causal LM and chat tokenizer built locally, for tests, the demo and benchmarks.

Nothing is downloaded: the tokenizer is the core's test tokenizer (a byte-level BPE
trained in code, with a ChatML template) and the model a 2-layer Qwen2 made from a
config with random weights. It learns nothing useful; it makes a real
``GRPOTrainer`` run end to end on a CPU in seconds.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_tiny_model", "build_tiny_tokenizer", "env_corpus", "imitate", "warm_up"]


def build_tiny_tokenizer(
    env_id: str | None = None,
    *,
    vocab_size: int | None = None,
    episodes: int = 64,
    env_kwargs: dict[str, Any] | None = None,
) -> Any:
    """A ChatML test tokenizer (``eos="<|im_end|>"``, ``pad="<|endoftext|>"``), trained in code.

    Args:
        env_id: When given, the BPE merges are learned from this env's own messages and
            moves (``episodes`` games of random legal moves), so that each of its words and
            numbers is one token (a number is the same token in a message and in a move):
            episodes get several times shorter, which a tiny model
            trains on faster and attends over more easily. Other text still encodes, byte
            by byte. ``None``: the core's fixed test corpus.
        vocab_size: BPE vocabulary size; defaults to 400 (core corpus) or 1000 (env corpus).
        episodes: Random games whose text makes the env corpus.
        env_kwargs: Env constructor overrides (as for ``gem_core.make``).
    """
    from gem_core.testing_tokenizers import build_chat_tokenizer

    if env_id is None:
        return build_chat_tokenizer("chatml", vocab_size=vocab_size or 400)
    return build_chat_tokenizer(
        "chatml",
        vocab_size=vocab_size or 1000,
        corpus=env_corpus(env_id, episodes=episodes, env_kwargs=env_kwargs),
        split_digits=True,
    )


def env_corpus(
    env_id: str, *, episodes: int = 64, seed: int = 0, env_kwargs: dict[str, Any] | None = None
) -> list[str]:
    """Texts of ``episodes`` games of ``env_id`` played with random legal moves: observations and moves."""
    import gem_core

    texts: list[str] = ["system\n", "user\n", "assistant\n"]  # the chat template's role headers
    env = gem_core.make(env_id, **(env_kwargs or {}))
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            texts.append(observation)
            done = False
            while not done:
                action = env.sample_random_action()
                observation, _, terminated, truncated, _ = env.step(action)
                texts += [action, observation]
                done = terminated or truncated
    finally:
        env.close()
    return texts


def build_tiny_model(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Any:
    """A randomly initialised Qwen2 causal LM sized for ``tokenizer``.

    Args:
        tokenizer: Gives the vocabulary size and the special token ids.
        seed: Seeds the weight initialisation (torch's global RNG, restored afterwards).
        hidden_size: Width of the model.
        num_layers: Number of decoder layers.
    """
    from gem_core.testing_models import build_tiny_model as tiny_causal_lm

    return tiny_causal_lm(
        tokenizer,
        seed=seed,
        generation_tokens=True,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def warm_up(
    model: Any,
    tokenizer: Any,
    env_id: str,
    *,
    steps: int = 60,
    batch_size: int = 8,
    learning_rate: float = 3e-3,
    max_turns: int = 1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> list[float]:
    """Teach a random model an env's answer format by imitating random legal moves (a short SFT).

    A randomly initialised model almost never writes a well-formed action, so every
    episode is one format error and RL has nothing to compare. A few dozen supervised
    steps on episodes played with ``env.sample_random_action()`` fix the format (not the
    play), which gives RL episodes of several turns with rewards that differ.

    Episodes are played by the core's episode engine and laid out token in, token out;
    the loss covers exactly the tokens the layout masks in. ``max_turns=1`` (first moves
    only) keeps the sequences short; the format carries over to later turns. The
    demo warms up on whole episodes, so that later turns start at chance too.

    Args:
        model: The causal LM to train in place.
        tokenizer: Its chat tokenizer.
        env_id: Env whose ``sample_random_action`` gives the moves.
        steps: Optimizer steps.
        batch_size: Episodes per step (``4 * batch_size`` episodes are played once and sampled from).
        learning_rate: AdamW's learning rate.
        max_turns: Turns per warm-up episode.
        seed: First env seed, and the seed of the batch sampling.
        env_kwargs: Env constructor overrides (as for ``gem_core.make``).

    Returns:
        The training loss of each step.
    """
    import gem_core
    from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
    from gem_core.rl.layouts import episode_to_sequence

    kwargs = env_kwargs or {}
    jobs = [EpisodeJob(env=gem_core.make(env_id, **kwargs), seed=s) for s in range(seed, seed + 4 * batch_size)]

    def random_legal_moves(requests: list[TurnRequest]) -> list[Generation]:
        moves = [jobs[r.episode_index].env.sample_random_action() for r in requests]
        return [
            Generation(token_ids=[*tokenizer.encode(m, add_special_tokens=False), tokenizer.eos_token_id])
            for m in moves
        ]

    sessions = EpisodeEngine(tokenizer, max_turns=max_turns).play_batch(jobs, random_legal_moves)
    sequences = [episode_to_sequence(session.episode()) for session in sessions]
    for job in jobs:
        job.env.close()

    return imitate(
        model, tokenizer, sequences, steps=steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed
    )


def imitate(
    model: Any,
    tokenizer: Any,
    sequences: list[Any],
    *,
    steps: int,
    batch_size: int = 8,
    learning_rate: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Supervised steps on token-in/token-out sequences (``episode_to_sequence``): the loss covers their loss mask.

    Each step draws ``batch_size`` sequences without replacement (all of them when there are fewer).

    Returns:
        The training loss of each step.
    """
    import numpy as np
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    rng = np.random.default_rng(seed)
    batch_size = min(batch_size, len(sequences))
    losses = []
    model.train()
    for _ in range(steps):
        batch = [sequences[i] for i in rng.choice(len(sequences), size=batch_size, replace=False)]
        width = max(s.num_tokens for s in batch)
        input_ids = torch.full((batch_size, width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((batch_size, width), -100, dtype=torch.long)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for row, s in enumerate(batch):
            ids = torch.from_numpy(s.input_ids)
            input_ids[row, : s.num_tokens] = ids
            attention[row, : s.num_tokens] = 1
            labels[row, : s.num_tokens] = torch.where(torch.from_numpy(s.loss_mask).bool(), ids, -100)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().item())
    return losses
