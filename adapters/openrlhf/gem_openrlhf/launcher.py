"""``gem-openrlhf-train``: OpenRLHF's ``train_ppo_ray`` with gem's agent executor and per-turn ReBN.

Takes OpenRLHF 0.11's own flags, plus:

* ``--algo.advantage.estimator rebn``: per-turn ReBN (:mod:`gem_openrlhf.rebn`).
  OpenRLHF's parser only knows its own estimators, so it gets ``reinforce`` (no
  critic, no group baseline, ``--algo.advantage.gamma`` kept) and every Ray worker
  gets :data:`~gem_openrlhf.patch.ESTIMATOR_ENV` ``=rebn`` and the setup hook
  :func:`gem_openrlhf.patch.install`, which swaps the estimator in the trainer actor.
* ``--gem.config JSON_OR_PATH``: the executor settings
  (:class:`~gem_openrlhf.executor.ExecutorConfig`), exported to every worker.
* ``--train.agent_func_path`` defaults to gem's executor file.

Before Ray starts it checks what would otherwise fail inside an actor: the executor
settings, every row of a local ``--data.prompt_dataset`` (env ids registered), and
ReBN's requirements (KL as a loss, prompts given as written). Then it starts Ray with
that runtime environment and runs OpenRLHF's ``train_ppo_ray`` as ``__main__``
(OpenRLHF's ``train()`` keeps a Ray that is already up).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.errors import ConfigError
from gem_openrlhf import agent_func
from gem_openrlhf.dataset import check_rows
from gem_openrlhf.executor import CONFIG_ENV, ExecutorConfig
from gem_openrlhf.patch import ESTIMATOR_ENV, install

__all__ = ["SETUP_HOOK", "LaunchPlan", "main", "prepare"]

#: Ray's ``worker_process_setup_hook`` for the job (a module path, imported in every worker).
SETUP_HOOK = "gem_openrlhf.patch.install"
_GEM_ESTIMATORS = ("rebn",)
# What OpenRLHF's own train() puts in the runtime env when it starts Ray itself.
_OPENRLHF_ENV_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1",
}


@dataclass
class LaunchPlan:
    """What :func:`main` runs.

    Attributes:
        argv: The flags for OpenRLHF's ``train_ppo_ray``.
        env_vars: Environment for the driver and every Ray worker.
        runtime_env: The Ray job's runtime environment (env vars and the setup hook).
        rows: Prompt rows checked (0 when the dataset is not a local JSONL file).
    """

    argv: list[str]
    env_vars: dict[str, str]
    runtime_env: dict[str, Any] = field(default_factory=dict)
    rows: int = 0


def _split(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[(flag, value or None)]`` in order; ``--flag=value`` and ``--flag value`` both work."""
    items: list[tuple[str, str | None]] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            items.append((name, value))
        elif token.startswith("--") and index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            items.append((token, argv[index + 1]))
            index += 1
        else:
            items.append((token, None))
        index += 1
    return items


def _join(items: Sequence[tuple[str, str | None]]) -> list[str]:
    out: list[str] = []
    for name, value in items:
        out.append(name)
        if value is not None:
            out.append(value)
    return out


def _local_files(datasets: str) -> list[str]:
    """The local JSON/JSONL files of an OpenRLHF dataset list (``a.jsonl,b.jsonl@dir``)."""
    paths = []
    for entry in datasets.split(","):
        path = os.path.expanduser(entry.split("@")[0].strip())
        if path.endswith((".json", ".jsonl")) and os.path.isfile(path):
            paths.append(path)
    return paths


def prepare(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Turn ``gem-openrlhf-train`` flags into OpenRLHF flags and the job's environment; check what can be checked.

    Raises:
        ConfigError: Bad ``--gem.config``, a ReBN run with KL folded into the reward or with
            chat-templated prompts, or a prompt row that names no gem episode.
        gem_core.errors.EnvNotFound: A prompt row names an env id that is not registered.
    """
    environ = os.environ if environ is None else environ
    items = _split(argv)
    flags = {name: value for name, value in items}
    env_vars = {key: environ.get(key, default) for key, default in _OPENRLHF_ENV_DEFAULTS.items()}

    config_text = flags.get("--gem.config")
    if "--gem.config" in flags:
        if not config_text:
            raise ConfigError("--gem.config needs a JSON object or the path of a JSON file")
        env_vars[CONFIG_ENV] = config_text
        items = [(n, v) for n, v in items if n != "--gem.config"]
    elif environ.get(CONFIG_ENV):
        env_vars[CONFIG_ENV] = environ[CONFIG_ENV]
    ExecutorConfig.from_env(env_vars)  # fails here, not in every vLLM actor

    estimator = flags.get("--algo.advantage.estimator")
    if estimator in _GEM_ESTIMATORS:
        env_vars[ESTIMATOR_ENV] = estimator
        items = [(n, "reinforce" if n == "--algo.advantage.estimator" else v) for n, v in items]
        if "--algo.kl.use_loss" not in flags and float(flags.get("--algo.kl.init_coef") or 0.01) > 0:
            raise ConfigError(
                "--algo.advantage.estimator rebn gives one advantage per turn and cannot fold OpenRLHF's KL reward "
                "penalty (on by default, --algo.kl.init_coef 0.01) into it; add --algo.kl.use_loss (KL as a loss "
                "term) or --algo.kl.init_coef 0"
            )

    if "--data.apply_chat_template" in flags or "--data.input_template" in flags:
        raise ConfigError(
            "gem prompts are JSON episode names read by the agent executor; drop --data.apply_chat_template and "
            "--data.input_template (the executor applies the chat template itself)"
        )
    if "--train.agent_func_path" not in flags:
        items.append(("--train.agent_func_path", agent_func.__file__))

    rows = 0
    input_key = flags.get("--data.input_key") or "input"
    for flag in ("--data.prompt_dataset", "--eval.dataset"):
        for path in _local_files(flags.get(flag) or ""):
            rows += check_rows(path, input_key)
    runtime_env = {"env_vars": dict(env_vars), "worker_process_setup_hook": SETUP_HOOK}
    return LaunchPlan(argv=_join(items), env_vars=env_vars, runtime_env=runtime_env, rows=rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run OpenRLHF's PPO trainer with gem's executor (and ReBN when asked)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print((__doc__ or "").strip())
        print("\nOpenRLHF's own flags: python -m openrlhf.cli.train_ppo_ray --help")
        return 0
    try:
        plan = prepare(args)
    except ConfigError as exc:
        print(f"gem-openrlhf-train: {exc}", file=sys.stderr)
        return 2
    os.environ.update(plan.env_vars)
    install()  # the driver, in case it builds an experience maker itself
    import ray

    if not ray.is_initialized():
        ray.init(runtime_env=plan.runtime_env)
    sys.argv = ["openrlhf.cli.train_ppo_ray", *plan.argv]
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
