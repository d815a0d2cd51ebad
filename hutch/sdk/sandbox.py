"""`Sandbox` and `AsyncSandbox`: a sandbox from blocking or asyncio code, with its `commands` and `files`.

Every call is written once, on the shared bases below, as the flow it runs (see `hutch.sdk.front`);
the blocking and the async classes differ only where their shapes must (an iterator of a watch,
closing the client). What a call sends and how its answer is read lives in `hutch.sdk.ops`.
"""

from __future__ import annotations

import builtins
import signal as signals
from collections.abc import AsyncGenerator, Generator
from typing import Any, Generic, TypeAlias, TypeVar

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.desktop import AsyncDesktop, Desktop
from hutch.sdk.flow import Flow, mapped
from hutch.sdk.front import AsyncFront, Job, SyncFront, call, classcall, closing
from hutch.sdk.ops import code as _code
from hutch.sdk.ops import commands, files, previews, sandboxes
from hutch.sdk.ops import desktop as _desktop
from hutch.sdk.ops import snapshots as _snapshots
from hutch.sdk.ops.code import OnError, OnOutput, OnResult
from hutch.sdk.ops.commands import OutputCallback
from hutch.sdk.ops.files import check_watch_opened
from hutch.sdk.ops.sandboxes import UNSET, DataPlane
from hutch.sdk.process import AsyncProcess, Process, PtySize
from hutch.sdk.session import Session, close_awaited, close_blocking, iterate_awaited, iterate_blocking
from hutch.sdk.snapshots import SnapshotRef, snapshot_ref
from hutch.sdk.templates import AsyncTemplate, Template, template_name
from hutch.sdk.types import (
    AuditPage,
    CodeContext,
    CommandResult,
    EntryInfo,
    Execution,
    FilesystemEvent,
    NetworkConfig,
    NetworkLogPage,
    PreviewPort,
    ProcessInfo,
    SandboxInfo,
    SecretBinding,
    SnapshotInfo,
)
from hutch.sdk.volumes import VolumeMounts, mounts_body

TemplateRef: TypeAlias = str | Template | AsyncTemplate  # a Template, or a template's name or id
SandboxT = TypeVar("SandboxT", bound="_SandboxBase[Any]")
ProcessT = TypeVar("ProcessT", Process, AsyncProcess)


class _SandboxBase(Generic[SandboxT]):
    """Both fronts' calls. `status` and `metadata` are a snapshot taken when the object was made:
    call `get_info()` for the server's current view."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, session: Session) -> None:
        self._info, self._dp, self._session = info, data_plane, session

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
    def secrets(self) -> builtins.list[SecretBinding]:
        """The secrets bound to env vars, as of the last get_info(), attach or detach."""
        return list(self._info.secrets)

    def _bound(self, bindings: builtins.list[SecretBinding]) -> builtins.list[SecretBinding]:
        self._info.secrets = bindings
        return list(bindings)

    @property
    def _cfg(self) -> ConnectionConfig:
        return self._session.cfg

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, status={self.status!r})"

    # --- the class's own calls --------------------------------------------------------------------

    @classmethod
    def _opening(cls: type[SandboxT], session: Session, flow: Flow[tuple[SandboxInfo, DataPlane]]) -> Job[SandboxT]:
        """A call that makes a sandbox object; it keeps the client the call ran on."""
        return Job(session, mapped(flow, lambda answer: cls(*answer, session)))

    @classcall
    def create(cls: type[SandboxT], name: str, *, from_template: TemplateRef | None = None,
               timeout_seconds: int | None = None, auto_delete_seconds: int | None = None,
               metadata: dict[str, str] | None = None, env_vars: dict[str, str] | None = None,
               network: NetworkConfig | None = None, secrets: dict[str, str] | None = None,
               preview_access: str | None = None, from_snapshot: SnapshotRef | None = None,
               volumes: VolumeMounts | None = None, resolution: tuple[int, int] | None = None,
               dpi: int | None = None,
               api_key: str | None = None, base_url: str | None = None) -> Job[SandboxT]:
        """Create a sandbox and return once it is ready for commands. `from_template`: a Template,
        or a template's name or id (default hutch/base); the box takes its shape, env, workdir and
        user, and create waits for its ready_cmd. `network` sets its egress rules (default: any
        public address over HTTP(S); never private, loopback or link-local).
        `secrets` binds env vars to secrets by name: the box sees a stand-in token, swapped for
        the real value only on requests to the secret's hosts. `preview_access` ("public" or
        "private") is what ports published later get by default.
        `from_snapshot` (a snapshot, its id or its name) boots the box from a snapshot instead:
        its processes continue from where they were saved, with the snapshot's files, template,
        shape and env (`env_vars` on top); its egress rules and secrets are the snapshot's box's
        unless given here, with new stand-ins.
        `volumes` mounts volumes: {"/mnt/data": vol, "/srv/cache": {"volume": "cache", "read_only":
        True}}, each a Volume or a volume's name or id. Many boxes may mount one volume at once; a
        file one box has closed is whole for the next to open it.
        From the `desktop` template (or with `resolution`), create returns once its desktop runs
        (Xvfb and XFCE at `resolution`, default 1024x768, and `dpi`): see `sandbox.desktop`."""
        session = Session(ConnectionConfig.resolve(api_key, base_url), keep=True)
        template = template_name(from_template)
        flow = sandboxes.create(session.cfg, name, from_template=template,
                                timeout_seconds=timeout_seconds, auto_delete_seconds=auto_delete_seconds,
                                metadata=metadata, env_vars=env_vars, network=network, secrets=secrets,
                                preview_access=preview_access, from_snapshot=snapshot_ref(from_snapshot),
                                volumes=mounts_body(volumes))
        if resolution is not None or template in _desktop.TEMPLATES:
            flow = _desktop.with_desktop(flow, resolution, dpi)
        return cls._opening(session, flow)

    @classcall
    def from_snapshot(cls: type[SandboxT], snapshot: SnapshotRef, count: int = 1, *, name: str | None = None,
                      timeout_seconds: int | None = None, auto_delete_seconds: int | None = None,
                      metadata: dict[str, str] | None = None, env_vars: dict[str, str] | None = None,
                      network: NetworkConfig | None = None, secrets: dict[str, str] | None = None,
                      volumes: VolumeMounts | None = None,
                      api_key: str | None = None, base_url: str | None = None) -> Job[builtins.list[SandboxT]]:
        """`count` sandboxes (at most 20) booted at once from one snapshot, as `create(from_snapshot=...)`
        makes one: all of them, or none and the error (`name` defaults to the snapshot's). They
        mount the volumes the snapshot's box did (the live volumes, shared), unless `volumes` says
        otherwise; one restored with its memory needs a volume at each path its box had."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        body = _snapshots.boot_body(count, name, timeout_seconds, auto_delete_seconds, metadata, env_vars, network,
                                    secrets, mounts_body(volumes))
        flow = _snapshots.boot(cfg, snapshot_ref(snapshot), body)
        return Job(Session(cfg), mapped(flow, lambda boxes: [cls(info, dp, Session(cfg, keep=True))
                                                             for info, dp in boxes]))

    @classcall
    def connect(cls: type[SandboxT], sandbox_id: str, *, api_key: str | None = None,
                base_url: str | None = None) -> Job[SandboxT]:
        """A sandbox by id, with a fresh token for its commands and files; a paused one is resumed."""
        session = Session(ConnectionConfig.resolve(api_key, base_url), keep=True)
        return cls._opening(session, sandboxes.connect(session.cfg, sandbox_id))

    @classcall
    def list(cls, *, metadata: dict[str, str] | None = None, status: str | None = None, api_key: str | None = None,
             base_url: str | None = None) -> Job[builtins.list[SandboxInfo]]:
        """The team's sandboxes, filtered by status and by metadata (every pair must match)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), sandboxes.list_sandboxes(cfg, metadata, status))

    @classcall
    def kill_by_id(cls, sandbox_id: str, *, api_key: str | None = None, base_url: str | None = None) -> Job[None]:
        """As `kill`, without connecting; a sandbox that is already gone is not an error."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), sandboxes.kill(cfg, sandbox_id))

    @classcall
    def get_network_log_by_id(cls, sandbox_id: str, *, limit: int = 100, before: int | None = None,
                              api_key: str | None = None, base_url: str | None = None) -> Job[NetworkLogPage]:
        """As `get_network_log`, without connecting (a paused box stays paused)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), sandboxes.network_log(cfg, sandbox_id, limit, before))

    @classcall
    def get_audit_log_by_id(cls, sandbox_id: str, *, limit: int = 100, before: int | None = None,
                            api_key: str | None = None, base_url: str | None = None) -> Job[AuditPage]:
        """As `get_audit_log`, without connecting (a paused box stays paused)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), sandboxes.audit_log(cfg, sandbox_id, limit, before))

    # --- the sandbox's ----------------------------------------------------------------------------

    @call
    def get_info(self) -> Flow[SandboxInfo]:
        """The server's current view of the sandbox."""
        info = yield from sandboxes.get_info(self._cfg, self.id)
        self._bound(info.secrets)
        return info

    @call
    def update(self, *, metadata: dict[str, str] | None = UNSET, timeout_seconds: int | None = UNSET,
               auto_delete_seconds: int | None = UNSET, network: NetworkConfig | None = UNSET) -> Flow[SandboxInfo]:
        """Change what is given; None clears a lifetime or the network rules. Metadata and rules
        are replaced, not merged; new rules apply to the box's next connection."""
        self._info = yield from sandboxes.update(self._cfg, self.id, metadata=metadata, timeout_seconds=timeout_seconds,
                                                 auto_delete_seconds=auto_delete_seconds, network=network)
        return self._info

    @call
    def get_network_log(self, *, limit: int = 100, before: int | None = None) -> Flow[NetworkLogPage]:
        """The box's connection attempts, newest first; `page.next_before` asks for older ones."""
        return sandboxes.network_log(self._cfg, self.id, limit, before)

    @call
    def get_audit_log(self, *, limit: int = 100, before: int | None = None) -> Flow[AuditPage]:
        """Every command and file operation on the box, newest first: who, when, what, exit code."""
        return sandboxes.audit_log(self._cfg, self.id, limit, before)

    def get_preview_url(self, port: int) -> str:
        """The URL of a port at the preview proxy (no request: publish it to make it answer)."""
        return previews.preview_url(self._info.preview_url_template, port)

    @call
    def publish_preview_port(self, port: int, *, access: str | None = None) -> Flow[PreviewPort]:
        """Serve a port of the box at its preview URL. `access`: "public" (anyone with the URL)
        or "private" (a signed link, its cookie, or the port's token); default: the sandbox's
        `preview_access`. Publishing again changes the access."""
        return previews.publish(self._cfg, self.id, port, access)

    @call
    def unpublish_preview_port(self, port: int) -> Flow[None]:
        """Stop serving the port (its links, cookies and token go with it)."""
        return previews.unpublish(self._cfg, self.id, port)

    @call
    def list_preview_ports(self) -> Flow[builtins.list[PreviewPort]]:
        """The ports published now."""
        return previews.list_ports(self._cfg, self.id)

    @call
    def get_signed_preview_url(self, port: int, expires_in_seconds: int = 60) -> Flow[str]:
        """A link to a private port: opened in a browser before it expires, it is exchanged for a
        cookie for this port only."""
        return previews.signed_url(self._cfg, self.id, port, expires_in_seconds)

    @call
    def get_preview_token(self, port: int) -> Flow[str]:
        """A credential for machine clients: send it as X-Hutch-Preview-Token. Valid until rotated."""
        return previews.token(self._cfg, self.id, port)

    @call
    def rotate_preview_token(self, port: int) -> Flow[None]:
        """Void the port's links, cookies and token at once (and cut its open connections)."""
        return previews.rotate_token(self._cfg, self.id, port)

    @call
    def attach_secret(self, env: str, secret: str) -> Flow[builtins.list[SecretBinding]]:
        """Bind a secret to an env var (active or paused box); commands started afterwards see
        its stand-in. Replaces a binding the variable had."""
        return mapped(sandboxes.secret_bindings(self._cfg, self.id, "PUT", env, secret), self._bound)

    @call
    def detach_secret(self, env: str) -> Flow[builtins.list[SecretBinding]]:
        """Commands started afterwards no longer get the variable."""
        return mapped(sandboxes.secret_bindings(self._cfg, self.id, "DELETE", env), self._bound)

    @call
    def pause(self, *, memory: bool = True) -> Flow[None]:
        """Checkpoint the whole box (memory, processes, files) to disk and free its memory.
        Any later command, file call or connect resumes it. Idempotent. With `memory=False`, only
        the files it changed on its root filesystem are kept (not /tmp, a tmpfs): its resume boots
        it afresh with them, and no process of before."""
        return sandboxes.pause(self._cfg, self.id, memory)

    @call
    def resume(self) -> Flow[None]:
        """Restore a paused box exactly where it was; its access token rotates (handled here)."""
        self._info = yield from sandboxes.resume(self._dp)

    # --- the code interpreter (a box of hutch/code-interpreter) ----------------------------------

    @call
    def run_code(self, code: str, *, language: str | None = None, context: CodeContext | str | None = None,
                 on_stdout: OnOutput | None = None, on_stderr: OnOutput | None = None,
                 on_result: OnResult | None = None, on_error: OnError | None = None,
                 envs: dict[str, str] | None = None, timeout: float | None = None) -> Flow[Execution]:
        """Run code in a kernel that keeps its state between calls: the default context of
        `language` ("python", the default; "bash"; "javascript" or "js", "typescript" or "ts", both
        Deno's; "r"), or `context`'s. Returns its results (the last expression's value is
        the main one, `execution.text`), its stdout/stderr and the error it raised (None if none).
        Output, results and the error go to the callbacks as they come (on the async SDK they may
        be coroutine functions). `envs` hold for this run only. Past `timeout` seconds the kernel
        is interrupted and SandboxTimeoutError raised. Needs a box of hutch/code-interpreter
        (else the code `interpreter_unavailable`)."""
        return _code.run(self._dp, code, language=language, context=context, on_stdout=on_stdout,
                         on_stderr=on_stderr, on_result=on_result, on_error=on_error, envs=envs, timeout=timeout)

    @call
    def create_code_context(self, *, cwd: str | None = None, language: str | None = None,
                            timeout: float | None = None) -> Flow[CodeContext]:
        """A new context: its own kernel of `language` (as run_code's), so its own variables, started
        in `cwd` (default /home/user).
        `timeout` (seconds), here and on the other context calls: as on `files`' calls."""
        return _code.create_context(self._dp, cwd, language, timeout)

    @call
    def list_code_contexts(self, *, timeout: float | None = None) -> Flow[builtins.list[CodeContext]]:
        """Every context in the box."""
        return _code.list_contexts(self._dp, timeout)

    @call
    def restart_code_context(self, context: CodeContext | str, *, timeout: float | None = None) -> Flow[None]:
        """A fresh kernel for the context: its variables go (a running cell is interrupted first)."""
        return _code.restart_context(self._dp, context, timeout)

    @call
    def remove_code_context(self, context: CodeContext | str, *, timeout: float | None = None) -> Flow[None]:
        """Stop the context's kernel."""
        return _code.remove_context(self._dp, context, timeout)

    # --- snapshots --------------------------------------------------------------------------------

    @call
    def snapshot(self, *, name: str | None = None, metadata: dict[str, str] | None = None,
                 memory: bool = True) -> Flow[SnapshotInfo]:
        """Save the box (memory, processes, files) as a snapshot that new boxes boot from, any
        number of times. The box runs on: it is paused only while it is saved (streams of its
        commands and watches are cut then, as by a pause; its processes are not). `name` is
        unique in the team; `metadata` is for `Snapshot.list`. With `memory=False`, only the
        files the box changed on its root filesystem are saved (not /tmp, a tmpfs), read while it
        runs, unpaused: boxes from it boot afresh, with those files and no processes."""
        return _snapshots.take(self._cfg, self.id, name, metadata, memory)

    @call
    def fork(self, count: int = 1, *, name: str | None = None, timeout_seconds: int | None = None,
             auto_delete_seconds: int | None = None, metadata: dict[str, str] | None = None,
             env_vars: dict[str, str] | None = None, network: NetworkConfig | None = None,
             secrets: dict[str, str] | None = None,
             volumes: VolumeMounts | None = None) -> Flow[builtins.list[SandboxT]]:
        """`count` new boxes (at most 20), each continuing from this box as it is now (a snapshot
        is taken for them, and not kept); this box runs on. All of them, or none and the error.
        The forks mount this box's volumes (the same live volumes: a write of one is every one's),
        unless `volumes` puts another volume at each of those paths."""
        body = _snapshots.boot_body(count, name, timeout_seconds, auto_delete_seconds, metadata, env_vars, network,
                                    secrets, mounts_body(volumes))
        boxes = yield from _snapshots.fork(self._cfg, self.id, body)
        return [type(self)(info, dp, Session(self._cfg, keep=True)) for info, dp in boxes]  # type: ignore[misc]

    @closing
    def kill(self) -> Flow[None]:
        """Delete the sandbox (idempotent) and close this object's HTTP client."""
        return sandboxes.kill(self._cfg, self.id)


class _CommandsBase(Generic[ProcessT]):
    """Both fronts' `sandbox.commands`."""

    def __init__(self, sandbox: _SandboxBase[Any]) -> None:
        self._dp, self._session = sandbox._dp, sandbox._session

    def _process(self, process: AsyncProcess) -> ProcessT:
        """The front's own object for an attached process."""
        raise NotImplementedError

    @call
    def run(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
            timeout_seconds: float | None = None, on_stdout: OutputCallback | None = None,
            on_stderr: OutputCallback | None = None, user: str | None = None) -> Flow[CommandResult]:
        """Run `command` with /bin/sh in the sandbox, as `user` ("user" by default, or "root").

        Returns stdout, stderr and exit_code once it ends; a non-zero exit is a result. Output goes
        to the callbacks as it comes (on the async SDK they may be coroutine functions). Past
        `timeout_seconds` the command's whole process group is killed and SandboxTimeoutError
        raised. No timeout: it runs as long as it takes.
        """
        return commands.run(self._dp, command, cwd=cwd, env=env, timeout_seconds=timeout_seconds, user=user,
                            on_stdout=on_stdout, on_stderr=on_stderr)

    @call
    def spawn(self, command: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
              user: str | None = None, pty: PtySize | tuple[int, int] | None = None,
              on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None) -> Flow[ProcessT]:
        """Start `command` (with /bin/sh) as a long-lived process and attach to it; returns once it
        runs. Its stdin is a pipe, or with `pty=PtySize(rows, cols)` a terminal (stdout and stderr
        then arrive together as stdout). It outlives this object: see `connect`."""
        return mapped(commands.spawn(self._dp, command, cwd=cwd, env=env, user=user, pty=pty, on_stdout=on_stdout,
                                     on_stderr=on_stderr), self._process)

    @call
    def connect(self, pid: int, *, on_stdout: OutputCallback | None = None,
                on_stderr: OutputCallback | None = None) -> Flow[ProcessT]:
        """Attach to a spawned process: the output kept since it started is replayed first."""
        return mapped(commands.attach(self._dp, pid, on_stdout, on_stderr), self._process)

    @call
    def list(self, *, timeout: float | None = None) -> Flow[builtins.list[ProcessInfo]]:
        """The spawned processes that are still running. `timeout` (seconds): as on `files`' calls."""
        return commands.list_processes(self._dp, timeout)

    @call
    def kill(self, pid: int, signal: int = signals.SIGTERM, *, timeout: float | None = None) -> Flow[bool]:
        """Signal a spawned process' group, attached or not; False if it had already ended."""
        return commands.signal_process(self._dp, pid, signal, timeout)


class _FilesBase:
    """Both fronts' `sandbox.files`. Below, `user` is who a call acts as: the box user (default;
    the box's permissions apply to it) or "root". Paths are absolute. `timeout` is how many seconds
    the call may take, its retries included (default: each request's own limits, 300 s for a
    transfer); past it SandboxTimeoutError (request_timeout)."""

    def __init__(self, sandbox: _SandboxBase[Any]) -> None:
        self._dp, self._session = sandbox._dp, sandbox._session

    @call
    def write(self, path: str, content: str | bytes, *, user: str | None = None,
              timeout: float | None = None) -> Flow[None]:
        """Write a file (absolute path), making missing parent directories; owned by `user`."""
        return files.write_file(self._dp, path, content, user, timeout)

    @call
    def read(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[bytes]:
        """A file's bytes, read as the box user (with its rights) unless user="root"."""
        return files.read_file(self._dp, path, user, timeout)

    @call
    def read_text(self, path: str, encoding: str = "utf-8", *, user: str | None = None,
                  timeout: float | None = None) -> Flow[str]:
        """A file, decoded; read as the box user unless user="root"."""
        return mapped(files.read_file(self._dp, path, user, timeout), lambda data: data.decode(encoding))

    @call
    def download_dir(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[bytes]:
        """A directory and everything under it, as the bytes of a zip archive (as the box user
        sees it, unless user="root")."""
        return files.download_dir(self._dp, path, user, timeout)

    @call
    def list(self, path: str, depth: int = 1, *, user: str | None = None,
             timeout: float | None = None) -> Flow[builtins.list[EntryInfo]]:
        """A directory's entries, `depth` (1-16) levels down, sorted; links are listed, not followed."""
        return files.list_dir(self._dp, path, depth, user, timeout)

    @call
    def get_info(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[EntryInfo]:
        """A file, directory or link (described, not followed). NotFoundError if there is none."""
        return files.get_entry(self._dp, path, user, timeout)

    @call
    def exists(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[bool]:
        """Whether there is a file, directory or link at `path`."""
        return files.exists(self._dp, path, user, timeout)

    @call
    def remove(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[None]:
        """A file or link (never its target), or a directory with everything in it."""
        return files.remove(self._dp, path, user, timeout)

    @call
    def rename(self, source: str, destination: str, *, user: str | None = None,
               timeout: float | None = None) -> Flow[EntryInfo]:
        """Move a file or directory (the destination's parent must exist); the destination's entry."""
        return files.rename(self._dp, source, destination, user, timeout)

    @call
    def make_dir(self, path: str, *, user: str | None = None, timeout: float | None = None) -> Flow[bool]:
        """mkdir -p, owned by `user`; False if it was a directory already (ConflictError if it is
        something else)."""
        return files.make_dir(self._dp, path, user, timeout)


# --- blocking -------------------------------------------------------------------------------------

class Sandbox(_SandboxBase["Sandbox"], SyncFront):
    """A sandbox, used from blocking code. Holds an HTTP client until `kill()` or `close()`."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, session: Session) -> None:
        super().__init__(info, data_plane, session)
        self.commands = Commands(self)
        self.files = Files(self)
        self.desktop = Desktop(data_plane, session)

    def close(self) -> None:
        close_blocking(self._session)


class Commands(_CommandsBase[Process], SyncFront):
    def _process(self, process: AsyncProcess) -> Process:
        return Process(process)


class Files(_FilesBase, SyncFront):
    def watch_dir(self, path: str, *, recursive: bool = False) -> WatchHandle:
        """Watch a directory: iterate the handle for FilesystemEvents as they happen (the watch is in
        place when this returns); `close()` it when done. It ends if the directory goes."""
        return WatchHandle(iterate_blocking(self._session, files.watch_dir(self._dp, path, recursive)))


class WatchHandle:
    """A watched directory's changes: an iterator of FilesystemEvents, and a context manager."""

    def __init__(self, items: Generator[Any, None, Any]) -> None:
        self._items = items
        try:
            check_watch_opened(next(items, None))
        except BaseException:
            items.close()
            raise

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


# --- asyncio --------------------------------------------------------------------------------------

class AsyncSandbox(_SandboxBase["AsyncSandbox"], AsyncFront):
    """A sandbox, used from asyncio code. The same calls as `Sandbox`, awaited."""

    def __init__(self, info: SandboxInfo, data_plane: DataPlane, session: Session) -> None:
        super().__init__(info, data_plane, session)
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)
        self.desktop = AsyncDesktop(data_plane, session)

    async def close(self) -> None:
        await close_awaited(self._session)


class AsyncCommands(_CommandsBase[AsyncProcess], AsyncFront):
    def _process(self, process: AsyncProcess) -> AsyncProcess:
        return process


class AsyncFiles(_FilesBase, AsyncFront):
    async def watch_dir(self, path: str, *, recursive: bool = False) -> AsyncWatchHandle:
        """As `Files.watch_dir`: iterate with `async for`; `await close()`."""
        return await AsyncWatchHandle.open(iterate_awaited(self._session, files.watch_dir(self._dp, path, recursive)))


class AsyncWatchHandle:
    """A watched directory's changes: an async iterator of FilesystemEvents, and an async context
    manager."""

    def __init__(self, items: AsyncGenerator[Any, None]) -> None:
        self._items = items

    @classmethod
    async def open(cls, items: AsyncGenerator[Any, None]) -> AsyncWatchHandle:
        try:
            check_watch_opened(await anext(items, None))
        except BaseException:
            await items.aclose()
            raise
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
