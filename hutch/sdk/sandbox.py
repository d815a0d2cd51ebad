"""`Sandbox` and `AsyncSandbox`: thin fronts that run the flows of `ops` with a sync or async client.

Each public method here is one line of wiring; what a call sends and how its answer is read lives
once, in `ops`.
"""

from __future__ import annotations

import builtins
import contextlib
import signal as signals
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

import httpx

from hutch.sdk import ops
from hutch.sdk.config import ConnectionConfig, tls_context
from hutch.sdk.errors import SandboxError, ServerError, ValidationError
from hutch.sdk.flow import Flow, iter_async, iter_sync, run_async, run_sync
from hutch.sdk.ops import (
    UNSET,
    WATCH_OPENED,
    AuditPage,
    CommandResult,
    DataPlane,
    EntryInfo,
    FilesystemEvent,
    NetworkConfig,
    NetworkLogPage,
    PreviewPort,
    ProcessInfo,
    SandboxInfo,
    SecretBinding,
    check_preview_port,
)
from hutch.sdk.process import AsyncProcess, Process, PtySize

if TYPE_CHECKING:  # templates.py builds on this module: its names are only needed for types
    from hutch.sdk.templates import AsyncTemplate, Template

    TemplateRef: TypeAlias = str | Template | AsyncTemplate  # a Template, or a template's name or id

ClientT = TypeVar("ClientT", httpx.Client, httpx.AsyncClient)
OutputCallback = Callable[[str], Any]  # on the async SDK it may also return an awaitable


def _create_body(name: str, from_template: TemplateRef | None, timeout_seconds: int | None,
                 auto_delete_seconds: int | None, metadata: dict[str, str] | None,
                 env_vars: dict[str, str] | None, network: NetworkConfig | None,
                 secrets: dict[str, str] | None, preview_access: str | None) -> dict[str, Any]:
    if from_template is not None and not isinstance(from_template, str):
        from_template = from_template.name
    body = {"name": name, "from_template": from_template, "timeout_seconds": timeout_seconds,
            "auto_delete_seconds": auto_delete_seconds, "metadata": metadata, "env_vars": env_vars,
            "network": ops.network_body(network), "secrets": secrets, "preview_access": preview_access}
    return {k: v for k, v in body.items() if v is not None}


def _changes(metadata: Any, timeout_seconds: Any, auto_delete_seconds: Any, network: Any) -> dict[str, Any]:
    return {"metadata": metadata, "timeout_seconds": timeout_seconds, "auto_delete_seconds": auto_delete_seconds,
            "network": network if network is UNSET else ops.network_body(network)}


class _SandboxBase(Generic[ClientT]):
    """State shared by both fronts. `status` and `metadata` are a snapshot taken when the object
    was made: call `get_info()` for the server's current view."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, config: ConnectionConfig, client: ClientT) -> None:
        self._info, self._dp, self._cfg = info, data_plane, config
        self._client: ClientT = client

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def status(self) -> str:
        return self._info.status

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._info.metadata)

    @property
    def secrets(self) -> list[SecretBinding]:
        """The secrets bound to env vars, as of the last get_info(), attach or detach."""
        return list(self._info.secrets)

    def _bound(self, bindings: list[SecretBinding]) -> list[SecretBinding]:
        self._info.secrets = bindings
        return list(bindings)

    def get_preview_url(self, port: int) -> str:
        """The URL of a port at the preview proxy (no request: publish it to make it answer)."""
        return self._info.preview_url_template.replace("{port}", str(check_preview_port(port)))

    def _ports(self, method: str = "GET", port: int | None = None, tail: str = "",
               body: dict[str, Any] | None = None) -> Flow[Any]:
        return ops.preview_ports(self._cfg, self.id, method, None if port is None else check_preview_port(port), tail,
                                 body)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, status={self.status!r})"


# --- sync -----------------------------------------------------------------------------------------

def _sync_client(cfg: ConnectionConfig) -> httpx.Client:
    return httpx.Client(timeout=cfg.request_timeout, verify=tls_context())


def _once_sync(cfg: ConnectionConfig, flow: Flow[Any]) -> Any:
    with _sync_client(cfg) as client:
        return run_sync(client, flow)


class Sandbox(_SandboxBase[httpx.Client]):
    """A sandbox, used from blocking code. Holds an HTTP client until `kill()` or `close()`."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, config: ConnectionConfig, client: httpx.Client) -> None:
        super().__init__(info, data_plane, config, client)
        self.commands = Commands(self)
        self.files = Files(self)

    def _run(self, flow: Flow[Any]) -> Any:
        return run_sync(self._open_client(), flow)

    def _open_client(self) -> httpx.Client:
        if self._client.is_closed:  # used again after kill() or close(): the server has the last word
            self._client = _sync_client(self._cfg)
        return self._client

    @classmethod
    def _open(cls, cfg: ConnectionConfig, flow: Flow[tuple[SandboxInfo, DataPlane]]) -> Sandbox:
        client = _sync_client(cfg)
        try:
            info, dp = run_sync(client, flow)
        except BaseException:
            client.close()
            raise
        return cls(info, dp, cfg, client)

    @classmethod
    def create(cls, name: str, *, from_template: TemplateRef | None = None, timeout_seconds: int | None = None,
               auto_delete_seconds: int | None = None, metadata: dict[str, str] | None = None,
               env_vars: dict[str, str] | None = None, network: NetworkConfig | None = None,
               secrets: dict[str, str] | None = None, preview_access: str | None = None,
               api_key: str | None = None, base_url: str | None = None) -> Sandbox:
        """Create a sandbox and return once it is ready for commands. `from_template`: a Template,
        or a template's name or id (default hutch/base); the box takes its shape, env, workdir and
        user, and create waits for its ready_cmd. `network` sets its egress rules (default: any
        public address over HTTP(S); never private, loopback or link-local).
        `secrets` binds env vars to secrets by name: the box sees a stand-in token, swapped for
        the real value only on requests to the secret's hosts. `preview_access` ("public" or
        "private") is what ports published later get by default."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        body = _create_body(name, from_template, timeout_seconds, auto_delete_seconds, metadata, env_vars, network,
                            secrets, preview_access)
        return cls._open(cfg, ops.create(cfg, body))

    @classmethod
    def connect(cls, sandbox_id: str, *, api_key: str | None = None, base_url: str | None = None) -> Sandbox:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls._open(cfg, ops.connect(cfg, sandbox_id))

    @classmethod
    def list(cls, *, metadata: dict[str, str] | None = None, status: str | None = None,
             api_key: str | None = None, base_url: str | None = None) -> list[SandboxInfo]:
        """The team's sandboxes, filtered by status and by metadata (every pair must match)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        result: list[SandboxInfo] = _once_sync(cfg, ops.list_sandboxes(cfg, metadata, status))
        return result

    @classmethod
    def kill_by_id(cls, sandbox_id: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        _once_sync(cfg, ops.kill(cfg, sandbox_id))

    @classmethod
    def get_network_log_by_id(cls, sandbox_id: str, *, limit: int = 100, before: int | None = None,
                              api_key: str | None = None, base_url: str | None = None) -> NetworkLogPage:
        """As `get_network_log`, without connecting (a paused box stays paused)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        page: NetworkLogPage = _once_sync(cfg, ops.network_log(cfg, sandbox_id, limit, before))
        return page

    def get_info(self) -> SandboxInfo:
        info: SandboxInfo = self._run(ops.get_info(self._cfg, self.id))
        self._bound(info.secrets)
        return info

    def update(self, *, metadata: dict[str, str] | None = UNSET, timeout_seconds: int | None = UNSET,
               auto_delete_seconds: int | None = UNSET, network: NetworkConfig | None = UNSET) -> SandboxInfo:
        """Change what is given; None clears a lifetime or the network rules. Metadata and rules
        are replaced, not merged; new rules apply to the box's next connection."""
        changes = _changes(metadata, timeout_seconds, auto_delete_seconds, network)
        self._info = self._run(ops.update(self._cfg, self.id, changes))
        return self._info

    def get_network_log(self, *, limit: int = 100, before: int | None = None) -> NetworkLogPage:
        """The box's connection attempts, newest first; `page.next_before` asks for older ones."""
        page: NetworkLogPage = self._run(ops.network_log(self._cfg, self.id, limit, before))
        return page

    def get_audit_log(self, *, limit: int = 100, before: int | None = None) -> AuditPage:
        """Every command and file operation on the box, newest first: who, when, what, exit code."""
        page: AuditPage = self._run(ops.audit_log(self._cfg, self.id, limit, before))
        return page

    @classmethod
    def get_audit_log_by_id(cls, sandbox_id: str, *, limit: int = 100, before: int | None = None,
                            api_key: str | None = None, base_url: str | None = None) -> AuditPage:
        """As `get_audit_log`, without connecting (a paused box stays paused)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        page: AuditPage = _once_sync(cfg, ops.audit_log(cfg, sandbox_id, limit, before))
        return page

    def publish_preview_port(self, port: int, *, access: str | None = None) -> PreviewPort:
        """Serve a port of the box at its preview URL. `access`: "public" (anyone with the URL)
        or "private" (a signed link, its cookie, or the port's token); default: the sandbox's
        `preview_access`. Publishing again changes the access."""
        return PreviewPort.from_json(self._run(self._ports("POST", body={"port": check_preview_port(port),
                                                                         "access": access})))

    def unpublish_preview_port(self, port: int) -> None:
        self._run(self._ports("DELETE", port))

    def list_preview_ports(self) -> builtins.list[PreviewPort]:
        return [PreviewPort.from_json(d) for d in self._run(self._ports())]

    def get_signed_preview_url(self, port: int, expires_in_seconds: int = 60) -> str:
        """A link to a private port: opened in a browser before it expires, it is exchanged for a
        cookie for this port only."""
        url: str = self._run(self._ports("POST", port, "/signed-url", {"expires_in_seconds": expires_in_seconds}))["url"]
        return url

    def get_preview_token(self, port: int) -> str:
        """A credential for machine clients: send it as X-Hutch-Preview-Token. Valid until rotated."""
        token: str = self._run(self._ports("GET", port, "/token"))["token"]
        return token

    def rotate_preview_token(self, port: int) -> None:
        """Void the port's links, cookies and token at once (and cut its open connections)."""
        self._run(self._ports("POST", port, "/rotate"))

    def attach_secret(self, env: str, secret: str) -> builtins.list[SecretBinding]:
        """Bind a secret to an env var (active or paused box); commands started afterwards see
        its stand-in. Replaces a binding the variable had."""
        return self._bound(self._run(ops.sandbox_secrets(self._cfg, self.id, "PUT", env, secret)))

    def detach_secret(self, env: str) -> builtins.list[SecretBinding]:
        """Commands started afterwards no longer get the variable."""
        return self._bound(self._run(ops.sandbox_secrets(self._cfg, self.id, "DELETE", env)))

    def pause(self) -> None:
        """Checkpoint the whole box (memory, processes, files) to disk and free its memory.
        Any later command, file call or connect resumes it. Idempotent."""
        self._run(ops.pause(self._cfg, self.id))

    def resume(self) -> None:
        """Restore a paused box exactly where it was; its access token rotates (handled here)."""
        self._info = self._run(ops.resume(self._dp))

    def kill(self) -> None:
        """Delete the sandbox (idempotent) and close this object's HTTP client."""
        try:
            self._run(ops.kill(self._cfg, self.id))
        finally:
            self.close()

    def close(self) -> None:
        self._client.close()


class Commands:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def run(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout_seconds: float | None = None, on_stdout: OutputCallback | None = None,
            on_stderr: OutputCallback | None = None, user: str | None = None) -> CommandResult:
        """Run `command` with /bin/sh in the sandbox, as `user` ("user" by default, or "root").

        Returns stdout, stderr and exit_code once it ends; a non-zero exit is a result. Output goes
        to the callbacks as it comes. Past `timeout_seconds` the command's whole process group is
        killed and SandboxTimeoutError raised. No timeout: it runs as long as it takes.
        """
        result: CommandResult = self._sandbox._run(ops.run(
            self._sandbox._dp, command, cwd=cwd, env=env, timeout_seconds=timeout_seconds, user=user,
            on_stdout=on_stdout, on_stderr=on_stderr))
        return result

    def spawn(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
              user: str | None = None, pty: PtySize | tuple[int, int] | None = None,
              on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None) -> Process:
        """Start `command` (with /bin/sh) as a long-lived process and attach to it; returns once it
        runs. Its stdin is a pipe, or with `pty=PtySize(rows, cols)` a terminal (stdout and stderr
        then arrive together as stdout). It outlives this object: see `connect`."""
        dp = self._sandbox._dp
        pid: int = self._sandbox._run(ops.spawn(dp, command, cwd=cwd, env=env, user=user, pty=_pty(pty)))
        try:
            return self.connect(pid, on_stdout=on_stdout, on_stderr=on_stderr)
        except BaseException:  # nobody could ever reach it: do not leave it running
            with contextlib.suppress(SandboxError):
                self.kill(pid, signals.SIGKILL)
            raise

    def connect(self, pid: int, *, on_stdout: OutputCallback | None = None,
                on_stderr: OutputCallback | None = None) -> Process:
        """Attach to a spawned process: the output kept since it started is replayed first."""
        dp, cfg = self._sandbox._dp, self._sandbox._cfg
        return Process.attach(dp, pid, lambda: _once_async(cfg, ops.refresh_token(dp)), on_stdout, on_stderr)

    def list(self) -> list[ProcessInfo]:
        """The spawned processes that are still running."""
        result: list[ProcessInfo] = self._sandbox._run(ops.list_processes(self._sandbox._dp))
        return result

    def kill(self, pid: int, signal: int = signals.SIGTERM) -> bool:
        """Signal a spawned process' group, attached or not; False if it had already ended."""
        result: bool = self._sandbox._run(ops.signal_process(self._sandbox._dp, pid, signal))
        return result


def _pty(pty: PtySize | tuple[int, int] | None) -> tuple[int, int] | None:
    if pty is None:
        return None
    rows, cols = pty
    if not all(type(v) is int and 1 <= v <= 1000 for v in (rows, cols)):
        raise ValidationError("pty takes rows and cols within 1..1000", code="invalid_argument")
    return rows, cols


class Files:
    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def write(self, path: str, content: str | bytes, *, user: str | None = None) -> None:
        """Write a file (absolute path), making missing parent directories; owned by `user`."""
        self._sandbox._run(ops.write_file(self._sandbox._dp, path, ops.as_bytes(content), user))

    def read(self, path: str) -> bytes:
        data: bytes = self._sandbox._run(ops.read_file(self._sandbox._dp, path))
        return data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def download_dir(self, path: str) -> bytes:
        """A directory and everything under it, as the bytes of a zip archive."""
        data: bytes = self._sandbox._run(ops.download_dir(self._sandbox._dp, path))
        return data

    # Below, `user` is who the call acts as: the box user (default; the box's permissions apply to
    # it) or "root". Paths are absolute.

    def list(self, path: str, depth: int = 1, *, user: str | None = None) -> list[EntryInfo]:
        """A directory's entries, `depth` (1-16) levels down, sorted; links are listed, not followed."""
        result: list[EntryInfo] = self._sandbox._run(ops.list_dir(self._sandbox._dp, path, depth, user))
        return result

    def get_info(self, path: str, *, user: str | None = None) -> EntryInfo:
        """A file, directory or link (described, not followed). NotFoundError if there is none."""
        result: EntryInfo = self._sandbox._run(ops.get_entry(self._sandbox._dp, path, user))
        return result

    def exists(self, path: str, *, user: str | None = None) -> bool:
        result: bool = self._sandbox._run(ops.exists(self._sandbox._dp, path, user))
        return result

    def remove(self, path: str, *, user: str | None = None) -> None:
        """A file or link (never its target), or a directory with everything in it."""
        self._sandbox._run(ops.remove(self._sandbox._dp, path, user))

    def rename(self, source: str, destination: str, *, user: str | None = None) -> EntryInfo:
        """Move a file or directory (the destination's parent must exist); the destination's entry."""
        result: EntryInfo = self._sandbox._run(ops.rename(self._sandbox._dp, source, destination, user))
        return result

    def make_dir(self, path: str, *, user: str | None = None) -> bool:
        """mkdir -p, owned by `user`; False if it was a directory already (ConflictError if it is
        something else)."""
        result: bool = self._sandbox._run(ops.make_dir(self._sandbox._dp, path, user))
        return result

    def watch_dir(self, path: str, *, recursive: bool = False) -> WatchHandle:
        """Watch a directory: iterate the handle for FilesystemEvents as they happen (the watch is in
        place when this returns); `close()` it when done. It ends if the directory goes."""
        return WatchHandle(iter_sync(self._sandbox._open_client(), ops.watch_dir(self._sandbox._dp, path, recursive)))


class WatchHandle:
    """A watched directory's changes: an iterator of FilesystemEvents, and a context manager."""

    def __init__(self, items: Generator[Any, None, Any]) -> None:
        self._items = items
        try:
            opened = next(items)
        except StopIteration:
            opened = None
        except BaseException:
            items.close()
            raise
        if opened is not WATCH_OPENED:
            items.close()
            raise ServerError("the watch did not start", code="stream_ended")

    def __iter__(self) -> WatchHandle:
        return self

    def __next__(self) -> FilesystemEvent:
        event: FilesystemEvent = next(self._items)
        return event

    def close(self) -> None:
        self._items.close()

    def __enter__(self) -> WatchHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# --- async ----------------------------------------------------------------------------------------

def _async_client(cfg: ConnectionConfig) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=cfg.request_timeout, verify=tls_context())


async def _once_async(cfg: ConnectionConfig, flow: Flow[Any]) -> Any:
    async with _async_client(cfg) as client:
        return await run_async(client, flow)


class AsyncSandbox(_SandboxBase[httpx.AsyncClient]):
    """A sandbox, used from asyncio code. The same calls as `Sandbox`, awaited."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, config: ConnectionConfig,
                 client: httpx.AsyncClient) -> None:
        super().__init__(info, data_plane, config, client)
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)

    def _run(self, flow: Flow[Any]) -> Awaitable[Any]:
        return run_async(self._open_client(), flow)

    def _open_client(self) -> httpx.AsyncClient:
        if self._client.is_closed:
            self._client = _async_client(self._cfg)
        return self._client

    @classmethod
    async def _open(cls, cfg: ConnectionConfig, flow: Flow[tuple[SandboxInfo, DataPlane]]) -> AsyncSandbox:
        client = _async_client(cfg)
        try:
            info, dp = await run_async(client, flow)
        except BaseException:
            await client.aclose()
            raise
        return cls(info, dp, cfg, client)

    @classmethod
    async def create(cls, name: str, *, from_template: TemplateRef | None = None, timeout_seconds: int | None = None,
                     auto_delete_seconds: int | None = None, metadata: dict[str, str] | None = None,
                     env_vars: dict[str, str] | None = None, network: NetworkConfig | None = None,
                     secrets: dict[str, str] | None = None, preview_access: str | None = None,
                     api_key: str | None = None, base_url: str | None = None) -> AsyncSandbox:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        body = _create_body(name, from_template, timeout_seconds, auto_delete_seconds, metadata, env_vars, network,
                            secrets, preview_access)
        return await cls._open(cfg, ops.create(cfg, body))

    @classmethod
    async def connect(cls, sandbox_id: str, *, api_key: str | None = None, base_url: str | None = None) -> AsyncSandbox:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return await cls._open(cfg, ops.connect(cfg, sandbox_id))

    @classmethod
    async def list(cls, *, metadata: dict[str, str] | None = None, status: str | None = None,
                   api_key: str | None = None, base_url: str | None = None) -> list[SandboxInfo]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        result: list[SandboxInfo] = await _once_async(cfg, ops.list_sandboxes(cfg, metadata, status))
        return result

    @classmethod
    async def kill_by_id(cls, sandbox_id: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        await _once_async(cfg, ops.kill(cfg, sandbox_id))

    @classmethod
    async def get_network_log_by_id(cls, sandbox_id: str, *, limit: int = 100, before: int | None = None,
                                    api_key: str | None = None, base_url: str | None = None) -> NetworkLogPage:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        page: NetworkLogPage = await _once_async(cfg, ops.network_log(cfg, sandbox_id, limit, before))
        return page

    async def get_info(self) -> SandboxInfo:
        info: SandboxInfo = await self._run(ops.get_info(self._cfg, self.id))
        self._bound(info.secrets)
        return info

    async def update(self, *, metadata: dict[str, str] | None = UNSET, timeout_seconds: int | None = UNSET,
                     auto_delete_seconds: int | None = UNSET, network: NetworkConfig | None = UNSET) -> SandboxInfo:
        changes = _changes(metadata, timeout_seconds, auto_delete_seconds, network)
        self._info = await self._run(ops.update(self._cfg, self.id, changes))
        return self._info

    async def publish_preview_port(self, port: int, *, access: str | None = None) -> PreviewPort:
        return PreviewPort.from_json(await self._run(self._ports("POST", body={"port": check_preview_port(port),
                                                                               "access": access})))

    async def unpublish_preview_port(self, port: int) -> None:
        await self._run(self._ports("DELETE", port))

    async def list_preview_ports(self) -> builtins.list[PreviewPort]:
        return [PreviewPort.from_json(d) for d in await self._run(self._ports())]

    async def get_signed_preview_url(self, port: int, expires_in_seconds: int = 60) -> str:
        answer = await self._run(self._ports("POST", port, "/signed-url", {"expires_in_seconds": expires_in_seconds}))
        url: str = answer["url"]
        return url

    async def get_preview_token(self, port: int) -> str:
        token: str = (await self._run(self._ports("GET", port, "/token")))["token"]
        return token

    async def rotate_preview_token(self, port: int) -> None:
        await self._run(self._ports("POST", port, "/rotate"))

    async def attach_secret(self, env: str, secret: str) -> builtins.list[SecretBinding]:
        return self._bound(await self._run(ops.sandbox_secrets(self._cfg, self.id, "PUT", env, secret)))

    async def detach_secret(self, env: str) -> builtins.list[SecretBinding]:
        return self._bound(await self._run(ops.sandbox_secrets(self._cfg, self.id, "DELETE", env)))

    async def get_audit_log(self, *, limit: int = 100, before: int | None = None) -> AuditPage:
        page: AuditPage = await self._run(ops.audit_log(self._cfg, self.id, limit, before))
        return page

    async def get_network_log(self, *, limit: int = 100, before: int | None = None) -> NetworkLogPage:
        page: NetworkLogPage = await self._run(ops.network_log(self._cfg, self.id, limit, before))
        return page

    async def pause(self) -> None:
        await self._run(ops.pause(self._cfg, self.id))

    async def resume(self) -> None:
        self._info = await self._run(ops.resume(self._dp))

    async def kill(self) -> None:
        try:
            await self._run(ops.kill(self._cfg, self.id))
        finally:
            await self.close()

    async def close(self) -> None:
        await self._client.aclose()


class AsyncCommands:
    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def run(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
                  timeout_seconds: float | None = None, on_stdout: OutputCallback | None = None,
                  on_stderr: OutputCallback | None = None, user: str | None = None) -> CommandResult:
        """As `Commands.run`; the callbacks may be coroutine functions."""
        result: CommandResult = await self._sandbox._run(ops.run(
            self._sandbox._dp, command, cwd=cwd, env=env, timeout_seconds=timeout_seconds, user=user,
            on_stdout=on_stdout, on_stderr=on_stderr))
        return result

    async def spawn(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
                    user: str | None = None, pty: PtySize | tuple[int, int] | None = None,
                    on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None) -> AsyncProcess:
        """As `Commands.spawn`; the callbacks may be coroutine functions."""
        dp = self._sandbox._dp
        pid: int = await self._sandbox._run(ops.spawn(dp, command, cwd=cwd, env=env, user=user, pty=_pty(pty)))
        try:
            return await self.connect(pid, on_stdout=on_stdout, on_stderr=on_stderr)
        except BaseException:
            with contextlib.suppress(SandboxError):
                await self.kill(pid, signals.SIGKILL)
            raise

    async def connect(self, pid: int, *, on_stdout: OutputCallback | None = None,
                      on_stderr: OutputCallback | None = None) -> AsyncProcess:
        dp = self._sandbox._dp
        return await AsyncProcess.attach(dp, pid, lambda: self._sandbox._run(ops.refresh_token(dp)),
                                         on_stdout, on_stderr)

    async def list(self) -> list[ProcessInfo]:
        result: list[ProcessInfo] = await self._sandbox._run(ops.list_processes(self._sandbox._dp))
        return result

    async def kill(self, pid: int, signal: int = signals.SIGTERM) -> bool:
        result: bool = await self._sandbox._run(ops.signal_process(self._sandbox._dp, pid, signal))
        return result


class AsyncFiles:
    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def write(self, path: str, content: str | bytes, *, user: str | None = None) -> None:
        await self._sandbox._run(ops.write_file(self._sandbox._dp, path, ops.as_bytes(content), user))

    async def read(self, path: str) -> bytes:
        data: bytes = await self._sandbox._run(ops.read_file(self._sandbox._dp, path))
        return data

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def download_dir(self, path: str) -> bytes:
        data: bytes = await self._sandbox._run(ops.download_dir(self._sandbox._dp, path))
        return data

    async def list(self, path: str, depth: int = 1, *, user: str | None = None) -> list[EntryInfo]:
        result: list[EntryInfo] = await self._sandbox._run(ops.list_dir(self._sandbox._dp, path, depth, user))
        return result

    async def get_info(self, path: str, *, user: str | None = None) -> EntryInfo:
        result: EntryInfo = await self._sandbox._run(ops.get_entry(self._sandbox._dp, path, user))
        return result

    async def exists(self, path: str, *, user: str | None = None) -> bool:
        result: bool = await self._sandbox._run(ops.exists(self._sandbox._dp, path, user))
        return result

    async def remove(self, path: str, *, user: str | None = None) -> None:
        await self._sandbox._run(ops.remove(self._sandbox._dp, path, user))

    async def rename(self, source: str, destination: str, *, user: str | None = None) -> EntryInfo:
        result: EntryInfo = await self._sandbox._run(ops.rename(self._sandbox._dp, source, destination, user))
        return result

    async def make_dir(self, path: str, *, user: str | None = None) -> bool:
        result: bool = await self._sandbox._run(ops.make_dir(self._sandbox._dp, path, user))
        return result

    async def watch_dir(self, path: str, *, recursive: bool = False) -> AsyncWatchHandle:
        """As `Files.watch_dir`: iterate with `async for`; `await close()`."""
        items = iter_async(self._sandbox._open_client(), ops.watch_dir(self._sandbox._dp, path, recursive))
        return await AsyncWatchHandle.open(items)


class AsyncWatchHandle:
    """A watched directory's changes: an async iterator of FilesystemEvents, and an async context
    manager."""

    def __init__(self, items: AsyncGenerator[Any, None]) -> None:
        self._items = items

    @classmethod
    async def open(cls, items: AsyncGenerator[Any, None]) -> AsyncWatchHandle:
        try:
            opened = await anext(items, None)
        except BaseException:
            await items.aclose()
            raise
        if opened is not WATCH_OPENED:
            await items.aclose()
            raise ServerError("the watch did not start", code="stream_ended")
        return cls(items)

    def __aiter__(self) -> AsyncWatchHandle:
        return self

    async def __anext__(self) -> FilesystemEvent:
        event: FilesystemEvent = await anext(self._items)
        return event

    async def close(self) -> None:
        await self._items.aclose()

    async def __aenter__(self) -> AsyncWatchHandle:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
