"""What ``gem eval`` and ``gem view`` print and draw: the summary table, JSON, a PNG, readable episodes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TextIO

from gem_core.eval.run import EnvSummary

__all__ = ["plot", "print_episode", "print_summary", "summary_json"]


def summary_json(summaries: Sequence[EnvSummary], meta: dict[str, Any]) -> str:
    """The summary as one JSON document (``gem eval --json``)."""
    return json.dumps({**meta, "envs": [s.as_dict() for s in summaries]}, indent=2)


def print_summary(summaries: Sequence[EnvSummary], out: TextIO, title: str = "gem eval") -> None:
    """A table: episodes, errors, success (95% CI), reward (CI), turns, tokens, and win/draw/loss per seat for games."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    games = any(s.outcomes for s in summaries)
    columns = ["env", "episodes", "errors", "success (95% CI)", "reward (± 95% CI)", "turns", "tokens"]
    for name in [*columns, *(["win/draw/loss per seat"] if games else [])]:
        per_seat = name == "win/draw/loss per seat"
        table.add_column(name, justify="left" if per_seat or name == "env" else "right", no_wrap=per_seat)
    for s in summaries:
        low, high = s.success_ci
        wdl = (
            ["  ".join(f"{seat} {c['win']}/{c['draw']}/{c['loss']}" for seat, c in s.outcomes.items())] if games else []
        )
        table.add_row(
            s.env_id,
            str(s.episodes),
            str(s.errors),
            f"{s.success:.3f} [{low:.2f}, {high:.2f}]",
            f"{s.reward:.3f} ± {s.reward_ci:.3f}",
            f"{s.turns:.2f}",
            f"{s.completion_tokens:.1f}",
            *wdl,
        )
    # the per-seat column needs room: one line per env, never wrapped
    Console(file=out, width=170 if games else 120, force_terminal=False, color_system=None).print(table)


def plot(summaries: Sequence[EnvSummary], records: Sequence[dict[str, Any]], path: str, title: str) -> None:
    """A PNG: success per env with 95% CIs (left), the distribution of episode returns per env (right)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    names = [s.env_id for s in summaries]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(names) + 4), 4.2))
    success = [s.success for s in summaries]
    errors = [[s.success - s.success_ci[0] for s in summaries], [s.success_ci[1] - s.success for s in summaries]]
    left.bar(range(len(names)), success, yerr=errors, capsize=4, color="#4c72b0")
    left.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    left.set_ylim(0, 1)
    left.set_ylabel("success rate (95% CI)")
    left.set_title("success per env")
    returns = [[float(r["episode_return"]) for r in records if r["env_id"] == name] for name in names]
    right.boxplot(returns, showmeans=True)
    right.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right", fontsize=8)
    right.set_ylabel("episode return")
    right.set_title("return distribution")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def content_text(content: Any, image_folder: str | None = None) -> str:
    """A trace message's ``content`` as text; each image as ``[image png 64x48 sha256:1a2b3c4d5e6f <file>]``.

    Args:
        content: A ``str``, or content parts (text, and images as trace references).
        image_folder: The trace's image folder (:func:`~gem_core.eval.traces.image_folder`);
            the line then names each image's file and its size read from the file's header.
    """
    import os

    from gem_core.errors import ImageError
    from gem_core.multimodal import Image

    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return str(content if content is not None else "")
    pieces: list[str] = []
    image_pieces: set[int] = set()
    for part in content:
        ref = part.get("image", {}).get("$image") if isinstance(part, dict) and part.get("type") == "image" else None
        if isinstance(part, dict) and part.get("type") == "text":
            pieces.append(str(part.get("text", "")))
        elif isinstance(ref, dict):
            fmt, digest = ref.get("format", "?"), str(ref.get("sha256", ""))
            shown = f"[image {fmt}"
            if image_folder is not None:
                path = os.path.join(image_folder, f"{digest}.{fmt}")
                try:
                    width, height = Image.from_path(path).size
                    shown += f" {width}x{height} sha256:{digest[:12]} {path}"
                except ImageError as exc:
                    shown += f" sha256:{digest[:12]} missing: {exc}"
            else:
                shown += f" sha256:{digest[:12]}"
            pieces.append(shown + "]")
            image_pieces.add(len(pieces) - 1)
        else:
            pieces.append(f"[{part.get('type', 'part') if isinstance(part, dict) else type(part).__name__}]")
    # an image is a line of its own: its header never shares a wrapped line with text or a long path
    lines = ""
    for i, piece in enumerate(pieces):
        apart = i in image_pieces or (i - 1) in image_pieces
        lines += ("\n" if apart and lines and not lines.endswith("\n") else "") + piece
    return lines


def print_episode(record: dict[str, Any], out: TextIO, *, width: int = 100, image_folder: str | None = None) -> None:
    """One trace record, readably: header, then the conversation with each turn's reward.

    Images show as one line each (format, size, hash and file, :func:`content_text`).
    """
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    status = "error" if record.get("error") else ("success" if record.get("success") else "no success")
    console.rule(
        f"{record['env_id']} seed={record['seed']}  model={record.get('model')}  "
        f"return={record['episode_return']:.3f}  turns={record['num_turns']}  {status}"
    )
    turns = iter(record.get("turns", []))
    for message in record.get("messages", []):
        role = message.get("role", "?")
        body = Text(content_text(message.get("content", ""), image_folder))
        subtitle = None
        if role == "assistant":
            turn = next(turns, None)
            if turn is not None:
                cut = " (cut at the token limit)" if turn.get("stop_reason") == "length" else ""
                subtitle = f"reward {turn['reward']:+.3f}{cut}"
        console.print(Panel(body, title=role, title_align="left", subtitle=subtitle, subtitle_align="right"))
    if record.get("error"):
        console.print(f"error: {record['error']}")
    console.print(f"end: {record.get('end_reason')}  wall {record.get('wall_s', 0.0):.2f}s")
