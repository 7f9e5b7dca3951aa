"""Single-turn code env: the model writes a program; it runs on each test's stdin in the python sandbox."""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, ValidationError

from gem_core.errors import ConfigError
from gem_core.registry import format_config_error
from gem_dataset_env.single_turn import DatasetEnv, DatasetEnvConfig

__all__ = ["CODE_PROMPT", "CodeEnv", "CodeEnvConfig", "IOTest", "extract_code", "outputs_match", "parse_tests"]

CODE_PROMPT = (
    "{question}\n\nWrite a complete Python 3 program that reads the input from standard input and prints the "
    "answer to standard output. Put the program in a single ```python code block."
)

_FENCE_RE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str | None:
    """The last fenced code block of the response (``python``/``py`` or untagged), or ``None``."""
    blocks = [b for b in _FENCE_RE.findall(response) if b.strip()]
    return str(blocks[-1]) if blocks else None


@dataclass(frozen=True)
class IOTest:
    """One stdin/stdout test."""

    input: str
    output: str


def parse_tests(cell: Any) -> list[IOTest]:
    """Tests from a dataset cell.

    Accepts ``{"inputs": [...], "outputs": [...]}``, a list of ``{"input", "output"}`` dicts,
    or either one JSON-encoded.

    Raises:
        ValueError: the cell has neither shape.
    """
    if isinstance(cell, str):
        cell = json.loads(cell)
    if isinstance(cell, dict) and "inputs" in cell and "outputs" in cell:
        if len(cell["inputs"]) != len(cell["outputs"]):
            raise ValueError(f"{len(cell['inputs'])} test inputs but {len(cell['outputs'])} outputs")
        return [IOTest(str(i), str(o)) for i, o in zip(cell["inputs"], cell["outputs"], strict=True)]
    if isinstance(cell, list) and all(isinstance(t, dict) and "input" in t and "output" in t for t in cell):
        return [IOTest(str(t["input"]), str(t["output"])) for t in cell]
    raise ValueError('tests must be {"inputs": [...], "outputs": [...]} or [{"input": ..., "output": ...}, ...]')


def outputs_match(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and blank lines at the ends."""

    def canon(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip().splitlines()]

    return canon(actual) == canon(expected)


# Runs the solution with the test input as stdin; exec keeps `from __future__` imports and line numbers valid.
_HARNESS = (
    "import io, sys\n"
    "sys.stdin = io.TextIOWrapper(io.BytesIO({data!r}), encoding='utf-8')\n"
    "exec(compile({code!r}, 'solution.py', 'exec'), {{'__name__': '__main__', '__builtins__': __builtins__}})\n"
)


def harness(code: str, stdin: str) -> str:
    """A program that runs ``code`` with ``stdin`` as its standard input."""
    return _HARNESS.format(data=stdin.encode(), code=code)


class CodeEnvConfig(DatasetEnvConfig):
    """Configuration of :class:`CodeEnv` (data fields in :class:`~gem_dataset_env.single_turn.DatasetEnvConfig`).

    Attributes:
        answer_column: The column with the tests.
        partial_credit: Reward the fraction of tests passed instead of 1 only when all pass.
        max_tests: Run at most this many tests per answer (those with the longest inputs, as in GEM).
        timeout_s: Wall-clock limit per test run.
        memory_mb: Address-space limit of the program.
        sandbox: Further :class:`gem_tool_python.SandboxConfig` fields (``pool_size``, ``isolation``...).
    """

    question_column: str = "problem"
    answer_column: str = "tests"
    prompt: str = CODE_PROMPT
    partial_credit: bool = False
    max_tests: int = Field(12, ge=1)
    timeout_s: float = Field(5.0, gt=0)
    memory_mb: int = Field(1024, ge=64)
    sandbox: dict[str, Any] = Field(default_factory=dict)


_POOLS: dict[str, Any] = {}
_POOLS_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None


def _sandbox(settings: dict[str, Any]) -> Any:
    """One sandbox pool per distinct settings, shared by every code env of the process."""
    global _EXECUTOR
    from gem_tool_python.sandbox import SandboxConfig, SandboxPool

    key = json.dumps(settings, sort_keys=True, default=str)
    with _POOLS_LOCK:
        if key not in _POOLS:
            try:
                config = SandboxConfig.model_validate(settings)
            except ValidationError as exc:
                raise ConfigError(
                    format_config_error("code env sandbox settings (sandbox=..., timeout_s, memory_mb)", exc)
                ) from exc
            _POOLS[key] = SandboxPool(config)
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(8, thread_name_prefix="gem-code-tests")
        return _POOLS[key], _EXECUTOR


class CodeEnv(DatasetEnv):
    """Solve a programming problem; the program runs on every test's stdin in the python sandbox.

    Reward 1 when all (selected) tests pass, 0 otherwise; with ``partial_credit`` the fraction
    passed. ``info`` gets ``success``, ``format_error`` (no code block), ``tests_passed``,
    ``tests_run`` and ``first_failure`` (what went wrong on the first failing test).
    """

    config_model: ClassVar[type[DatasetEnvConfig]] = CodeEnvConfig
    config: CodeEnvConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        settings = {"timeout_s": self.config.timeout_s, "memory_mb": self.config.memory_mb, **self.config.sandbox}
        self.pool, self.executor = _sandbox(settings)

    def select_tests(self, tests: list[IOTest]) -> list[IOTest]:
        """At most ``max_tests`` tests, preferring the longest inputs (they tend to be the hard ones)."""
        if len(tests) <= self.config.max_tests:
            return tests
        order = sorted(range(len(tests)), key=lambda i: len(tests[i].input), reverse=True)
        return [tests[i] for i in sorted(order[: self.config.max_tests])]

    def score(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        code = extract_code(action)
        info: dict[str, Any] = {"format_error": code is None, "success": False}
        if code is None:
            return self.config.format_error_reward, info
        info["parsed_action"] = code
        try:
            tests = self.select_tests(parse_tests(row[self.config.answer_column]))
        except (ValueError, TypeError) as exc:  # a bad row is the dataset's fault: say so, score 0
            info["tests_error"] = str(exc)
            return 0.0, info
        results = list(self.executor.map(lambda t: self.pool.run(harness(code, t.input)), tests))
        passed = 0
        for test, result in zip(tests, results, strict=True):
            if result.ok and outputs_match(result.stdout, test.output):
                passed += 1
            elif "first_failure" not in info:
                info["first_failure"] = (
                    f"{result.status}: {result.error}" if not result.ok else "wrong output"
                ) + f" (stdout {result.stdout[:200]!r})"
        info.update(tests_passed=passed, tests_run=len(tests), success=passed == len(tests) > 0)
        if self.config.partial_credit:
            return (passed / len(tests) if tests else 0.0), info
        return (1.0 if info["success"] else 0.0), info

    def sample_random_action(self) -> str:
        return f"```python\nprint({self.py_random.randint(0, 9)})\n```"
