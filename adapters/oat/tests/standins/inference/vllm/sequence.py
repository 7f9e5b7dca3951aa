"""Stand-in for ``vllm.sequence``: the per-token logprob record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None
