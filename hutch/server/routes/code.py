"""The data plane's code interpreter (/data/v1/sandboxes/{id}/code): run code in a context's kernel
(an NDJSON stream, as it comes) and the contexts themselves. The box's token opens them; the calls
go to the interpreter of a hutch/code-interpreter box (hutch/guest/interpreter.py, on loopback port
49999 inside the box) through hutch.services.boxport, as E2B's port forwarder does.

The stream is the interpreter's own lines (`stdout`, `stderr`, `result`, `error`,
`number_of_executions`, `keepalive`, `end_of_execution`), passed on unparsed: the interpreter
bounds them. hutch adds one line of its own, last, when the run did not end by itself:
`{"type": "hutch_timeout", "message"}` (the run passed `timeout_seconds`: the tunnel is closed,
which interrupts the kernel) or `{"type": "hutch_error", "code", "message"}` (the box cut the
stream short).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import ValidationError
from starlette.responses import StreamingResponse

from hutch.errors import ApiError, Code
from hutch.node.box import INTERPRETER_PORT as PORT
from hutch.server import errors
from hutch.server.auth import ActorDep, BoxDep
from hutch.server.state import State, StateDep
from hutch.services import audit, boxport
from hutch.services.models import CodeContext, CreateCodeContext, RunCode
from hutch.store import SandboxRecord

router = APIRouter(prefix="/data/v1/sandboxes/{sandbox_id}/code")

MAX_ANSWER = 1 * 2**20  # a context call's JSON (at most 32 contexts)
MAX_REFUSAL = 2000  # the interpreter's plain-text reason for a refusal
BY_STATUS = {400: Code.INVALID_REQUEST, 404: Code.CONTEXT_NOT_FOUND, 413: Code.PAYLOAD_TOO_LARGE,
             429: Code.TOO_MANY_PROCESSES}  # 429: the interpreter's limit on contexts (each a kernel)
ContextId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9-]+$")]


def _unavailable(rec: SandboxRecord, why: str) -> ApiError:
    return ApiError(Code.INTERPRETER_UNAVAILABLE, f"sandbox {rec.id} has no code interpreter answering ({why}); "
                                                  "create it from the hutch/code-interpreter template")


async def _ask(st: State, rec: SandboxRecord, method: str, target: str, body: dict[str, Any] | None) -> boxport.Answer:
    """One request to the box's interpreter; its refusals as hutch's typed errors."""
    data = json.dumps(body).encode() if body is not None else b""
    headers = [(b"content-type", b"application/json")] if body is not None else []
    try:
        answer = await boxport.exchange(st, rec, PORT, method, target.encode(), headers, data)
    except boxport.PortUnavailable as e:
        raise _unavailable(rec, str(e)) from None
    if answer.status < 400:
        return answer
    try:
        reason = (await boxport.read_bounded(answer, MAX_REFUSAL)).decode("utf-8", "replace").strip()
    except boxport.CutShort:
        reason = ""
    code = BY_STATUS.get(answer.status)
    if code is None:  # 500: a kernel that would not start, say
        raise _unavailable(rec, reason or f"it answered {answer.status}")
    raise ApiError(code, reason or f"the code interpreter refused the call ({answer.status})")


async def _json(st: State, rec: SandboxRecord, method: str, target: str, body: dict[str, Any] | None) -> Any:
    answer = await _ask(st, rec, method, target, body)
    try:
        raw = await boxport.read_bounded(answer, MAX_ANSWER)
        return json.loads(raw)
    except (boxport.CutShort, ValueError):
        raise _unavailable(rec, "its answer was cut short or not JSON") from None


def _context(rec: SandboxRecord, raw: Any) -> CodeContext:
    try:
        return CodeContext.model_validate(raw)
    except ValidationError:
        raise _unavailable(rec, "its answer was not a context") from None


def _line(item: dict[str, str]) -> bytes:
    return json.dumps(item).encode() + b"\n"


async def _stream(st: State, rec: SandboxRecord, answer: boxport.Answer, timeout: float | None) -> AsyncIterator[bytes]:
    """The interpreter's lines, then hutch's own if the run did not end by itself. Closing the
    tunnel (a timeout, a client gone) is what interrupts the kernel: the interpreter sees it."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    whole = True  # whether the last chunk ended a line
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                chunk = await asyncio.wait_for(anext(answer.body), left)
            except StopAsyncIteration:
                return
            except TimeoutError:
                yield (b"" if whole else b"\n") + _line({
                    "type": "hutch_timeout", "message": f"the code ran past its timeout of {timeout:g} s and was "
                                                        "interrupted"})
                return
            except boxport.CutShort:
                err = await st.sandboxes.box_unreachable(rec)
                if err.code == Code.SANDBOX_UNREACHABLE:  # the box lives: its interpreter broke off
                    err = _unavailable(rec, "its stream broke off")
                yield (b"" if whole else b"\n") + _line({"type": "hutch_error",
                                                          **errors.error_fields(err.code, err.message)})
                return
            whole = chunk.endswith(b"\n")
            yield chunk
    finally:
        await answer.body.aclose()


@router.post("/execute", responses={200: {"content": {"application/x-ndjson": {}}}})
async def run_code(body: RunCode, rec: BoxDep, st: StateDep, who: ActorDep) -> StreamingResponse:
    """Run code in a context's kernel; the answer streams as NDJSON lines (see the module's doc)."""
    wire = {"code": body.code, "language": body.language, "context_id": body.context_id, "env_vars": body.env}
    try:
        answer = await _ask(st, rec, "POST", "/execute", {k: v for k, v in wire.items() if v is not None})
    except ApiError as e:
        st.audit.add(rec, who, "run_code", body.code, audit.Outcome(outcome=e.code))
        raise
    st.audit.add(rec, who, "run_code", body.code)
    return StreamingResponse(_stream(st, rec, answer, body.timeout_seconds), media_type="application/x-ndjson",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.post("/contexts", response_model=CodeContext)
async def create_code_context(body: CreateCodeContext, rec: BoxDep, st: StateDep) -> CodeContext:
    """A new context: its own kernel, started in `cwd` (default /home/user)."""
    wire = {"language": body.language, "cwd": body.cwd}
    return _context(rec, await _json(st, rec, "POST", "/contexts", {k: v for k, v in wire.items() if v is not None}))


@router.get("/contexts", response_model=list[CodeContext])
async def list_code_contexts(rec: BoxDep, st: StateDep) -> list[CodeContext]:
    """Every context, the default ones among them once they have run code."""
    raw = await _json(st, rec, "GET", "/contexts", None)
    if not isinstance(raw, list):
        raise _unavailable(rec, "its answer was not a list of contexts")
    return [_context(rec, item) for item in raw]


@router.post("/contexts/{context_id}/restart", status_code=204)
async def restart_code_context(context_id: ContextId, rec: BoxDep, st: StateDep) -> None:
    """A fresh kernel for the context (its variables go; a running cell is interrupted first)."""
    await _json(st, rec, "POST", f"/contexts/{context_id}/restart", {})


@router.delete("/contexts/{context_id}", status_code=204)
async def remove_code_context(context_id: ContextId, rec: BoxDep, st: StateDep) -> None:
    """Stop the context's kernel."""
    await _json(st, rec, "DELETE", f"/contexts/{context_id}", None)
