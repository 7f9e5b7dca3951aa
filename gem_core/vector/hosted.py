"""Members hosted out of the caller's process (worker processes, Ray actors), with crash recovery.

A :class:`Host` is one worker process or actor holding some members (:class:`MemberHost`
runs inside it). A :class:`HostedGroup` sends each host one message per batch with all
its envs' requests, then collects the replies, so hosts work in parallel and a cheap env
pays one round trip per batch, not per env.

When a host dies (``os._exit``, a signal, the OOM killer, ``ray.kill``), the group starts a
replacement and rebuilds the host's envs there with their seed streams. Their episodes are
gone: the env that was running when the host died, and every other env of that host, fail
their next ``step`` with :class:`~gem_core.errors.EnvWorkerCrashed` (recovered at once
with ``on_error="reset"``). Envs on other hosts are not touched. A ``reset`` request that
was cut short on another env's account is simply served again by the replacement.

The wire: the group pickles each host's payload itself (so a payload that does not pickle
fails before anything is sent), and the host side answers with one pickled frame per
message. A frame that does not unpickle in the parent is asked for again, one blob per env,
so only the envs whose results do not unpickle fail (:class:`~gem_core.errors.EnvResultError`,
with ``on_error`` applied on the host side); a host whose replies cannot be read at all, or
that misses ``step_timeout``, is treated as dead: replaced, never reused.
"""

from __future__ import annotations

import abc
import contextlib
import os
import pickle
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Union

from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.errors import ConfigError, EnvStepTimeout, EnvWorkerCrashed
from gem_core.seed_streams import episode_seed
from gem_core.vector.base import Group, Pending
from gem_core.vector.member import (
    AutoresetMode,
    Failure,
    Member,
    MemberState,
    OnError,
    Outcome,
    Request,
    Reset,
    describe_env,
    portable,
)

__all__ = ["HOST_TAG", "BuildSpec", "Host", "HostDied", "HostedGroup", "MemberHost", "kill_tagged"]

#: Environment variable a host sets for the processes its envs start, so they can be found and killed.
HOST_TAG = "GEM_VECTOR_HOST"


def kill_tagged(token: str) -> int:
    """SIGKILL every process whose environment carries ``GEM_VECTOR_HOST=token``; returns how many (Linux only).

    Finds what a host's envs started even after it left the host's process group or session
    (``setsid``) or was orphaned. A process that clears its environment before ``exec`` escapes.
    """
    if not os.path.isdir("/proc"):
        return 0
    needle = f"\0{HOST_TAG}={token}\0".encode()
    me, killed = os.getpid(), 0
    for _ in range(5):  # a process may fork while its siblings are killed
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    environ = b"\0" + f.read()
            except OSError:
                continue
            if needle in environ or environ.endswith(needle[:-1]):
                found.append(int(entry.name))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
    return killed


class BuildSpec(NamedTuple):
    """What a host needs to build one member."""

    env_index: int
    factory: Callable[[], Env | AsyncEnv]
    autoreset_mode: AutoresetMode
    on_error: OnError
    state: MemberState | None


#: A request on the wire: a bare ``str`` is a :class:`Step` (cheaper to pickle than the tuple).
WireRequest = Union[str, Request]
#: A host's reply per request: the outcome and the member's seed stream position afterwards.
Reply = tuple[Outcome, "int | None", int]


class MemberHost:
    """The members living in one worker process or actor (runs on the remote side)."""

    def __init__(self) -> None:
        self.members: dict[int, Member] = {}
        self._last: list[Reply] = []  # the replies of the last run, until the parent has read them

    def build(
        self, specs: Sequence[BuildSpec], mark: Callable[[int], None] | None = None
    ) -> list[tuple[BaseException | None, str | None]]:
        """Build each member (replacing one with the same index); per spec, ``(build error or None, env id)``."""
        built: list[tuple[BaseException | None, str | None]] = []
        for spec in specs:
            if mark is not None:
                mark(spec.env_index)
            try:
                env = to_sync(spec.factory())
            except Exception as exc:
                built.append((portable(exc), None))
                continue
            old = self.members.pop(spec.env_index, None)
            if old is not None:
                with contextlib.suppress(Exception):  # the env being replaced is already broken
                    old.env.close()
            member = Member(spec.env_index, env, spec.autoreset_mode, spec.on_error, spec.state)
            self.members[spec.env_index] = member
            built.append((None, member.env_id))
        return built

    def run(self, items: Sequence[tuple[int, WireRequest]], mark: Callable[[int], None] | None = None) -> list[Reply]:
        """Serve each ``(index, request)``; ``mark(index)`` is called before each, so a crash can be pinned on it."""
        replies: list[Reply] = []
        members = self.members
        for index, request in items:
            if mark is not None:
                mark(index)
            member = members[index]
            out = member.step(request) if type(request) is str else member.handle(request)  # type: ignore[arg-type]
            replies.append((out, member.seeds.root, member.seeds.episodes))
        return replies

    def close(self) -> list[BaseException]:
        """Close every env; returns their close errors."""
        errors: list[BaseException] = []
        for member in self.members.values():
            try:
                member.env.close()
            except Exception as exc:
                errors.append(portable(exc))
        self.members.clear()
        return errors

    def recover(self, items: Sequence[tuple[int, str]]) -> list[Reply]:
        """Per ``(index, problem)``: the member's last result did not reach the parent; apply ``on_error``."""
        replies: list[Reply] = []
        for index, problem in items:
            member = self.members[index]
            out = member.recover(member.failure(member.result_error(problem), ""))
            replies.append((out, member.seeds.root, member.seeds.episodes))
        return replies

    def serve(self, op: str, data: bytes, mark: Callable[[int], None] | None = None) -> bytes:
        """Serve one message (``data`` is the pickled payload); returns the pickled ``(status, value)`` frame.

        Never raises: a failure of the message itself comes back as ``("err", exception)``.
        """
        try:
            payload = pickle.loads(data)
            if op == "run":
                return self._frame([i for i, _ in payload], self.run(payload, mark))
            if op == "recover":
                return self._frame([i for i, _ in payload], self.recover(payload))
            if op == "split":  # the last frame did not unpickle in the parent: one blob per env
                return pickle.dumps(("ok", [pickle.dumps(reply) for reply in self._last]))
            if op == "build":
                return pickle.dumps(("ok", self.build(payload, mark)))
            if op == "shutdown":
                return pickle.dumps(("ok", self.close()))
            raise ValueError(f"unknown host op {op!r}")
        except Exception as exc:
            return pickle.dumps(("err", portable(exc)))

    def _frame(self, indices: list[int], replies: list[Reply]) -> bytes:
        """The frame of ``replies``; a reply that does not pickle becomes that env's failure (``on_error`` applied)."""
        try:
            frame = pickle.dumps(("ok", replies))
        except Exception:
            replies = [self._portable_reply(i, reply) for i, reply in zip(indices, replies, strict=True)]
            frame = pickle.dumps(("ok", replies))
        self._last = replies
        return frame

    def _portable_reply(self, index: int, reply: Reply) -> Reply:
        try:
            pickle.dumps(reply)
            return reply
        except Exception as exc:
            problem = f"its result does not pickle, so it cannot leave the worker ({type(exc).__name__}: {exc})"
        (recovered,) = self.recover([(index, problem)])
        try:
            pickle.dumps(recovered)
            return recovered
        except Exception as exc:  # the recovery's result does not pickle either
            member = self.members[index]
            error = member.result_error(f"{problem}; the recovery reset's result does not pickle either ({exc})")
            return (member.failure(error, ""), member.seeds.root, member.seeds.episodes)


class HostDied(Exception):
    """A host stopped answering: it died, its replies could not be read, or it missed ``step_timeout``.

    ``culprit`` is the env it was serving, when known; ``timed_out`` says it is hung, not dead.
    """

    def __init__(self, culprit: int | None, detail: str, timed_out: bool = False) -> None:
        super().__init__(detail)
        self.culprit = culprit
        self.detail = detail
        self.timed_out = timed_out


class Host(abc.ABC):
    """One worker process or actor and the env indices it hosts.

    ``send`` never blocks on the host's work; ``receive`` waits for the frame answering the
    last ``send`` and raises :class:`HostDied` if the host died or missed the timeout.
    """

    def __init__(self, indices: Sequence[int]) -> None:
        self.indices = list(indices)

    def dumps(self, payload: Any) -> bytes:
        """Pickle a payload for this host."""
        return pickle.dumps(payload)

    @abc.abstractmethod
    def send(self, op: str, data: bytes) -> None:
        """Send one message: ``op`` and its pickled payload (see :meth:`MemberHost.serve`)."""

    @abc.abstractmethod
    def receive(self, timeout: float | None = None) -> bytes:
        """The frame answering the last ``send``; :class:`HostDied` after ``timeout`` seconds without one."""

    @abc.abstractmethod
    def restart(self) -> None:
        """Replace the host (dead, hung or unreadable) with a fresh, empty one; the old one is never reused."""

    @abc.abstractmethod
    def close(self) -> list[BaseException]:
        """Close the envs and stop the host; returns the envs' close errors, never raises."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Names the host in messages (``worker process 1234``)."""

    def build_timeout_error(self, timeout: float) -> Exception:
        """The error when building missed its deadline (the Ray backend names the resources)."""
        return EnvStepTimeout(f"{self.describe()} did not build envs {self.indices} within {timeout}s")

    def call(self, op: str, payload: Any, timeout: float | None = None) -> Any:
        """Send, receive and decode; raises the host-side exception of an ``("err", ...)`` frame."""
        self.send(op, self.dumps(payload))
        return decode(self.receive(timeout))


def decode(frame: bytes) -> Any:
    """The value of a host's ``(status, value)`` frame; raises the host-side exception of an error frame."""
    status, value = pickle.loads(frame)
    if status == "err":
        raise value
    return value


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class HostedGroup(Group):
    """Members spread over hosts; one message per host per batch; dead, hung or unreadable hosts replaced.

    Args:
        hosts: The hosts; each one's ``indices`` say which envs it holds.
        factories: Per env index, a factory the host can run (picklable for processes).
        autoreset_mode: The vector env's autoreset mode.
        on_error: The vector env's ``on_error``.
        step_timeout: Seconds a batch may take on a host before the host is replaced (``None``: no limit).
        build_timeout: Seconds building may take (Ray: waiting for placement); ``None``: no limit.
    """

    def __init__(
        self,
        hosts: Sequence[Host],
        factories: dict[int, Callable[[], Env | AsyncEnv]],
        autoreset_mode: AutoresetMode,
        on_error: OnError,
        step_timeout: float | None = None,
        build_timeout: float | None = None,
    ) -> None:
        super().__init__(sorted(i for h in hosts for i in h.indices))
        self.hosts = list(hosts)
        self.host_of = {i: h for h in self.hosts for i in h.indices}
        self.factories = factories
        self.autoreset_mode = autoreset_mode
        self.on_error = on_error
        self.step_timeout = step_timeout
        self.build_timeout = build_timeout
        self.positions: dict[int, tuple[int | None, int]] = {i: (None, 0) for i in self.indices}
        self.env_ids: dict[int, str | None] = dict.fromkeys(self.indices)
        self._build_all(build_timeout)

    def _spec(self, index: int, lost: Failure | None = None) -> BuildSpec:
        root, episodes = self.positions[index]
        state = MemberState(root, episodes, lost)
        return BuildSpec(index, self.factories[index], self.autoreset_mode, self.on_error, state)

    def _seed(self, index: int) -> int | None:
        root, episodes = self.positions[index]
        return episode_seed(root, index, episodes - 1) if root is not None and episodes > 0 else None

    def _where(self, index: int, error: BaseException, phase: str) -> Failure:
        """A failure the group itself found (the host died or hung), naming the env's id and seed."""
        return Failure(index, error, "", env_id=self.env_ids.get(index), seed=self._seed(index), phase=phase)

    def _describe(self, index: int, phase: str) -> str:
        return describe_env(index, self.env_ids.get(index), self._seed(index), phase)

    def _build_all(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            try:
                frames = [(host, host.dumps([self._spec(i) for i in host.indices])) for host in self.hosts]
            except Exception as exc:
                raise ConfigError(
                    f"cannot send the env factories to their hosts: {exc}. Env factories must pickle: "
                    "use a module-level function or a functools.partial of one, not a lambda or closure"
                ) from exc
            for host, data in frames:
                host.send("build", data)
            for host, _ in frames:
                try:
                    built = decode(host.receive(_remaining(deadline)))
                except HostDied as died:
                    if died.timed_out and timeout is not None:
                        raise host.build_timeout_error(timeout) from None
                    where = f" while building env {died.culprit}" if died.culprit is not None else ""
                    raise EnvWorkerCrashed(f"{host.describe()} died{where}: {died.detail}") from None
                for index, (error, env_id) in zip(host.indices, built, strict=True):
                    if error is not None:
                        if hasattr(error, "add_note"):
                            error.add_note(f"while building env {index} in {host.describe()}")
                        raise error
                    self.env_ids[index] = env_id
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ batches
    def start(self, indices: list[int], requests: Sequence[Request]) -> Pending:
        return self._start(indices, requests)

    def start_steps(self, indices: list[int], actions: Sequence[str]) -> Pending:
        return self._start(indices, actions)

    def _start(self, indices: list[int], requests: Sequence[WireRequest]) -> Pending:
        buckets: dict[int, tuple[Host, list[int], list[tuple[int, WireRequest]]]] = {}
        for n, (i, request) in enumerate(zip(indices, requests, strict=True)):
            host = self.host_of[i]
            bucket = buckets.get(id(host))
            if bucket is None:
                bucket = buckets[id(host)] = (host, [], [])
            bucket[1].append(n)
            bucket[2].append((i, request))
        # every payload is pickled before anything is sent: a bad action must not leave hosts half-served
        try:
            frames = [host.dumps(items) for host, _, items in buckets.values()]
        except Exception as exc:
            raise ConfigError(f"cannot send the requests to the envs' hosts: {exc}. Actions must pickle") from exc
        for (host, _, _), data in zip(buckets.values(), frames, strict=True):
            host.send("run", data)

        def wait() -> list[Outcome]:
            # one deadline for the batch: the hosts work in parallel
            deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout
            outcomes: list[Outcome] = [()] * len(indices)
            for host, positions, items in buckets.values():  # every host's reply is read, whatever the others did
                for n, out in zip(positions, self._collect(host, items, deadline), strict=True):
                    outcomes[n] = out
            return outcomes

        return wait

    def _collect(self, host: Host, items: list[tuple[int, WireRequest]], deadline: float | None) -> list[Outcome]:
        try:
            frame = host.receive(_remaining(deadline))
            try:
                status, value = pickle.loads(frame)
            except Exception:  # some env's result does not unpickle here: ask for them one by one
                status, value = "ok", self._split(host, items, deadline)
        except HostDied as died:
            return self._recover(host, died, items)
        if status == "err":  # the host could not serve the message at all; the channel is still in step
            return [Failure(i, value, "", env_id=self.env_ids.get(i), phase="step") for i, _ in items]
        positions = self.positions
        outcomes: list[Outcome] = []
        for (index, _), (out, root, episodes) in zip(items, value, strict=True):
            positions[index] = (root, episodes)
            outcomes.append(out)
        return outcomes

    def _split(self, host: Host, items: list[tuple[int, WireRequest]], deadline: float | None) -> list[Reply]:
        """The last run's replies one by one; those that do not unpickle become failures (``on_error`` applied)."""
        host.send("split", host.dumps(None))
        try:
            blobs = decode(host.receive(_remaining(deadline)))
            if len(blobs) != len(items):
                raise ValueError(f"{len(blobs)} replies for {len(items)} requests")
        except HostDied:
            raise
        except Exception as exc:  # the channel's state is unknown: the host is replaced
            raise HostDied(None, f"its replies could not be read ({type(exc).__name__}: {exc})") from None
        replies: list[Reply | None] = []
        problems: list[tuple[int, int, str]] = []
        for k, ((index, _), blob) in enumerate(zip(items, blobs, strict=True)):
            try:
                replies.append(pickle.loads(blob))
            except Exception as exc:
                replies.append(None)
                problems.append(
                    (k, index, f"its result does not unpickle in the parent process ({type(exc).__name__}: {exc})")
                )
        if problems:
            host.send("recover", host.dumps([(index, problem) for _, index, problem in problems]))
            try:
                fixed = decode(host.receive(_remaining(deadline)))
            except HostDied:
                raise
            except Exception as exc:  # the recovery's result did not come back either: replace the host
                raise HostDied(None, f"its replies could not be read ({type(exc).__name__}: {exc})") from None
            for (k, _, _), reply in zip(problems, fixed, strict=True):
                replies[k] = reply
        return replies  # type: ignore[return-value]

    def _recover(
        self, host: Host, died: HostDied, items: list[tuple[int, WireRequest]], retry: bool = True
    ) -> list[Outcome]:
        """Replace the host, rebuild its envs as lost, and serve the batch's requests again where that is safe."""
        culprit = died.culprit
        running = f"while env {culprit} was running" if culprit is not None else f"while serving envs {host.indices}"
        what = "missed step_timeout" if died.timed_out else "died"
        message = f"{host.describe()} hosting envs {host.indices} {what} {running} ({died.detail})"
        phase = {i: ("reset" if type(r) is Reset else "step") for i, r in items}

        def lost(i: int) -> Failure:
            where = self._describe(i, phase.get(i, "idle"))
            if i == culprit or culprit is None:
                error: Exception = (EnvStepTimeout if died.timed_out else EnvWorkerCrashed)(f"{where}: {message}")
            else:
                error = EnvWorkerCrashed(f"{where} was lost with its host: {message}")
            return self._where(i, error, phase.get(i, "idle"))

        crash = {i: lost(i) for i in host.indices}
        try:
            host.restart()
            built = host.call("build", [self._spec(i, crash[i]) for i in host.indices], self.build_timeout)
        except Exception as exc:  # no replacement: every env of the batch on this host fails
            return [
                self._where(
                    i, EnvWorkerCrashed(f"{message}; replacing it failed: {type(exc).__name__}: {exc}"), phase[i]
                )
                for i, _ in items
            ]
        # The env that crashed the host is not asked to reset again (it would crash again); a
        # step request is served by the rebuilt member, which fails it (or recovers, on_error="reset").
        broken = {i for i, (e, _) in zip(host.indices, built, strict=True) if e is not None}
        outcomes: dict[int, Outcome] = {}
        again: list[tuple[int, WireRequest]] = []
        for i, request in items:
            if i in broken or (i == culprit and type(request) is Reset) or (not retry and type(request) is Reset):
                outcomes[i] = crash[i]
            else:
                again.append((i, request))
        if again:
            host.send("run", host.dumps(again))
            replies = None
            try:
                replies = decode(host.receive(self.step_timeout))
            except HostDied as second:
                if retry:
                    for (i, _), out in zip(again, self._recover(host, second, again, retry=False), strict=True):
                        outcomes[i] = out
                else:  # the replacement failed too: give up on this batch, and start another one
                    failed = EnvWorkerCrashed(f"{message}, and its replacement failed too ({second.detail})")
                    outcomes.update({i: self._where(i, failed, phase[i]) for i, _ in again})
                    self._replace(host, crash)
            except Exception as exc:  # unreadable: give up on this batch, and start another host
                failed = EnvWorkerCrashed(f"{message}; its replacement's reply could not be read ({exc})")
                outcomes.update({i: self._where(i, failed, phase[i]) for i, _ in again})
                self._replace(host, crash)
            if replies is not None:
                for (i, _), (out, root, episodes) in zip(again, replies, strict=True):
                    self.positions[i] = (root, episodes)
                    outcomes[i] = out
        return [outcomes[i] for i, _ in items]

    def _replace(self, host: Host, lost: dict[int, Failure]) -> None:
        """Start a fresh host with the envs rebuilt as lost; if that fails, the next batch finds it dead."""
        with contextlib.suppress(Exception):
            host.restart()
            host.call("build", [self._spec(i, lost[i]) for i in host.indices], self.build_timeout)

    def close(self) -> list[BaseException]:
        errors: list[BaseException] = []
        for host in self.hosts:
            try:
                errors += host.close()
            except Exception as exc:  # close() of a host must not raise; keep going regardless
                errors.append(exc)
        return errors
