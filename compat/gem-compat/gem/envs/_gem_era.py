"""GEM-era constructor arguments of the dataset envs (math, code, QA), translated to gem's options."""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

from gem_core.errors import ConfigError
from gem_core.registry import caller_stacklevel

__all__ = ["DATASET_KEYS", "DATASET_RENAMES", "gem_era_class", "translate_dataset_kwargs"]

_GEM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the gem package

#: GEM's argument name -> gem's option name, for the envs built on gem-dataset-env.
DATASET_RENAMES: dict[str, str] = {
    "dataset_name": "path",
    "question_key": "question_column",
    "answer_key": "answer_column",
}

#: Every GEM-era argument only GEM's dataset envs took (``verbose`` is every env's: see registration).
DATASET_KEYS: frozenset[str] = frozenset({*DATASET_RENAMES, "dataset", "extract_boxed"})

# In-memory datasets are spilled to Parquet here; the directory lives as long as the process.
_SPILL_DIR: tempfile.TemporaryDirectory[str] | None = None


def _warn(owner: str, message: str) -> None:
    warnings.warn(f"{owner}: {message}", DeprecationWarning, stacklevel=caller_stacklevel(also_skip=[_GEM_DIR]))


def _spill(owner: str, dataset: Any) -> str:
    """Write an in-memory ``datasets.Dataset`` to a Parquet file gem's loader reads; its path."""
    global _SPILL_DIR
    if not callable(getattr(dataset, "to_parquet", None)):
        raise ConfigError(
            f"{owner}: dataset= takes a datasets.Dataset (got {type(dataset).__name__}); "
            "for files pass path='/abs/path/data.jsonl' or a Parquet file"
        )
    if _SPILL_DIR is None:
        _SPILL_DIR = tempfile.TemporaryDirectory(prefix="gem-compat-")
    fd, target = tempfile.mkstemp(suffix=".parquet", dir=_SPILL_DIR.name)
    os.close(fd)
    dataset.to_parquet(target)
    return target


def translate_dataset_kwargs(owner: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with GEM's dataset-env arguments turned into gem's, each with a DeprecationWarning.

    ``dataset=`` (an in-memory ``datasets.Dataset``) becomes a Parquet ``path``, and then GEM's
    ``dataset_name`` only labels the env; ``extract_boxed`` becomes ``answer_format``; ``verbose``
    is dropped (gem's envs do not print).
    """
    out = dict(kwargs)
    if "dataset" in out:
        dataset = out.pop("dataset")
        label = out.pop("dataset_name", None)
        out["path"] = _spill(owner, dataset)
        if label is not None and "label" not in out:
            out["label"] = str(label)
        _warn(owner, "dataset= is GEM's; pass path= (a hub id, JSONL or Parquet file) instead")
    for old, new in DATASET_RENAMES.items():
        if old in out:
            if new in out:
                raise ConfigError(f"{owner}: both GEM's {old}= and gem's {new}= given; keep {new}=")
            out[new] = out.pop(old)
            _warn(owner, f"the GEM-era argument {old}= is now {new}=")
    if "extract_boxed" in out:
        out["answer_format"] = "boxed" if out.pop("extract_boxed") else "answer_tag"
        _warn(owner, "extract_boxed= is now answer_format='boxed' or 'answer_tag'")
    if "verbose" in out:
        del out["verbose"]
        _warn(owner, "the GEM-era argument verbose= is ignored; gem-core envs do not print")
    return out


def gem_era_class(native: type[Any], gem_path: str) -> type[Any]:
    """A subclass of gem's dataset env ``native`` that also takes GEM's constructor arguments."""

    def __init__(self: Any, **kwargs: Any) -> None:
        native.__init__(self, **translate_dataset_kwargs(gem_path, kwargs))

    class _SameClass(type(native)):  # type: ignore[misc]
        """Envs built by ``gem.make`` are gem's own class: ``isinstance`` answers for it, as before."""

        # By the MRO, not isinstance/issubclass: an ABC base would ask its subclasses (this one) again.
        def __instancecheck__(cls, obj: Any) -> bool:
            return cls in type(obj).__mro__ or native in type(obj).__mro__

        def __subclasscheck__(cls, sub: type) -> bool:
            mro = getattr(sub, "__mro__", ())
            return cls in mro or native in mro

    namespace = {"__init__": __init__, "__doc__": native.__doc__, "__module__": gem_path}
    return _SameClass(native.__name__, (native,), namespace)
