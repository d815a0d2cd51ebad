"""`hutch mcp serve`: hutch's sandboxes as MCP tools, on the official `mcp` package.

    hutch mcp serve                          # stdio, for an agent that starts it
    hutch mcp serve --listen 127.0.0.1:8765  # streamable HTTP at /mcp, bearer token required
    hutch mcp serve --ephemeral              # one tool, sandbox_exec: each call in a fresh box

The MCP server is a client of a hutch server (HUTCH_BASE_URL, HUTCH_API_KEY): every tool call is
a call of the SDK, so the box's rules, secrets and audit log apply, and the audit log names the
caller "hutch-mcp". Nothing ever runs on the machine of the MCP server itself: with
`--ephemeral` it refuses to start unless the hutch server says its boxes are gVisor sandboxes,
and a call whose box cannot be made fails.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx

from hutch.integrations._extra import missing
from hutch.integrations.tools import RUN_CODE, command_report
from hutch.sdk import (
    AsyncSandbox,
    AsyncVolume,
    NetworkConfig,
    SandboxError,
    SandboxTimeoutError,
    ValidationError,
    VolumeInfo,
)
from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.volumes import VolumeMounts

try:
    from mcp.server.mcpserver import Image, MCPServer
except ImportError as e:  # pragma: no cover - depends on the extra
    raise missing("mcp", e) from e

ACTOR = "hutch-mcp"
DEFAULT_TIMEOUT = 120


class IsolationError(RuntimeError):
    """The hutch server cannot show that its boxes are gVisor sandboxes."""


def check_isolation(cfg: ConnectionConfig) -> str:
    """What the hutch server isolates boxes with; raises unless it is gVisor (fail closed)."""
    try:
        health = httpx.get(f"{cfg.base_url}/health", timeout=10).json()
    except (httpx.HTTPError, ValueError) as e:
        raise IsolationError(f"the hutch server at {cfg.base_url} cannot be reached: {e}") from e
    isolation = str(health.get("isolation", ""))
    if isolation != "gvisor":
        raise IsolationError(f"the hutch server at {cfg.base_url} reports isolation {isolation!r}, not gvisor")
    return isolation


def _error(e: SandboxError) -> str:
    return f"error: {e.code}: {e.message}"


def mounts(volumes: dict[str, str] | None) -> VolumeMounts | None:
    """sandbox_create's `volumes` ({"/mnt/data": "repo", "/srv/docs": "docs:ro"}) as the SDK takes them."""
    if not volumes:
        return None
    result: dict[str, str | dict[str, Any]] = {}
    for path, ref in volumes.items():
        name, colon, mode = ref.partition(":")  # a volume's name or id holds no ':'
        if colon and mode not in ("ro", "rw"):
            raise ValidationError(f"volumes[{path!r}] is a volume's name or id, with :ro to mount it read-only, "
                                  f"not {ref!r}", code=SdkCode.INVALID_ARGUMENT)
        result[path] = {"volume": name, "read_only": True} if mode == "ro" else name
    return result


def screen_size(resolution: list[int] | None) -> tuple[int, int] | None:
    """sandbox_create's `resolution` ([1280, 720]) as the SDK takes it."""
    if resolution is None:
        return None
    if len(resolution) != 2:
        raise ValidationError(f"resolution is [width, height], not {resolution!r}", code=SdkCode.INVALID_ARGUMENT)
    return resolution[0], resolution[1]


def _volume(info: VolumeInfo) -> dict[str, Any]:
    return {"id": info.id, "name": info.name, "size_mib": info.size_mib, "used_bytes": info.used_bytes,
            "metadata": info.metadata, "mounted_by": info.mounted_by}


async def _exec(sandbox: AsyncSandbox, command: str, cwd: str | None, timeout: int | None) -> str:
    seconds = timeout or DEFAULT_TIMEOUT
    try:
        result = await sandbox.commands.run(command, cwd=cwd, timeout_seconds=seconds)
    except SandboxTimeoutError as e:
        return command_report(None, e.stdout, e.stderr, note=f"timed out after {seconds} s")
    return command_report(result.exit_code, result.stdout, result.stderr)


def build(cfg: ConnectionConfig | None = None, ephemeral: bool = False) -> MCPServer[Any]:
    """The MCP server, its tools bound to the hutch server of `cfg` (default: the environment)."""
    os.environ.setdefault("HUTCH_ACTOR", ACTOR)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per SDK request is noise on the client's stderr
    cfg = cfg or ConnectionConfig.resolve()
    conn: dict[str, Any] = {"api_key": cfg.api_key, "base_url": cfg.base_url}
    server: MCPServer[Any] = MCPServer("hutch", instructions=(
        "Run shell commands and read and write files in isolated gVisor sandboxes. Create a sandbox once, keep its id, "
        "and pass it to the other tools; pause it when you are done for now. For run_code (Python in a kernel that "
        "keeps its state), create the sandbox from the template hutch/code-interpreter. Volumes are storage that "
        "outlives sandboxes: mount one with sandbox_create's volumes, or read and write its files with the volume_ "
        "tools, with no sandbox. For a screen (computer use), create the sandbox from the template desktop and use the "
        "desktop_ tools: a screenshot, then clicks, typing and keys at its pixel coordinates."))

    if ephemeral:
        check_isolation(cfg)

        @server.tool(name="sandbox_exec")
        async def exec_once(command: str, timeout_seconds: int = DEFAULT_TIMEOUT) -> str:
            """Run a shell command in a fresh, isolated sandbox that is deleted afterwards. Returns the exit
            code, stdout and stderr. Nothing persists between calls."""
            check_isolation(cfg)  # fail closed: never run anything if the server cannot show gVisor
            try:
                # a lifetime of its own, in case the kill below never happens: it pauses, then is deleted
                sandbox = await AsyncSandbox.create("mcp-ephemeral", timeout_seconds=timeout_seconds + 60,
                                                    auto_delete_seconds=0, **conn)
            except SandboxError as e:
                return _error(e)
            try:
                return await _exec(sandbox, command, None, timeout_seconds)
            except SandboxError as e:
                return _error(e)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(60):  # a cancelled call still kills its box
                    await sandbox.kill()

        return server

    async def on_box(sandbox_id: str, use: Callable[[AsyncSandbox], Awaitable[str]]) -> str:
        """Connect (resuming a paused box), use, let go; an error is the model's to read."""
        try:
            sb = await AsyncSandbox.connect(sandbox_id, **conn)
            try:
                return await use(sb)
            finally:
                await sb.close()
        except SandboxError as e:
            return _error(e)

    async def on_volume(volume: str, use: Callable[[AsyncVolume], Awaitable[str]]) -> str:
        """Look the volume up (by name or id), use it; an error is the model's to read."""
        try:
            return await use(await AsyncVolume.get(volume, **conn))
        except SandboxError as e:
            return _error(e)

    @server.tool()
    async def sandbox_create(name: str = "agent", template: str | None = None, metadata: dict[str, str] | None = None,
                             timeout_seconds: int | None = None, auto_delete_seconds: int | None = None,
                             allow_out: list[str] | None = None, deny_out: list[str] | None = None,
                             volumes: dict[str, str] | None = None, resolution: list[int] | None = None) -> str:
        """Create a sandbox (a Debian box under gVisor). Returns its id, to pass to the other tools. allow_out /
        deny_out restrict its network egress (domains or CIDRs; deny_out ["0.0.0.0/0"] with an allow list).
        volumes mounts volumes in it: a path in the box to a volume's name or id, with ":ro" to mount it
        read-only, e.g. {"/mnt/data": "repo", "/srv/docs": "docs:ro"}. template "desktop" gives it a screen
        (the desktop_ tools) of resolution [width, height] (default [1024, 768])."""
        network = NetworkConfig(allow_out or [], deny_out or []) if allow_out or deny_out else None
        try:
            sb = await AsyncSandbox.create(name, from_template=template, metadata=metadata,
                                           timeout_seconds=timeout_seconds, auto_delete_seconds=auto_delete_seconds,
                                           network=network, volumes=mounts(volumes),
                                           resolution=screen_size(resolution), **conn)
        except SandboxError as e:
            return _error(e)
        made: dict[str, Any] = {"id": sb.id, "name": sb.name, "status": sb.status}
        try:
            if volumes:
                made["volumes"] = [{"path": m.path, "volume": m.name, "volume_id": m.volume_id, "read_only": m.read_only}
                                   for m in (await sb.get_info()).volumes]
        except SandboxError:
            made["volumes"] = volumes  # made and mounted: only the read of what it mounts failed
        finally:
            await sb.close()
        return json.dumps(made)

    @server.tool()
    async def sandbox_exec(sandbox_id: str, command: str, cwd: str | None = None,
                           timeout_seconds: int = DEFAULT_TIMEOUT) -> str:
        """Run a shell command in a sandbox (resuming it if paused). Returns the exit code, stdout and stderr."""
        return await on_box(sandbox_id, lambda sb: _exec(sb, command, cwd, timeout_seconds))

    @server.tool()
    async def run_code(sandbox_id: str, code: str, context_id: str | None = None,
                       timeout_seconds: int = DEFAULT_TIMEOUT) -> str:
        """Run Python code in a sandbox's Jupyter kernel (a sandbox made from the hutch/code-interpreter
        template), which keeps variables between calls. Returns stdout, stderr, the last expression's value,
        displays (charts, tables) and any error with its traceback."""
        args = {"code": code, "context_id": context_id, "timeout_seconds": timeout_seconds}
        return await on_box(sandbox_id, lambda sb: RUN_CODE.run(sb, args))

    @server.tool()
    async def sandbox_list(metadata: dict[str, str] | None = None) -> str:
        """List sandboxes (id, name, status, metadata), optionally only those whose metadata has every pair given."""
        try:
            infos = await AsyncSandbox.list(metadata=metadata, **conn)
        except SandboxError as e:
            return _error(e)
        return json.dumps([{"id": i.id, "name": i.name, "status": i.status, "metadata": i.metadata} for i in infos])

    @server.tool()
    async def sandbox_kill(sandbox_id: str) -> str:
        """Delete a sandbox and everything in it."""
        try:
            await AsyncSandbox.kill_by_id(sandbox_id, **conn)
        except SandboxError as e:
            return _error(e)
        return f"killed {sandbox_id}"

    @server.tool()
    async def sandbox_pause(sandbox_id: str) -> str:
        """Pause a sandbox: its memory, processes and files are kept on disk; any later call resumes it."""
        async def pause(sb: AsyncSandbox) -> str:
            await sb.pause()
            return f"paused {sandbox_id}"

        return await on_box(sandbox_id, pause)

    @server.tool()
    async def sandbox_resume(sandbox_id: str) -> str:
        """Resume a paused sandbox (other tools resume it on their own too)."""
        async def status(sb: AsyncSandbox) -> str:
            return f"{sandbox_id} is {sb.status}"

        return await on_box(sandbox_id, status)

    @server.tool()
    async def files_read(sandbox_id: str, path: str) -> str:
        """Read a text file from a sandbox (an absolute path)."""
        async def read(sb: AsyncSandbox) -> str:
            return (await sb.files.read(path)).decode("utf-8", errors="replace")

        return await on_box(sandbox_id, read)

    @server.tool()
    async def files_write(sandbox_id: str, path: str, content: str) -> str:
        """Write a text file in a sandbox (an absolute path; parent directories are made)."""
        async def write(sb: AsyncSandbox) -> str:
            await sb.files.write(path, content)
            return f"wrote {len(content.encode())} bytes to {path}"

        return await on_box(sandbox_id, write)

    @server.tool()
    async def preview_url(sandbox_id: str, port: int, private: bool = False) -> str:
        """Publish a port of a sandbox (a server listening on it inside) and return its URL; private gives a
        signed link valid for an hour."""
        async def publish(sb: AsyncSandbox) -> str:
            await sb.publish_preview_port(port, access="private" if private else "public")
            if private:
                return await sb.get_signed_preview_url(port, expires_in_seconds=3600)
            return sb.get_preview_url(port)

        return await on_box(sandbox_id, publish)

    @server.tool()
    async def desktop_screenshot(sandbox_id: str) -> Image | str:
        """The screen of a sandbox made from the desktop template, as a PNG image (the pointer drawn in).
        Coordinates for the other desktop_ tools are this image's pixels, (0, 0) its top left."""
        try:
            sb = await AsyncSandbox.connect(sandbox_id, **conn)
            try:
                return Image(data=await sb.desktop.screenshot(), format="png")
            finally:
                await sb.close()
        except SandboxError as e:
            return _error(e)

    @server.tool()
    async def desktop_click(sandbox_id: str, x: int, y: int, button: str = "left", count: int = 1) -> str:
        """Click on a desktop sandbox's screen at pixel (x, y): button "left", "middle" or "right"; count 2 is a
        double click."""
        async def click(sb: AsyncSandbox) -> str:
            await sb.desktop.click(x, y, button=button, count=count)
            return f"clicked {button} at ({x}, {y})" + (f" {count} times" if count > 1 else "")

        return await on_box(sandbox_id, click)

    @server.tool()
    async def desktop_type(sandbox_id: str, text: str) -> str:
        """Type text into the focused window of a desktop sandbox, as keystrokes (click a field first)."""
        async def type_text(sb: AsyncSandbox) -> str:
            await sb.desktop.type(text)
            return f"typed {len(text)} characters"

        return await on_box(sandbox_id, type_text)

    @server.tool()
    async def desktop_key(sandbox_id: str, combo: str) -> str:
        """Press a key or a combination on a desktop sandbox, in xdotool's names joined by "+": "Return",
        "Escape", "Tab", "ctrl+s", "ctrl+shift+t", "alt+F4", "BackSpace", "Page_Down"."""
        async def press(sb: AsyncSandbox) -> str:
            await sb.desktop.key(combo)
            return f"pressed {combo}"

        return await on_box(sandbox_id, press)

    @server.tool()
    async def volume_create(name: str, size_mib: int | None = None, metadata: dict[str, str] | None = None) -> str:
        """Create a volume: storage that outlives sandboxes, which many sandboxes may mount at once (see
        sandbox_create's volumes). name is unique (letters, digits, '.', '_', '-'); size_mib is what its files
        may take (default 1024)."""
        try:
            vol = await AsyncVolume.create(name, size_mib=size_mib, metadata=metadata, **conn)
        except SandboxError as e:
            return _error(e)
        return json.dumps(_volume(vol.info))

    @server.tool()
    async def volume_list(metadata: dict[str, str] | None = None) -> str:
        """List volumes (id, name, size_mib, used_bytes, metadata, and the sandboxes that mount each), optionally
        only those whose metadata has every pair given."""
        try:
            found = await AsyncVolume.list(metadata=metadata, **conn)
        except SandboxError as e:
            return _error(e)
        return json.dumps([_volume(v.info) for v in found])

    @server.tool()
    async def volume_files_list(volume: str, path: str = "/", depth: int = 1) -> str:
        """List a directory of a volume (by its name or id; paths start at the volume's root, "/"), depth levels
        down (1-16), with no sandbox: each entry's path, type (file, dir, symlink, other) and size."""
        async def listing(vol: AsyncVolume) -> str:
            entries = await vol.files.list(path, depth)
            return json.dumps([{"path": e.path, "type": e.type, "size": e.size} for e in entries])

        return await on_volume(volume, listing)

    @server.tool()
    async def volume_files_read(volume: str, path: str) -> str:
        """Read a text file from a volume (by its name or id; an absolute path from the volume's root), with no
        sandbox."""
        async def read(vol: AsyncVolume) -> str:
            return (await vol.files.read(path)).decode("utf-8", errors="replace")

        return await on_volume(volume, read)

    @server.tool()
    async def volume_files_write(volume: str, path: str, content: str) -> str:
        """Write a text file in a volume (by its name or id; an absolute path from the volume's root; parent
        directories are made), with no sandbox. Sandboxes that mount the volume see it at once."""
        async def write(vol: AsyncVolume) -> str:
            await vol.files.write(path, content)
            return f"wrote {len(content.encode())} bytes to {vol.name}:{path}"

        return await on_volume(volume, write)

    return server


class BearerAuth:
    """The streamable HTTP endpoint takes only requests with the token (constant-time compare)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error": {"code": "unauthorized", "message": "Authorization: Bearer <token> required"}}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def serve(listen: str | None, token: str | None, ephemeral: bool) -> None:
    server = build(ephemeral=ephemeral)
    if listen is None:
        server.run("stdio")
        return
    if not token:
        raise SystemExit("hutch: --listen needs a token: set HUTCH_MCP_TOKEN (clients send Authorization: Bearer)")
    import uvicorn

    host, _, port = listen.rpartition(":")
    app = BearerAuth(server.streamable_http_app(host=host or "127.0.0.1"), token)
    uvicorn.run(app, host=host or "127.0.0.1", port=int(port), log_level="warning")
