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
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Union

from gem_core.core import AsyncEnv, Env, to_sync
from gem_core.errors import EnvWorkerCrashed
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
    portable,
)

__all__ = ["BuildSpec", "Host", "HostDied", "HostedGroup", "MemberHost"]


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

    def build(
        self, specs: Sequence[BuildSpec], mark: Callable[[int], None] | None = None
    ) -> list[BaseException | None]:
        """Build each member (replacing one with the same index); per spec, ``None`` or the build error."""
        errors: list[BaseException | None] = []
        for spec in specs:
            if mark is not None:
                mark(spec.env_index)
            try:
                env = to_sync(spec.factory())
            except Exception as exc:
                errors.append(portable(exc))
                continue
            old = self.members.pop(spec.env_index, None)
            if old is not None:
                with contextlib.suppress(Exception):  # the env being replaced is already broken
                    old.env.close()
            self.members[spec.env_index] = Member(spec.env_index, env, spec.autoreset_mode, spec.on_error, spec.state)
            errors.append(None)
        return errors

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


class HostDied(Exception):
    """A host stopped answering because it died; ``culprit`` is the env it was serving, when known."""

    def __init__(self, culprit: int | None, detail: str) -> None:
        super().__init__(detail)
        self.culprit = culprit
        self.detail = detail


class Host(abc.ABC):
    """One worker process or actor and the env indices it hosts.

    ``send`` never blocks on the host's work; ``receive`` waits for the reply to the last
    ``send`` and raises :class:`HostDied` if the host died, or the host-side exception if
    the message could not be served.
    """

    def __init__(self, indices: Sequence[int]) -> None:
        self.indices = list(indices)

    @abc.abstractmethod
    def send(self, op: str, payload: Any) -> None:
        """Send ``("build", specs)`` or ``("run", items)``."""

    @abc.abstractmethod
    def receive(self) -> Any:
        """The reply to the last ``send``."""

    @abc.abstractmethod
    def restart(self) -> None:
        """Replace a dead host with a fresh, empty one."""

    @abc.abstractmethod
    def close(self) -> list[BaseException]:
        """Close the envs and stop the host; returns the envs' close errors, never raises."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Names the host in messages (``worker process 1234``)."""

    def call(self, op: str, payload: Any) -> Any:
        self.send(op, payload)
        return self.receive()


class HostedGroup(Group):
    """Members spread over hosts; one message per host per batch; dead hosts replaced.

    Args:
        hosts: The hosts; each one's ``indices`` say which envs it holds.
        factories: Per env index, a factory the host can run (picklable for processes).
        autoreset_mode: The vector env's autoreset mode.
        on_error: The vector env's ``on_error``.
    """

    def __init__(
        self,
        hosts: Sequence[Host],
        factories: dict[int, Callable[[], Env | AsyncEnv]],
        autoreset_mode: AutoresetMode,
        on_error: OnError,
    ) -> None:
        super().__init__(sorted(i for h in hosts for i in h.indices))
        self.hosts = list(hosts)
        self.host_of = {i: h for h in self.hosts for i in h.indices}
        self.factories = factories
        self.autoreset_mode = autoreset_mode
        self.on_error = on_error
        self.positions: dict[int, tuple[int | None, int]] = {i: (None, 0) for i in self.indices}
        self._build_all()

    def _spec(self, index: int, lost: Failure | None = None) -> BuildSpec:
        root, episodes = self.positions[index]
        state = MemberState(root, episodes, lost)
        return BuildSpec(index, self.factories[index], self.autoreset_mode, self.on_error, state)

    def _build_all(self) -> None:
        sent: list[Host] = []
        try:
            for host in self.hosts:
                host.send("build", [self._spec(i) for i in host.indices])
                sent.append(host)
            for host in sent:
                try:
                    errors = host.receive()
                except HostDied as died:
                    where = f" while building env {died.culprit}" if died.culprit is not None else ""
                    raise EnvWorkerCrashed(f"{host.describe()} died{where}: {died.detail}") from None
                for index, error in zip(host.indices, errors, strict=True):
                    if error is not None:
                        if hasattr(error, "add_note"):
                            error.add_note(f"while building env {index} in {host.describe()}")
                        raise error
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
        for host, _, items in buckets.values():
            host.send("run", items)

        def wait() -> list[Outcome]:
            outcomes: list[Outcome] = [()] * len(indices)
            for host, positions, items in buckets.values():
                for n, out in zip(positions, self._collect(host, items), strict=True):
                    outcomes[n] = out
            return outcomes

        return wait

    def _collect(self, host: Host, items: list[tuple[int, WireRequest]]) -> list[Outcome]:
        try:
            replies = host.receive()
        except HostDied as died:
            return self._recover(host, died, items)
        positions = self.positions
        outcomes: list[Outcome] = []
        for (index, _), (out, root, episodes) in zip(items, replies, strict=True):
            positions[index] = (root, episodes)
            outcomes.append(out)
        return outcomes

    def _recover(
        self, host: Host, died: HostDied, items: list[tuple[int, WireRequest]], retry: bool = True
    ) -> list[Outcome]:
        """Replace the dead host, rebuild its envs as lost, and serve the batch's requests again where that is safe."""
        culprit = died.culprit
        running = f"while env {culprit} was running" if culprit is not None else f"while serving envs {host.indices}"
        message = f"{host.describe()} hosting envs {host.indices} died {running} ({died.detail})"
        crash = {
            i: EnvWorkerCrashed(
                message if i == culprit or culprit is None else f"env {i} was lost with its host: {message}"
            )
            for i in host.indices
        }
        try:
            host.restart()
            errors = host.call("build", [self._spec(i, Failure(i, crash[i], "")) for i in host.indices])
        except Exception as exc:  # no replacement: every env of the batch on this host fails
            return [
                Failure(i, EnvWorkerCrashed(f"{message}; replacing it failed: {type(exc).__name__}: {exc}"), "")
                for i, _ in items
            ]
        # The env that crashed the host is not asked to reset again (it would crash again); a
        # step request is served by the rebuilt member, which fails it (or recovers, on_error="reset").
        broken = {i for i, e in zip(host.indices, errors, strict=True) if e is not None}
        outcomes: dict[int, Outcome] = {}
        again: list[tuple[int, WireRequest]] = []
        for i, request in items:
            if i in broken or (i == culprit and type(request) is Reset) or (not retry and type(request) is Reset):
                outcomes[i] = Failure(i, crash[i], "")
            else:
                again.append((i, request))
        if again:
            host.send("run", again)
            try:
                replies = host.receive()
            except HostDied as second:
                replies = None
                if retry:
                    for (i, _), out in zip(again, self._recover(host, second, again, retry=False), strict=True):
                        outcomes[i] = out
                else:  # the replacement died too: give up on this batch; the next one restarts it again
                    failed = EnvWorkerCrashed(f"{message}, and its replacement died too ({second.detail})")
                    outcomes.update({i: Failure(i, failed, "") for i, _ in again})
            if replies is not None:
                for (i, _), (out, root, episodes) in zip(again, replies, strict=True):
                    self.positions[i] = (root, episodes)
                    outcomes[i] = out
        return [outcomes[i] for i, _ in items]

    def close(self) -> list[BaseException]:
        errors: list[BaseException] = []
        for host in self.hosts:
            try:
                errors += host.close()
            except Exception as exc:  # close() of a host must not raise; keep going regardless
                errors.append(exc)
        return errors
