"""The one exception hierarchy of gem_core.

Every error raised on purpose by gem_core, its plugins and adapters derives from
:class:`GemCoreError`. Each class says when it is raised; messages name what was
wrong and how to fix it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "CheckPhaseError",
    "ConfigError",
    "DuplicateIdError",
    "EntryPointError",
    "EnvCheckError",
    "EnvNotFound",
    "EnvWorkerCrashed",
    "GemCoreError",
    "GemCoreWarning",
    "GenerateContractError",
    "ImageError",
    "InvalidAction",
    "InvalidIdError",
    "NamespaceError",
    "PluginCommandError",
    "PluginLoadError",
    "PluginValidationError",
    "PluginWarning",
    "RLInputError",
    "RegistrationError",
    "ResetNeeded",
    "TemplatePrefixError",
    "ToolCallParseError",
    "ToolError",
    "ToolNotFound",
    "ToolTimeout",
    "TrajectoryError",
    "VectorEnvError",
    "WrapperNotFound",
]


class GemCoreError(Exception):
    """Base class of every error gem_core raises on purpose."""


class GemCoreWarning(UserWarning):
    """Base class of every warning gem_core emits."""


class PluginWarning(GemCoreWarning):
    """A plugin was skipped (broken, duplicate) because skipping was asked for."""


class RegistrationError(GemCoreError):
    """A spec could not be registered (bad id, bad entry point, conflicting alias)."""


class InvalidIdError(RegistrationError, ValueError):
    """An id does not follow ``namespace:Name[-vN][-variant]``."""


class DuplicateIdError(RegistrationError):
    """Two owners registered the same id; the message names both."""


class NamespaceError(RegistrationError):
    """An env id was declared in a namespace that another distribution owns; names the owner."""


class EnvNotFound(GemCoreError, LookupError):
    """No env is registered under the requested id; the message suggests close ids."""


class ToolNotFound(GemCoreError, LookupError):
    """No tool is registered under the requested name."""


class WrapperNotFound(GemCoreError, LookupError):
    """No wrapper is registered under the requested name."""


class EntryPointError(GemCoreError, ImportError):
    """A ``"module:attr"`` entry point could not be imported or resolved."""


class ConfigError(GemCoreError, ValueError):
    """A user-facing configuration is invalid; the message names the field."""


class PluginLoadError(GemCoreError):
    """A plugin failed to import, its hook raised, or it targets another plugin API.

    The message names the entry point, distribution and version, and ends with :attr:`hint`.

    Attributes:
        plugin: The plugin's (entry point's) name, when known.
        distribution: The distribution that installed it, when known.
        version: That distribution's version, when known.
        hint: How to go on: the dependency to install, or how to block the plugin.
    """

    def __init__(
        self,
        message: str,
        *,
        plugin: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(message)
        self.plugin, self.distribution, self.version, self.hint = plugin, distribution, version, hint


class PluginValidationError(GemCoreError):
    """A plugin returned something that is not a valid declaration."""


class PluginCommandError(GemCoreError):
    """A ``gem`` command a plugin declared could not be loaded, or failed with an error outside gem's.

    The message names the command, the plugin and its distribution, and who can fix it.
    """


class ImageError(GemCoreError, ValueError):
    """An image of an observation or trace is not usable.

    Not PNG or JPEG (by its magic bytes), a cut header, a missing file, or a part of a
    :class:`~gem_core.multimodal.Content` that is neither text nor an image.
    """


class ResetNeeded(GemCoreError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class EnvCheckError(GemCoreError, AssertionError):
    """``gem_core.testing.check_env`` found a contract violation."""


class ToolError(GemCoreError):
    """A tool could not be built or run (not raised for errors returned to the model)."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool call ran past its time limit."""


class CheckPhaseError(ToolError):
    """An episode's check could not be made, on gem's or the runtime's side: there is no reward, not a 0.

    Raised by an env whose reward comes from a checker run after the agent's part (the terminal env):
    a bounded runtime call ran past its bound or exited non-zero, the checker's container could not
    start, or the episode's sandbox ended from gem's side. What the agent caused (a checker that failed,
    files it broke) is never this error: that is the task's reward. The episode engine ends such an
    episode with ``end_reason == "error"`` (``on_env_error="end"``), which the trainer adapters keep out
    of training; the message names the phase, the call and what to do.

    Attributes:
        phase: The step of the check that failed (``probe``, ``end-agent``, ``checker-start``,
            ``write-tests``, ``checker``, ``reward``...).
        call: The runtime call or sandbox operation that failed (``docker commit``, ``write_file``...).
    """

    def __init__(self, message: str, *, phase: str, call: str) -> None:
        super().__init__(message)
        self.phase, self.call = phase, call


# --- wrappers, vector envs and the episode runner ---


class VectorEnvError(GemCoreError, RuntimeError):
    """One or more sub-envs of a vector env raised; names each index and its cause.

    Attributes:
        failures: Index of each failed sub-env mapped to the exception it raised.
        results: What the call returned for the envs that did not fail (the failed
            entries hold placeholders), so a caller that catches the error loses nothing.
    """

    def __init__(self, message: str, failures: dict[int, BaseException], results: object = None) -> None:
        super().__init__(message)
        self.failures = failures
        self.results = results


class EnvWorkerCrashed(GemCoreError, RuntimeError):
    """The worker process or Ray actor hosting a sub-env died (``os._exit``, a signal, OOM).

    The host is replaced and its envs rebuilt; their episodes are lost, so each must start
    a new one (``on_error="reset"`` does that at once). The message names the env that was
    running when the host died, when known.
    """


# --- tools ---


class ToolCallParseError(ToolError, ValueError):
    """A tool call in a model's response is malformed (raised only by strict parsing helpers)."""


# --- rl (gem_core.rl: trajectories, returns, advantages, sample layouts) ---


class RLInputError(GemCoreError, ValueError):
    """Bad input to the RL math (non-finite rewards, gamma outside [0, 1], mismatched lengths)."""


class TrajectoryError(RLInputError):
    """A :class:`~gem_core.rl.types.Turn`/``Episode`` record (or a JSONL line of one) is malformed."""


class TemplatePrefixError(RLInputError):
    """A chat template does not extend its own rendering of the earlier turns.

    Raised by the token-in/token-out layout; the message names the turn. Typical cause:
    templates that drop earlier reasoning (``<think>``) when a new message arrives. Fall
    back to the per-transition layout, or use a template that keeps history verbatim.
    """

    def __init__(self, message: str, *, turn: int | None = None) -> None:
        super().__init__(message)
        #: The turn whose rendering broke the prefix, when known (``None`` for a template probe).
        self.turn = turn


# --- action contract ---


class InvalidAction(GemCoreError, TypeError):
    """An action breaks the env's action contract (a text env got a non-string); the turn does not count."""


# --- errors that moved into the plugin packages raising them ---

#: Old name -> the module that defines it now. ``from gem_core.errors import CorpusError`` keeps
#: working while that package is installed; new code imports from the package.
MOVED: dict[str, str] = {
    "CorpusError": "gem_tool_search.errors",
    "MCPConnectionError": "gem_tool_mcp.errors",
    "SandboxIsolationWarning": "gem_tool_python.errors",
    "DatasetUnavailable": "gem_dataset_env.errors",
    "GradingError": "gem_math.errors",
}


def __getattr__(name: str) -> Any:
    module = MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'gem_core.errors' has no attribute {name!r}")
    distribution = module.split(".")[0].replace("_", "-")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise AttributeError(
            f"{name} moved to {module}, part of {distribution}, which is not installed; "
            f"pip install it, or catch GemCoreError"
        ) from exc


# --- generate contract (the episode engine's boundary to the policy) ---


class GenerateContractError(TrajectoryError):
    """A ``generate`` callable returned something the episode engine cannot take.

    Raised at the boundary (:meth:`~gem_core.episode.EpisodeEngine.play`,
    :meth:`~gem_core.episode.EpisodeEngine.play_batch`, :class:`~gem_core.runner.EpisodeRunner`)
    before anything reaches an env or a record: a wrong type, a batch of the wrong length,
    token ids outside the tokenizer's vocabulary, non-finite logprobs, logprobs that do not
    match the ids. The message names the episode(s) (env id, seed, turn), what was wrong
    and what a ``generate`` must return.
    """

    def __init__(self, message: str, *, episodes: list[str] | None = None) -> None:
        super().__init__(message)
        #: The episodes the bad answer was for, as ``"env_id seed=S turn=T"`` labels.
        self.episodes = list(episodes or [])


# --- vector env fault model (docs/wrappers-vector.md, "Faults") ---


class EnvResultError(GemCoreError, TypeError):
    """A sub-env broke the result contract, or its result could not travel back.

    ``step`` did not return ``(str, float, bool, bool, dict)``, ``reset`` did not return
    ``(str, dict)``, or the result does not pickle in the worker or does not unpickle in the parent.

    The message names the env index, its id, the episode seed, the phase and what was wrong.
    """


class EnvStepTimeout(GemCoreError, TimeoutError):
    """A sub-env's call ran past the vector env's ``step_timeout``; the message names the env.

    The worker process or actor that hosted it is replaced (its envs lose their episodes).
    """


class PlacementError(GemCoreError, RuntimeError):
    """Ray could not place a vector env's actors in time; names the resources needed and available."""


__all__ += ["EnvResultError", "EnvStepTimeout", "PlacementError"]


# --- remote env servers (gem-openenv: OpenEnv servers used as gem envs) ---


class EnvServerError(GemCoreError, RuntimeError):
    """A remote env server (an OpenEnv server) answered a call with an error.

    Attributes:
        code: The server's error code (OpenEnv's ``VALIDATION_ERROR``, ``EXECUTION_ERROR``,
            ``CAPACITY_REACHED``, ``FACTORY_ERROR``, ``SESSION_ERROR``...), when it sent one.
    """

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class EnvServerUnavailable(EnvServerError, ConnectionError):
    """The env server cannot be reached, or went away mid-episode (that episode is lost); names the URL."""


class EnvServerAtCapacity(EnvServerError):
    """The env server kept refusing a new session (``CAPACITY_REACHED``) past the client's backoff."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="CAPACITY_REACHED")


class ActionSchemaError(InvalidAction, ValueError):
    """The model's text does not fit a remote env's action schema; the message names the schema."""


__all__ += ["ActionSchemaError", "EnvServerAtCapacity", "EnvServerError", "EnvServerUnavailable"]


# --- rollouts under changing weights (docs/rl.md, "Rollout modes") ---


class PolicyLagError(GemCoreError, RuntimeError):
    """An episode's oldest token is more policy versions behind the current weights than ``max_policy_lag``.

    Raised under ``EpisodeLimits(on_stale="raise")``; the message names the episode, its
    oldest version, the current one and the bound. ``on_stale="drop"`` ends the episode
    instead (``end_reason == "stale"``) and the continuous scheduler replays its job.
    """


__all__ += ["PolicyLagError"]


# --- the continuous scheduler's bounds (docs/rl.md, "Bounds and contract errors") ---


class GenerateCancelled(GenerateContractError):
    """A request's ``generate`` raised ``asyncio.CancelledError`` while the scheduler was not cancelled.

    Clients do this for a request the server aborted; the contract for an aborted request is
    an answer with ``finish_reason="abort"``. Only that request's episode ends (named in the
    message and in :attr:`GenerateContractError.episodes`).
    """


class GenerateTimeout(GemCoreError, TimeoutError):
    """A request (or batched call) was given up by the continuous scheduler.

    No answer came within its ``request_timeout``, or it ignored a weight update's abort
    past ``abort_timeout``; the request is cancelled. Only its episode(s) end; the message
    names each (env id, seed, turn) and its request id.

    Attributes:
        episodes: The episodes, as ``"env_id seed=S turn=T"`` labels.
        request_ids: Their :attr:`~gem_core.episode.TurnRequest.request_id`.
    """

    def __init__(self, message: str, *, episodes: list[str] | None = None, request_ids: list[str] | None = None):
        super().__init__(message)
        self.episodes = list(episodes or [])
        self.request_ids = list(request_ids or [])


class WeightUpdateTimeout(GemCoreError, TimeoutError):
    """An ``abort`` or ``swap`` hook of ``update_policy`` ran past its bound; the version did not move."""


class PolicyVersionError(GemCoreError, ValueError):
    """``update_policy`` was asked for a version that is not past the current one (versions only move forward)."""


class SharedEnvError(ConfigError):
    """A job's env object is already played by a live job of the same scheduler; each live job needs its own env."""


__all__ += ["GenerateCancelled", "GenerateTimeout", "PolicyVersionError", "SharedEnvError", "WeightUpdateTimeout"]


# --- multi-agent envs (gem_core.multiagent, docs/multiagent.md) ---


class AgentError(GemCoreError, ValueError):
    """A multi-agent ``step`` named the wrong agents; the turn does not count and the env is unchanged.

    Attributes:
        agent: The agent the error is about (``None`` when it is about several).
    """

    def __init__(self, message: str, *, agent: str | None = None) -> None:
        super().__init__(message)
        self.agent = agent


class UnknownAgent(AgentError, LookupError):
    """An action was given for an agent the env does not have (not in ``possible_agents``)."""


class NotYourTurn(AgentError):
    """A turn-based env got an action from an agent other than ``agent_selection``."""


class AgentFinished(AgentError):
    """An action was given for an agent whose part of the episode already ended (terminated or truncated)."""


class MissingActions(AgentError):
    """A simultaneous-move env's ``step`` lacks the action of one or more live agents; names them."""


__all__ += ["AgentError", "AgentFinished", "MissingActions", "NotYourTurn", "UnknownAgent"]
