"""Images in episodes: bytes and tokens per episode, and the episode engine's cost per turn with and without images.

For each ``vision:*`` env, episodes are played by a scripted policy (the right answer, or the game's
expert move) through the episode engine with a tiny Qwen2-VL processor (built in code, no hub), and
written to a gem eval trace. Printed per env: PNG bytes per image, distinct images and their bytes
per episode, the trace's bytes per episode (JSON lines + its image folder: each image once), context
tokens and image tokens per episode.

The engine's cost per turn (the time of ``EpisodeEngine.play_batch`` less the env's reset and step
time, over turns) is measured on the same Sudoku, as text (``game:Sudoku-v0-easy``, the ChatML test
tokenizer) and as a picture (``vision:Sudoku-v0-easy``, the processor), with the same moves.

    python bench/vision.py [--episodes 20]

Needs gem-vision (Pillow), torch and transformers (the processor).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import gem_core
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest
from gem_core.eval.traces import TraceWriter, image_folder
from gem_core.testing_models import build_tiny_vlm_processor
from gem_core.testing_tokenizers import build_chat_tokenizer
from gem_core.vision import merge_image_inputs


def answer_policy(tokenizer: Any, envs: list[Any]) -> Any:
    """Each request answered with its env's right answer (single turn) or expert move (Sudoku)."""

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        out = []
        for request in requests:
            env = envs[request.episode_index].unwrapped
            if hasattr(env, "expert_action"):
                action = env.expert_action()
            else:
                from gem_vision._base import answer_text

                action = f"\\boxed{{{answer_text(env.problem.answer)}}}"
            ids = [*tokenizer.encode(action, add_special_tokens=False), tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids))
        return out

    return generate


def play(engine: EpisodeEngine, tokenizer: Any, env_id: str, episodes: int) -> tuple[list[Any], float]:
    """Sessions of ``episodes`` episodes (one batch) and the engine's seconds per turn."""
    envs = [gem_core.make(env_id) for _ in range(episodes)]
    jobs = [EpisodeJob(env, env_id=env_id, seed=seed) for seed, env in enumerate(envs)]
    started = time.perf_counter()
    sessions = engine.play_batch(jobs, answer_policy(tokenizer, envs))
    total = time.perf_counter() - started
    env_time = sum(s.reset_s + sum(s.env_seconds) for s in sessions)
    turns = sum(len(s.turns) for s in sessions)
    return sessions, (total - env_time) / max(turns, 1)


def sizes(env_id: str, sessions: list[Any], processor: Any) -> dict[str, float]:
    """Per-episode bytes (images, trace) and tokens."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.jsonl")
        with TraceWriter(trace) as writer:
            for s in sessions:
                record = {"env_id": env_id, "seed": s.seed, "episode_return": 0.0, "success": False}
                writer.write({**record, "num_turns": len(s.turns), "completion_tokens": 0, "messages": s.messages})
        folder = image_folder(trace)
        stored = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        trace_bytes = os.path.getsize(trace) + stored
    n = len(sessions)
    images = [i for s in sessions for i in s.images]
    pixels = [merge_image_inputs(s.image_inputs)["pixel_values"].nbytes for s in sessions if s.image_inputs]
    image_tokens = sum(sum(1 for t in (s.context or []) if t == processor.image_token_id) for s in sessions)
    return {
        "png_bytes_per_image": statistics.mean(len(i.read()) for i in images),
        "images_per_episode": len(images) / n,
        "trace_bytes_per_episode": trace_bytes / n,
        "pixel_feature_bytes_per_episode": statistics.mean(pixels),
        "context_tokens_per_episode": sum(len(s.context or []) for s in sessions) / n,
        "image_tokens_per_episode": image_tokens / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    processor = build_tiny_vlm_processor()
    vision = EpisodeEngine(processor=processor, max_turns=8)
    print(
        f"{'env':<24} {'png B/img':>9} {'img/ep':>6} {'trace B/ep':>10} {'pixels B/ep':>11} "
        f"{'tokens/ep':>9} {'img tok/ep':>10}"
    )
    for env_id in ("vision:Geometry-v0", "vision:BarChart-v0", "vision:PieChart-v0", "vision:Sudoku-v0-easy"):
        sessions, _ = play(vision, processor.tokenizer, env_id, args.episodes)
        row = sizes(env_id, sessions, processor)
        print(
            f"{env_id:<24} {row['png_bytes_per_image']:>9.0f} {row['images_per_episode']:>6.1f} "
            f"{row['trace_bytes_per_episode']:>10.0f} {row['pixel_feature_bytes_per_episode']:>11.0f} "
            f"{row['context_tokens_per_episode']:>9.0f} {row['image_tokens_per_episode']:>10.0f}"
        )
    text_tokenizer = build_chat_tokenizer()
    text = EpisodeEngine(text_tokenizer, max_turns=8)
    play(text, text_tokenizer, "game:Sudoku-v0-easy", 2)  # warm-up (template probe, imports)
    play(vision, processor.tokenizer, "vision:Sudoku-v0-easy", 2)
    costs: dict[str, list[float]] = {"text": [], "image": []}
    for _ in range(3):  # alternate, so the shared machine's load falls on both alike
        costs["text"].append(play(text, text_tokenizer, "game:Sudoku-v0-easy", args.episodes)[1])
        costs["image"].append(play(vision, processor.tokenizer, "vision:Sudoku-v0-easy", args.episodes)[1])
    t, i = statistics.median(costs["text"]), statistics.median(costs["image"])
    print(f"\nengine cost per turn (median of 3 batches of {args.episodes} Sudoku episodes, env time excluded):")
    print(f"  text board  (game:Sudoku-v0-easy, tokenizer):   {t * 1e3:8.2f} ms")
    print(f"  image board (vision:Sudoku-v0-easy, processor): {i * 1e3:8.2f} ms  ({i / t:.1f}x)")


if __name__ == "__main__":
    main()
