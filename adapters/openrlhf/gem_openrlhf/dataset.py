"""Prompt rows for OpenRLHF: one JSON line per (env id, seed), played by the gem ``AgentExecutor``.

OpenRLHF's ``PromptDataset`` reads each row's ``--data.input_key`` (default ``input``)
as the prompt string and hands it to the agent executor unchanged (no
``--data.apply_chat_template``). The prompt is therefore a small JSON object naming
the episode: ``{"gem": {"env_id": ..., "seed": ..., ...}}``; the env writes the real
first observation. ``datasource`` (OpenRLHF's per-source eval grouping) is the env id.

Command line::

    gem-openrlhf-dataset --env-id core:NumberGuess-v0 --seeds 0-999 --out ~/data/gem/train.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import gem_core
from gem_core.cli_values import parse_json_object, parse_seeds
from gem_core.errors import ConfigError

__all__ = ["EpisodeRequest", "check_rows", "main", "make_rows", "write_jsonl"]


class EpisodeRequest(BaseModel):
    """What one prompt row asks for: the episode's env and start state.

    Attributes:
        env_id: A registered env id, e.g. ``"core:NumberGuess-v0"``.
        seed: ``reset`` seed; the ``--rollout.n_samples_per_prompt`` episodes of one row share it.
        options: ``reset`` options.
        env_kwargs: Constructor overrides for this row's env (on top of the executor config's).
        system_prompt: A system message before the first observation (overrides the config's).
    """

    model_config = ConfigDict(extra="forbid")

    env_id: str = Field(min_length=1)
    seed: int | None = None
    options: dict[str, Any] | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = None

    def to_prompt(self) -> str:
        """The row's prompt string: ``{"gem": {...}}`` with only the fields that are set."""
        return json.dumps({"gem": self.model_dump(exclude_defaults=True)}, sort_keys=True)

    @classmethod
    def from_prompt(cls, prompt: Any) -> EpisodeRequest:
        """Parse the request out of a prompt string written by :func:`make_rows`.

        Raises:
            ConfigError: The prompt is not such a JSON object, naming what was found and how to fix it.
        """
        how = (
            "build the prompt file with gem-openrlhf-dataset --env-id ... --seeds ... and pass it as "
            "--data.prompt_dataset without --data.apply_chat_template or --data.input_template"
        )
        try:
            data = json.loads(prompt) if isinstance(prompt, str) else None
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("gem"), dict):
            shown = prompt if not isinstance(prompt, str) or len(prompt) <= 80 else prompt[:77] + "..."
            raise ConfigError(f"the prompt {shown!r} does not name a gem episode ({{'gem': {{...}}}}); {how}")
        try:
            return cls.model_validate(data["gem"])
        except ValidationError as exc:
            raise ConfigError(f"bad gem episode in prompt {prompt!r}: {exc}; {how}") from None


def make_rows(
    env_ids: str | Sequence[str],
    seeds: Iterable[int],
    *,
    options: Mapping[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    system_prompt: str | None = None,
) -> list[dict[str, str]]:
    """Build one row per (env id, seed), env-major.

    Returns:
        Rows with ``input`` (the :class:`EpisodeRequest` as JSON) and ``datasource`` (the env id).

    Raises:
        gem_core.errors.EnvNotFound: An env id is not registered (with suggestions).
        ConfigError: No env ids or seeds, or values that are not JSON.
    """
    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
    seed_list = [int(s) for s in seeds]
    if not ids or not seed_list:
        raise ConfigError("make_rows needs at least one env id and one seed")
    for env_id in ids:
        gem_core.spec(env_id)  # unknown ids fail here, not inside a vLLM actor
    rows: list[dict[str, str]] = []
    for env_id in ids:
        for seed in seed_list:
            try:
                request = EpisodeRequest(
                    env_id=env_id,
                    seed=seed,
                    options=dict(options) if options else None,
                    env_kwargs=dict(env_kwargs or {}),
                    system_prompt=system_prompt,
                )
                prompt = request.to_prompt()
            except (ValidationError, TypeError) as exc:
                raise ConfigError(f"cannot store the episode of {env_id} seed {seed} as JSON: {exc}") from None
            rows.append({"input": prompt, "datasource": env_id})
    return rows


def check_rows(path: str | os.PathLike[str], input_key: str = "input") -> int:
    """Check a prompt JSONL file before training: every row names a registered env.

    Returns:
        The number of rows.

    Raises:
        ConfigError: A row is not JSON, lacks ``input_key`` or does not name a gem episode.
        gem_core.errors.EnvNotFound: A row names an env id that is not registered.
    """
    count = 0
    checked: set[str] = set()
    with open(os.path.expanduser(os.fspath(path)), encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{line_number} is not JSON: {exc}") from None
            if not isinstance(row, dict) or input_key not in row:
                raise ConfigError(f"{path}:{line_number} has no {input_key!r} field (--data.input_key)")
            try:
                request = EpisodeRequest.from_prompt(row[input_key])
            except ConfigError as exc:
                raise ConfigError(f"{path}:{line_number}: {exc}") from None
            if request.env_id not in checked:
                gem_core.spec(request.env_id)
                checked.add(request.env_id)
            count += 1
    if not count:
        raise ConfigError(f"{path} has no rows")
    return count


def write_jsonl(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> str:
    """Write rows (from :func:`make_rows`) as JSON lines; parent folders are created.

    Returns:
        The path written, with ``~`` expanded.
    """
    if not rows:
        raise ConfigError("no rows to write")
    target = os.path.expanduser(os.fspath(path))
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with open(target, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(dict(row), sort_keys=True) + "\n")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """``gem-openrlhf-dataset``: write a prompt JSONL file of env episodes for OpenRLHF."""
    parser = argparse.ArgumentParser(prog="gem-openrlhf-dataset", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--env-id", action="append", required=True, help="registered env id (repeatable)")
    parser.add_argument("--seeds", required=True, help="seeds, e.g. 0-999 or 1,2,3")
    parser.add_argument("--out", required=True, help="JSONL file to write")
    parser.add_argument("--options", default=None, help="reset options as JSON")
    parser.add_argument("--env-kwargs", default=None, help="env constructor overrides as JSON")
    parser.add_argument("--system-prompt", default=None)
    args = parser.parse_args(argv)
    rows = make_rows(
        args.env_id,
        parse_seeds(args.seeds),
        options=parse_json_object(args.options, "--options"),
        env_kwargs=parse_json_object(args.env_kwargs, "--env-kwargs"),
        system_prompt=args.system_prompt,
    )
    print(f"wrote {len(rows)} rows to {write_jsonl(rows, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
