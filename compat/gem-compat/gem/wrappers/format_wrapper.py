"""GEM's ``EncapsulateWrapper``: the env sees only the last ``prefix...suffix`` part of a response."""

from __future__ import annotations

from typing import Any

from gem_core.core import ResetReturn
from gem_core.wrappers import Wrapper

__all__ = ["EncapsulateWrapper"]


class EncapsulateWrapper(Wrapper):
    """Tells the model to answer in ``prefix<answer>suffix`` and passes only that answer on.

    A response without the prefix reaches the env as :attr:`MALFORMED_ACTION`, as in GEM.
    """

    MALFORMED_ACTION = "MALFORMED_ACTION"

    def __init__(self, env: Any, prefix: str = "<<<", suffix: str = ">>>") -> None:
        super().__init__(env)
        self.prefix, self.suffix = prefix, suffix

    def extract(self, text: str) -> str | None:
        """The text between the last ``prefix`` and the ``suffix`` after it (or the end)."""
        start = text.rfind(self.prefix)
        if start < 0:
            return None
        body = start + len(self.prefix)
        end = text.find(self.suffix, body)
        return text[body : end if end >= 0 else len(text)].strip()

    def _on_reset(self, obs: str, info: dict[str, Any]) -> ResetReturn:
        sep = "" if not obs or obs.endswith("\n") else "\n"
        rule = (
            f"Please give your FINAL response in the following format: {self.prefix}<your response>{self.suffix}\n"
            "If you give multiple responses, only the last one will be considered."
        )
        return f"{obs}{sep}{rule}", info

    def _on_action(self, action: str) -> str:
        found = self.extract(action)
        return self.MALFORMED_ACTION if found is None else found

    def sample_random_action(self) -> str:
        return f"{self.prefix}{self.env.sample_random_action()}{self.suffix}"
