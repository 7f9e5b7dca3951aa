"""An MCP client that keeps one session open and exposes the server's tools as gem tools.

GEM's MCP tool opened a new event loop, transport and handshake for every call. Here one
:class:`MCPToolset` owns a background event loop (:class:`~gem_core.loop.LoopThread`)
where a single ``mcp.Client`` session lives from the first use to :meth:`MCPToolset.close`;
calls from any loop or thread are forwarded to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gem_core.errors import ConfigError, MCPConnectionError
from gem_core.loop import LoopThread
from gem_core.registry import format_config_error
from gem_core.tools.base import Tool, ToolResult
from gem_core.tools.safety import UnsafeValue, clean_arguments, clean_text

__all__ = ["MCPConfig", "MCPTool", "MCPToolset", "render_call_result"]

_sdk_imported = False
#: After SIGKILL, how long the SDK may take to reap the server and close its pipes.
_REAP_S = 10.0

# JSON-RPC error codes the MCP SDK uses for a closed transport and a request past its read timeout.
_CONNECTION_CLOSED = -32000
_REQUEST_TIMEOUT = -32001


class MCPConfig(BaseModel):
    """How to reach one MCP server and which of its tools to expose.

    Give either ``command`` (stdio: the server is started as a subprocess) or ``url``
    (streamable HTTP).

    Attributes:
        name: Label of the server in messages and result metadata.
        command: Executable that starts the server, e.g. ``"uvx"`` or ``sys.executable``.
        args: Its arguments, e.g. ``["-m", "mcp_server_time"]``.
        env: Extra environment variables for the subprocess.
        cwd: Working directory of the subprocess.
        server_stderr: ``"inherit"`` shows the server's log on this process's stderr;
            ``"discard"`` hides it.
        url: Streamable HTTP endpoint, e.g. ``http://127.0.0.1:8000/mcp``.
        headers: Extra HTTP headers (authorisation, for instance).
        connect_timeout_s: Limit for starting the server, the handshake and listing tools.
        call_timeout_s: Limit for one tool call; past it the model gets a timeout error.
        include: Expose only these tools (by MCP name); ``None`` exposes all.
        exclude: Never expose these tools.
        name_prefix: Prepended to every tool name, to keep servers' names apart.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "mcp"
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: Path | None = None
    server_stderr: Literal["inherit", "discard"] = "inherit"
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout_s: float = Field(60.0, gt=0)
    call_timeout_s: float = Field(30.0, gt=0)
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    name_prefix: str = ""

    @model_validator(mode="after")
    def _check_transport(self) -> MCPConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command=... (stdio server) or url=... (streamable HTTP server)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        if self.command is not None and self.headers:
            raise ValueError("headers are for url=... servers; a stdio server takes env=...")
        return self


def render_call_result(result: Any) -> tuple[str, bool]:
    """Text for the model from an ``mcp`` ``CallToolResult``, and whether it is an error."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data)} base64 characters]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[binary resource {block.resource.uri}]")
        else:
            parts.append(f"[{kind or type(block).__name__} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), bool(result.is_error)


class MCPTool(Tool):
    """One tool of an MCP server, called through its :class:`MCPToolset`'s shared session.

    Built by :meth:`MCPToolset.tools`; ``name``, ``description`` and ``parameters`` come
    from the server's ``tools/list`` (with the toolset's ``name_prefix``).
    """

    def __init__(self, toolset: MCPToolset, mcp_name: str, description: str, parameters: dict[str, Any]) -> None:
        # Tool declares these as class attributes; each MCP tool has its own values.
        self.name = f"{toolset.config.name_prefix}{mcp_name}"  # type: ignore[misc]
        self.description = description  # type: ignore[misc]
        self.parameters = parameters  # type: ignore[misc]
        self.mcp_name = mcp_name
        self.toolset = toolset

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        return await self.toolset.call(self.mcp_name, arguments)

    async def aclose(self) -> None:
        await self.toolset.release(self)


class MCPToolset:
    """A connection to one MCP server, kept open and shared by all its tools.

    The server is started (stdio) or connected to (HTTP) on first use, its tools are
    listed once and wrapped as :class:`MCPTool`; every call reuses the same session.
    Errors the model should see (unknown tool, bad arguments, a tool that failed, a
    timeout, a lost server) come back as :class:`~gem_core.tools.ToolResult` errors; a lost
    session is reopened on the next call. A call that timed out or was cancelled leaves the
    server answering a request nobody waits for: that session is never used again (the next
    call opens a new one), so a late reply can never be read as a later call's.

    Args:
        config: An :class:`MCPConfig`, or pass its fields as keyword arguments.

    Raises:
        ConfigError: invalid configuration; the message names the field.

    Example:
        >>> import sys
        >>> with MCPToolset(command=sys.executable, args=["-m", "mcp_server_time"]) as toolset:
        ...     tools = toolset.tools()  # doctest: +SKIP
    """

    #: For ``gem_core`` registries and ``make``-style validation of keyword arguments.
    config_model: ClassVar[type[BaseModel]] = MCPConfig

    def __init__(self, config: MCPConfig | None = None, **fields: Any) -> None:
        if config is None:
            try:
                config = MCPConfig.model_validate(fields)
            except ValidationError as exc:
                raise ConfigError(format_config_error("MCP server configuration", exc)) from exc
        elif fields:
            raise ConfigError(f"pass either config=MCPConfig(...) or keyword fields, not both (got {sorted(fields)})")
        self.config = config
        self._loop = LoopThread(f"gem-mcp-{config.name}")
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        # Every session task not yet finished, the current one and those still shutting down.
        self._holders: set[asyncio.Task[None]] = set()
        self._connect_lock: asyncio.Lock | None = None
        self._tools: list[MCPTool] | None = None
        self._open_tools: set[int] = set()
        self._closed = False
        self._groups: list[str] = []  # pid files of the stdio servers started (each a process group leader)
        self._groups_lock = threading.Lock()
        self._started: list[str] = []
        self._attempt = 0  # the connection attempt allowed to start a server; bumped to give one up
        self._scratch: str | None = None  # holds the pid files; removed by close()
        self.connections = 0

    # ------------------------------------------------------------------ public API

    @classmethod
    def stdio(cls, command: str, args: list[str] | None = None, **fields: Any) -> MCPToolset:
        """A toolset for a server started as ``command *args`` and spoken to over stdin/stdout."""
        return cls(command=command, args=list(args or []), **fields)

    @classmethod
    def http(cls, url: str, **fields: Any) -> MCPToolset:
        """A toolset for a streamable HTTP server at ``url``."""
        return cls(url=url, **fields)

    def tools(self) -> list[MCPTool]:
        """The server's tools, connecting first if needed (blocks; use :meth:`atools` in async code).

        Raises:
            MCPConnectionError: the server could not be started, reached or initialised.
        """
        if self._tools is None:
            self._import_sdk()
            self._run_sync(self._ensure_connected(), self.config.connect_timeout_s)
        return self._handed_out()

    async def atools(self) -> list[MCPTool]:
        """Async :meth:`tools`."""
        if self._tools is None:
            await asyncio.to_thread(self._import_sdk)
            try:
                await self._run(self._ensure_connected(), self.config.connect_timeout_s)
            except asyncio.TimeoutError:
                raise MCPConnectionError(
                    f"MCP server {self.config.name!r} did not connect within {self.config.connect_timeout_s} s"
                ) from None
        return self._handed_out()

    def __iter__(self) -> Iterator[MCPTool]:
        return iter(self.tools())

    async def call(self, mcp_name: str, arguments: dict[str, Any], timeout_s: float | None = None) -> ToolResult:
        """Call a tool by its MCP name; never raises for failures the model should see."""
        start = time.perf_counter()
        timeout = timeout_s if timeout_s is not None else self.config.call_timeout_s
        meta = {"server": self.config.name, "tool": mcp_name}
        if self._closed:
            return ToolResult(error=f"MCP server {self.config.name!r} was closed", metadata=meta)
        if not isinstance(arguments, dict):
            return ToolResult(error=f"the arguments of {mcp_name} must be a JSON object", metadata=meta)
        try:
            # Checked here so that a value the transport cannot encode fails this call, not the shared session.
            arguments = clean_arguments(arguments, what=f"the arguments of {mcp_name}")
        except UnsafeValue as exc:
            return ToolResult(error=str(exc), metadata=meta)
        if not _sdk_imported:
            await asyncio.to_thread(self._import_sdk)
        used: list[asyncio.Task[None] | None] = []  # the session the call went out on
        try:
            result = await self._run(self._call(mcp_name, arguments, timeout, used), timeout)
        except asyncio.TimeoutError:
            self._retire_soon(used)
            return ToolResult(error=f"{mcp_name} timed out after {timeout} s", elapsed_s=_since(start), metadata=meta)
        except asyncio.CancelledError:
            self._retire_soon(used)
            raise
        except MCPConnectionError as exc:
            return ToolResult(error=str(exc), elapsed_s=_since(start), metadata=meta)
        except Exception as exc:  # the SDK's MCPError: unknown tool, invalid params...
            return ToolResult(error=f"{mcp_name} failed: {_describe(exc)}", elapsed_s=_since(start), metadata=meta)
        text, is_error = render_call_result(result)
        text = clean_text(text)
        if result.structured_content is not None:
            meta["structured_content"] = result.structured_content
        if is_error:
            return ToolResult(error=text or f"{mcp_name} reported an error", elapsed_s=_since(start), metadata=meta)
        return ToolResult(output=text, elapsed_s=_since(start), metadata=meta)

    async def release(self, tool: MCPTool) -> None:
        """Called by :meth:`MCPTool.aclose`: the session closes once every handed-out tool is closed."""
        self._open_tools.discard(id(tool))
        if not self._open_tools:
            await self.aclose()

    async def aclose(self) -> None:
        """End the session and the background loop; idempotent and never raises.

        A stdio server gets the SDK's graceful shutdown (``connect_timeout_s`` at most), then
        SIGKILL for its whole process group.
        """
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Synchronous :meth:`aclose` (idempotent, never raises)."""
        if self._closed:
            return
        self._closed = True
        self._attempt += 1
        try:
            if self._loop.started:
                self._loop.run_sync(self._shut_down(), self.config.connect_timeout_s + 2 * _REAP_S)
        except Exception:  # a server that does not shut down in time is killed next
            pass
        # Kill what is left before stopping the loop: the SDK's pending cleanup then ends at once.
        self._kill_servers()
        with contextlib.suppress(Exception):
            self._loop.close(max(self.config.connect_timeout_s, _REAP_S))
        # A launcher shell that has not run yet still needs its stop marker: keep the folder then.
        if self._scratch is not None and all(Path(p).exists() for p in self._started):
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> MCPToolset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPToolset:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ internals

    def _import_sdk(self) -> None:
        """Import the SDK's transports in the caller's thread, not on the session's loop.

        An import can take seconds; a loop blocked in one misses its deadlines (and an abandoned
        attempt would then start its server late).
        """
        global _sdk_imported
        if not _sdk_imported:
            import mcp.client.stdio

            if self.config.url is not None:
                import httpx2  # noqa: F401
                import mcp.client.streamable_http  # noqa: F401
            _sdk_imported = self.config.url is None

    def _handed_out(self) -> list[MCPTool]:
        assert self._tools is not None
        self._open_tools.update(id(tool) for tool in self._tools)
        return list(self._tools)

    async def _run(self, coro: Any, timeout: float) -> Any:
        return await asyncio.wait_for(self._loop.run(coro), timeout)

    def _run_sync(self, coro: Any, timeout: float) -> Any:
        try:
            return self._loop.run_sync(coro, timeout)
        except TimeoutError:
            self._abandon()  # a server still starting is not left running
            raise MCPConnectionError(
                f"MCP server {self.config.name!r} did not connect within {timeout} s "
                "(raise connect_timeout_s for slow-starting servers)"
            ) from None

    async def _call(
        self, mcp_name: str, arguments: dict[str, Any], timeout: float, used: list[asyncio.Task[None] | None]
    ) -> Any:
        client = await self._ensure_connected()
        holder = self._holder
        used.append(holder)
        try:
            # The SDK's own limit is a backstop: the caller's wait_for (same timeout) normally fires first.
            return await client.call_tool(mcp_name, arguments, read_timeout_seconds=timeout + 1.0)
        except asyncio.CancelledError:  # the caller gave up (its timeout, or it was cancelled)
            self._retire(holder)
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code == _REQUEST_TIMEOUT:
                self._retire(holder)
                raise asyncio.TimeoutError from exc
            if code == _CONNECTION_CLOSED or holder is None or holder.done():
                if holder is self._holder:  # not a session an earlier timeout already replaced
                    await self._disconnect()  # reopened on the next call
                raise MCPConnectionError(
                    f"MCP server {self.config.name!r} connection lost ({_describe(exc)}); "
                    "it is restarted on the next call"
                ) from exc
            raise

    def _retire_soon(self, used: list[asyncio.Task[None] | None]) -> None:
        """From the caller's side, at once: retire the session a given-up call went out on.

        The cancellation reaches the call on the session's loop only later (the SDK may await while
        unwinding); queued now, the retirement runs before any call the caller makes next.
        """
        if used:
            with contextlib.suppress(RuntimeError):  # the loop is closed: so is the session
                self._loop.submit(self._retire_async(used[0]))

    async def _retire_async(self, holder: asyncio.Task[None] | None) -> None:
        self._retire(holder)

    def _retire(self, holder: asyncio.Task[None] | None) -> None:
        """Never hand out this session again: a call on it was abandoned, so the server may still answer it.

        The next call opens a new session (and shuts this one down first); calls still in flight on
        this one finish on it or fail as a lost connection. The SDK matches replies by request id,
        so a late reply cannot answer another request even before that; the server, though, may
        still be busy with (or stuck in) the abandoned call.
        """
        if holder is not None and holder is self._holder:
            self._client = None

    def _session_alive(self) -> bool:
        return self._holder is not None and not self._holder.done()

    async def _ensure_connected(self) -> Any:
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._client is not None and self._session_alive():
                return self._client
            await self._disconnect()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            # Read the outcome even when the caller gave up waiting, so asyncio does not log it as lost.
            ready.add_done_callback(lambda future: future.cancelled() or future.exception())
            self._stop = asyncio.Event()
            self._attempt += 1
            self._holder = asyncio.get_running_loop().create_task(self._hold_session(ready, self._stop, self._attempt))
            self._holders.add(self._holder)
            self._holder.add_done_callback(self._holders.discard)
            try:
                self._client, listed = await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout_s)
            except asyncio.TimeoutError:
                self._abandon()  # a half-started server must not linger: kill it, then collect the session
                await self._disconnect()
                raise MCPConnectionError(
                    f"MCP server {self.config.name!r} did not connect within {self.config.connect_timeout_s} s"
                ) from None
            except asyncio.CancelledError:  # the caller gave up waiting (see _run_sync)
                self._abandon()
                await self._disconnect()
                raise
            except Exception as exc:
                self._abandon()
                await self._disconnect()
                raise MCPConnectionError(
                    f"cannot connect to MCP server {self.config.name!r} ({self._target()}): {_describe(exc)}"
                ) from exc
            self.connections += 1
            if self._tools is None:
                self._tools = self._wrap_tools(listed)
            return self._client

    async def _hold_session(self, ready: asyncio.Future[Any], stop: asyncio.Event, attempt: int) -> None:
        # anyio cancel scopes must be entered and left by the same task: this task owns the session.
        from mcp import Client

        async with contextlib.AsyncExitStack() as stack:
            try:
                transport = await self._open_transport(stack, attempt)
                client = await stack.enter_async_context(Client(transport))
                listed = []
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            except asyncio.CancelledError:
                ready.cancel()
                raise
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                return
            ready.set_result((client, listed))
            with contextlib.suppress(Exception):
                await stop.wait()

    async def _open_transport(self, stack: contextlib.AsyncExitStack, attempt: int) -> Any:
        cfg = self.config
        if cfg.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=cfg.headers, timeout=httpx2.Timeout(cfg.connect_timeout_s, read=300.0))
            )
            return streamable_http_client(cfg.url, http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert cfg.command is not None
        errlog: TextIO = _stderr()
        if cfg.server_stderr == "discard":
            errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the session's exit stack
        command, args = cfg.command, list(cfg.args)
        if os.name == "posix" and os.path.exists("/bin/sh"):
            # The SDK starts the server as the leader of a new process group; the shell records that
            # pid (= the group id) and execs the server, so close() can kill the whole group.
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="gem-mcp-")
            pidfile = os.path.join(self._scratch, f"server-{len(self._started)}.pid")
            with self._groups_lock:
                # Imports above can take seconds: the attempt may have been given up meanwhile.
                if self._closed or attempt != self._attempt:
                    raise MCPConnectionError("the connection attempt was abandoned")
                self._started.append(pidfile)
                self._groups.append(pidfile)
            # "$0.stop" exists when close() came before the shell ran: then it must not start the server.
            launcher = 'echo $$ > "$0" && [ ! -e "$0.stop" ] && exec "$@"'
            command, args = "/bin/sh", ["-c", launcher, pidfile, command, *args]
        params = StdioServerParameters(command=command, args=args, env=cfg.env, cwd=cfg.cwd)
        return stdio_client(params, errlog=errlog)

    async def _disconnect(self) -> None:
        holder, stop = self._holder, self._stop
        self._client = self._holder = self._stop = None
        if holder is None or stop is None:
            return
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(holder), self.config.connect_timeout_s)
        except asyncio.TimeoutError:
            self._kill_servers()  # past the graceful shutdown: what the SDK still waits for dies now
            # Let the SDK see the death and reap the server (cancelling it would leave the process unreaped).
            try:
                await asyncio.wait_for(asyncio.shield(holder), _REAP_S)
            except asyncio.TimeoutError:
                holder.cancel()
            except Exception:
                pass
        except Exception:
            pass  # the session already failed; nothing left to release
        finally:
            self._kill_servers()

    async def _shut_down(self) -> None:
        """Close the session, then wait for sessions still shutting down (a call given up just before).

        A session task cancelled by the loop's shutdown would leave its server unreaped (the
        SDK waits for the process in its cleanup): each is let finish, its server killed first.
        """
        await self._disconnect()
        leftover = [holder for holder in self._holders if not holder.done()]
        if leftover:
            self._kill_servers()
            await asyncio.wait(leftover, timeout=_REAP_S)

    def _abandon(self) -> None:
        """Give up the connection attempt (from any thread): it starts no server, and what started dies."""
        self._attempt += 1
        self._kill_servers()

    def _kill_servers(self) -> None:
        """SIGKILL the process group of every stdio server started so far (what the SDK left behind).

        The stop marker is written before the pid is read: a launcher shell that has not yet written
        its pid will see the marker and exit instead of starting the server, so none is missed.
        Called right after the SDK's own shutdown, so a group id cannot have been reused yet.
        """
        with self._groups_lock:
            groups, self._groups = self._groups, []
        for pidfile in groups:
            with contextlib.suppress(OSError):
                Path(pidfile + ".stop").touch()
            with contextlib.suppress(OSError, ValueError):
                os.killpg(int(Path(pidfile).read_text().strip()), signal.SIGKILL)

    def _wrap_tools(self, listed: list[Any]) -> list[MCPTool]:
        include = set(self.config.include) if self.config.include is not None else None
        if include is not None and (missing := include - {t.name for t in listed}):
            raise MCPConnectionError(
                f"MCP server {self.config.name!r} has no tools {sorted(missing)}; "
                f"it offers {sorted(t.name for t in listed)}"
            )
        return [
            MCPTool(self, t.name, t.description or t.title or t.name, dict(t.input_schema))
            for t in listed
            if (include is None or t.name in include) and t.name not in self.config.exclude
        ]

    def _target(self) -> str:
        cfg = self.config
        return cfg.url if cfg.url is not None else " ".join([cfg.command or "", *cfg.args])


def _stderr() -> TextIO:
    import sys

    return sys.stderr


def _since(start: float) -> float:
    return time.perf_counter() - start


def _describe(exc: BaseException) -> str:
    """One line for an exception, unwrapping the exception groups anyio raises."""
    while getattr(exc, "exceptions", None):  # BaseExceptionGroup, also on Python 3.10 via anyio's backport
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
