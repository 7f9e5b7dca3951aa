"""Harbor's terminus-2 agent on a gem terminal task, its model pointed at the capture gateway.

Harbor (Python >= 3.12, not a gem dependency) runs in its own interpreter, ``--harbor-python``;
this script (gem's interpreter) serves the gateway on loopback, converts a gem shipped terminal
task (Terminal-Bench v1 form, ``envs/terminal/gem_terminal/tasks/<name>``) into a Harbor task
folder, starts ``harbor run -a terminus-2 -m openai/<model>`` with terminus-2's ``api_base`` set
to the gateway's session URL (``http://127.0.0.1:PORT/s/<key>/v1``), then:

* reads the episode's reward from Harbor's own verifier run (the task's tests in the container);
* ends the gateway session with that reward and checks every captured call token-exact against
  the engine's own record (the prompt ids it got, the ids it answered);
* counts the branch points (drift) and records the request shapes terminus-2 sent (which body
  fields, which sampling parameters) through litellm.

Engines (``--engine``):

* ``scripted``: a generate function that answers terminus-2's JSON protocol with the task's
  reference solution (first call: the solution's commands; then ``task_complete`` twice, as
  terminus-2 asks for a confirmation), encoded with a locally built chat tokenizer. It makes the
  task solvable, so the reward is the verifier's judgement of a real run; the "model" is scripted.
* ``tiny``: a real transformers model (a tiny Qwen2 built from a config, random weights, sampled
  through gem eval's HF generate function): real sampling, unreadable replies; terminus-2 answers
  them with its parse-error feedback until ``--max-turns``; the reward is 0.

The task's image is replaced by ``--image`` (a local stand-in with tmux and python3, as
docs/terminal.md's Harbor runs do: the machine reaches no image registry).

    python bench/harbor_gateway.py --harbor-python /tmp/harbor-venv/bin/python \
        --task envs/terminal/gem_terminal/tasks/text-csv-sum --engine scripted --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from gem_gateway.capture import Gateway, GatewayLimits
from gem_gateway.server import build_app

from gem_core.episode import Generation, TurnRequest

ROOT = Path(__file__).resolve().parent.parent
#: Harbor's CLI, run by its own interpreter
HARBOR_CLI = "import sys; from harbor.cli.main import app; sys.exit(app())"


def harbor_task(source: Path, dest: Path, image: str) -> Path:
    """Write ``source`` (a gem v1 task folder) as a Harbor task folder under ``dest``; returns it."""
    spec = yaml.safe_load((source / "task.yaml").read_text())
    task = dest / source.name
    shutil.rmtree(task, ignore_errors=True)
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text(spec["instruction"])
    (task / "task.toml").write_text(
        'version = "1.0"\n\n[verifier]\n'
        f"timeout_sec = {float(spec.get('max_test_timeout_sec', 60))}\n\n[agent]\n"
        f"timeout_sec = {float(spec.get('max_agent_timeout_sec', 300))}\n"
    )
    dockerfile = (source / "Dockerfile").read_text()
    (task / "environment" / "Dockerfile").write_text(re.sub(r"(?m)^FROM \S+", f"FROM {image}", dockerfile, count=1))
    for item in source.iterdir():
        if item.is_dir():
            shutil.copytree(item, task / "environment" / item.name)
    shutil.copy(source / "run-tests.sh", task / "tests" / "run-tests.sh")
    # Harbor's verifier contract: a number in /logs/verifier/reward.txt
    # gem's checkers run the agent's programs through its as-agent helper (the agent's uid) and keep scratch
    # files in /checker/work; Harbor's verifier has neither: the programs run as the verifier's user
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier /checker/work\n"
        'as-agent() { "$@"; }\nexport -f as-agent\n'
        "if bash /tests/run-tests.sh; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    shutil.copy(source / "solution.sh", task / "solution" / "solve.sh")
    return task


def solution_commands(source: Path) -> list[str]:
    """The reference solution's command lines (comments, blank lines and ``set -e`` left out)."""
    lines = []
    for line in (source / "solution.sh").read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and stripped != "set -e":
            lines.append(stripped)
    return lines


class Recorded:
    """A generate function with the engine's own record of each request and answer."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.log: list[tuple[list[int], list[int]]] = []

    async def __call__(self, request: TurnRequest) -> Generation:
        generation = await self.inner(request)
        self.log.append((list(request.prompt_ids or []), list(generation.token_ids or [])))
        return generation


class ScriptedTerminus:
    """Answers terminus-2's prompts with the reference solution (a scripted model, not a trained one).

    The main loop gets terminus-2's JSON: first the solution's commands, then ``task_complete``
    (twice: terminus-2 asks for a confirmation). Its context summarisation's three sub-calls (a
    summary, questions about it, answers) get plain text.
    """

    def __init__(self, tokenizer: Any, commands: list[str]) -> None:
        self.tokenizer = tokenizer
        self.commands = commands
        self.sent_commands = False

    def reply(self, messages: list[dict[str, Any]]) -> str:
        last = messages[-1]["content"] if messages else ""
        if "hand off your work to another AI agent" in last:
            return "Summary: I ran the reference solution's commands; the task should be done. Check and finish."
        if "asking several questions" in last:
            return "1. Did the commands succeed?\n2. Is the output file in place?"
        if "The next agent has a few questions" in last:
            return "1. Yes.\n2. Yes."
        if not self.sent_commands:
            self.sent_commands = True
            answer: dict[str, Any] = {
                "analysis": "The task is not done yet.",
                "plan": "Run the reference solution's commands.",
                "commands": [{"keystrokes": f"{c}\n", "duration": 1.0} for c in self.commands],
                "task_complete": False,
            }
        else:
            answer = {"analysis": "Done.", "plan": "Mark the task complete.", "commands": [], "task_complete": True}
        return json.dumps(answer, indent=2)

    async def __call__(self, request: TurnRequest) -> Generation:
        text = self.reply(list(request.messages or []))
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")


def tiny_engine(tokenizer: Any, max_context: int, folder: Path) -> Any:
    """gem eval's HF generate function on a tiny Qwen2 from a config (random weights, sampled)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from gem_core.eval.backends import HFBackend, Sampling

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=max_context,
        eos_token_id=tokenizer.eos_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    backend = HFBackend(str(folder), sampling=Sampling(temperature=1.0, max_tokens=128, seed=0), device="cpu")

    async def generate(request: TurnRequest) -> Generation:
        return await backend.generate(request, request.request_id)

    return generate


@contextmanager
def serve_logged(gateway: Gateway) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The gateway on loopback in a thread, every request body kept (to report terminus-2's request shapes)."""
    bodies: list[dict[str, Any]] = []

    @web.middleware
    async def keep(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "POST":
            try:
                bodies.append({"path": request.path, "body": await request.json()})
            except ValueError:
                bodies.append({"path": request.path, "body": None})
        return await handler(request)

    app = build_app(gateway)
    app.middlewares.append(keep)
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    stop = asyncio.Event()
    started = threading.Event()

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.append(f"http://127.0.0.1:{port}")
        started.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("the gateway did not start within 30 s")
    try:
        yield ready[0], bodies
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


def trial_result(jobs: Path) -> dict[str, Any]:
    """The one trial's result.json under Harbor's jobs folder."""
    results = [p for p in jobs.rglob("result.json") if p.parent.parent.parent == jobs]
    if len(results) != 1:
        raise RuntimeError(f"expected one trial result under {jobs}, found {[str(p) for p in results]}")
    return json.loads(results[0].read_text())


def shapes(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """What terminus-2 sent: paths, body fields, roles, parameter values (as counts)."""
    fields: dict[str, int] = {}
    values: dict[str, list[Any]] = {}
    roles: dict[str, int] = {}
    for entry in bodies:
        body = entry["body"] or {}
        for name, value in body.items():
            fields[name] = fields.get(name, 0) + 1
            if name not in ("messages",):
                seen = values.setdefault(name, [])
                if value not in seen:
                    seen.append(value)
        for message in body.get("messages") or ():
            roles[message.get("role")] = roles.get(message.get("role"), 0) + 1
    return {
        "paths": sorted({e["path"] for e in bodies}),
        "fields": fields,
        "values": values,
        "roles": roles,
        "content_types": sorted(
            {type(m.get("content")).__name__ for e in bodies for m in (e["body"] or {}).get("messages") or ()}
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harbor-python", required=True, help="the interpreter Harbor is installed in (>= 3.12)")
    parser.add_argument("--task", type=Path, default=ROOT / "envs/terminal/gem_terminal/tasks/text-csv-sum")
    parser.add_argument("--engine", choices=("scripted", "tiny"), default="scripted")
    parser.add_argument("--image", default="gem-harbor-standin:1", help="local image with tmux and python3")
    parser.add_argument(
        "--docker-config",
        default=None,
        help="DOCKER_CONFIG for Harbor (a folder whose cli-plugins/ holds a Compose V2 plugin, when docker has none)",
    )
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument(
        "--context-limit",
        type=int,
        default=None,
        help="the model's context as terminus-2 sees it (model_info.max_input_tokens): a small one makes it "
        "summarise its context (below 8000 free tokens, counted with litellm's token counter)",
    )
    parser.add_argument("--temperature", type=float, default=None, help="terminus-2's temperature (sent per call)")
    parser.add_argument("--episodes", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None, help="where the task folder and Harbor's jobs go")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from gem_core.testing_tokenizers import build_chat_tokenizer

    tokenizer = build_chat_tokenizer("chatml_tools")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gem-harbor-gateway-"))
    workdir.mkdir(parents=True, exist_ok=True)
    task = harbor_task(args.task, workdir / "tasks", args.image)
    limits = GatewayLimits(default_max_tokens=512 if args.engine == "scripted" else 128)
    report: dict[str, Any] = {"task": args.task.name, "engine": args.engine, "image": args.image, "episodes": []}
    for episode_no in range(args.episodes):
        inner: Any = (
            ScriptedTerminus(tokenizer, solution_commands(args.task))
            if args.engine == "scripted"
            else tiny_engine(tokenizer, limits.max_context_tokens, workdir / "tiny-model")
        )
        engine = Recorded(inner)
        gateway = Gateway(engine, tokenizer, model_name="policy", tool_parser="none", limits=limits)
        key = f"{args.task.name}-{episode_no}"
        jobs = workdir / f"jobs-{key}-{int(time.time())}"
        with serve_logged(gateway) as (url, bodies):
            command = [
                args.harbor_python, "-c", HARBOR_CLI, "run", "-p", str(task), "-a", "terminus-2",
                "-m", "openai/policy", "--ak", f"api_base={url}/s/{key}/v1", "--ak", f"max_turns={args.max_turns}",
                "--ak", "record_terminal_session=false", "-o", str(jobs), "-n", "1", "-y", "-q",
            ]  # fmt: skip
            if args.context_limit is not None:
                info = {"max_input_tokens": args.context_limit, "max_output_tokens": limits.default_max_tokens}
                command += ["--ak", f"model_info={json.dumps(info)}"]
            if args.temperature is not None:
                command += ["--ak", f"temperature={args.temperature}"]
            env = {**os.environ, "OPENAI_API_KEY": "unused-by-the-gateway"}
            if args.docker_config:
                env["DOCKER_CONFIG"] = args.docker_config
            started = time.time()
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
            seconds = time.time() - started
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
        result = trial_result(jobs)
        rewards = (result.get("verifier_result") or {}).get("rewards") or {}
        reward = float(rewards.get("reward", 0.0))
        session = gateway.sessions[key]
        calls = sorted(session.calls, key=lambda c: c.index)
        episode = gateway.finish(key, reward)
        exact = len(calls) == len(engine.log) and all(
            turn.prompt_token_ids == seen[0] and turn.action_token_ids == seen[1]
            for turn, seen in zip(episode.turns, engine.log, strict=False)
        )
        report["episodes"].append(
            {
                "key": key,
                "harbor_returncode": run.returncode,
                "harbor_seconds": round(seconds, 1),
                "exception": (result.get("exception_info") or {}).get("exception_type"),
                "reward": reward,
                "calls": len(calls),
                "token_exact": exact,
                "branch_points": episode.metadata["branch_points"],
                "branches": [c.branch for c in calls],
                "prompt_tokens": [len(c.prompt_ids) for c in calls],
                "completion_tokens": [len(c.completion_ids) for c in calls],
                "finish_reasons": [c.finish_reason for c in calls],
                "request_shapes": shapes(bodies),
            }
        )
        print(json.dumps(report["episodes"][-1], indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0 if all(e["token_exact"] for e in report["episodes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
