"""gem tool envs on TRL's native path: ``GRPOTrainer(environment_factory=...)``.

TRL 1.16 builds one object per rollout from ``environment_factory()``: its public methods are the
tools (their JSON schemas come from the type hints and the Google docstring, read by
``transformers.utils.get_json_schema``), ``reset(**row)`` starts an episode and may return text that
TRL appends to the row's last user message, and TRL's generate/tool-call loop calls the tools.

:func:`tool_environment_factory` turns any gem env with a tool set (a ``ToolEnvWrapper``, e.g.
``math:GSM8K-python`` or ``qa:HotpotQA-search``) into such a factory:

* one method per tool of the env's tool set, with the tool's own name, description and parameter
  schema (:func:`tool_method`);
* ``reset(seed=..., options=...)`` resets the inner env with the row's seed and returns its first
  observation (the tools reach the model through the chat template's tool schema, not as text);
* tool calls keep the wrapper's rules: its call budget (``max_tool_calls``) and its per-call rewards;
* :attr:`GemToolEnvironmentFactory.reward` is the reward function: it gives each rollout's final
  assistant message to the env (the env's own grading) and returns the episode's total reward.

Several envs in one run (TRL's dict ``environment_factory``, each row routed by its ``environment``
column): :func:`tool_environment_factories` builds one factory per name. Each factory's reward
function scores the rollouts of its own env only and returns ``None`` for the others (TRL's
convention for a reward function that does not apply to a row: it becomes NaN and is left out of
the sums and means), and is named ``gem_reward:<name>``, so each env has its own log columns.

Why a reward function and not ``get_reward``: TRL calls ``get_reward()`` without the completion, and a
gem env grades the model's final answer, which only reward functions receive.
"""

from __future__ import annotations

import keyword
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from gem_core.core import Env
from gem_core.errors import ConfigError, ResetNeeded, ToolError
from gem_core.tools.base import Tool, ToolResult
from gem_core.tools.safety import UnsafeValue, clean_arguments, clean_text
from gem_core.tools.wrapper import ToolEnvWrapper

__all__ = [
    "GemToolEnvironment",
    "GemToolEnvironmentFactory",
    "GemToolEnvironments",
    "ToolEpisode",
    "tool_environment_factories",
    "tool_environment_factory",
    "tool_method",
]

#: Names TRL gives a meaning of its own (``reset``, ``get_reward``); a tool cannot take them.
RESERVED_NAMES = frozenset({"reset", "get_reward"})

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
    "null": type(None),
}

_NO_ANSWER = (
    "no final answer: the rollout ended on a tool call (TRL's max_tool_calling_iterations or max_completion_length)"
)


@dataclass
class ToolEpisode:
    """What happened in one rollout's episode (``environment.episode``).

    Attributes:
        seed: The seed the env was reset with.
        observation: The first observation (what TRL appended to the prompt).
        tool_calls: One ``{"name", "ok", "error"}`` per tool call, in order.
        tool_reward: Reward of the tool calls (the wrapper's ``call_reward``/``success_reward``/``error_reward``).
        env_reward: Reward the env gave the final answer (0 until graded).
        answer: The final assistant message the env graded; ``None`` before grading or when there was none.
        terminated: The env ended the episode on the final answer.
        truncated: The episode ended without the env ending it (no final answer, or the env wanted more turns).
        info: The env's ``info`` from the final step.
        finished: The reward function has graded this episode.
    """

    seed: int
    observation: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_reward: float = 0.0
    env_reward: float = 0.0
    answer: str | None = None
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    @property
    def reward(self) -> float:
        """The episode's total reward: tool calls plus the env's grade."""
        return self.tool_reward + self.env_reward


class GemToolEnvironment:
    """One rollout's env for TRL: a gem tool env whose tools are this object's public methods.

    Only ``reset`` and the tool methods are public functions: TRL turns every other public function of
    the class into a tool. Built by :class:`GemToolEnvironmentFactory`, which adds the tool methods to a
    subclass per env id.

    Args:
        env: The env built by ``gem_core.make``; a :class:`~gem_core.tools.ToolEnvWrapper` on the outside.
    """

    def __init__(self, env: ToolEnvWrapper) -> None:
        self._env = env
        self._episode: ToolEpisode | None = None
        self._lock = threading.Lock()  # TRL may call one rollout's async tools concurrently; ours are sync

    @property
    def episode(self) -> ToolEpisode:
        """The current episode; raises ``ResetNeeded`` before the first ``reset``."""
        if self._episode is None:
            raise ResetNeeded("call reset() before using a gem tool environment")
        return self._episode

    @property
    def tools(self) -> dict[str, Tool]:
        """The env's tool set, by name."""
        return self._env.tools

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None, **row: Any) -> str:
        """Start an episode from the dataset row's ``seed`` (and ``options``); return the first observation.

        Args:
            seed: The start state; the rows of one GRPO group share it (build the dataset with
                :meth:`GemToolEnvironmentFactory.dataset`).
            options: The env's reset options, if any.
            **row: The row's other columns (``prompt``...), unused.

        Raises:
            ConfigError: the row has no ``seed`` column.
        """
        if seed is None:
            raise ConfigError(
                "the dataset row has no 'seed' column: without one, the rollouts of a GRPO group would start from "
                "different states and their advantages would compare unrelated episodes; build the train_dataset "
                "with factory.dataset(num_prompts)"
            )
        observation, _ = self._env.env.reset(seed=int(seed), options=options)  # the inner env: no tool text
        self._env.calls_used = 0
        self._env.turn_calls = []
        self._episode = ToolEpisode(seed=int(seed), observation=observation)
        return observation

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        with self._lock:
            episode = self.episode
            if episode.finished:
                raise ResetNeeded(f"the episode was graded; call reset() before calling {name!r} again")
            config = self._env.config
            if self._env.calls_used >= config.max_tool_calls:
                result = ToolResult(
                    error=f"no tool calls left: {config.max_tool_calls} per episode; give your final answer"
                )
            else:
                result = self._execute(name, arguments)
                self._env.calls_used += 1
                episode.tool_reward += config.call_reward
                episode.tool_reward += config.success_reward if result.ok else config.error_reward
            episode.tool_calls.append({"name": name, "ok": result.ok, "error": result.error})
        text = clean_text(result.render())
        if not result.ok:  # raised so that TRL counts it in its tool-failure metric; the model sees the message
            raise ToolError(text)
        return text

    def _execute(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        try:
            cleaned = clean_arguments(arguments, what=f"the arguments of {name!r}")
        except UnsafeValue as exc:
            return ToolResult(error=str(exc))
        try:
            # The wrapper's own loop: tools that hold loop-bound resources (HTTP sessions) keep one loop.
            return self._env._loop.run_sync(self._env.tools[name].execute(cleaned))
        except ToolError as exc:
            return ToolResult(error=f"the {name} tool failed: {exc}")
        except Exception as exc:  # a bug in a tool fails this call only, as in the wrapper
            return ToolResult(error=f"the {name} tool failed: {type(exc).__name__}: {exc}")

    def _finish(self, answer: str | None) -> ToolEpisode:
        """Give the env the final answer (once) and return the graded episode."""
        with self._lock:
            episode = self.episode
            if episode.finished:
                return episode
            episode.finished = True
            if answer is None:
                episode.truncated = True
                episode.info = {"gem_trl": _NO_ANSWER}
                return episode
            _, reward, terminated, truncated, info = self._env.env.step(answer)
            episode.answer = answer
            episode.env_reward = float(reward)
            episode.terminated = bool(terminated)
            # One answer per rollout on this path: an env that wants more turns is cut here.
            episode.truncated = bool(truncated) or not terminated
            episode.info = dict(info)
            return episode

    def _close(self) -> None:
        self._env.close()


def _hint(schema: dict[str, Any]) -> Any:
    """The Python type hint whose ``get_json_schema`` rendering is ``schema`` (as far as TRL can express it)."""
    if "enum" in schema and schema["enum"] and all(isinstance(v, (str, int, float, bool)) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list) and options:
        return Union[tuple(_hint(o) for o in options if isinstance(o, dict))] if options else Any
    kind = schema.get("type")
    if isinstance(kind, list):
        return Union[tuple(_hint({**schema, "type": k}) for k in kind)] if kind else Any
    if kind == "array":
        items = schema.get("items")
        return list[_hint(items)] if isinstance(items, dict) and items else list
    if kind is None:
        return Any
    if kind not in _JSON_TYPES:
        raise ConfigError(f"unsupported JSON schema type {kind!r}")
    return _JSON_TYPES[kind]


def _one_line(text: str, fallback: str) -> str:
    # get_json_schema parses a Google docstring: one line per argument, no section headers inside.
    text = " ".join(str(text).split())
    text = re.sub(r"\b(Args|Arguments|Returns|Raises)\s*:", r"\1 -", text)
    return text or fallback


def _check_identifier(name: str, what: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ConfigError(
            f"{what} {name!r} cannot be a Python method or argument name, which TRL's environment_factory needs; "
            "rename it (letters, digits and underscores, not starting with one or a digit, not a keyword)"
        )


def tool_method(tool: Tool) -> Callable[..., str]:
    """A method named after ``tool`` whose signature and docstring give back the tool's JSON schema.

    ``transformers.utils.get_json_schema`` (what TRL renders into the chat template) reads a function's
    type hints and Google docstring; this builds both from ``tool.parameters``: JSON types become
    ``str``/``int``/``float``/``bool``/``list[...]``/``dict``, ``enum`` a ``Literal``, unions a ``Union``,
    arguments not ``required`` get a ``None`` default. Nested object properties are not expressible in
    type hints: they show as ``"object"`` (the tool still validates them).

    Raises:
        ConfigError: the tool's or an argument's name is not a Python identifier, or is reserved
            (``reset``, ``get_reward``, ``self``), or a parameter schema has an unknown type.
    """
    import inspect

    name = tool.name
    _check_identifier(name, "tool name")
    if name in RESERVED_NAMES:
        raise ConfigError(f"a tool cannot be named {name!r}: TRL's environment_factory reserves it")
    schema = tool.parameters or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    arg_lines = []
    for arg, arg_schema in properties.items():
        _check_identifier(arg, f"argument of tool {name!r}")
        if arg == "self":
            raise ConfigError(f"tool {name!r} has an argument named 'self', which a method cannot take")
        arg_schema = arg_schema if isinstance(arg_schema, dict) else {}
        try:
            annotations[arg] = _hint(arg_schema)
        except ConfigError as exc:
            raise ConfigError(f"argument {arg!r} of tool {name!r}: {exc}") from None
        default = inspect.Parameter.empty if arg in required else None
        hint = annotations[arg]
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        arg_lines.append(f"    {arg}: {_one_line(arg_schema.get('description', ''), f'The {arg} argument.')}")
    doc = _one_line(tool.description, f"The {name} tool.")
    if arg_lines:
        doc += "\n\nArgs:\n" + "\n".join(arg_lines)

    def method(self: GemToolEnvironment, **arguments: Any) -> str:
        return self._call_tool(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    return method


class GemToolEnvironmentFactory:
    """``environment_factory`` for TRL's ``GRPOTrainer``: each call builds a :class:`GemToolEnvironment`.

    Built by :func:`tool_environment_factory`. The first env is made here (errors surface at once) and
    handed out by the first call, which is TRL's probe for the tool schemas.

    Attributes:
        env_id: The gem env id.
        name: Tells this env's rewards and metrics apart from other envs' in one run: the reward
            function is named ``gem_reward:<name>`` (TRL's log columns ``rewards/gem_reward:<name>/...``)
            and its metrics ``gem/<name>/...``. Defaults to the env id.
        env_kwargs: Its ``gem_core.make`` options.
        environment_class: The class of the objects built: :class:`GemToolEnvironment` plus one method per tool.
        environments: Every environment built so far (TRL pools and reuses them).
    """

    def __init__(self, env_id: str, *, name: str | None = None, **env_kwargs: Any) -> None:
        self.env_id = env_id
        self.name = env_id if name is None else name
        if not self.name or not self.name.strip():
            raise ConfigError(f"the name of the environment factory for {env_id!r} is empty; give it a name")
        self.env_kwargs = env_kwargs
        first = self._make_env()
        try:
            methods = {tool.name: tool_method(tool) for tool in first.tools.values()}
        except BaseException:
            first.close()
            raise
        class_name = "Gem_" + re.sub(r"\W", "_", env_id)
        # One class per factory: a rollout's env belongs to this factory exactly when its type is this class.
        namespace: dict[str, Any] = {**methods, "_gem_factory_name": self.name}
        self.environment_class: type[GemToolEnvironment] = type(class_name, (GemToolEnvironment,), namespace)
        self.environments: list[GemToolEnvironment] = []
        self._spare: GemToolEnvironment | None = self.environment_class(first)
        self.reward = self._reward_function()

    def _make_env(self) -> ToolEnvWrapper:
        import gem_core

        env = gem_core.make(self.env_id, **self.env_kwargs)
        if not isinstance(env, ToolEnvWrapper):
            kind = type(env).__name__
            if isinstance(env, Env):
                env.close()
            raise ConfigError(
                f"{self.env_id!r} built a {kind}, not an env with a tool set (a ToolEnvWrapper outside): TRL's "
                "environment_factory needs tools; pick a tool variant (e.g. 'math:GSM8K-python', "
                "'qa:HotpotQA-search'), or train it with gem-trl's GemRollout"
            )
        return env

    def __call__(self) -> GemToolEnvironment:
        """A new environment (TRL calls this once per concurrent rollout)."""
        if self._spare is not None:
            environment, self._spare = self._spare, None
        else:
            environment = self.environment_class(self._make_env())
        self.environments.append(environment)
        return environment

    def dataset(
        self, num_prompts: int, *, seed: int = 0, system_prompt: str | None = None, environment: str | None = None
    ) -> Any:
        """A ``datasets.Dataset`` of ``num_prompts`` rows, each with its own ``seed`` (``seed``, ``seed + 1``...).

        The prompt is an empty user message that ``reset`` fills with the env's first observation; TRL
        repeats each row ``num_generations`` times, so a group's rollouts share the start state.

        Args:
            num_prompts: Rows (start states).
            seed: The first row's seed.
            system_prompt: A system message before the user message, if any.
            environment: With a dict ``environment_factory``: this env's key there, written to the
                ``environment`` column TRL routes each row by.
        """
        from datasets import Dataset

        if num_prompts < 1:
            raise ConfigError(f"num_prompts must be >= 1, got {num_prompts}")
        head = [{"role": "system", "content": system_prompt}] if system_prompt else []
        prompt = [*head, {"role": "user", "content": ""}]
        seeds = [seed + i for i in range(num_prompts)]
        columns: dict[str, list[Any]] = {"prompt": [prompt] * num_prompts, "seed": seeds}
        if environment is not None:
            columns["environment"] = [environment] * num_prompts
        return Dataset.from_dict(columns)

    def _reward_function(self) -> Callable[..., list[float | None]]:
        mine, name = self.environment_class, self.name

        def gem_reward(
            completions: list[list[dict[str, Any]]],
            environments: list[GemToolEnvironment] | None = None,
            log_metric: Callable[[str, float], None] | None = None,
            **_: Any,
        ) -> list[float | None]:
            """Each rollout of this env graded by its env (the episode's total reward); ``None`` on others' rows."""
            if environments is None:
                raise ConfigError(f"{gem_reward.__name__} needs the trainer's environments: pass environment_factory")
            rewards: list[float | None] = []
            episodes: list[ToolEpisode] = []
            for env, completion in zip(environments, completions, strict=True):
                if type(env) is not mine:  # another env's rollout: not this function's to grade
                    if getattr(type(env), "_gem_factory_name", None) == name:
                        raise ConfigError(
                            f"two environment factories are named {name!r}: their reward columns and metrics would"
                            " be one; give each its own name (tool_environment_factory(..., name=...), or"
                            " tool_environment_factories({name: env_id, ...}))"
                        )
                    rewards.append(None)
                    continue
                episode = env._finish(final_answer(completion))
                episodes.append(episode)
                rewards.append(episode.reward)
            if log_metric is not None and episodes:
                n = len(episodes)
                log_metric(f"gem/{name}/tool_calls", sum(len(e.tool_calls) for e in episodes) / n)
                log_metric(f"gem/{name}/terminated", sum(e.terminated for e in episodes) / n)
                log_metric(f"gem/{name}/truncated", sum(e.truncated for e in episodes) / n)
            return rewards

        # TRL names a reward function's log columns after __name__: one column set per env
        gem_reward.__name__ = gem_reward.__qualname__ = f"gem_reward:{name}"
        return gem_reward

    def close(self) -> None:
        """Close every env built (their tools' pools and sessions); idempotent."""
        spare, self._spare = self._spare, None
        built, self.environments = self.environments, []
        for environment in [*built, *([spare] if spare else [])]:
            environment._close()

    def __enter__(self) -> GemToolEnvironmentFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def final_answer(completion: list[dict[str, Any]]) -> str | None:
    """The text of a rollout's final assistant message; ``None`` when the rollout ended on a tool call.

    TRL leaves a tool message last when the regenerated turn was cut to nothing, and an assistant message
    with ``tool_calls`` last when ``max_tool_calling_iterations`` or the length budget stopped the loop.
    """
    if not completion:
        return None
    last = completion[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content") or ""
    if isinstance(content, list):  # typed content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def tool_environment_factory(env_id: str, *, name: str | None = None, **env_kwargs: Any) -> GemToolEnvironmentFactory:
    """An ``environment_factory`` for TRL's ``GRPOTrainer`` from a gem tool env.

    Example:
        >>> factory = tool_environment_factory("math:Sample-v0-python")  # doctest: +SKIP
        >>> trainer = GRPOTrainer(model, args=args, train_dataset=factory.dataset(64),
        ...                       environment_factory=factory, reward_funcs=[factory.reward])  # doctest: +SKIP

    Args:
        env_id: A registered id whose env has a tool set (``ToolEnvWrapper`` outside).
        name: The name of its reward function (``gem_reward:<name>``) and metrics (``gem/<name>/...``);
            defaults to ``env_id``. Not passed to the env.
        **env_kwargs: ``gem_core.make`` options (e.g. ``tool_wrapper={"max_tool_calls": 3}``).

    Raises:
        ConfigError: the env has no tool set, or a tool cannot be a method (see :func:`tool_method`).
        gem_core.errors.EnvNotFound: the id is not registered.
    """
    return GemToolEnvironmentFactory(env_id, name=name, **env_kwargs)


@dataclass
class GemToolEnvironments:
    """Several gem tool envs for one TRL run: TRL's dict ``environment_factory``, their rewards and a dataset.

    Built by :func:`tool_environment_factories`.

    Attributes:
        factories: One :class:`GemToolEnvironmentFactory` per name; pass it as ``environment_factory``.
    """

    factories: dict[str, GemToolEnvironmentFactory]

    @property
    def rewards(self) -> list[Callable[..., list[float | None]]]:
        """One reward function per env (``gem_reward:<name>``): pass it as ``reward_funcs``."""
        return [factory.reward for factory in self.factories.values()]

    def dataset(self, num_prompts: int | Mapping[str, int], *, seed: int = 0, system_prompt: str | None = None) -> Any:
        """Every env's rows in one ``datasets.Dataset``, each with its ``environment`` name and ``seed``.

        Args:
            num_prompts: Rows per env, or a number per name (every name needs one).
            seed: Each env's first seed.
            system_prompt: A system message before each user message, if any.
        """
        from datasets import concatenate_datasets

        counts = dict(num_prompts) if isinstance(num_prompts, Mapping) else dict.fromkeys(self.factories, num_prompts)
        if set(counts) != set(self.factories):
            raise ConfigError(
                f"num_prompts names {sorted(counts)}, the environments are {sorted(self.factories)}: give every one"
            )
        parts = [
            factory.dataset(counts[name], seed=seed, system_prompt=system_prompt, environment=name)
            for name, factory in self.factories.items()
        ]
        return concatenate_datasets(parts)

    def close(self) -> None:
        """Close every factory's envs; idempotent."""
        for factory in self.factories.values():
            factory.close()

    def __enter__(self) -> GemToolEnvironments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tool_environment_factories(envs: Mapping[str, str | tuple[str, Mapping[str, Any]]]) -> GemToolEnvironments:
    """Several gem tool envs for TRL's dict ``environment_factory``, named by their keys.

    Example:
        >>> envs = tool_environment_factories({"math": "math:GSM8K-python",
        ...                                    "qa": ("qa:HotpotQA-search", {"metric": "f1"})})  # doctest: +SKIP
        >>> trainer = GRPOTrainer(model, args=args, train_dataset=envs.dataset(64),
        ...                       environment_factory=envs.factories, reward_funcs=envs.rewards)  # doctest: +SKIP

    Each reward function grades its own env's rollouts and returns ``None`` for the others' rows, so
    TRL's total reward is each rollout's own env's reward, and each env has its own log columns
    (``rewards/gem_reward:<name>/mean``...).

    Args:
        envs: Name (the dataset's ``environment`` value) to env id, or to ``(env id, make options)``.

    Raises:
        ConfigError: no envs, or one of them cannot be an ``environment_factory`` env.
    """
    if not envs:
        raise ConfigError("tool_environment_factories needs at least one env: {name: env_id, ...}")
    factories: dict[str, GemToolEnvironmentFactory] = {}
    try:
        for name, target in envs.items():
            env_id, kwargs = (target, {}) if isinstance(target, str) else (target[0], dict(target[1]))
            factories[name] = GemToolEnvironmentFactory(env_id, name=name, **kwargs)
    except BaseException:
        for factory in factories.values():
            factory.close()
        raise
    return GemToolEnvironments(factories)
