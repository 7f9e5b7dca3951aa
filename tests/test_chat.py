"""gem_core.chat: first prompts and per-turn bridges, with real Hugging Face tokenizers built locally."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gem_core.chat import ChatRenderer, render_ids, render_text, tail_overlap, template_name
from gem_core.errors import TemplatePrefixError

pytest.importorskip("transformers", reason="the test extra installs transformers")

from gem_core.testing_tokenizers import build_chat_tokenizer


@functools.cache
def tokenizer(template: str = "chatml") -> Any:
    return build_chat_tokenizer(template)


class _Wrapped:
    """A tokenizer whose template is changed by ``render``; encode/decode are the real ones."""

    name_or_path = "tiny/wrapped"

    def __init__(self, render: Any) -> None:
        self.inner = tokenizer()
        self.render = render

    def apply_chat_template(self, messages: Any, **kwargs: Any) -> Any:
        return self.render(self.inner, list(messages), **kwargs)

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        return list(self.inner.encode(text, **kwargs))

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return str(self.inner.decode(ids, **kwargs))


def test_bridge_is_footer_new_messages_and_generation_prompt() -> None:
    renderer = ChatRenderer(tokenizer())
    assert renderer.bridge_text([{"role": "user", "content": "hi"}]) == (
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert renderer.bridge_text([{"role": "tool", "content": "42"}]).startswith("<|im_end|>\n<|im_start|>tool\n42")


def test_the_stop_token_the_model_generated_is_not_repeated() -> None:
    tok = tokenizer()
    renderer = ChatRenderer(tok)
    new = [{"role": "user", "content": "hi"}]
    full = renderer.bridge_ids(new)
    assert renderer.bridge_ids(new, [5, tok.eos_token_id]) == full[1:]  # <|im_end|> already generated
    assert renderer.bridge_ids(new, [5, 6]) == full  # cut reply: the footer closes it


messages_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    first=messages_text,
    exchanges=st.lists(st.tuples(messages_text, messages_text, st.sampled_from(["user", "tool"])), max_size=5),
)
def test_bridged_context_equals_the_whole_rendering_for_a_verbatim_template(
    first: str, exchanges: list[tuple[str, str, str]]
) -> None:
    """For a template that renders history verbatim, prompt + answers + bridges is the template's own text."""
    tok = tokenizer()
    renderer = ChatRenderer(tok)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": first}]
    text = renderer.render(messages)
    for answer, reply, role in exchanges:
        new = {"role": role, "content": reply}
        text += answer + renderer.bridge_text([new])
        messages += [{"role": "assistant", "content": answer}, new]
    assert text == render_text(tok, messages, add_generation_prompt=True)


def test_history_rewriting_templates_bridge_and_say_so() -> None:
    rewriting = ChatRenderer(tokenizer("chatml_drop_think"))
    verbatim = ChatRenderer(tokenizer())
    assert rewriting.rewrites_history and not verbatim.rewrites_history
    new = [{"role": "user", "content": "Lower."}]
    assert rewriting.bridge_ids(new) == verbatim.bridge_ids(new)


def test_a_template_without_a_system_role_gets_an_anchor_without_one() -> None:
    def no_system(inner: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        if any(m["role"] == "system" for m in messages):
            raise ValueError("System role not supported")
        return inner.apply_chat_template(messages, **kwargs)

    renderer = ChatRenderer(_Wrapped(no_system))
    assert renderer.bridge_text([{"role": "user", "content": "x"}]).startswith("<|im_end|>\n<|im_start|>user\nx")


@pytest.mark.parametrize(
    ("render", "message"),
    [
        (
            lambda inner, m, **kw: f"[{len(m)}]" + inner.apply_chat_template(m, **kw),
            r"_Wrapped\('tiny/wrapped'\) renders the conversation before the new messages .*context='rerender'",
        ),
        (
            lambda inner, m, **kw: inner.apply_chat_template(m[-2:], **kw),
            r"_Wrapped\('tiny/wrapped'\)",
        ),
        (
            lambda inner, m, **kw: (_ for _ in ()).throw(ValueError("roles must alternate")),
            r"cannot render a finished assistant message .*roles must alternate",
        ),
        (lambda inner, m, **kw: [1, 2, 3], r"returned list, expected str"),
    ],
    ids=["header-counts-messages", "keeps-last-two", "refuses-everything", "returns-ids"],
)
def test_templates_that_cannot_be_bridged_fail_at_start_up_naming_the_template(render: Any, message: str) -> None:
    with pytest.raises(TemplatePrefixError, match=message):
        ChatRenderer(_Wrapped(render))


def test_a_role_the_template_refuses_mid_episode_is_a_template_error() -> None:
    def no_tool(inner: Any, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        if any(m["role"] == "tool" for m in messages):
            raise ValueError("tool role not supported")
        return inner.apply_chat_template(messages, **kwargs)

    renderer = ChatRenderer(_Wrapped(no_tool))
    with pytest.raises(TemplatePrefixError, match=r"cannot render the messages \['tool'\].*tool role not supported"):
        renderer.bridge_text([{"role": "tool", "content": "1"}])


@given(st.lists(st.integers(0, 3), max_size=6), st.lists(st.integers(0, 3), max_size=6))
def test_tail_overlap_is_the_longest_suffix_prefix_match(generated: list[int], following: list[int]) -> None:
    k = tail_overlap(generated, following)
    assert generated[len(generated) - k :] == following[:k]
    assert not any(
        generated[len(generated) - j :] == following[:j] for j in range(k + 1, min(len(generated), len(following)) + 1)
    )


def test_render_ids_and_template_name() -> None:
    tok = tokenizer()
    ids = render_ids(tok, [{"role": "user", "content": "x"}], add_generation_prompt=True)
    assert tok.decode(ids) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert template_name(_Wrapped(None)) == "_Wrapped('tiny/wrapped')"
