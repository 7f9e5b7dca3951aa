"""A hook that raises."""

from gem_core import hookimpl


@hookimpl
def register_envs():
    raise RuntimeError("kaboom in register_envs")
