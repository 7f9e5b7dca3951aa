"""Seed lists for dataset builders: ``"0-99"``, ``"1,5,9"`` or a mix like ``"0-9,100"``."""

from __future__ import annotations

from gem_core.errors import ConfigError

__all__ = ["parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """Parse ``"0-99"``, ``"1,5,9"`` or a mix like ``"0-9,100"`` into a list of seeds.

    Raises:
        ConfigError: Not integers or ranges, or an empty/backwards range.
    """
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-") if not part.startswith("-") else (part, "", "")
        try:
            first, last = (int(low), int(high)) if sep else (int(part), int(part))
        except ValueError:
            raise ConfigError(f"bad seed {part!r} in {text!r}; use integers and ranges like 0-99,200") from None
        if last < first:
            raise ConfigError(f"seed range {part!r} runs backwards; write it as {last}-{first}")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise ConfigError(f"no seeds in {text!r}")
    return seeds
