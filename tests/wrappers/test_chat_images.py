"""The chat-history wrapper with image observations: a text-only chat template is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from gem_core.core import Env, ResetReturn, StepReturn
from gem_core.errors import ImageError
from gem_core.multimodal import Content, Image
from gem_core.testing_tokenizers import build_chat_tokenizer
from gem_core.wrappers.chat import ChatHistory, renders_image_parts
from tests.test_multimodal import png

#: A text template that prints a message's content as it is: a list of parts would become its Python repr.
VERBATIM = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"


class Pictures(Env):
    """Text first, a picture from the second observation on (so the refusal may come at reset or at a step)."""

    def __init__(self, picture_at_reset: bool = True) -> None:
        self.picture_at_reset = picture_at_reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetReturn:
        super().reset(seed=seed)
        if self.picture_at_reset:
            return Content("What colour?", Image.from_bytes(png())), {}
        return "Ready?", {}

    def step(self, action: str) -> StepReturn:
        return Content(Image.from_bytes(png(4, 4)), "And now?"), 0.0, False, False, {}


def tokenizer(template: str) -> Any:
    if template == "verbatim":
        tok = build_chat_tokenizer("chatml")
        tok.chat_template = VERBATIM
        return tok
    return build_chat_tokenizer(template)


@pytest.mark.parametrize("template", ["chatml", "chatml_drop_think", "chatml_tools", "verbatim"])
@pytest.mark.parametrize("mode", ["chat", "chat_first_turn"])
def test_a_text_template_with_an_image_at_reset_is_an_image_error(template: str, mode: str) -> None:
    env = ChatHistory(Pictures(), mode=mode, tokenizer=tokenizer(template))
    with pytest.raises(ImageError, match="renders text only.*processor as tokenizer=.*mode='observation'"):
        env.reset(seed=0)


@pytest.mark.parametrize("incremental", [False, True], ids=["whole-history", "incremental"])
def test_a_text_template_with_an_image_at_a_step_is_an_image_error(incremental: bool) -> None:
    env = ChatHistory(Pictures(picture_at_reset=False), mode="chat", tokenizer=tokenizer("chatml"), incremental=True)
    env.incremental = incremental
    first, _ = env.reset(seed=0)
    assert isinstance(first, str) and "Ready?" in first  # text alone renders as before
    with pytest.raises(ImageError, match="1 image"):
        env.step("blue")


@pytest.mark.parametrize(
    ("template", "renders"),
    [("chatml", False), ("verbatim", False), ("chatml_vision", True)],
    ids=["chatml", "verbatim-repr", "chatml_vision"],
)
def test_the_probe_tells_image_templates_apart(template: str, renders: bool) -> None:
    assert renders_image_parts(tokenizer(template)) is renders


def test_a_vision_template_renders_the_images_in_every_mode_that_uses_it() -> None:
    tok = tokenizer("chatml_vision")
    env = ChatHistory(Pictures(), mode="chat", tokenizer=tok)
    first, _ = env.reset(seed=0)
    assert first.count("<|image_pad|>") == 1
    again, *_, info = env.step("blue")
    assert again.count("<|image_pad|>") == 2 and info["prompt_delta"].count("<|image_pad|>") == 1
    head, _ = ChatHistory(Pictures(), mode="chat_first_turn", tokenizer=tok).reset(seed=0)
    assert head.count("<|image_pad|>") == 1


@pytest.mark.parametrize("mode", ["observation", "observation_action"])
def test_text_modes_need_no_image_template(mode: str) -> None:
    env = ChatHistory(Pictures(), mode=mode, tokenizer=tokenizer("chatml"))
    shown, _ = env.reset(seed=0)
    assert shown == "What colour?<image>"
