"""gem_core.conformance_images: the image suite's reference, what it catches, and the refusal for text-only adapters."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

import gem_core
from gem_core.conformance import scripted_generation
from gem_core.conformance_images import (
    IMAGE_CASES,
    PICTURE_ENV_ID,
    ImageConformanceCase,
    assert_image_conformant,
    image_reference_episodes,
    image_reference_records,
    refuse_images,
)
from gem_core.episode import EpisodeEngine, Generation, TurnRequest
from gem_core.errors import ImageError
from gem_core.multimodal import Content
from gem_core.testing import check_env


def test_the_picture_env_passes_check_env() -> None:
    check_env(gem_core.make(PICTURE_ENV_ID), env_factory=lambda: gem_core.make(PICTURE_ENV_ID))


@pytest.mark.parametrize("case", IMAGE_CASES, ids=lambda c: c.name)
def test_the_reference_keeps_every_earlier_image_in_token_order(case: ImageConformanceCase) -> None:
    records = image_reference_records(case)
    episodes = image_reference_episodes(case)
    assert max(e.num_turns for e in episodes) > 1
    for record, episode in zip(records, episodes, strict=True):
        shown = [t.observation.images[0].sha256 for t in episode.turns]  # one new picture per turn
        assert record.images == shown
        assert record.image_grid_thw is not None and len(record.image_grid_thw) == len(shown)
        image_tokens = record.input_ids.count(case.processor().image_token_id)
        assert image_tokens == sum(t * h * w for t, h, w in record.image_grid_thw) // 4


@pytest.mark.parametrize("case", IMAGE_CASES, ids=lambda c: c.name)
def test_the_engines_single_episode_path_conforms(case: ImageConformanceCase) -> None:
    """EpisodeEngine.play (one episode at a time, async generate) against the batched reference."""
    from gem_core.conformance import record_from_episode
    from gem_core.conformance_images import ImageConformanceRecord, _reference_features

    engine = EpisodeEngine(processor=case.processor(), limits=case.limits)
    tokenizer = case.tokenizer()

    async def generate(request: TurnRequest) -> Generation:
        return scripted_generation(case, tokenizer, request.prompt_ids or [], request.max_tokens)

    reference = image_reference_records(case)
    records = []
    for seed, want in zip(case.seeds, reference, strict=True):
        session = asyncio.run(engine.play(case.make_env(), generate, env_id=case.env_id, seed=seed))
        episode = session.episode()
        text = record_from_episode(episode)
        grid, digest = _reference_features(session.images)
        fields = {**vars(text), "token_advantages": want.token_advantages}  # ReBN is over the whole case
        records.append(
            ImageConformanceRecord(
                **fields, images=[i.sha256 for i in session.images], image_grid_thw=grid, pixel_digest=digest
            )
        )
    assert_image_conformant(case, records)


FORGERIES = {
    "image-dropped": lambda r: dataclasses.replace(r, images=r.images[:-1]),
    "images-swapped": lambda r: dataclasses.replace(r, images=r.images[::-1]),
    "grid-changed": lambda r: dataclasses.replace(r, image_grid_thw=[[1, 2, 2]] * len(r.image_grid_thw)),
    "pixels-changed": lambda r: dataclasses.replace(r, pixel_digest="0" * 64),
    "features-missing": lambda r: dataclasses.replace(r, image_grid_thw=None, pixel_digest=None),
    "image-tokens-dropped": lambda r: dataclasses.replace(
        r, input_ids=[t for t in r.input_ids if t != IMAGE_CASES[0].processor().image_token_id]
    ),
}


@pytest.mark.parametrize("forge", list(FORGERIES), ids=list(FORGERIES))
def test_the_suite_catches_a_forged_image_record(forge: str) -> None:
    case = IMAGE_CASES[0]
    records = image_reference_records(case)
    assert_image_conformant(case, records)
    assert len(set(records[0].images)) == 3  # seed 0 plays three turns: three different pictures
    forged = [FORGERIES[forge](records[0]), *records[1:]]
    with pytest.raises(AssertionError, match=r"\[picture-bisect\] episode 0"):
        assert_image_conformant(case, forged)


def test_features_are_not_checked_when_the_adapter_leaves_encoding_to_its_trainer() -> None:
    case = IMAGE_CASES[0]
    records = [dataclasses.replace(r, image_grid_thw=None, pixel_digest=None) for r in image_reference_records(case)]
    assert_image_conformant(case, records, check_features=False)


def test_an_adapter_without_images_refuses_them_by_name() -> None:
    observation, _ = gem_core.make(PICTURE_ENV_ID).reset(seed=0)
    assert isinstance(observation, Content)
    with pytest.raises(ImageError, match="gem-example cannot carry images.*1 image.*gem-trl or gem-verl.*; try this"):
        refuse_images("gem-example", observation, fix="try this")
    refuse_images("gem-example", "text only")  # no image: nothing to refuse
