"""The data plane's commands (/data/v1/sandboxes/{id}/commands): run (a JSON answer or a stream of
server-sent events), spawn, list, signal, and the WebSocket that attaches to a spawned process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, WebSocket
from starlette.responses import StreamingResponse

from hutch.errors import ApiError
from hutch.node.api import Exited, Output, Ping
from hutch.server import errors
from hutch.server.attach import serve_attachment
from hutch.server.auth import ActorDep, BoxDep, authorize_box
from hutch.server.state import State, StateDep
from hutch.services import audit, boxops
from hutch.services.models import CommandResult, ProcessInfo, RunCommand, Signalled, SignalProcess, SpawnCommand

router = APIRouter(prefix="/data/v1/sandboxes/{sandbox_id}")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


@router.post("/commands/run", response_model=CommandResult,
             responses={200: {"content": {"text/event-stream": {}}}})
async def run_command(body: RunCommand, rec: BoxDep, st: StateDep, who: ActorDep,
                      accept: Annotated[str | None, Header()] = None) -> Any:
    detail = audit.describe(body.command, body.cwd, body.user, body.env)
    try:
        stream = await st.data.start_command(rec, body)
    except ApiError as e:
        st.audit.add(rec, who, "exec", detail, audit.Outcome(outcome=e.code))  # it could not start
        raise
    st.audit.add(rec, who, "exec", detail)
    if "text/event-stream" not in (accept or ""):
        async with st.audit.record(rec, who, "exit", detail) as note:
            result = await st.data.run_to_end(stream, rec)
            note.exit_code = result.exit_code
            note.outcome = "timed_out" if result.timed_out else "ok"
            return result

    async def events(note: audit.Outcome) -> AsyncIterator[bytes]:
        yield _sse("start", {"pid": stream.pid})
        async for ev in stream.events:
            match ev:
                case Output(stream=which, data=data):
                    yield _sse(which, {"data": data})
                case Ping():
                    yield b": keep-alive\n\n"  # proxies see a live stream; clients skip comments
                case Exited(code, timed_out):
                    note.exit_code, note.outcome = code, "timed_out" if timed_out else "ok"
                    yield _sse("exit", {"exit_code": code, "timed_out": timed_out})
                    return
        err = await st.sandboxes.box_unreachable(rec)
        note.outcome = err.code
        yield _sse("error", errors.error_fields(err.code, err.message))

    async def audited() -> AsyncIterator[bytes]:
        async with st.audit.record(rec, who, "exit", detail) as note:
            async for chunk in events(note):
                yield chunk

    return StreamingResponse(audited(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.post("/commands/spawn", response_model=ProcessInfo)
async def spawn_process(body: SpawnCommand, rec: BoxDep, st: StateDep, who: ActorDep) -> ProcessInfo:
    """Start a long-lived process; attach to it with the WebSocket at /commands/{pid}/ws."""
    return await boxops.spawn(st, rec, who, body)


@router.get("/commands", response_model=list[ProcessInfo])
async def list_processes(rec: BoxDep, st: StateDep) -> list[ProcessInfo]:
    """The spawned processes that are still running."""
    return await st.data.list_processes(rec)


@router.post("/commands/{pid}/signal", response_model=Signalled)
async def signal_process(pid: Annotated[int, Path(ge=1, le=2**31)], body: SignalProcess, rec: BoxDep,
                         st: StateDep, who: ActorDep) -> Signalled:
    """Signal a spawned process' group; `signalled` is false if it had already ended."""
    return Signalled(signalled=await boxops.signal(st, rec, who, pid, body.signal))


@router.websocket("/commands/{pid}/ws")
async def attach_process(websocket: WebSocket, sandbox_id: str, pid: str) -> None:
    """Attach to a spawned process (see hutch.server.attach for the frames)."""
    st: State = websocket.app.state.hutch
    await serve_attachment(websocket, st.data, st.audit,
                           lambda: authorize_box(st, sandbox_id, websocket.headers.get("x-access-token")), pid)

