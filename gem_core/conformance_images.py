"""The conformance suite on image episodes: multi-turn, earlier images kept, token for token.

The text suite (:mod:`gem_core.conformance`) holds every adapter to the engine's numbers;
this module does the same for episodes whose observations hold images, for the adapters
that carry images to their trainer (TRL, verl). The env is NumberGuess with a picture in
every observation (:class:`PictureNumberGuess`, registered as :data:`PICTURE_ENV_ID`; its
PNGs are written with ``zlib`` alone); the model's side is a real ``Qwen2VLProcessor``
(:func:`gem_core.testing_models.build_tiny_vlm_processor`), which places each image's
tokens. A record adds to the text fields the images of the sequence in token order (by
SHA-256) and, where the adapter hands its trainer pixel features, their grid and a digest
of the values, compared with the processor's own encoding of the same images.

Adapters that cannot carry images refuse an image episode with
:func:`refuse_images`: an :class:`~gem_core.errors.ImageError` naming the adapter.

Needs the ``test`` extra (transformers, Pillow for the processor's image processor).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gem_core.conformance import (
    ConformanceCase,
    ConformanceRecord,
    _first_mismatch,
    _rebn_per_episode,
    _reply_bisect,
    _reply_cut,
    record_from_episode,
    scripted_generation,
)
from gem_core.core import ResetReturn, StepReturn
from gem_core.episode import EpisodeEngine, EpisodeJob, EpisodeLimits, Generation, TurnRequest
from gem_core.errors import ImageError
from gem_core.multimodal import Content, Image, Observation
from gem_core.rl.types import Episode
from gem_core.testing import NumberGuessEnv

__all__ = [
    "IMAGE_CASES",
    "PICTURE_ENV_ID",
    "ImageConformanceCase",
    "ImageConformanceRecord",
    "PictureNumberGuess",
    "assert_image_conformant",
    "image_features_digest",
    "image_reference_episodes",
    "image_reference_records",
    "picture_png",
    "refuse_images",
]

#: The id of :class:`PictureNumberGuess` (registered by gem_core itself, next to ``core:NumberGuess-v0``).
PICTURE_ENV_ID = "core:PictureNumberGuess-v0"


def picture_png(seed: int, turn: int, size: int = 28) -> bytes:
    """A ``size`` x ``size`` RGB PNG whose pixels depend on ``seed`` and ``turn`` (written with zlib alone)."""
    rng = np.random.default_rng([seed, turn])
    pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    rows = b"".join(b"\x00" + pixels[y].tobytes() for y in range(size))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class PictureNumberGuess(NumberGuessEnv):
    """NumberGuess whose every observation is a picture (new each turn) followed by the text."""

    def _with_picture(self, text: str) -> Observation:
        return Content(Image.from_bytes(picture_png(self._picture_seed, self.turn)), text)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        text, info = super().reset(seed=seed, options=options)
        self._picture_seed = seed or 0
        return self._with_picture(str(text)), info

    def step(self, action: str) -> StepReturn:
        text, reward, terminated, truncated, info = super().step(action)
        return self._with_picture(str(text)), reward, terminated, truncated, info


@dataclass(frozen=True)
class ImageConformanceCase(ConformanceCase):
    """A case played with a vision-language model's processor (:meth:`processor`) instead of a text tokenizer."""

    def processor(self) -> Any:
        """The case's processor (a real ``Qwen2VLProcessor``, built locally, cached)."""
        return _processor()

    def tokenizer(self) -> Any:
        """The processor's tokenizer (the scripted policy decodes prompts with it)."""
        return self.processor().tokenizer


@functools.cache
def _processor() -> Any:
    from gem_core.testing_models import build_tiny_vlm_processor

    return build_tiny_vlm_processor()


#: The image scenarios: several turns with a new picture each (every earlier one stays in the
#: context), and a reply cut at the per-turn limit in the middle of an image episode.
IMAGE_CASES: tuple[ImageConformanceCase, ...] = (
    ImageConformanceCase(
        name="picture-bisect",
        env_id=PICTURE_ENV_ID,
        seeds=(0, 1, 2),
        template="chatml_vision",
        limits=EpisodeLimits(max_turn_tokens=24, max_episode_tokens=512),
        gamma=0.9,
        reply=_reply_bisect,
    ),
    ImageConformanceCase(
        name="picture-cut-generation",
        env_id=PICTURE_ENV_ID,
        seeds=(4, 5),
        template="chatml_vision",
        limits=EpisodeLimits(max_turn_tokens=12, max_episode_tokens=512),
        gamma=1.0,
        reply=_reply_cut,
    ),
)


@dataclass
class ImageConformanceRecord(ConformanceRecord):
    """A :class:`~gem_core.conformance.ConformanceRecord` with the sequence's images.

    Attributes:
        images: SHA-256 of each image whose tokens ``input_ids`` hold, in token order.
        image_grid_thw: The pixel features' grid, one row per image, as the adapter hands
            them to its trainer; ``None`` when the adapter leaves encoding to the trainer.
        pixel_digest: :func:`image_features_digest` of those features' values (or ``None``).
    """

    images: list[str] | None = None
    image_grid_thw: list[list[int]] | None = None
    pixel_digest: str | None = None


def image_features_digest(pixel_values: Any) -> str:
    """SHA-256 of pixel features as float32 (the values, not their container)."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(pixel_values, dtype=np.float32)).tobytes()).hexdigest()


def _reference_features(images: Sequence[Image]) -> tuple[list[list[int]], str]:
    from gem_core.vision import pil_loader

    out = _processor().image_processor(images=[pil_loader(i) for i in images], return_tensors="np")
    return np.asarray(out["image_grid_thw"]).tolist(), image_features_digest(out["pixel_values"])


def image_reference_episodes(case: ImageConformanceCase) -> list[Episode]:
    """The case played by the engine with the case's processor (one batched call per turn)."""
    engine = EpisodeEngine(processor=case.processor(), limits=case.limits)
    tokenizer = case.tokenizer()
    jobs = [EpisodeJob(env=case.make_env(), env_id=case.env_id, seed=seed) for seed in case.seeds]

    def generate(requests: list[TurnRequest]) -> list[Generation]:
        return [scripted_generation(case, tokenizer, r.prompt_ids or [], r.max_tokens) for r in requests]

    try:
        return [session.episode() for session in engine.play_batch(jobs, generate)]
    finally:
        for job in jobs:
            job.env.close()


def image_reference_records(case: ImageConformanceCase) -> list[ImageConformanceRecord]:
    """The expected records of ``case``, in seed order, with ReBN advantages and the images' features.

    Computed once per case and process (the case is a pure function of its fields); each call
    returns fresh copies.
    """
    key = repr(case)
    if key not in _REFERENCE:
        _REFERENCE[key] = _image_reference_records(case)
    return copy.deepcopy(_REFERENCE[key])


#: :func:`image_reference_records` per case (by its repr: cases hold dicts, so they do not hash).
_REFERENCE: dict[str, list[ImageConformanceRecord]] = {}


def _image_reference_records(case: ImageConformanceCase) -> list[ImageConformanceRecord]:
    episodes = image_reference_episodes(case)
    records = []
    for episode, advantages in zip(episodes, _rebn_per_episode(episodes, case.gamma), strict=True):
        text = record_from_episode(episode, advantages.tolist())
        images = list(episode.turns[-1].prompt_images or [])
        grid, digest = _reference_features(images) if images else ([], None)
        records.append(
            ImageConformanceRecord(
                **vars(text), images=[i.sha256 for i in images], image_grid_thw=grid, pixel_digest=digest
            )
        )
    return records


def assert_image_conformant(
    case: ImageConformanceCase,
    records: Sequence[ImageConformanceRecord],
    *,
    check_advantages: bool = True,
    check_features: bool = True,
) -> None:
    """Check an adapter's image records against the engine's, in seed order.

    Besides the text suite's fields, the images (in token order) must be the same, and
    with ``check_features`` the pixel features' grid and values.

    Raises:
        AssertionError: Naming the case, the episode, the field and the first difference.
    """
    expected = image_reference_records(case)
    if len(records) != len(expected):
        raise AssertionError(f"[{case.name}] {len(records)} records, expected {len(expected)} (one per seed)")
    fields = ["actions", "rewards", "terminated", "truncated", "input_ids", "loss_mask", "images"]
    fields += ["token_advantages"] * check_advantages + ["image_grid_thw", "pixel_digest"] * check_features
    for index, (got, want) in enumerate(zip(records, expected, strict=True)):
        where = f"[{case.name}] episode {index} ({want.start_state_id})"
        if got.start_state_id != want.start_state_id:
            raise AssertionError(f"{where}: start_state_id {got.start_state_id!r} != {want.start_state_id!r}")
        for name in fields:
            mine, theirs = getattr(got, name), getattr(want, name)
            if mine is None or theirs is None:
                if mine is not theirs:
                    raise AssertionError(f"{where}: {name}: {mine!r} != {theirs!r}")
                continue
            if isinstance(theirs, str):
                problem = None if mine == theirs else f"{mine!r} != {theirs!r}"
            else:
                problem = _first_mismatch(mine, theirs, close=name in ("rewards", "token_advantages"))
            if problem:
                raise AssertionError(f"{where}: {name}: {problem}")


def refuse_images(adapter: str, observation: Observation, *, fix: str = "") -> None:
    """Raise :class:`~gem_core.errors.ImageError` naming ``adapter`` when ``observation`` holds an image.

    For adapters whose trainer takes token ids only: an image would otherwise be dropped or
    reach the model as text.

    Args:
        adapter: The adapter's name (e.g. ``"gem-rl2"``).
        observation: An env's observation.
        fix: What the user can do instead, appended to the message.
    """
    if isinstance(observation, Content) and observation.images:
        raise ImageError(
            f"{adapter} cannot carry images to its trainer, and an observation holds {len(observation.images)} "
            "image(s). Train image envs through gem-trl or gem-verl with the VLM's processor"
            + (f"; {fix}" if fix else "")
        )
