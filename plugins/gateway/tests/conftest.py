from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest

from gem_core.episode import Generation, TurnRequest

pytest.importorskip("aiohttp", reason="gem-gateway's tests run in the eval tox env")


@functools.cache
def chat_tokenizer() -> Any:
    from gem_core.testing_tokenizers import build_chat_tokenizer

    return build_chat_tokenizer("chatml_tools")


@pytest.fixture
def tokenizer() -> Any:
    return chat_tokenizer()


class Scripted:
    """A generate function answering each call with a scripted text (the model is not what these tests test).

    ``reply(request) -> str`` chooses the text; its ids are encoded one character per token where
    ``char_ids`` (a non-canonical tokenisation, as a sampling model produces), then the eos id.
    Every request it got is kept: the engine's own record, to hold the gateway's against.
    """

    def __init__(self, reply: Callable[[TurnRequest], str], *, char_ids: bool = True, delay_s: float = 0.0) -> None:
        self.reply = reply
        self.char_ids = char_ids
        self.delay_s = delay_s
        self.seen: list[tuple[list[int], list[int]]] = []

    async def __call__(self, request: TurnRequest) -> Generation:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        tok = chat_tokenizer()
        text = self.reply(request)
        if self.char_ids:
            ids = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
        else:
            ids = list(tok.encode(text, add_special_tokens=False))
        ids = [*ids[: (request.max_tokens or 10**9) - 1], tok.eos_token_id]
        self.seen.append((list(request.prompt_ids or []), ids))
        return Generation(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason="stop")


@pytest.fixture
def scripted() -> type[Scripted]:
    return Scripted
