"""A client attached to a spawned process over a WebSocket: its output out, stdin and control in.

Server to client, JSON text frames:
    {"t": "stdout" | "stderr", "d": str}   output (buffered output is replayed first)
    {"t": "dropped", "chars": int}           the box's buffer lost this much output before the replay
    {"t": "exit", "exit_code": int}           the process ended; the socket then closes (1000)
    {"t": "ack", "id": ...}                   a request below was carried out
    {"t": "error", "status", "code", "message", "id"?}
                                              a request failed (with its id), or the attachment ends
Client to server:
    binary frame                              bytes for the process' stdin
    {"t": "stdin", "d": str, "id"?}           text for its stdin (or "b": base64 bytes)
    {"t": "close_stdin", "id"?}               end of input (^D on a terminal)
    {"t": "resize", "rows", "cols", "id"?}    a terminal's new size
    {"t": "signal", "signal": int, "id"?}     a signal to its process group

The process does not depend on the socket: when the client goes, it runs on and its output is kept
in the box for the next attach. A pause ends every attachment (error "sandbox_paused", close 4409).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from hutch.errors import ApiError, Code
from hutch.node.api import Dropped, Event, Exited, Output
from hutch.server import errors
from hutch.services.audit import AuditLog, actor
from hutch.services.dataplane import DataPlane
from hutch.services.models import PtySize, SignalProcess, StdinFrame
from hutch.store import SandboxRecord

MAX_FRAME = 1 * 2**20
CLOSE_PAUSED = 4409  # WebSocket close codes 4000-4999 are the application's
CLOSE_ERROR = 4500
CLOSE_TOO_BIG = 1009


def _error_frame(code: Code, message: str, **extra: Any) -> dict[str, Any]:
    """An error frame: the catalogue's code and its status, as an answer's error would have them."""
    return {"t": "error", "status": code.status, **errors.error_fields(code, message, **extra)}


async def serve_attachment(websocket: WebSocket, data: DataPlane, audit: AuditLog,
                           authorize: Callable[[], SandboxRecord], pid: str) -> None:
    """A WebSocket attached to spawned process `pid` of the box `authorize()` names (it raises
    ApiError, answered as the WebSocket's denial, before anything of the process is said). The
    process runs on in the box when the socket goes: the data plane's and the console's attach."""
    try:
        rec = authorize()
        if not pid.isdigit() or not 1 <= int(pid) <= 2**31:
            raise ApiError(Code.PROCESS_NOT_FOUND, f"no process {pid[:20]!r}")
        stream = await data.follow_process(rec, int(pid))
    except ApiError as e:
        await websocket.send_denial_response(errors.denial(websocket, e))
        return
    try:
        await websocket.accept()
        await Attachment(websocket, data, rec, int(pid), audit).run(stream.events)
    finally:
        await stream.aclose()


class Attachment:
    def __init__(self, ws: WebSocket, data: DataPlane, rec: SandboxRecord, pid: int,
                 audit: AuditLog | None = None) -> None:
        self.ws, self.data, self.rec, self.pid, self.audit = ws, data, rec, pid, audit
        self._send_lock = asyncio.Lock()
        self._busy = asyncio.Lock()  # held while a client request is carried out

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send_text(json.dumps(message))

    async def run(self, events: AsyncGenerator[Event, None]) -> None:
        out = asyncio.create_task(self._output(events))
        inp = asyncio.create_task(self._input())
        try:
            await asyncio.wait({out, inp}, return_when=asyncio.FIRST_COMPLETED)
            if out.done() and not inp.done():
                # The process ended or the box went: a request already under way (the signal
                # that ended it, say) is still answered, then the socket closes.
                async with self._busy:
                    inp.cancel()
            code = out.result() if out.done() and not out.cancelled() and out.exception() is None else None
        finally:
            for task in (out, inp):
                task.cancel()
            for task in (out, inp):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(Exception):
            await self.ws.close(code or 1000)

    async def _output(self, events: AsyncGenerator[Event, None]) -> int:
        """Relay events; the close code to end with."""
        async for ev in events:
            match ev:
                case Output(stream, data):
                    await self._send({"t": stream, "d": data})
                case Dropped(chars):
                    await self._send({"t": "dropped", "chars": chars})
                case Exited(code):
                    await self._send({"t": "exit", "exit_code": code})
                    return 1000
        err = await self.data.sandboxes.box_unreachable(self.rec)  # paused, failed or gone
        await self._send(_error_frame(err.code, err.message))
        return CLOSE_PAUSED if err.code == Code.SANDBOX_PAUSED else CLOSE_ERROR

    async def _input(self) -> None:
        while True:
            try:
                msg = await self.ws.receive()
            except WebSocketDisconnect:
                return
            if msg["type"] == "websocket.disconnect":
                return
            async with self._busy:
                if not await self._handle(msg.get("bytes"), msg.get("text")):
                    return

    async def _handle(self, raw_bytes: bytes | None, raw_text: str | None) -> bool:
        """Carry out one client frame; False when the socket must close."""
        size = len(raw_bytes) if raw_bytes is not None else len(raw_text or "")
        if raw_text is not None and size * 4 > MAX_FRAME:
            size = len(raw_text.encode())
        if size > MAX_FRAME:
            await self.ws.close(CLOSE_TOO_BIG, f"frames are limited to {MAX_FRAME} bytes")
            return False
        request_id: Any = None
        try:
            if raw_bytes is not None:
                await self.data.write_stdin(self.rec, self.pid, raw_bytes)
                return True
            request = json.loads(raw_text or "")
            if not isinstance(request, dict):
                raise ValueError
            request_id = request.get("id")
            answer = await self._control(request)
            if request_id is not None:
                await self._send({**answer, "t": "ack", "id": request_id})
        except ValueError:
            await self._send(_error_frame(Code.INVALID_MESSAGE, "a control frame is a JSON object"))
        except ApiError as e:
            await self._send(_error_frame(e.code, e.message, id=request_id))
        return True

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        """Carry out one control frame; what its ack says besides (a signal's {"signalled": bool})."""
        kind = request.get("t")
        body = {k: v for k, v in request.items() if k not in ("t", "id")}
        try:
            if kind == "stdin":
                await self.data.write_stdin(self.rec, self.pid, StdinFrame.model_validate(body).data())
                return {}
            if kind == "close_stdin":
                await self.data.close_stdin(self.rec, self.pid)
                return {}
            if kind == "resize":
                size = PtySize.model_validate(body)
                await self.data.resize_pty(self.rec, self.pid, size.rows, size.cols)
                return {}
            if kind == "signal":
                sig = SignalProcess.model_validate(body)
                if self.audit is None:
                    return {"signalled": await self.data.signal_process(self.rec, self.pid, sig.signal)}
                async with self.audit.record(self.rec, actor(self.ws), "signal",
                                             f"signal {sig.signal} to process {self.pid}"):
                    return {"signalled": await self.data.signal_process(self.rec, self.pid, sig.signal)}
        except PydanticValidationError as e:
            problem = e.errors()[0]
            where = ".".join(str(p) for p in problem.get("loc", ()))
            raise ApiError(Code.INVALID_MESSAGE, f"{kind} frame: {where}: {problem.get('msg', 'invalid')}") from None
        raise ApiError(Code.INVALID_MESSAGE, f"unknown control frame {str(kind)[:40]!r}")
