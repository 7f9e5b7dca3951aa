"""Runs one RL2 rollout step on the CPU: RL2's own config, dataset, dataloader and ``Rollout``, a stand-in server.

What is RL2's: ``trainer/config/ppo.yaml`` composed by Hydra with the overrides a user
gives, ``RLDataset`` + ``get_dataloader`` over a Parquet file from ``gem-rl2-dataset``,
``Rollout.prepare_device_mesh``/``prepare_environment`` (which loads our env module by
path), ``Rollout.__call__``/``rollout`` (the turn loop, tokenization, tensor dicts,
dynamic filtering, packing, ``cu_seqs``) and ``compute_advantages`` as
``RL2.trainer.ppo`` calls it. What is not: ``Rollout.__init__``'s server launch (the
harness sets the URL of :class:`~standins.StandInSGLang` instead).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gem_rl2.dataset import make_rows, write_parquet
from gem_rl2.episodes import SETTINGS_ENV, default_episodes
from gem_rl2.finish import install_finish_reasons
from gem_rl2.train import install_rebn, prepare


def rl2_config(overrides: Sequence[str]) -> Any:
    """RL2's ``ppo`` config composed with ``overrides``, as ``python -m RL2.trainer.ppo ...`` would build it."""
    import RL2.trainer.ppo as ppo
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(ppo.__file__).with_name("config")), version_base=None):
        return compose(config_name="ppo", overrides=list(overrides))


@dataclass
class RolloutResult:
    data_list: list[dict[str, Any]]
    tensor_dict: dict[str, Any]
    cu_seqs: Any
    config: Any


def run_rollout(
    tmp_path: Path,
    tokenizer: Any,
    server_url: str,
    *,
    env_id: str | Sequence[str],
    seeds: Sequence[int],
    max_turns: int,
    max_new_tokens: int | None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Any] = (),
    extra_overrides: Sequence[str] = (),
    responses_per_prompt: int = 1,
) -> RolloutResult:
    """One ``Rollout.__call__(data_list, train=True, step=1)`` over rows of ``env_id`` x ``seeds``, then advantages."""
    import RL2.trainer.ppo as ppo
    import RL2.workers.rollout as rollout_module
    from omegaconf import OmegaConf
    from RL2.datasets import RLDataset, get_dataloader
    from RL2.workers.rollout import Rollout

    tok_dir = tmp_path / "tokenizer"
    tokenizer.save_pretrained(tok_dir)
    data = tmp_path / "train.parquet"
    write_parquet(make_rows(env_id, seeds, env_kwargs=env_kwargs, wrappers=list(wrappers)), str(data))
    overrides = [
        f"train_data.path={data}",
        f"train_data.prompts_per_rollout={len(seeds) * (1 if isinstance(env_id, str) else len(env_id))}",
        f"train_data.responses_per_prompt={responses_per_prompt}",
        f"actor.model_name={tok_dir}",
        f"rollout.max_turns={max_turns}",
        f"rollout.train_sampling_params.max_new_tokens={'null' if max_new_tokens is None else max_new_tokens}",
        "adv.estimator=rebn",
        "actor.max_length_per_device=8192",
        *extra_overrides,
    ]
    config = rl2_config(overrides)
    settings = prepare(config, overrides)  # the launcher's own step: env_path, skip_special_tokens, settings
    OmegaConf.resolve(config)  # RL2's Trainer.__init__ does this first
    os.environ[SETTINGS_ENV] = settings.to_json()

    dataset = RLDataset(config.train_data, tokenizer)
    data_list = next(iter(get_dataloader(dataset, config.train_data.prompts_per_rollout)))

    rollout = Rollout.__new__(Rollout)  # __init__ would launch SGLang servers and a router
    rollout.config = config.rollout
    rollout.prepare_device_mesh()
    rollout.worker_url = server_url
    rollout.prepare_environment()
    from transformers import AutoTokenizer

    rollout.tokenizer = AutoTokenizer.from_pretrained(config.rollout.server_args.model_path, trust_remote_code=True)
    rollout.router_url = server_url
    rollout.train_sampling_params = OmegaConf.to_container(config.rollout.train_sampling_params)
    rollout.test_sampling_params = OmegaConf.to_container(config.rollout.test_sampling_params)

    install_rebn(ppo)  # as gem-rl2-train does before RL2's main
    install_finish_reasons(rollout_module)
    tensor_dict, cu_seqs = rollout(data_list, True, 1)
    ppo.compute_advantages(config.adv, tensor_dict, cu_seqs, 1)
    default_episodes()  # the table the env module used
    return RolloutResult(data_list=data_list, tensor_dict=tensor_dict, cu_seqs=cu_seqs, config=config)


def unpadded(tensor_dict: dict[str, Any], row: int) -> dict[str, list[Any]]:
    """One sequence of RL2's packed batch as the unshifted token sequence and per-token fields.

    RL2 stores ``states = ids[:-1]``, ``actions = ids[1:]`` (0 off the generated tokens)
    and ``action_mask``/``rewards``/``advantages``/``llm_logps`` aligned with ``actions``.
    The last token of an episode's sequence is generated, so ``ids[-1] = actions[-1]``.
    """
    n = int(tensor_dict["eos_mask"][row].nonzero()[-1]) + 1
    states = tensor_dict["states"][row, :n].tolist()
    actions = tensor_dict["actions"][row, :n].tolist()
    mask = tensor_dict["action_mask"][row, :n].tolist()
    out = {
        "input_ids": [*states, actions[-1]],
        "loss_mask": [0, *mask],
        "token_rewards": [0.0, *tensor_dict["rewards"][row, :n].tolist()],
        "llm_logps": tensor_dict["llm_logps"][row, :n].tolist(),
        "action_mask": mask,
    }
    if "advantages" in tensor_dict:
        out["token_advantages"] = [0.0, *tensor_dict["advantages"][row, :n].tolist()]
    return out
