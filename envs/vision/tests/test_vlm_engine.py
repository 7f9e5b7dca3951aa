"""The episode engine, token in / token out with images, on a tiny Qwen2-VL (random weights, built from a config).

The model's own processor places the image tokens; each image is processed once, when its
message enters the context; earlier images stay; the ids and pixel features are the same
whether the observations come from the env or from a gem eval trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gem_core
import numpy as np
import pytest
import torch
from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.episode import EpisodeEngine, EpisodeJob, Generation, TurnRequest, cut_at_stop
from gem_core.errors import ImageError
from gem_core.multimodal import Content, Image, message_images
from gem_core.testing_models import build_tiny_vlm, build_tiny_vlm_processor
from gem_core.vision import image_token_mask, merge_image_inputs, pil_loader

ACTIONS = [r"\boxed{1 1 1}", r"\boxed{2 2 2}", r"\boxed{3 3 3}"]

# the tiny VLM and its processor are built once for the file: under pytest-xdist, on one worker
pytestmark = pytest.mark.xdist_group("vision-tiny-vlm")


@pytest.fixture(scope="module")
def processor() -> Any:
    return build_tiny_vlm_processor()


@pytest.fixture(scope="module")
def model(processor: Any) -> Any:
    return build_tiny_vlm(processor)


class Counting:
    """The processor, counting the images each call encodes (to show no image is processed twice)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.image_token_id = inner.image_token_id
        self.images_per_call: list[int] = []

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.apply_chat_template(*args, **kwargs)

    def __call__(self, *args: Any, images: Any = None, **kwargs: Any) -> Any:
        self.images_per_call.append(len(images or []))
        return self.inner(*args, images=images, **kwargs)


def scripted(processor: Any, expert: Any = None) -> Any:
    """A batched generate that answers ACTIONS in turn (or the env's expert move), as ids plus the stop token."""
    tokenizer = processor.tokenizer

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        out = []
        for r in requests:
            action = expert.expert_action() if expert is not None else ACTIONS[r.turn]
            ids = [*tokenizer.encode(action, add_special_tokens=False), tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids))
        return out

    return generate


def image_tokens(ids: Any, processor: Any) -> int:
    return int(np.sum(np.asarray(list(ids)) == processor.image_token_id))


def play(processor: Any, env: Env, seed: int = 3, expert: bool = False) -> Any:
    engine = EpisodeEngine(processor=processor, max_turns=3)
    generate = scripted(processor, env.unwrapped if expert else None)
    (session,) = engine.play_batch([EpisodeJob(env, env_id="vision:Sudoku-v0-easy", seed=seed)], generate)
    return session


def test_images_are_placed_by_the_processor_once_each_and_kept(processor: Any) -> None:
    counting = Counting(processor)
    session = play(counting, gem_core.make("vision:Sudoku-v0-easy"), expert=True)
    assert len(session.turns) == 3
    assert counting.images_per_call == [1, 1, 1]  # one call per board; the last board ends the episode unseen
    assert session.images == [t.observation.images[0] for t in session.turns]
    assert len(set(session.images)) == 3  # expert moves: three different boards, in token order
    # earlier images stay: each turn's prompt holds the images of every turn before it
    assert [len(t.prompt_images) for t in session.turns] == [1, 2, 3]
    grids = merge_image_inputs(session.image_inputs)["image_grid_thw"]
    assert image_tokens(session.context, processor) == int(grids.prod(axis=1).sum()) // 4
    for earlier, later in zip(session.turns, session.turns[1:], strict=False):  # never re-rendered
        assert list(later.prompt_token_ids[: len(earlier.prompt_token_ids)]) == list(earlier.prompt_token_ids)


def test_the_context_equals_a_full_render_through_the_processor(processor: Any) -> None:
    session = play(processor, gem_core.make("vision:Sudoku-v0-easy"))
    last = session.turns[-1]
    history = list(last.prompt_token_ids)
    text = processor.apply_chat_template(
        [dict(m) for m in session.messages[: 2 * len(session.turns) - 1]], tokenize=False, add_generation_prompt=True
    )
    images = [image for m in session.messages for image in message_images(m["content"])][: len(last.prompt_images)]
    from gem_core.vision import pil_loader

    full = processor(text=[text], images=[pil_loader(i) for i in images], return_tensors="np")
    assert history == full["input_ids"][0].tolist()
    merged = merge_image_inputs(session.image_inputs)
    assert np.array_equal(merged["pixel_values"], full["pixel_values"])
    assert np.array_equal(merged["image_grid_thw"], full["image_grid_thw"])


def test_the_tiny_vlm_plays_and_reads_its_whole_context(processor: Any, model: Any) -> None:
    eos = processor.tokenizer.eos_token_id
    image_token = processor.image_token_id

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        out = []
        for request in requests:
            inputs = merge_image_inputs(list(request.image_inputs))
            ids = torch.tensor([request.prompt_ids])
            with torch.no_grad():
                sampled = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    pixel_values=torch.from_numpy(inputs["pixel_values"]),
                    image_grid_thw=torch.from_numpy(inputs["image_grid_thw"]),
                    mm_token_type_ids=torch.from_numpy(image_token_mask(request.prompt_ids, image_token))[None],
                    max_new_tokens=request.max_tokens,
                    do_sample=False,
                )
            out.append(cut_at_stop(sampled[0, ids.shape[1] :].tolist(), {eos}, request.max_tokens))
        return out

    # the boards of a scripted game, replayed whatever the random model says (a game would end at its
    # first format error): three turns, three images in the context
    boards = play(processor, gem_core.make("vision:Sudoku-v0-easy"), seed=1, expert=True).messages
    engine = EpisodeEngine(processor=processor, max_turns=3, max_turn_tokens=8)
    (session,) = engine.play_batch([EpisodeJob(TraceReplay(boards), seed=1)], generate)
    assert len(session.turns) == 3 and all(t.action_token_ids for t in session.turns)
    assert len(session.images) == 3
    # the whole episode's context goes through the model in one forward: image tokens and features agree
    inputs = merge_image_inputs(session.image_inputs)
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([session.context]),
            pixel_values=torch.from_numpy(inputs["pixel_values"]),
            image_grid_thw=torch.from_numpy(inputs["image_grid_thw"]),
            mm_token_type_ids=torch.from_numpy(image_token_mask(session.context, image_token))[None],
        ).logits
    assert logits.shape[1] == len(session.context) and torch.isfinite(logits).all()


class TraceReplay(Env):
    """Replays a trace's user messages as observations (images loaded from the trace's image folder)."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.observations = [m["content"] for m in messages if m["role"] == "user"]
        self.at = 0

    def _obs(self) -> Any:
        content = self.observations[self.at]
        if isinstance(content, str):
            return content
        return Content([p["text"] if p["type"] == "text" else p["image"] for p in content])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        self.at = 0
        return self._obs(), {}

    def step(self, action: str) -> StepReturn:
        self.at = min(self.at + 1, len(self.observations) - 1)  # the engine's max_turns ends the replay
        return self._obs(), 0.0, False, False, {}


def test_the_same_numbers_from_the_env_or_from_a_trace(processor: Any, tmp_path: Path) -> None:
    from gem_core.eval.traces import TraceWriter, load_images, read_trace

    live = play(processor, gem_core.make("vision:Sudoku-v0-easy"), seed=5)
    trace = tmp_path / "trace.jsonl"
    with TraceWriter(str(trace)) as writer:
        record = {"env_id": "vision:Sudoku-v0-easy", "seed": 5, "episode_return": 0.0, "success": False}
        writer.write({**record, "num_turns": 3, "completion_tokens": 0, "messages": live.messages})
    (stored,) = [load_images(r, trace) for r in read_trace(trace)]
    assert all(isinstance(i.path, str) for m in stored["messages"] for i in message_images(m["content"]))
    replayed = play(processor, TraceReplay(stored["messages"]), seed=5)
    assert replayed.context == live.context
    for key in ("pixel_values", "image_grid_thw"):
        assert np.array_equal(
            merge_image_inputs(replayed.image_inputs)[key], merge_image_inputs(live.image_inputs)[key]
        )


def test_a_processor_that_cannot_place_the_image_is_an_image_error(processor: Any) -> None:
    engine = EpisodeEngine(processor=processor)
    text_only = [{"role": "user", "content": "no placeholder here"}]
    with pytest.raises(ImageError, match="placeholder"):
        engine.image_encoder.encode_with_images(  # type: ignore[union-attr]
            engine.renderer.render(text_only),  # type: ignore[union-attr]
            [gem_core.make("vision:Geometry-v0").reset(seed=0)[0].images[0]],
        )


def test_tokenizer_and_processor_together_are_refused(processor: Any) -> None:
    from gem_core.errors import ConfigError

    with pytest.raises(ConfigError, match="not both"):
        EpisodeEngine(processor.tokenizer, processor=processor)


def test_images_reach_request_and_records_in_token_order(processor: Any) -> None:
    seen: list[list[Image]] = []

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        seen.append(list(requests[0].images))
        return scripted(processor)(requests)

    engine = EpisodeEngine(processor=processor, max_turns=2)
    (session,) = engine.play_batch([EpisodeJob(gem_core.make("vision:Sudoku-v0-easy"), seed=2)], generate)
    assert [len(s) for s in seen] == [1, 2]
    assert seen[1][0] == session.turns[0].observation.images[0]


def test_training_layouts_carry_the_images_in_token_order(processor: Any) -> None:
    from gem_core.rl.layouts import episode_to_sequence, episode_to_transitions

    session = play(processor, gem_core.make("vision:Sudoku-v0-easy"), seed=4, expert=True)
    episode = session.episode()
    sequence = episode_to_sequence(episode)
    assert sequence.input_ids.tolist() == session.context
    assert sequence.images == session.images
    assert image_tokens(sequence.input_ids, processor) == image_tokens(session.context, processor)
    samples = episode_to_transitions(episode, [0.0] * len(episode.turns))
    assert [len(s.prompt_images or []) for s in samples] == [1, 2, 3]
    for sample in samples:  # each sample's images are exactly those whose tokens its prompt holds
        features = processor.image_processor([pil_loader(i) for i in sample.prompt_images or []])
        assert image_tokens(sample.prompt_ids, processor) == int(np.prod(features["image_grid_thw"], axis=1).sum()) // 4
