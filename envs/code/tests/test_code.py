import pytest

import gem_core
from gem_code.env import IOTest, extract_code, harness, outputs_match, parse_tests
from gem_code.plugin import HUB_DATASETS
from gem_core.errors import ConfigError, DatasetUnavailable
from gem_core.testing import check_env

# This machine may lack user namespaces; the sandbox then says once that it fell back to weaker isolation.
pytestmark = pytest.mark.filterwarnings("ignore::gem_core.errors.SandboxIsolationWarning")

SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
PRIMES = """Sieve:
```python
import sys
n = int(sys.stdin.readline())
sieve = bytearray([1]) * (n + 1)
sieve[:2] = b"\\x00\\x00"[: n + 1]
for i in range(2, int(n ** 0.5) + 1):
    if sieve[i]:
        sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))
print(sum(sieve))
```"""


def test_sample_passes_check_env():
    check_env(gem_core.make("code:Sample-v0"), env_factory=lambda: gem_core.make("code:Sample-v0"))


def test_gem_ids_are_registered():
    assert {i for i, *_ in HUB_DATASETS} <= set(gem_core.list_envs())


def test_correct_program_passes_every_test():
    env = gem_core.make("code:Sample-v0")
    obs, _ = env.reset(options={"index": 0})
    assert "sum" in obs and "```python" in obs
    _, reward, terminated, _, info = env.step("Here you go:\n" + SUM)
    assert (reward, terminated, info["success"], info["tests_passed"], info["tests_run"]) == (1.0, True, True, 3, 3)


def test_stdin_as_a_file_and_future_imports():
    env = gem_core.make("code:Sample-v0")
    env.reset(options={"index": 3})
    assert env.step(PRIMES)[1] == 1.0
    env.reset(options={"index": 1})
    code = (
        "```python\nfrom __future__ import annotations\nimport sys\n"
        "print(sys.stdin.buffer.read().decode().strip()[::-1])\n```"
    )
    assert env.step(code)[1] == 1.0


@pytest.mark.parametrize(
    ("program", "failure"),
    [
        ("```python\nprint(42)\n```", "wrong output"),
        ("```python\nraise SystemExit(3)\n```", "exit"),
        ("```python\n1/0\n```", "ZeroDivisionError"),
        ("```python\nwhile True: pass\n```", "timeout"),
    ],
    ids=["wrong", "exit-code", "exception", "infinite-loop"],
)
def test_failing_programs_score_zero(program, failure):
    env = gem_core.make("code:Sample-v0", timeout_s=1.0)
    env.reset(options={"index": 0})
    _, reward, *_, info = env.step(program)
    assert reward == 0.0 and not info["success"]
    assert failure in info["first_failure"] or failure in str(info)


def test_partial_credit_is_the_fraction_passed():
    env = gem_core.make("code:Sample-v0", partial_credit=True)
    env.reset(options={"index": 2})  # max of n integers; this one breaks on all-negative input
    program = "```python\ninput()\nprint(max([0] + list(map(int, input().split()))))\n```"
    _, reward, *_, info = env.step(program)
    assert reward == pytest.approx(1 / 3) and (info["tests_passed"], info["tests_run"]) == (1, 3)


def test_max_tests_keeps_the_longest_inputs():
    env = gem_core.make("code:Sample-v0", max_tests=1)
    env.reset(options={"index": 0})
    _, reward, *_, info = env.step("```python\nprint(2000000000)\n```")
    assert reward == 1.0 and info["tests_run"] == 1


def test_no_code_block_is_a_format_error():
    env = gem_core.make("code:Sample-v0", format_error_reward=-0.1)
    env.reset(options={"index": 0})
    _, reward, *_, info = env.step("print(1)")
    assert reward == -0.1 and info["format_error"]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("```py\na\n``` then ```\nb\n```", "b\n"),
        ("```Python3\nc\n```", "c\n"),
        ("no code", None),
        ("```python\n```", None),
    ],
    ids=["python", "last-block", "python3", "none", "empty"],
)
def test_extract_code(text, code):
    assert extract_code(text) == code


@pytest.mark.parametrize(
    "cell",
    [
        {"inputs": ["1\n"], "outputs": ["2\n"]},
        [{"input": "1\n", "output": "2\n"}],
        '{"inputs": ["1\\n"], "outputs": ["2\\n"]}',
    ],
    ids=["dict-of-lists", "list-of-dicts", "json"],
)
def test_parse_tests(cell):
    assert parse_tests(cell) == [IOTest("1\n", "2\n")]


def test_parse_tests_rejects_other_shapes():
    with pytest.raises(ValueError, match="inputs"):
        parse_tests({"in": []})
    with pytest.raises(ValueError, match="2 test inputs but 1"):
        parse_tests({"inputs": ["a", "b"], "outputs": ["c"]})


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [("1 2\n", "1 2", True), ("1 2  \n\n", "1 2\n", True), ("1  2", "1 2", False), ("a\nb", "a\r\nb", True)],
    ids=["newline", "trailing-space", "inner-space", "crlf"],
)
def test_outputs_match(actual, expected, same):
    assert outputs_match(actual, expected) is same


def test_harness_is_plain_python():
    compile(harness("print(input())", "x\n"), "h", "exec")


def test_bad_config_and_offline_hub():
    with pytest.raises(ConfigError, match="max_tests"):
        gem_core.make("code:Sample-v0", max_tests=0)
    with pytest.raises(DatasetUnavailable, match="axon-rl/TACO-8k"):
        gem_core.make("code:Taco8k")
