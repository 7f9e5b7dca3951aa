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

Before Ray starts it checks every OpenRLHF option that interacts with multi-turn
episodes and ReBN (the options table of docs/openrlhf.md: each is set, refused with an
error naming the option and the fix, or supported): the executor settings, every row of
a local ``--data.prompt_dataset`` (env ids registered), ReBN's requirements, and that
every step trains on all of its samples, each once (:mod:`gem_openrlhf.steps`). Then it
starts Ray with that runtime environment and runs OpenRLHF's ``train_ppo_ray`` as
``__main__`` (OpenRLHF's ``train()`` keeps a Ray that is already up).
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gem_core.errors import ConfigError, EnvNotFound, RLInputError
from gem_core.rl.returns import check_gamma
from gem_openrlhf import agent_func
from gem_openrlhf.dataset import check_rows
from gem_openrlhf.executor import CONFIG_ENV, ExecutorConfig
from gem_openrlhf.patch import ESTIMATOR_ENV, install
from gem_openrlhf.steps import StepShape, step_problem

__all__ = ["SETUP_HOOK", "LaunchPlan", "main", "prepare"]

#: Ray's ``worker_process_setup_hook`` for the job (a module path, imported in every worker).
SETUP_HOOK = "gem_openrlhf.patch.install"
_GEM_ESTIMATORS = ("rebn",)
# OpenRLHF 0.11.2's defaults (cli/train_ppo_ray.py) of the flags that decide how a step's samples reach the loss.
_OPENRLHF_DEFAULTS = {
    "--actor.num_nodes": 1,
    "--actor.num_gpus_per_node": 8,
    "--ds.ring_attn_size": 1,
    "--ds.tensor_parallel_size": 1,
    "--rollout.batch_size": 1024,
    "--rollout.n_samples_per_prompt": 1,
    "--rollout.micro_batch_size": 1,
    "--train.batch_size": 128,
    "--train.micro_batch_size": 1,
    "--data.max_samples": int(1e8),
}
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


def _int(flags: Mapping[str, str | None], name: str) -> int:
    """An integer flag of OpenRLHF's, or its default."""
    raw = flags.get(name)
    if raw is None:
        return _OPENRLHF_DEFAULTS[name]
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} {raw!r} is not an integer") from None


def _step_shape(flags: Mapping[str, str | None]) -> StepShape:
    dp = (
        _int(flags, "--actor.num_nodes")
        * _int(flags, "--actor.num_gpus_per_node")
        // max(_int(flags, "--ds.ring_attn_size"), 1)
        // max(_int(flags, "--ds.tensor_parallel_size"), 1)
    )
    return StepShape(
        rollout_micro_batch_size=_int(flags, "--rollout.micro_batch_size"),
        train_batch_size=_int(flags, "--train.batch_size"),
        train_micro_batch_size=_int(flags, "--train.micro_batch_size"),
        dp=max(dp, 1),
    )


def _check_rebn(flags: Mapping[str, str | None], config: ExecutorConfig) -> None:
    """What ReBN (one advantage per turn, computed by gem) cannot honour among OpenRLHF's options."""
    if "--algo.kl.use_loss" not in flags and float(flags.get("--algo.kl.init_coef") or 0.01) > 0:
        raise ConfigError(
            "--algo.advantage.estimator rebn gives one advantage per turn and cannot fold OpenRLHF's KL reward "
            "penalty (on by default, --algo.kl.init_coef 0.01) into it; add --algo.kl.use_loss (KL as a loss "
            "term) or --algo.kl.init_coef 0"
        )
    check_gamma(float(flags.get("--algo.advantage.gamma") or 1.0))
    ignored = {
        "--algo.advantage.no_std_norm": "ReBN always divides by the batch's std of the turn returns",
        "--reward.overlong_buffer_len": "OpenRLHF's length penalties act on its scalar reward, which ReBN does not use",
        "--reward.stop_properly_penalty_coef": "OpenRLHF's length penalties act on its scalar reward, which ReBN "
        "does not use",
        "--reward.clip_range": "ReBN uses the env's turn rewards as they are (clip them with a reward wrapper)",
    }
    for name, why in ignored.items():
        if name in flags:
            raise ConfigError(f"--algo.advantage.estimator rebn would ignore {name}: {why}; drop {name}")


def _check_steps(flags: Mapping[str, str | None], rows: int | None) -> None:
    """Every step trains on all of its samples, each once (see :mod:`gem_openrlhf.steps`)."""
    if "--train.dynamic_batch_enable" in flags:
        raise ConfigError(
            "--train.dynamic_batch_enable splits the step by token counts and trains on whole optimizer steps of "
            "--train.batch_size only, dropping the rest of the step's samples; drop --train.dynamic_batch_enable"
        )
    if "--algo.dynamic_filtering_enable" in flags:
        raise ConfigError(
            "--algo.dynamic_filtering_enable refills filtered prompt groups until the prompt file runs out, so the "
            "last step of an epoch is short and OpenRLHF trains on part of it only; drop "
            "--algo.dynamic_filtering_enable"
        )
    shape = _step_shape(flags)
    batch = _int(flags, "--rollout.batch_size")
    step = batch * _int(flags, "--rollout.n_samples_per_prompt")
    problem = step_problem(step, shape)
    if problem is not None:
        raise ConfigError(
            f"{problem}; make --rollout.batch_size x --rollout.n_samples_per_prompt a multiple of "
            "--train.batch_size, --train.batch_size a multiple of --train.micro_batch_size x the actor ranks, and "
            "--rollout.micro_batch_size deal the step out evenly to the ranks"
        )
    if rows is not None:
        prompts = min(rows, _int(flags, "--data.max_samples"))
        if prompts < batch:
            raise ConfigError(
                f"the prompt file gives {prompts} prompts per epoch, fewer than --rollout.batch_size {batch}: the "
                "only step would be short and OpenRLHF would train on part of it only; pass a --rollout.batch_size "
                f"that divides {prompts} (and fits the other batch sizes)"
            )
        if prompts % batch:
            raise ConfigError(
                f"the prompt file gives {prompts} prompts per epoch, not a multiple of --rollout.batch_size {batch}: "
                f"its last step would have {prompts % batch} prompt(s) and OpenRLHF would train on part of it only; "
                f"pass --data.max_samples {prompts - prompts % batch} (or add rows)"
            )


def prepare(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Turn ``gem-openrlhf-train`` flags into OpenRLHF flags and the job's environment; check what can be checked.

    Every check is a row of the options table in docs/openrlhf.md.

    Raises:
        ConfigError: Bad ``--gem.config``; an option ReBN would silently ignore or get wrong; flags whose
            steps OpenRLHF would not train on whole; chat-templated prompts; a prompt row that names no gem
            episode.
        gem_core.errors.RLInputError: ``--algo.advantage.gamma`` outside ``[0, 1]`` with ``rebn``.
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
    config = ExecutorConfig.from_env(env_vars)  # fails here, not in every vLLM actor

    estimator = flags.get("--algo.advantage.estimator")
    if estimator in _GEM_ESTIMATORS:
        env_vars[ESTIMATOR_ENV] = estimator
        items = [(n, "reinforce" if n == "--algo.advantage.estimator" else v) for n, v in items]
        _check_rebn(flags, config)

    if flags.get("--algo.advantage.is_correction_level") == "seq" and config.on_env_error == "end":
        raise ConfigError(
            "--algo.advantage.is_correction_level seq averages each sample's importance ratio over its action "
            "tokens, and a sample an env error ended has none (0/0 = NaN in the loss); use "
            '--algo.advantage.is_correction_level token, or --gem.config \'{"on_env_error": "raise"}\''
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
    train_rows: int | None = None
    for flag in ("--data.prompt_dataset", "--eval.dataset"):
        entries = [e for e in (flags.get(flag) or "").split(",") if e.strip()]
        local = _local_files(flags.get(flag) or "")
        counted = sum(check_rows(path, input_key) for path in local)
        rows += counted
        if flag == "--data.prompt_dataset" and entries and len(local) == len(entries):
            train_rows = None if "--data.prompt_probs" in flags else counted
    _check_steps(flags, train_rows)
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
    except (ConfigError, RLInputError, EnvNotFound) as exc:
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
