"""E2B's templates built from code (the Template SDK: `Template.build`) over hutch's templates.

    POST /v3/templates                              the template (made if new) and a build id
    GET  /templates/{id}/files/{hash}               whether a COPY's files are here; else where to PUT them
    PUT  /template-uploads/{team}/{hash}?exp=&sig=  the upload (signed, bounded, the team's own store)
    POST /v2/templates/{id}/builds/{build}          the steps: the template's spec replaced, a hutch build queued
    GET  /templates/{id}/builds/{build}/status      its state and its log, from an offset
    GET  /templates/aliases/{name}, tags            what names and tags find

A template built this way is a hutch template of the team's, by its name: hutch's SDK, CLI and
console see its steps, builds and logs. E2B's RUN, ENV, WORKDIR and USER are hutch's own steps;
COPY is a copy step whose files the client uploaded, named by E2B's filesHash (a key the client
computes: kept per team, never shared with another team, not recomputed). `e2bdev/base` and
`debian:*` are hutch/base, built as E2B's base is (as "user", in /home/user); another image is
pulled through hutch's OCI import when the server may pull (`--registry-pulls`), else the build
request is refused naming the image. Tags: a template has one build that boxes boot from, so a
`name:tag` finds the template's current build whatever the tag, and tags are not kept apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import re
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Response
from pydantic import ValidationError
from starlette.responses import JSONResponse

from hutch.e2b.common import Ctx, iso, validation_message
from hutch.errors import ApiError, Code
from hutch.services.models import CreateTemplate
from hutch.services.system_templates import BASE_TEMPLATE_ID
from hutch.store import BuildRecord, BuildStatus, TemplateRecord
from hutch.templates.buildlog import MAX_LOG_BYTES

if TYPE_CHECKING:
    from hutch.e2b.common import StateGetter
    from hutch.server.state import State

UPLOADS = "/template-uploads"
MAX_UPLOAD = 512 * 2**20  # a COPY's files: unpacked in the build box's memory-backed /tmp
TEAM_UPLOADS = 1000  # a team's uploads kept for COPY steps (by their hash: a rebuild uploads nothing again)
TEAM_UPLOAD_BYTES = 4 * 2**30
UPLOAD_SECONDS = 3600
MAX_PENDING = 1000  # builds asked for (POST /v3/templates) whose steps have not come yet
MAX_PAGE = 100
_HASH = re.compile(r"[0-9a-f]{64}")
_TEAM = re.compile(r"[0-9a-f-]{36}")
STATES = {BuildStatus.QUEUED: "waiting", BuildStatus.RUNNING: "building", BuildStatus.READY: "ready",
          BuildStatus.FAILED: "error", BuildStatus.CANCELLED: "error"}
BASE_IMAGES = re.compile(r"(docker\.io/)?(e2bdev/base|(library/)?debian)(:[\w.-]+)?")


@dataclass
class Pending:
    team_id: str
    template_id: str
    build_id: str
    vcpu: int | None
    memory_mib: int | None


def split_name(ref: str) -> tuple[str, str | None]:
    """E2B's "name:tag" (a tag finds the template's current build)."""
    name, _, tag = ref.partition(":")
    return name, tag or None



def _image(ref: str) -> str:
    """A Docker-style image name as hutch's `from`: docker://registry/repository:tag."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return "docker://" + ref
    return "docker://docker.io/" + (ref if "/" in ref else "library/" + ref)


def _user(value: object, where: str) -> str:
    if value not in ("root", "user"):
        raise ApiError(Code.INVALID_SPEC, f"{where}: the box knows the users root and user, not {str(value)[:64]!r}")
    return str(value)


def _args(step: dict[str, Any], count: tuple[int, int], where: str) -> list[str]:
    args = step.get("args")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args) or not count[0] <= len(args) <= count[1]:
        raise ApiError(Code.INVALID_SPEC, f"{where}: args must be {count[0]} to {count[1]} strings")
    return args


def spec_of(team_id: str, name: str, body: dict[str, Any], p: Pending) -> tuple[dict[str, Any], bool, list[int]]:
    """E2B's build request as hutch's template spec (CreateTemplate's fields), whether the build
    skips the cache, and for each hutch step the E2B step it comes from (1 up; 0: the base's)."""
    if body.get("fromImageRegistry"):
        raise ApiError(Code.INVALID_SPEC, "fromImageRegistry: registry credentials are not supported by hutch "
                                          "(it pulls public images only, and only with --registry-pulls)")
    source, steps = "hutch/base", list[dict[str, Any]]()
    if isinstance(body.get("fromTemplate"), str) and body["fromTemplate"]:
        parent = split_name(body["fromTemplate"])[0]
        source = "hutch/base" if parent in ("base", BASE_TEMPLATE_ID) else parent
    elif isinstance(body.get("fromImage"), str) and body["fromImage"] and not BASE_IMAGES.fullmatch(body["fromImage"]):
        source = _image(body["fromImage"])
    if source == "hutch/base":  # as E2B's base: its builds run as "user" in its home
        steps += [{"user": {"name": "user"}}, {"workdir": "/home/user"}]
    origin = [0] * len(steps)
    user = "user" if source == "hutch/base" else None
    raw = body.get("steps") or []
    if not isinstance(raw, list):
        raise ApiError(Code.INVALID_SPEC, "steps must be a list")
    for i, step in enumerate(raw, 1):
        if not isinstance(step, dict):
            raise ApiError(Code.INVALID_SPEC, f"step {i} must be an object")
        origin += [i] * _translate(step, f"step {i}", steps, user)
        if step.get("type") == "USER":
            user = steps[-1]["user"]["name"]
    spec: dict[str, Any] = {"name": name, "from": source, "steps": steps}
    for key, field in (("startCmd", "start_cmd"), ("readyCmd", "ready_cmd")):
        if isinstance(body.get(key), str) and body[key]:
            spec[field] = body[key]
    if p.vcpu is not None:
        spec["vcpu"] = p.vcpu
    if p.memory_mib is not None:
        spec["memory_mib"] = p.memory_mib
    force = body.get("force") is True or any(isinstance(s, dict) and s.get("force") is True for s in raw)
    return spec, force, origin


def _translate(step: dict[str, Any], where: str, steps: list[dict[str, Any]], user: str | None) -> int:
    """One E2B step appended to `steps` as hutch's; how many hutch steps it became."""
    before = len(steps)
    kind = step.get("type")
    if kind == "RUN":
        args = _args(step, (1, 2), where)
        as_user = _user(args[1], where) if len(args) > 1 and args[1] else None
        if as_user and as_user != (user or "root"):  # that step alone runs as that user
            steps += [{"user": {"name": as_user}}, {"run": args[0]}, {"user": {"name": user or "root"}}]
        else:
            steps.append({"run": args[0]})
    elif kind == "ENV":
        args = _args(step, (2, 2 * 64), where)
        if len(args) % 2:
            raise ApiError(Code.INVALID_SPEC, f"{where}: ENV args are name, value pairs")
        steps += [{"env": {"key": k, "value": v}} for k, v in zip(args[::2], args[1::2], strict=True)]
    elif kind == "WORKDIR":
        steps.append({"workdir": _args(step, (1, 1), where)[0]})
    elif kind == "USER":
        steps.append({"user": {"name": _user(_args(step, (1, 1), where)[0], where)}})
    elif kind == "COPY":
        args = _args(step, (2, 4), where)
        digest = step.get("filesHash")
        if not isinstance(digest, str) or not _HASH.fullmatch(digest):
            raise ApiError(Code.INVALID_SPEC, f"{where}: COPY needs the filesHash of its upload")
        copy: dict[str, Any] = {"files": digest, "src": args[0], "dest": args[1]}
        if len(args) > 2 and args[2]:
            copy["user"] = _user(args[2], where)
        if len(args) > 3 and args[3]:
            copy["mode"] = args[3]
        steps.append({"copy": copy})
    else:
        raise ApiError(Code.INVALID_SPEC, f"{where}: {str(kind)[:32]!r} is not a step hutch builds "
                                          "(RUN, COPY, ENV, WORKDIR, USER)")
    return len(steps) - before


def e2b_step(index: int, origin: list[int] | None) -> str:
    """A hutch step (0 up) as E2B numbers its steps: 1 up, "base" for what its base did."""
    if origin is None:
        return str(index + 1)
    found = origin[index] if 0 <= index < len(origin) else 0
    return str(found) if found else "base"


def log_entries(path: Path, origin: list[int] | None = None) -> list[dict[str, Any]]:
    """A build's log (bounded, as hutch writes it) as E2B's entries, oldest first."""
    entries: list[dict[str, Any]] = []
    with contextlib.suppress(OSError), path.open("rb") as f:
        for line in f.read(MAX_LOG_BYTES + 2**20).splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if not isinstance(e, dict) or e.get("done") or not isinstance(e.get("text"), str):
                continue
            step = e.get("step")
            entries.append({"timestamp": e.get("time") or iso(time.time()),
                            "level": "warn" if e.get("stream") == "stderr" else "info", "message": e["text"],
                            **({"step": e2b_step(step, origin)} if isinstance(step, int) else {})})
    return entries


class TemplateApi:
    def __init__(self, get_state: StateGetter) -> None:
        self.get_state = get_state
        self.pending: OrderedDict[str, Pending] = OrderedDict()  # template id -> the build asked for
        # build id -> for each hutch step, the E2B step it came from (the status speaks of E2B's)
        self.origins: OrderedDict[str, list[int]] = OrderedDict()

    def template(self, c: Ctx, ref: str) -> TemplateRecord:
        rec = c.st.store.get_template(split_name(ref)[0], c.team_id)
        if rec is None or (rec.team_id != c.team_id and rec.id != BASE_TEMPLATE_ID):
            raise ApiError(Code.TEMPLATE_NOT_FOUND, f"template '{ref[:128]}' not found")
        return rec

    def request(self, c: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("name") or body.get("alias")
        if not isinstance(raw, str) or not raw:
            raise ApiError(Code.INVALID_REQUEST, "name is required")
        name, tag = split_name(raw)
        tags = body.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ApiError(Code.INVALID_REQUEST, "tags must be a list of strings")
        try:
            shape = CreateTemplate.model_validate({"name": name, **{k: body[v] for k, v in (
                ("vcpu", "cpuCount"), ("memory_mib", "memoryMB")) if body.get(v) is not None}})
        except ValidationError as e:
            raise ApiError(Code.INVALID_REQUEST, validation_message(e).replace("vcpu", "cpuCount")
                           .replace("memory_mib", "memoryMB")) from None
        rec = c.st.templates.reserve(c.team_id, name)
        p = Pending(c.team_id, rec.id, str(uuid.uuid4()), body.get("cpuCount") and shape.vcpu,
                    body.get("memoryMB") and shape.memory_mib)
        self.pending[rec.id] = p
        while len(self.pending) > MAX_PENDING:
            self.pending.popitem(last=False)
        every = [*([tag] if tag else []), *tags]
        return {"templateID": rec.id, "buildID": p.build_id, "public": False, "names": [name], "aliases": [name],
                "tags": every}

    def upload_link(self, c: Ctx, template_id: str, digest: str) -> dict[str, Any]:
        self.template(c, template_id)
        if not _HASH.fullmatch(digest):
            raise ApiError(Code.INVALID_REQUEST, "the files' hash is 64 lower-case hex digits")
        if (c.st.templates.files_dir / c.team_id / digest).is_file():
            return {"present": True}
        expires = int(time.time()) + UPLOAD_SECONDS
        sig = _signature(c.st, c.team_id, digest, expires)
        return {"present": False, "url": f"{c.st.config.base_url}/e2b{UPLOADS}/{c.team_id}/{digest}"
                                          f"?exp={expires}&sig={sig}"}

    def build(self, c: Ctx, template_id: str, build_id: str, body: dict[str, Any]) -> None:
        p = self.pending.get(template_id)
        if p is None or p.build_id != build_id or p.team_id != c.team_id:
            raise ApiError(Code.BUILD_NOT_FOUND, f"build {build_id[:64]!r} of template {template_id[:64]!r} was not "
                                                 "asked for (POST /v3/templates first)")
        rec = self.template(c, template_id)
        spec, force, origin = spec_of(c.team_id, rec.name, body, p)
        try:
            req = CreateTemplate.model_validate(spec)
        except ValidationError as e:
            raise ApiError(Code.INVALID_SPEC, validation_message(e)) from None
        try:
            c.st.templates.build_spec(c.team_id, rec.id, req, no_cache=force, build_id=build_id)
        except ApiError as e:
            if e.code == Code.INVALID_SPEC and req.from_.startswith("docker://"):
                raise ApiError(Code.INVALID_SPEC, f"image {req.from_.removeprefix('docker://')}: {e.message}") from e
            raise
        self.pending.pop(template_id, None)
        self.origins[build_id] = origin
        while len(self.origins) > MAX_PENDING:
            self.origins.popitem(last=False)

    def status(self, c: Ctx, template_id: str, build_id: str, offset: int, limit: int) -> dict[str, Any]:
        rec = self.template(c, template_id)
        build = c.st.store.get_build(build_id)
        if build is None or build.template_id != rec.id:
            p = self.pending.get(rec.id)
            if p is not None and p.build_id == build_id:  # asked for, its steps not sent yet
                return {"templateID": rec.id, "buildID": build_id, "status": "waiting", "logs": [], "logEntries": []}
            raise ApiError(Code.BUILD_NOT_FOUND, f"build {build_id[:64]!r} not found")
        entries = log_entries(c.st.templates.build_logs.path(build.id), self.origins.get(build.id))
        page = entries[offset:offset + limit]
        out: dict[str, Any] = {"templateID": rec.id, "buildID": build.id, "status": STATES[BuildStatus(build.status)],
                               "logs": [f"[{e['timestamp']}] {e['message']}" for e in page], "logEntries": page}
        if out["status"] == "error":
            out["reason"] = _reason(build, entries, self.origins.get(build.id))
        return out


def _reason(build: BuildRecord, entries: list[dict[str, Any]], origin: list[int] | None) -> dict[str, Any]:
    error = build.error or {}
    step = error.get("step")
    reason: dict[str, Any] = {"message": str(error.get("message") or "the build failed")}
    if isinstance(step, int):
        reason["step"] = e2b_step(step, origin)
        if reason["step"].isdigit():  # hutch's message counts hutch's steps
            reason["message"] = reason["message"].replace(f"step {step + 1} ", f"step {reason['step']} ", 1)
        reason["logEntries"] = [e for e in entries if e.get("step") == reason["step"]][-50:]
    else:
        reason["step"] = "finalize"  # the start command and readiness probe, or the root's making
    return reason


def _signature(st: State, team_id: str, digest: str, expires: int) -> str:
    return st.signer.keyed(f"template-upload/{team_id}/{digest}", expires)


async def receive_upload(st: State, request: Request, team_id: str, digest: str) -> Response:
    """A COPY's files, PUT to the link `upload_link` made: the signature names the team, the
    hash and the expiry; the body is bounded, written beside its place and renamed into it."""
    q = request.query_params
    expires = q.get("exp") or ""
    if (not _TEAM.fullmatch(team_id) or not _HASH.fullmatch(digest) or not expires.isdigit() or len(expires) > 12
            or not hmac.compare_digest(q.get("sig") or "", _signature(st, team_id, digest, int(expires)))):
        raise ApiError(Code.INVALID_SIGNATURE, "the upload link is not valid")
    if int(expires) < time.time():
        raise ApiError(Code.SIGNATURE_EXPIRED, "the upload link has expired: ask for the files again")
    folder = st.templates.files_dir / team_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    count, held = await asyncio.to_thread(_held, folder)
    if count >= TEAM_UPLOADS:
        raise ApiError(Code.TOO_MANY_TEMPLATES, f"a team keeps at most {TEAM_UPLOADS} uploads for COPY steps")
    limit = min(MAX_UPLOAD, TEAM_UPLOAD_BYTES - held)
    declared = request.headers.get("content-length") or ""
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(Code.PAYLOAD_TOO_LARGE, f"this upload may be at most {limit} bytes (at most {MAX_UPLOAD} "
                                               f"each, {TEAM_UPLOAD_BYTES} for all of a team's)")
    partial = folder / f".{digest}.{uuid.uuid4().hex}"
    seen = 0
    try:
        with partial.open("wb") as f:
            async for chunk in request.stream():
                seen += len(chunk)
                if seen > limit:
                    raise ApiError(Code.PAYLOAD_TOO_LARGE, f"this upload may be at most {limit} bytes")
                await asyncio.to_thread(f.write, chunk)
        os.replace(partial, folder / digest)
    finally:
        partial.unlink(missing_ok=True)
    return Response(status_code=200)


def _held(folder: Path) -> tuple[int, int]:
    """A team's uploads: how many, and their bytes (the server's own flat directory)."""
    sizes = [e.stat(follow_symlinks=False).st_size for e in os.scandir(folder) if _HASH.fullmatch(e.name)]
    return len(sizes), sum(sizes)


def template_routes(app: FastAPI, get_state: StateGetter, ctx: Any, body_of: Any) -> None:
    """On E2B's control app, before its other /templates routes (`DELETE /templates/{ref}`
    would take "tags" for a template)."""
    api = TemplateApi(get_state)

    @app.post("/v3/templates", status_code=202)
    async def request_build(request: Request) -> Any:
        c = await ctx(request)
        return JSONResponse(api.request(c, await body_of(request)), status_code=202)

    @app.get("/templates/aliases/{alias}")
    async def alias(alias: str, request: Request) -> Any:
        c = await ctx(request)
        rec = api.template(c, alias)
        return {"templateID": rec.id, "public": rec.team_id is None}

    @app.post("/templates/tags", status_code=201)
    async def assign_tags(request: Request) -> Any:
        c = await ctx(request)
        body = await body_of(request)
        rec = api.template(c, str(body.get("target") or ""))
        tags = body.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) and t for t in tags):
            raise ApiError(Code.INVALID_REQUEST, "tags must be a list of strings")
        return JSONResponse({"tags": tags, "buildID": rec.build_id or str(uuid.UUID(int=0))}, status_code=201)

    @app.delete("/templates/tags", status_code=204)
    async def remove_tags(request: Request) -> Response:
        c = await ctx(request)
        api.template(c, str((await body_of(request)).get("name") or ""))
        return Response(status_code=204)

    @app.get("/templates/{ref}/tags")
    async def tags(ref: str, request: Request) -> Any:
        c = await ctx(request)
        rec = api.template(c, ref)
        if rec.build_id is None:
            return []
        build = c.st.store.get_build(rec.build_id)
        return [{"tag": "default", "buildID": rec.build_id,
                 "createdAt": iso(build.finished_at or build.created_at if build else rec.created_at)}]

    @app.get("/templates/{template_id}/files/{digest}", status_code=201)
    async def files(template_id: str, digest: str, request: Request) -> Any:
        return JSONResponse(api.upload_link(await ctx(request), template_id, digest), status_code=201)

    @app.put(UPLOADS + "/{team_id}/{digest}")
    async def upload(team_id: str, digest: str, request: Request) -> Response:
        return await receive_upload(get_state(), request, team_id, digest)

    @app.post("/v2/templates/{template_id}/builds/{build_id}", status_code=202)
    async def start_build(template_id: str, build_id: str, request: Request) -> Any:
        c = await ctx(request)
        api.build(c, template_id, build_id, await body_of(request))
        return JSONResponse({}, status_code=202)

    @app.get("/templates/{template_id}/builds/{build_id}/status")
    async def status(template_id: str, build_id: str, request: Request) -> Any:
        c = await ctx(request)
        q = request.query_params
        offset = int(q["logsOffset"]) if (q.get("logsOffset") or "").isdigit() and len(q["logsOffset"]) < 10 else 0
        limit = int(q["limit"]) if (q.get("limit") or "").isdigit() and len(q["limit"]) < 4 else MAX_PAGE
        return api.status(c, template_id, build_id, offset, max(1, min(limit, MAX_PAGE)))
