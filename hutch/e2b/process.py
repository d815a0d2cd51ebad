"""envd's process service (`/process.Process/*`) over hutch's spawned processes.

`Start` spawns a hutch process (agent `/v1/procs`, audited as "spawn") and follows it, so a
background command outlives its client and a later `Connect` finds it. The SDK's
`{cmd: "/bin/bash", args: ["-l", "-c", cmd]}` becomes one shell command (`shlex.join`).
`Connect-Timeout-Ms` on `Start` is the process' lifetime, as in envd: a timer kills it at the
deadline, whether or not a client is still attached (a server restart forgets the timer), and its
streams end with `deadline_exceeded` (the SDK's TimeoutException), as envd's do.
A stream cut short by its box's end (killed, or its lifetime over) ends `unavailable` with envd's
"ended before the stream completed" and "the sandbox was killed or reached its end of life".
`stdin: false` closes the process' stdin at once (envd gives it /dev/null).

A process killed by a signal that this service sent ends as envd says it: exitCode -1,
"signal: killed"; hutch itself only sees the shell's 128+N.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import signal as signals
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from hutch.e2b.common import box_path, header_number, keepalive, validation_message, with_keepalive
from hutch.e2b.connect import (
    ConnectError,
    Envelopes,
    b64decode,
    b64encode,
    end_stream,
    enum,
    envelope,
    flag,
    get,
    integer,
    invalid,
    read_stream_request,
    stream_response,
    text,
)
from hutch.e2b.envd import Call
from hutch.errors import ApiError, Code
from hutch.node.api import Event, Exited, Output
from hutch.services import boxops
from hutch.services.models import PtySize, SpawnCommand
from hutch.store import SandboxStatus

SIGNALS = {"SIGNAL_UNSPECIFIED": 0, "SIGNAL_SIGTERM": 15, "SIGNAL_SIGKILL": 9}
MAX_KNOWN = 1000  # processes remembered per box, for List's config and tags
SWEEP_EVERY = 60.0  # seconds between looks for boxes that are gone
PAUSED_RETRY = 5.0  # a deadline that passes while the box is paused is tried again this often

T = TypeVar("T")


@dataclass
class Known:
    """What envd says of a process that hutch does not keep: its argv, tag and terminal."""

    config: dict[str, Any]
    tag: str | None
    pty: bool
    signalled: int | None = None  # the last signal this service sent it
    deadline_hit: bool = False  # killed by its Connect-Timeout-Ms timer
    timer: asyncio.Task[None] | None = None
    seq: int | None = None  # the last output event relayed to a client: Connect follows from there


@dataclass
class Processes:
    """Per box: what this service knows of the processes it started. An entry goes when its
    process ends (seen by a stream), when the box is gone, or (the oldest) past MAX_KNOWN."""

    boxes: dict[str, dict[int, Known]] = field(default_factory=dict)
    swept: float = 0.0

    def known(self, sandbox_id: str, pid: int) -> Known | None:
        return self.boxes.get(sandbox_id, {}).get(pid)

    def remember(self, st: Any, sandbox_id: str, pid: int, known: Known) -> None:
        self._sweep(st)
        box = self.boxes.setdefault(sandbox_id, {})
        if len(box) >= MAX_KNOWN:
            for old in list(box)[:MAX_KNOWN // 10]:
                self.forget(sandbox_id, old)
            box = self.boxes.setdefault(sandbox_id, {})
        box[pid] = known

    def forget(self, sandbox_id: str, pid: int) -> None:
        box = self.boxes.get(sandbox_id, {})
        k = box.pop(pid, None)
        if k and k.timer and k.timer is not asyncio.current_task():
            k.timer.cancel()
        if not box:
            self.boxes.pop(sandbox_id, None)

    def forget_box(self, sandbox_id: str) -> None:
        for pid in list(self.boxes.get(sandbox_id, {})):
            self.forget(sandbox_id, pid)

    def _sweep(self, st: Any) -> None:
        now = time.monotonic()
        if now - self.swept < SWEEP_EVERY:
            return
        self.swept = now
        for sandbox_id in list(self.boxes):
            if st.store.get_sandbox(sandbox_id) is None:  # killed: its processes went with it
                self.forget_box(sandbox_id)

    def close(self) -> None:
        for sandbox_id in list(self.boxes):
            self.forget_box(sandbox_id)

    # --- helpers --------------------------------------------------------------------------------

    def pid(self, call: Call, msg: dict[str, Any]) -> int:
        selector = get(msg, "process")
        if not isinstance(selector, dict):
            raise invalid("process (a selector: pid or tag) is required")
        if get(selector, "tag") is not None:
            tag = text(selector, "tag")
            for pid, k in self.boxes.get(call.rec.id, {}).items():
                if k.tag == tag:
                    return pid
            raise ApiError(Code.PROCESS_NOT_FOUND, f"process with tag {tag} not found")
        pid = integer(selector, "pid")
        if not 1 <= pid <= 2**31:
            raise invalid("process.pid must be a positive number")
        return pid

    @staticmethod
    async def _call(pid: int, work: Awaitable[T]) -> T:
        """A call on a process, a missing one as Connect's not_found."""
        try:
            return await work
        except ApiError as e:
            if e.code == Code.PROCESS_NOT_FOUND:  # kept a ConnectError: start's suppress(ApiError) passes it on, as before
                raise ConnectError.of_code(Code.PROCESS_NOT_FOUND, f"process with pid {pid} not found") from None
            raise

    async def signal(self, call: Call, pid: int, sig: int) -> bool:
        done = await self._call(pid, boxops.signal(call.st, call.rec, call.who, pid, sig))
        if done and (k := self.known(call.rec.id, pid)):
            k.signalled = sig
        return done

    def _end(self, call: Call, pid: int, code: Any) -> dict[str, Any]:
        k = self.known(call.rec.id, pid)
        sig = k.signalled if k else None
        if not isinstance(code, int) or (sig and code == 128 + sig):
            name = {9: "killed", 15: "terminated"}.get(sig or 9, signals.Signals(sig or 9).name)
            return {"exitCode": -1, "exited": False, "status": f"signal: {name}", "error": f"signal: {name}"}
        status = f"exit status {code}"
        return {"exitCode": code, "exited": True, "status": status, **({"error": status} if code else {})}

    def _kill_at(self, call: Call, pid: int, seconds: float) -> asyncio.Task[None]:
        async def later() -> None:
            await asyncio.sleep(seconds)
            while True:
                current = call.st.store.get_sandbox(call.rec.id)
                if current is None or self.known(call.rec.id, pid) is None:
                    return  # the box, or the process, is gone
                if current.status == SandboxStatus.ACTIVE:
                    break
                await asyncio.sleep(PAUSED_RETRY)  # never resume a paused box to kill: wait for it
            if k := self.known(call.rec.id, pid):
                k.deadline_hit = True
            with contextlib.suppress(ApiError, ConnectError):
                await self.signal(call, pid, 9)

        return asyncio.get_running_loop().create_task(later())

    async def _relay(self, call: Call, pid: int, events: AsyncGenerator[Event, None],
                     close: Any, keepalive: float) -> AsyncIterator[bytes]:
        """start, then data and keepalives, then end and the end of the stream."""
        pty = (k.pty if (k := self.known(call.rec.id, pid)) else False)
        try:
            yield envelope({"event": {"start": {"pid": pid}}})
            # closed before `close()`: its pending read is cancelled and awaited first, so the
            # events generator is not running when the stream is closed
            async with contextlib.aclosing(with_keepalive(events, keepalive)) as ticks:
                async for ev in ticks:
                    if ev is None:
                        yield envelope({"event": {"keepalive": {}}})
                        continue
                    if isinstance(ev, (Output, Exited)) and ev.seq is not None \
                            and (k := self.known(call.rec.id, pid)):
                        k.seq = max(k.seq or -1, ev.seq)
                    if isinstance(ev, Output):
                        key = "pty" if pty else ev.stream
                        yield envelope({"event": {"data": {key: b64encode(ev.data.encode(errors="replace"))}}})
                    elif isinstance(ev, Exited):
                        end = self._end(call, pid, ev.code)
                        k = self.known(call.rec.id, pid)
                        self.forget(call.rec.id, pid)  # ended: envd forgets it too (its timer with it)
                        if k and k.deadline_hit:  # as envd, whose request context ended the process
                            yield end_stream(ConnectError.deadline_exceeded())
                            return
                        yield envelope({"event": {"end": end}})
                        yield end_stream()
                        return
            err = await call.st.sandboxes.box_unreachable(call.rec)
            if err.code in (Code.NOT_FOUND, Code.SANDBOX_FAILED):
                # killed, or ended: envd's words for a stream its sandbox's end cut short, which the
                # SDK (2.63) checks with a health probe, and says: "sandbox was killed or reached
                # its end of life" (TimeoutException; SandboxNotRunningException in 2.63)
                err = ApiError(Code.SANDBOX_UNREACHABLE, f"the connection to sandbox {call.rec.id} ended before the "
                                                         "stream completed: the sandbox was killed or reached its end of life")
            yield end_stream(ConnectError.of(err))
        finally:
            await close()  # the process runs on in the box

    # --- the RPCs -------------------------------------------------------------------------------

    async def start(self, call: Call, request: Request) -> Response:
        msg = await read_stream_request(request.stream())
        proc = get(msg, "process")
        if not isinstance(proc, dict):
            raise invalid("process is required")
        cmd = text(proc, "cmd")
        args = get(proc, "args") or []
        envs = get(proc, "envs") or {}
        if not cmd or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise invalid("process.cmd and process.args must be strings")
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise invalid("process.envs must map names to strings")
        # relative to the home of whom it runs as: the call's user, else the template's (maybe root)
        acting = call.user or (call.st.sandboxes.defaults(call.rec).user if get(proc, "cwd") else None)
        cwd = box_path(text(proc, "cwd"), acting) if get(proc, "cwd") else None
        size = get(get(msg, "pty"), "size")
        tag = text(msg, "tag") if get(msg, "tag") is not None else None
        stdin = flag(msg, "stdin")
        command = shlex.join([cmd, *args])
        pty = _pty_size(size) if isinstance(size, dict) else None
        try:
            spawn = SpawnCommand(command=command, cwd=cwd, env=envs or None, user=call.user, pty=pty)
        except ValidationError as e:
            raise invalid(validation_message(e)) from None
        try:
            info = await boxops.spawn(call.st, call.rec, call.who, spawn)
        except ApiError as e:
            if e.code == Code.INVALID_CWD:
                raise invalid(f"cwd '{cwd}' does not exist") from None
            raise
        pid = info.pid
        config = {"cmd": cmd, "args": args, "envs": envs, **({"cwd": cwd} if cwd else {})}
        known = Known(config, tag, pty is not None)
        self.remember(call.st, call.rec.id, pid, known)
        if stdin is False and pty is None:
            with contextlib.suppress(ApiError):
                await self._call(pid, call.st.data.close_stdin(call.rec, pid))
        deadline_ms = header_number(request, "connect-timeout-ms")
        if deadline_ms:
            known.timer = self._kill_at(call, pid, deadline_ms / 1000)
        follow = await call.st.data.follow_process(call.rec, pid)
        return stream_response(self._relay(call, pid, follow.events, follow.aclose, keepalive(request)))

    async def connect(self, call: Call, request: Request) -> Response:
        pid = self.pid(call, await read_stream_request(request.stream()))
        k = self.known(call.rec.id, pid)
        try:  # as envd: no replay of what a client was already sent
            follow = await call.st.data.follow_process(call.rec, pid, after=k.seq if k else None)
        except ApiError as e:
            if e.code == Code.PROCESS_NOT_FOUND:
                raise ApiError(Code.PROCESS_NOT_FOUND, f"process with pid {pid} not found") from None
            raise
        return stream_response(self._relay(call, pid, follow.events, follow.aclose, keepalive(request)))

    async def list(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        out = []
        for info in await call.st.data.list_processes(call.rec):
            k = self.known(call.rec.id, info.pid)
            config = k.config if k else {"cmd": "/bin/sh", "args": ["-c", info.command], "envs": {}}
            out.append({"pid": info.pid, "config": config, **({"tag": k.tag} if k and k.tag else {})})
        return {"processes": out}

    async def send_input(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        pid = self.pid(call, msg)
        await self._write(call, pid, get(msg, "input"))
        return {}

    async def _write(self, call: Call, pid: int, given: Any) -> None:
        data = get(given, "stdin")
        if data is None:
            data = get(given, "pty")
        if data is None:
            raise invalid("input: stdin or pty is required")
        await self._call(pid, call.st.data.write_stdin(call.rec, pid, b64decode(data)))

    async def close_stdin(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        pid = self.pid(call, msg)
        await self._call(pid, call.st.data.close_stdin(call.rec, pid))
        return {}

    async def send_signal(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        pid = self.pid(call, msg)
        sig = enum(msg, "signal", SIGNALS)
        if sig not in (9, 15):
            raise invalid("signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
        if not await self.signal(call, pid, sig):  # it had ended: envd has forgotten it
            raise ApiError(Code.PROCESS_NOT_FOUND, f"process with pid {pid} not found")
        return {}

    async def update(self, call: Call, msg: dict[str, Any]) -> dict[str, Any]:
        pid = self.pid(call, msg)
        size = get(get(msg, "pty"), "size")
        if isinstance(size, dict):
            pty = _pty_size(size)
            await self._call(pid, call.st.data.resize_pty(call.rec, pid, pty.rows, pty.cols))
        return {}

    async def stream_input(self, call: Call, request: Request) -> Response:
        """Client stream: a start naming the process, then data, taken as the chunks arrive."""
        env, pid = Envelopes(), None
        async for chunk in request.stream():
            for _flags, msg in env.feed(chunk):
                event = get(msg, "event") if "event" in msg else msg
                if get(event, "start") is not None:
                    pid = self.pid(call, get(event, "start"))
                elif get(event, "data") is not None:
                    if pid is None:
                        raise invalid("the stream must start with a start event")
                    await self._write(call, pid, get(get(event, "data"), "input"))

        async def answer() -> AsyncIterator[bytes]:
            yield envelope({})
            yield end_stream()

        return stream_response(answer())


UNARY = {"List": Processes.list, "SendInput": Processes.send_input, "CloseStdin": Processes.close_stdin,
         "SendSignal": Processes.send_signal, "Update": Processes.update}


async def dispatch(service: Processes, method: str, call: Call, request: Request) -> Response:
    if method == "Start":
        return await service.start(call, request)
    if method == "Connect":
        return await service.connect(call, request)
    if method == "StreamInput":
        return await service.stream_input(call, request)
    handler = UNARY.get(method)
    if handler is None:
        raise ConnectError.unimplemented(f"process.Process/{method}")
    return JSONResponse(await handler(service, call, await call.unary_message(request)))


def _pty_size(size: dict[str, Any]) -> PtySize:
    try:
        return PtySize(rows=integer(size, "rows"), cols=integer(size, "cols"))
    except ValidationError as e:
        raise invalid(validation_message(e)) from None
