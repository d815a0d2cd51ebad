"""Spawned processes: a long-lived command in the box, attached over a WebSocket.

`AsyncProcess` is the one implementation. `Process` is the same object for blocking code: it runs
the async one on the SDK's event-loop thread (`hutch.sdk.portal`), each of its calls derived from
the async one's, so both behave alike by construction.
The process does not depend on the attachment: closing it (or losing the connection) leaves the
process running, and `commands.connect(pid)` attaches again, replaying the output kept meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import signal as signals
from collections.abc import Callable
from typing import Any, NamedTuple

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode, ServerCode
from hutch.sdk.config import tls_context
from hutch.sdk.errors import ConflictError, SandboxError, SandboxTimeoutError, ServerError, error_for, error_from_response
from hutch.sdk.flow import call_back
from hutch.sdk.ops.sandboxes import DataPlane, refresh_token
from hutch.sdk.portal import blocking, run_coroutine
from hutch.sdk.session import Session, run_awaited

OutputCallback = Callable[[str], Any]
REQUEST_TIMEOUT = 60.0
MAX_FRAME = 16 * 2**20
STDIN_PIECE = 256 * 2**10  # a write is sent in pieces: the server takes frames up to 1 MiB


class PtySize(NamedTuple):
    rows: int
    cols: int


class AsyncProcessStdin:
    def __init__(self, process: AsyncProcess) -> None:
        self._process = process

    async def write(self, data: str | bytes) -> None:
        """Send to the process' stdin; returns once the box took it (a pipe that is full waits)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        for at in range(0, len(raw), STDIN_PIECE):
            piece = raw[at:at + STDIN_PIECE]
            await self._process._request({"t": "stdin", "b": base64.b64encode(piece).decode()})

    async def close(self) -> None:
        """End of input: the pipe closes (on a terminal, ^D is sent)."""
        await self._process._request({"t": "close_stdin"})


class AsyncProcess:
    """A spawned process, attached. `stdout` and `stderr` hold what arrived so far (replayed
    output included); `exit_code` is set once it ends. As an async context manager it kills the
    process and detaches on exit."""

    def __init__(self, pid: int, on_stdout: OutputCallback | None, on_stderr: OutputCallback | None) -> None:
        self.pid = pid
        self.stdin = AsyncProcessStdin(self)
        self._output_parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.dropped_chars = 0  # output the box's buffer dropped before this attachment saw it
        self.exit_code: int | None = None
        self._callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._done: asyncio.Future[int] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    @classmethod
    async def attach(cls, dp: DataPlane, pid: int, on_stdout: OutputCallback | None = None,
                     on_stderr: OutputCallback | None = None) -> AsyncProcess:
        """Attach to process `pid` of the sandbox behind `dp`."""
        proc = cls(pid, on_stdout, on_stderr)
        for attempt in (1, 2):
            try:
                proc._ws = await ws_connect(
                    routes.ATTACH_PROCESS.at(dp.url.replace("http", "ws", 1), pid=pid)[1], additional_headers=dp.headers(),
                    ssl=tls_context() if dp.url.startswith("https:") else None, max_size=MAX_FRAME,
                    open_timeout=30, ping_interval=20, ping_timeout=60)
                break
            except websockets.InvalidStatus as e:
                err = error_from_response(e.response.status_code, bytes(e.response.body or b""))
                if attempt == 1 and err.code == ServerCode.INVALID_ACCESS_TOKEN:
                    await run_awaited(Session(dp.cfg), refresh_token(dp))  # the box resumed since: its token rotated
                    continue
                raise err from None
            except (OSError, TimeoutError, websockets.InvalidHandshake) as e:
                raise ServerError(f"could not attach to process {pid}: {e}", code=SdkCode.CONNECTION_ERROR) from e
        proc._done = asyncio.get_running_loop().create_future()
        proc._reader = asyncio.create_task(proc._read())
        return proc

    @property
    def stdout(self) -> str:
        return "".join(self._output_parts["stdout"])

    @property
    def stderr(self) -> str:
        return "".join(self._output_parts["stderr"])

    async def _read(self) -> None:
        """Take frames until the server closes: output, the exit (which settles wait() at once),
        and the answers to requests, which may come after the exit."""
        assert self._ws is not None and self._done is not None
        failure: SandboxError = ServerError("the connection to the process ended before it exited; it may "
                                            "still run: attach again with commands.connect(pid)", code=SdkCode.STREAM_ENDED)
        try:
            async for frame in self._ws:
                msg = json.loads(frame)
                kind = msg.get("t")
                if kind in ("stdout", "stderr"):
                    await self._output(kind, msg["d"])
                elif kind == "dropped":
                    self.dropped_chars = msg["chars"]
                elif kind == "exit":
                    self.exit_code = msg["exit_code"]
                    if not self._done.done():
                        self._done.set_result(msg["exit_code"])
                elif kind == "ack" and msg.get("id") in self._pending:
                    self._pending.pop(msg["id"]).set_result(msg)
                elif kind == "error":
                    err = error_for(msg.get("status", 500), msg.get("code", SdkCode.ERROR), msg.get("message", ""))
                    waiter = self._pending.pop(msg.get("id"), None) if msg.get("id") is not None else None
                    if waiter is not None:
                        waiter.set_exception(err)
                    else:
                        failure = err  # the attachment ends (e.g. the sandbox was paused)
        except websockets.ConnectionClosed:
            pass
        except asyncio.CancelledError:  # close(): detached on purpose
            failure = ServerError("detached from the process (close()); it runs on in the sandbox",
                                  code=SdkCode.DETACHED)
            raise
        except Exception as e:  # a callback raised: the attachment ends, wait() says why
            failure = e if isinstance(e, SandboxError) else ServerError(f"an output callback raised {e!r}",
                                                                        code=SdkCode.CALLBACK_ERROR)
        finally:
            for waiter in self._pending.values():
                if not waiter.done():
                    waiter.set_exception(failure if self.exit_code is None else
                                         ConflictError("the process has exited", status_code=409, code=SdkCode.PROCESS_EXITED))
            self._pending.clear()
            if not self._done.done():
                if self.exit_code is not None:
                    self._done.set_result(self.exit_code)
                else:
                    self._done.set_exception(failure)
                    self._done.exception()  # retrieved, so an unawaited failure is not reported
            await self._ws.close()

    async def _output(self, kind: str, text: str) -> None:
        self._output_parts[kind].append(text)
        callback = self._callbacks[kind]
        if callback is not None:
            await call_back(callback, text)

    async def _request(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self._ws is not None and self._done is not None
        if self._done.done():
            if self.exit_code is not None:
                raise ConflictError(f"process {self.pid} has exited", status_code=409, code=SdkCode.PROCESS_EXITED)
            self._done.result()  # raises why the attachment ended
        request_id = next(self._ids)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            await self._ws.send(json.dumps({**msg, "id": request_id}))
            return await asyncio.wait_for(waiter, REQUEST_TIMEOUT)
        except websockets.ConnectionClosed:
            return await asyncio.wait_for(waiter, REQUEST_TIMEOUT)  # the reader fails it with the reason
        except TimeoutError:
            raise SandboxTimeoutError("the sandbox did not answer in time", code=SdkCode.REQUEST_TIMEOUT) from None
        finally:
            self._pending.pop(request_id, None)

    async def wait(self, timeout: float | None = None) -> int:
        """The exit code (128 + N if signal N ended it). Raises if the attachment ends first, e.g.
        ConflictError "sandbox_paused"; the process then runs on (attach again after resume)."""
        assert self._done is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._done), timeout)
        except TimeoutError:
            raise SandboxTimeoutError(f"process {self.pid} is still running after {timeout} s",
                                      code=SdkCode.WAIT_TIMEOUT) from None

    async def kill(self, signal: int = signals.SIGTERM) -> bool:
        """Send `signal` to the process' group; False if it had already exited."""
        if self.exit_code is not None:
            return False
        try:
            answer = await self._request({"t": "signal", "signal": int(signal)})
        except ConflictError as e:
            if e.code == SdkCode.PROCESS_EXITED:
                return False
            raise
        return bool(answer.get("signalled"))

    async def resize(self, rows: int, cols: int) -> None:
        """A terminal's new size; its foreground programs get SIGWINCH."""
        await self._request({"t": "resize", "rows": rows, "cols": cols})

    async def close(self) -> None:
        """Detach: the process runs on in the box, its output kept for the next attach."""
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
        if self._ws is not None:
            await self._ws.close()

    async def __aenter__(self) -> AsyncProcess:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        try:
            if self.exit_code is None and self._done is not None and not self._done.done():
                await self.kill(signals.SIGKILL)
        finally:
            await self.close()

    def __repr__(self) -> str:
        return f"AsyncProcess(pid={self.pid}, exit_code={self.exit_code})"


# --- the same, from blocking code -----------------------------------------------------------------

class ProcessStdin:
    def __init__(self, inner: AsyncProcessStdin) -> None:
        self._inner = inner

    write = blocking(AsyncProcessStdin.write)
    close = blocking(AsyncProcessStdin.close)


class Process:
    """A spawned process, from blocking code; the same calls as `AsyncProcess`. The output
    callbacks run on the SDK's event-loop thread."""

    def __init__(self, inner: AsyncProcess) -> None:
        self._inner = inner
        self.pid = inner.pid
        self.stdin = ProcessStdin(inner.stdin)

    @property
    def stdout(self) -> str:
        return self._inner.stdout

    @property
    def stderr(self) -> str:
        return self._inner.stderr

    @property
    def exit_code(self) -> int | None:
        return self._inner.exit_code

    @property
    def dropped_chars(self) -> int:
        return self._inner.dropped_chars

    wait = blocking(AsyncProcess.wait)
    kill = blocking(AsyncProcess.kill)
    resize = blocking(AsyncProcess.resize)
    close = blocking(AsyncProcess.close)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        run_coroutine(self._inner.__aexit__(*exc))

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, exit_code={self.exit_code})"
