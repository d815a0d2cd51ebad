"""The ASGI app: routes of the control plane (/v1) and the data plane (/data/v1), and their auth."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

import sqlalchemy.exc
from fastapi import FastAPI, Header, Path, Query, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hutch import e2b
from hutch.errors import ApiError, Code
from hutch.guest import protocol
from hutch.server import audit, errors
from hutch.server.attach import Attachment
from hutch.server.auth import ActorDep, BoxDep, TeamDep, authorize_box
from hutch.server.config import ServerConfig
from hutch.server.models import (
    AttachSecret,
    AuditPage,
    BuildId,
    BuildInfo,
    CommandResult,
    CreateSandbox,
    CreateSecret,
    CreateTemplate,
    DirMade,
    EnvName,
    FileWritten,
    FsEntries,
    FsEntry,
    MakeDir,
    MoveEntry,
    NetworkLogPage,
    PreviewPort,
    PreviewPortNumber,
    PreviewToken,
    ProcessInfo,
    ProviderInfo,
    PublishPreviewPort,
    Rebuild,
    RotateSecret,
    RunCommand,
    SandboxAccess,
    SandboxInfo,
    SecretAuditPage,
    SecretBinding,
    SecretInfo,
    SecretName,
    Signalled,
    SignalProcess,
    SignedPreviewUrl,
    SignPreviewUrl,
    SpawnCommand,
    TemplateInfo,
    TemplateRef,
    UpdateSandbox,
    User,
)
from hutch.server.secrets import providers
from hutch.server.state import State, StateDep
from hutch.store import SandboxRecord

log = logging.getLogger("hutch.server")

MAX_JSON_BODY = 1 * 2**20
Status = Literal["active", "pausing", "paused", "resuming", "failed"]


# --- templates ------------------------------------------------------------------------------------

def template_routes(app: FastAPI) -> None:
    @app.post("/v1/templates", status_code=202, response_model=TemplateInfo)
    async def create_template(body: CreateTemplate, st: StateDep, team_id: TeamDep) -> TemplateInfo:
        """Queues the build and answers at once; follow it with the build's logs."""
        return st.templates.describe(st.templates.create(team_id, body))

    @app.get("/v1/templates", response_model=list[TemplateInfo])
    async def list_templates(st: StateDep, team_id: TeamDep) -> list[TemplateInfo]:
        return st.templates.all(team_id)

    @app.get("/v1/templates/{ref}", response_model=TemplateInfo)
    async def get_template(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> TemplateInfo:
        return st.templates.describe(st.templates.get(team_id, ref))

    @app.delete("/v1/templates/{ref}", status_code=204)
    async def delete_template(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> Response:
        await st.templates.delete(team_id, ref)
        return Response(status_code=204)

    @app.post("/v1/templates/{ref}/builds", status_code=202, response_model=BuildInfo)
    async def rebuild_template(ref: TemplateRef, st: StateDep, team_id: TeamDep,
                               body: Rebuild | None = None) -> BuildInfo:
        rec, build = st.templates.rebuild(team_id, ref, (body or Rebuild()).no_cache)
        return st.templates.build_info(build, rec)

    @app.get("/v1/templates/{ref}/builds", response_model=list[BuildInfo])
    async def list_builds(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> list[BuildInfo]:
        return st.templates.list_builds(team_id, ref)

    @app.get("/v1/templates/{ref}/builds/{build_id}", response_model=BuildInfo)
    async def get_build(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep) -> BuildInfo:
        rec, build = st.templates.get_build(team_id, ref, build_id)
        return st.templates.build_info(build, rec)

    @app.post("/v1/templates/{ref}/builds/{build_id}/cancel", response_model=BuildInfo)
    async def cancel_build(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep) -> BuildInfo:
        build = await st.templates.cancel(team_id, ref, build_id)
        return st.templates.build_info(build, st.templates.get(team_id, ref))

    @app.get("/v1/templates/{ref}/builds/{build_id}/logs", response_class=StreamingResponse,
             responses={200: {"content": {"application/x-ndjson": {}}}})
    async def build_logs(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep,
                         after: Annotated[int, Query(ge=0)] = 0, follow: bool = True) -> Any:
        """One JSON object a line; with `follow`, to the build's end, whose line says "done"."""
        lines = await st.templates.logs(team_id, ref, build_id, after, follow)
        return StreamingResponse(lines, media_type="application/x-ndjson")


# --- control plane --------------------------------------------------------------------------------

def control_routes(app: FastAPI) -> None:
    @app.post("/v1/sandboxes", status_code=201, response_model=SandboxAccess)
    async def create_sandbox(body: CreateSandbox, st: StateDep, team_id: TeamDep) -> SandboxAccess:
        return st.sandboxes.access(await st.sandboxes.create(team_id, body))

    @app.get("/v1/sandboxes", response_model=list[SandboxInfo])
    async def list_sandboxes(st: StateDep, team_id: TeamDep, status: Status | None = None,
                             metadata: Annotated[str | None, Query(max_length=4096,  # encoded: under the 64 KiB request line
                                                                   description="key=value&key=value")] = None,
                             ) -> list[SandboxInfo]:
        wanted = dict(parse_qsl(metadata, keep_blank_values=True)) if metadata else None
        return st.sandboxes.infos(st.store.list_sandboxes(team_id, status, wanted))

    @app.get("/v1/sandboxes/{sandbox_id}", response_model=SandboxInfo)
    async def get_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxInfo:
        return st.sandboxes.info(st.sandboxes.get(team_id, sandbox_id))

    @app.patch("/v1/sandboxes/{sandbox_id}", response_model=SandboxInfo)
    async def update_sandbox(sandbox_id: str, body: UpdateSandbox, st: StateDep, team_id: TeamDep) -> SandboxInfo:
        return st.sandboxes.info(await st.sandboxes.update(team_id, sandbox_id, body))

    @app.delete("/v1/sandboxes/{sandbox_id}", status_code=204)
    async def kill_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> Response:
        await st.sandboxes.kill(team_id, sandbox_id)
        return Response(status_code=204)

    @app.post("/v1/sandboxes/{sandbox_id}/connect", response_model=SandboxAccess)
    async def connect_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxAccess:
        """The sandbox and its data-plane token, resumed first if it is paused."""
        return st.sandboxes.access(await st.sandboxes.connect(team_id, sandbox_id))

    @app.post("/v1/sandboxes/{sandbox_id}/pause", status_code=204)
    async def pause_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> Response:
        await st.sandboxes.pause(team_id, sandbox_id)
        return Response(status_code=204)

    @app.post("/v1/sandboxes/{sandbox_id}/resume", response_model=SandboxAccess)
    async def resume_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxAccess:
        return st.sandboxes.access(await st.sandboxes.resume(team_id, sandbox_id))

    @app.get("/v1/sandboxes/{sandbox_id}/audit", response_model=AuditPage)
    async def get_audit_log(sandbox_id: str, st: StateDep, team_id: TeamDep,
                            limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                            before: Annotated[int | None, Query(ge=1)] = None) -> AuditPage:
        """Every command and file operation on the box, newest first: who, when, what, how it ended."""
        return st.audit.page(st.sandboxes.get(team_id, sandbox_id).id, limit, before)

    @app.get("/v1/sandboxes/{sandbox_id}/network-log", response_model=NetworkLogPage)
    async def get_network_log(sandbox_id: str, st: StateDep, team_id: TeamDep,
                              limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                              before: Annotated[int | None, Query(ge=1)] = None) -> NetworkLogPage:
        """Every connection the box tried, newest first: destination, address, verdict, the rule
        that decided, bytes each way."""
        return st.sandboxes.network_log(team_id, sandbox_id, limit, before)

    # --- secrets ---

    @app.post("/v1/secrets", status_code=201, response_model=SecretInfo)
    async def create_secret(body: CreateSecret, st: StateDep, team_id: TeamDep) -> SecretInfo:
        """Store a credential (sealed at rest; no call ever returns it)."""
        return st.secrets.info(st.secrets.create(team_id, body))

    @app.get("/v1/secrets", response_model=list[SecretInfo])
    async def list_secrets(st: StateDep, team_id: TeamDep) -> list[SecretInfo]:
        return [st.secrets.info(r) for r in st.store.list_secrets(team_id)]

    @app.get("/v1/secrets/{name}", response_model=SecretInfo)
    async def get_secret(name: SecretName, st: StateDep, team_id: TeamDep) -> SecretInfo:
        return st.secrets.info(st.secrets.get(team_id, name))

    @app.delete("/v1/secrets/{name}", status_code=204)
    async def delete_secret(name: SecretName, st: StateDep, team_id: TeamDep) -> Response:
        """Boxes bound to it keep their stand-in, which is never swapped again (revoked)."""
        st.secrets.delete(team_id, name)
        return Response(status_code=204)

    @app.post("/v1/secrets/{name}/rotate", response_model=SecretInfo)
    async def rotate_secret(name: SecretName, body: RotateSecret, st: StateDep, team_id: TeamDep) -> SecretInfo:
        """A new value, used from the next request out of any box."""
        return st.secrets.info(st.secrets.rotate(team_id, name, body.value))

    @app.get("/v1/secrets/{name}/audit", response_model=SecretAuditPage)
    async def secret_audit(name: SecretName, st: StateDep, team_id: TeamDep,
                           limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                           before: Annotated[int | None, Query(ge=1)] = None,
                           sandbox_id: Annotated[str | None, Query(max_length=64)] = None) -> SecretAuditPage:
        """Every request the secret was swapped into, newest first."""
        return st.secrets.audit(team_id, name, limit, before, sandbox_id)

    @app.get("/v1/providers", response_model=list[ProviderInfo])
    async def list_providers(team_id: TeamDep) -> list[ProviderInfo]:
        """Services whose auth scheme and hosts a secret can take by name."""
        return providers()

    # --- preview ports ---

    @app.post("/v1/sandboxes/{sandbox_id}/preview-ports", response_model=PreviewPort)
    async def publish_preview_port(sandbox_id: str, body: PublishPreviewPort, st: StateDep,
                                   team_id: TeamDep) -> PreviewPort:
        """Publish a port of the box at its preview URL (or change a published port's access)."""
        return st.previews.publish(st.sandboxes.get(team_id, sandbox_id), body.port, body.access)

    @app.get("/v1/sandboxes/{sandbox_id}/preview-ports", response_model=list[PreviewPort])
    async def list_preview_ports(sandbox_id: str, st: StateDep, team_id: TeamDep) -> list[PreviewPort]:
        return st.previews.list(st.sandboxes.get(team_id, sandbox_id))

    @app.delete("/v1/sandboxes/{sandbox_id}/preview-ports/{port}", status_code=204)
    async def unpublish_preview_port(sandbox_id: str, port: PreviewPortNumber, st: StateDep,
                                     team_id: TeamDep) -> Response:
        """The preview proxy refuses the port again, and its open connections are cut."""
        st.previews.unpublish(st.sandboxes.get(team_id, sandbox_id), port)
        return Response(status_code=204)

    @app.post("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/signed-url", response_model=SignedPreviewUrl)
    async def sign_preview_url(sandbox_id: str, port: PreviewPortNumber, body: SignPreviewUrl, st: StateDep,
                               team_id: TeamDep) -> SignedPreviewUrl:
        """A link to the port that a browser exchanges for a cookie for that port alone."""
        return st.previews.signed_url(st.sandboxes.get(team_id, sandbox_id), port, body.expires_in_seconds)

    @app.get("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/token", response_model=PreviewToken)
    async def preview_token(sandbox_id: str, port: PreviewPortNumber, st: StateDep, team_id: TeamDep) -> PreviewToken:
        """A header credential for the port, for machine clients; valid until rotated."""
        return st.previews.token(st.sandboxes.get(team_id, sandbox_id), port)

    @app.post("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/rotate", response_model=PreviewPort)
    async def rotate_preview_port(sandbox_id: str, port: PreviewPortNumber, st: StateDep,
                                  team_id: TeamDep) -> PreviewPort:
        """Void every link, cookie and token of the port, and cut its open connections."""
        return st.previews.rotate(st.sandboxes.get(team_id, sandbox_id), port)

    @app.get("/v1/sandboxes/{sandbox_id}/secrets", response_model=list[SecretBinding])
    async def sandbox_secrets(sandbox_id: str, st: StateDep, team_id: TeamDep) -> list[SecretBinding]:
        return st.secrets.bindings(st.sandboxes.get(team_id, sandbox_id).id)

    @app.put("/v1/sandboxes/{sandbox_id}/secrets/{env}", response_model=list[SecretBinding])
    async def attach_secret(sandbox_id: str, env: EnvName, body: AttachSecret, st: StateDep,
                            team_id: TeamDep) -> list[SecretBinding]:
        """Bind a secret to an env var; commands started from now on see its stand-in."""
        return await st.sandboxes.attach_secret(team_id, sandbox_id, env, body.secret)

    @app.delete("/v1/sandboxes/{sandbox_id}/secrets/{env}", response_model=list[SecretBinding])
    async def detach_secret(sandbox_id: str, env: EnvName, st: StateDep, team_id: TeamDep) -> list[SecretBinding]:
        """Unbind; commands started from now on do not have the variable."""
        return await st.sandboxes.detach_secret(team_id, sandbox_id, env)

    @app.get("/metrics", response_class=Response)
    async def metrics(st: StateDep) -> Response:
        """Prometheus metrics (text format)."""
        body = st.metrics.render(st.store.count_by_status, len(st.pool))
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/health")
    async def health(st: StateDep) -> dict[str, Any]:
        # isolation: what a box is; `hutch mcp serve --ephemeral` refuses to run without "gvisor"
        return {"status": "ok", "warm_pool": len(st.pool), "isolation": "gvisor"}


# --- data plane -----------------------------------------------------------------------------------

def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def data_routes(app: FastAPI) -> None:
    prefix = "/data/v1/sandboxes/{sandbox_id}"

    @app.post(prefix + "/commands/run", response_model=CommandResult,
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
                kind = ev["t"]
                if kind in (protocol.EVENT_STDOUT, protocol.EVENT_STDERR):
                    yield _sse(kind, {"data": ev["d"]})
                elif kind == protocol.EVENT_PING:
                    yield b": keep-alive\n\n"  # proxies see a live stream; clients skip comments
                elif kind == protocol.EVENT_EXIT:
                    note.exit_code, note.outcome = ev["code"], "timed_out" if ev["timed_out"] else "ok"
                    yield _sse("exit", {"exit_code": ev["code"], "timed_out": ev["timed_out"]})
                    return
            err = await st.sandboxes.box_unreachable(rec)
            note.outcome = err.code
            yield _sse("error", {"code": err.code, "message": err.message})

        async def audited() -> AsyncIterator[bytes]:
            async with st.audit.record(rec, who, "exit", detail) as note:
                async for chunk in events(note):
                    yield chunk

        return StreamingResponse(audited(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post(prefix + "/commands/spawn", response_model=ProcessInfo)
    async def spawn_process(body: SpawnCommand, rec: BoxDep, st: StateDep, who: ActorDep) -> ProcessInfo:
        """Start a long-lived process; attach to it with the WebSocket at /commands/{pid}/ws."""
        async with st.audit.record(rec, who, "spawn", audit.describe(body.command, body.cwd, body.user, body.env)):
            return await st.data.spawn(rec, body)

    @app.get(prefix + "/commands", response_model=list[ProcessInfo])
    async def list_processes(rec: BoxDep, st: StateDep) -> list[ProcessInfo]:
        """The spawned processes that are still running."""
        return await st.data.list_processes(rec)

    @app.post(prefix + "/commands/{pid}/signal", response_model=Signalled)
    async def signal_process(pid: Annotated[int, Path(ge=1, le=2**31)], body: SignalProcess, rec: BoxDep,
                             st: StateDep, who: ActorDep) -> Signalled:
        """Signal a spawned process' group; `signalled` is false if it had already ended."""
        async with st.audit.record(rec, who, "signal", f"signal {body.signal} to process {pid}"):
            answer = await st.data.process_call(rec, pid, protocol.PROC_SIGNAL, json={"signal": body.signal})
        return Signalled(signalled=answer.get("signalled") is True)

    @app.websocket(prefix + "/commands/{pid}/ws")
    async def attach_process(websocket: WebSocket, sandbox_id: str, pid: str) -> None:
        """Attach to a spawned process (see hutch.server.attach for the frames)."""
        st: State = websocket.app.state.hutch
        try:
            if not pid.isdigit() or not 1 <= int(pid) <= 2**31:
                raise ApiError(Code.PROCESS_NOT_FOUND, f"no process {pid[:20]!r}")
            rec = authorize_box(st, sandbox_id, websocket.headers.get("x-access-token"))
            stream = await st.data.follow_process(rec, int(pid))
        except ApiError as e:
            await websocket.send_denial_response(errors.denial(websocket, e))
            return
        try:
            await websocket.accept()
            await Attachment(websocket, st.data, rec, int(pid), st.audit).run(stream.events)
        finally:
            await stream.aclose()  # the process runs on in the box

    @app.put(prefix + "/files", response_model=FileWritten)
    async def write_file(request: Request, rec: BoxDep, st: StateDep, who: ActorDep,
                         path: Annotated[str, Query(max_length=4096)],
                         user: Literal["user", "root"] | None = None) -> Any:
        return await write_file_audited(st, rec, who, path, request.stream(), user)

    @app.get(prefix + "/files", response_class=StreamingResponse,
             responses={200: {"content": {"application/octet-stream": {}}}})
    async def read_file(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)]) -> Any:
        return await read_file_audited(st, rec, who, path)

    @app.get(prefix + "/files/zip", response_class=StreamingResponse,
             responses={200: {"content": {"application/zip": {}}}})
    async def download_dir(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)]) -> Any:
        async with st.audit.record(rec, who, "dir_download", path):
            _resp, body = await st.data.zip_dir(rec, path)
        return StreamingResponse(body, media_type="application/zip")

    # filesystem operations: as the box user unless user=root (the agent keeps each to its rights)

    @app.get(prefix + "/files/stat", response_model=FsEntry)
    async def stat_file(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                        user: User | None = None) -> FsEntry:
        """A file, directory or link (described, not followed)."""
        return await st.data.stat(rec, path, user)

    @app.get(prefix + "/files/list", response_model=FsEntries)
    async def list_dir(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                       depth: Annotated[int, Query(ge=1, le=16)] = 1, user: User | None = None) -> FsEntries:
        """A directory's entries, `depth` levels down, sorted; at most 10,000 (400 too_many_entries)."""
        return FsEntries(entries=await st.data.list_dir(rec, path, depth, user))

    @app.post(prefix + "/files/mkdir", response_model=DirMade)
    async def make_dir(body: MakeDir, rec: BoxDep, st: StateDep, who: ActorDep) -> DirMade:
        """mkdir -p; `created` is false if it was a directory already (409 if it is something else)."""
        async with st.audit.record(rec, who, "dir_make", body.path + audit.acting(body.user)):
            entry, created = await st.data.make_dir(rec, body.path, body.user)
        return DirMade(entry=entry, created=created)

    @app.post(prefix + "/files/move", response_model=FsEntry)
    async def move_file(body: MoveEntry, rec: BoxDep, st: StateDep, who: ActorDep) -> FsEntry:
        """Rename a file or directory; answers the destination's entry."""
        async with st.audit.record(rec, who, "file_move", f"{body.source} -> {body.destination}{audit.acting(body.user)}"):
            return await st.data.move(rec, body.source, body.destination, body.user)

    @app.delete(prefix + "/files", status_code=204, response_class=Response)
    async def remove_file(rec: BoxDep, st: StateDep, who: ActorDep, path: Annotated[str, Query(max_length=4096)],
                          user: User | None = None) -> Response:
        """A file or link, or a directory with everything in it."""
        async with st.audit.record(rec, who, "file_remove", path + audit.acting(user)):
            await st.data.remove(rec, path, user)
        return Response(status_code=204)

    @app.get(prefix + "/files/watch", response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}}}})
    async def watch_dir(rec: BoxDep, st: StateDep, path: Annotated[str, Query(max_length=4096)],
                        recursive: bool = False) -> Any:
        """A directory's changes as server-sent events, one FsEvent per `data:` line, with keep-alive
        comments; the watch is in place when the headers arrive. Ends when the directory goes."""
        watch = await st.data.watch(rec, path, recursive)

        async def events() -> AsyncIterator[bytes]:
            try:
                yield b": watching\n\n"
                async for ev in watch.ticks:
                    yield b": keep-alive\n\n" if ev is None else b"data: " + ev.model_dump_json().encode() + b"\n\n"
            finally:
                await watch.aclose()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def write_file_audited(st: State, rec: SandboxRecord, who: str, path: str, body: AsyncIterator[bytes],
                             user: str | None) -> dict[str, Any]:
    """A file written, in the audit log (hutch's data plane and E2B's envd)."""
    async with st.audit.record(rec, who, "file_write", path + audit.acting(user)):
        return await st.data.write_file(rec, path, body, user)


async def read_file_audited(st: State, rec: SandboxRecord, who: str, path: str) -> StreamingResponse:
    """A file's bytes as a streamed answer, the read in the audit log."""
    async with st.audit.record(rec, who, "file_read", path):
        resp, body = await st.data.read_file(rec, path)
    headers = {k: v for k, v in resp.headers.items() if k.lower() == "content-length"}
    return StreamingResponse(body, media_type="application/octet-stream", headers=headers)


class BodyLimit:
    """Refuses over-large JSON bodies (413) before anything parses them; file uploads are exempt
    here and capped where they stream."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT" and scope["path"].endswith("/files")) or (
                scope["method"] == "POST" and scope["path"] in e2b.STREAMED):  # E2B's upload and input stream
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _refuse(send, self.limit, connect=scope["path"].startswith(e2b.ENVD_PREFIX + "/"))
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:  # an HTTPException, which the body parser passes on unchanged
                raise StarletteHTTPException(413, f"request bodies are limited to {self.limit} bytes")
            return msg

        await self.app(scope, counted, send)


async def _refuse(send: Send, limit: int, connect: bool = False) -> None:
    """413 in hutch's error shape, or (E2B's envd, a Connect client) Connect's resource_exhausted."""
    message = f"request bodies are limited to {limit} bytes"
    error = {"code": "resource_exhausted", "message": message} if connect else errors.error_body(Code.PAYLOAD_TOO_LARGE,
                                                                                                     message)
    body = json.dumps(error).encode()
    await send({"type": "http.response.start", "status": 429 if connect else 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _dump_tasks() -> None:
    tasks = asyncio.all_tasks()
    log.warning("%d tasks, each with where it waits:", len(tasks))
    for task in tasks:
        task.print_stack(limit=12, file=sys.stderr)


def create_app(config: ServerConfig) -> FastAPI:
    envd = e2b.EnvdServices()  # E2B's envd: processes' timers and tags, file watchers

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = State(config)
        app.state.hutch = st
        st.node.start_reaping()
        await st.sandboxes.reconcile()
        await st.templates.reconcile()
        st.pool.start()
        await st.previews.proxy.start(config.host, config.preview_port)
        loop = asyncio.get_running_loop()
        lifetimes = loop.create_task(st.sandboxes.run_lifetimes())
        loop.add_signal_handler(signal.SIGUSR2, _dump_tasks)  # `kill -USR2 <pid>`: what every task waits on
        try:
            yield
        finally:
            lifetimes.cancel()
            await envd.close()  # E2B's watchers and process timers
            await st.templates.close()  # a build cut short is queued again for the next start
            await st.pool.close()  # nobody's boxes: not worth keeping
            await st.egress.close_all()
            await st.previews.proxy.close()
            await st.node.close()  # the sandboxes outlive the server; a restart takes them back

    app = FastAPI(title="hutch", version="0.1.0", lifespan=lifespan,
                  description="Self-hosted gVisor sandboxes for AI agents.")
    app.add_exception_handler(ApiError, errors.api_error_handler)
    app.add_exception_handler(RequestValidationError, errors.validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, errors.http_error_handler)
    app.add_exception_handler(sqlalchemy.exc.OperationalError, errors.store_error_handler)
    app.add_exception_handler(Exception, errors.unexpected_error_handler)
    app.add_middleware(BodyLimit, limit=MAX_JSON_BODY)
    control_routes(app)
    template_routes(app)
    data_routes(app)
    e2b.mount(app, lambda: app.state.hutch, envd)  # E2B's API, at /e2b (control plane) and /e2b/envd

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = errors.document_errors(get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
