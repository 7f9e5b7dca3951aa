"""Train on gem envs with oat: ``python -m gem_oat.train --pretrain MODEL --env_ids ID [ID ...] [oat flags]``.

The launcher follows oat's own scripts: parse ``GemOatArgs`` (oat's ``PPOArgs`` plus the
env flags) with tyro, fix the settings the multi-turn learner needs, validate with oat's
``default_args_validation`` and gem's :func:`gem_oat.args.check_args`, then build oat's
launchpad program with :class:`~gem_oat.learner.GemOatLearner` and
:class:`~gem_oat.actor.GemOatActor`. Needs oat's full install (GPU, vLLM 0.8.4, Python 3.10).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gem_oat.args import GemOatArgs, check_args, check_round_options, learner_ranks

__all__ = ["build_args", "main"]


def build_args(argv: Sequence[str] | None = None) -> GemOatArgs:
    """Parse and validate the command line as the launcher does (no GPU needed).

    Raises:
        ConfigError: A flag is wrong (``--whiten_adv``, ``--num_samples 2``, an unknown env id, ...);
            the message names it and the fix. ``--pi_buffer_maxlen_per_device 0`` is set here.
    """
    import tyro
    from oat.args import default_args_validation

    args = tyro.cli(GemOatArgs, args=list(sys.argv[1:] if argv is None else argv))
    # What the multi-turn learner needs; a prompt set and a reward oracle are the envs' job.
    args.algo = "PPO"
    args.oracle = ""
    args.prompt_data = ""
    args = default_args_validation(args)
    check_args(args)
    check_round_options(args, learner_ranks(args))
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Launch oat's actor/learner program on gem envs."""
    import launchpad as lp
    from oat.interface import get_program

    from gem_oat.actor import GemOatActor
    from gem_oat.learner import GemOatLearner

    args = build_args(argv)
    program, local_resources = get_program(args, learner_cls=GemOatLearner, actor_cls=GemOatActor)
    lp.launch(program, launch_type=args.launch_type, local_resources=local_resources, terminal="current_terminal")


if __name__ == "__main__":
    main()
