"""E2B's control plane (E2B_API_URL = <hutch>/e2b): sandboxes made, listed, paused, resumed and killed
as hutch boxes, through hutch's own Sandboxes service, so both APIs see the same box; snapshots taken,
listed, booted and deleted, and boxes forked, through its Snapshots service (snapshots.py).

Errors are E2B's `{"code": <http status>, "message"}`. Lifecycle: E2B's `autoPause: true` is hutch's
own timeout (the box pauses at its deadline and stays paused); without it (E2B's default, "kill"),
the box gets `auto_delete_seconds = 0`, which hutch carries out as a kill at the deadline, with no
checkpoint written.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote

from fastapi import FastAPI, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.responses import JSONResponse

from hutch.e2b import events, rest, secrets, snapshots, templates, volumes, webhooks
from hutch.e2b.common import ENVD_VERSION, Ctx, StateGetter, iso, validation_message
from hutch.errors import ApiError, Code
from hutch.server.auth import team_for_key
from hutch.services import header_rules
from hutch.services.creation import E2BTraits
from hutch.services.models import MAX_FORKS, CreateSandbox, NetworkConfig, UpdateSandbox
from hutch.services.system_templates import BASE_TEMPLATE_ID
from hutch.store import AuditLogRecord, SandboxRecord, SandboxStatus

DEFAULT_TIMEOUT = 300
MAX_PAGE = 100
RUNNING = (SandboxStatus.ACTIVE, SandboxStatus.RESUMING)
PAUSED = (SandboxStatus.PAUSING, SandboxStatus.PAUSED)
# E2B's cold resume (on_resume="reboot") of a box paused with its memory: hutch keeps no files apart
# from the memory then (a files-only pause's resume always boots afresh)
NO_REBOOT = ("a resume that reboots (on_resume=\"reboot\") is served by hutch only for a box paused with its files "
             "only (mode \"filesystem\"): this box's pause kept its memory, and its resume restores it")
T = TypeVar("T")


def _state(rec: SandboxRecord) -> str | None:
    """E2B knows two states; a failed box is left out of lists (and is 'not found' elsewhere)."""
    return "running" if rec.status in RUNNING else "paused" if rec.status in PAUSED else None


def _domain(c: Ctx) -> str:
    """What the SDK puts after "<port>-<sandbox id>." (`get_host(port)`, and every call of the SDKs
    that speak only E2B's host form): the E2B domain hutch serves that form on (hosts.py); without
    it, the host (and port) of hutch's preview URLs."""
    site = c.st.config.e2b_site
    if site:
        return site
    preview = c.st.previews.site
    return f"{preview.domain}:{preview.url_port}" if preview.url_port else preview.domain



def _int(body: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(Code.INVALID_REQUEST, f"{key} must be an integer")
    return value


def _count(raw: str | None, name: str, default: int) -> int:
    """A query's non-negative count: ASCII digits, at most nine."""
    if not raw:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise ApiError(Code.INVALID_REQUEST, f"{name} is not valid")
    return int(raw)


def _unix(raw: str | None, name: str) -> int | None:
    """A query's time in Unix seconds (ASCII digits, at most twelve), or None."""
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"[0-9]{1,12}", raw):
        raise ApiError(Code.INVALID_REQUEST, f"{name} is not valid")
    return int(raw)


def _cursor(token: str) -> tuple[float, str]:
    """A page's nextToken: the last box's (created_at, id)."""
    m = re.fullmatch(r"([0-9]{1,12}(?:\.[0-9]{1,20})?(?:e[0-9]{1,3})?)_([0-9a-f-]{36})", token)
    if m is None:
        raise ApiError(Code.INVALID_REQUEST, "nextToken is not valid")
    return float(m[1]), m[2]


def _clamp_timeout(seconds: int) -> int:
    return max(1, min(seconds, 30 * 24 * 3600))


def _page(items: list[T], q: QueryParams, key: Callable[[T], tuple[float, str]]) -> tuple[list[T], dict[str, str]]:
    """One page of `items` by `key` (created_at, id), newest first unless `order=asc`, after the
    nextToken cursor (not an offset: items made between pages move nothing); the next page's token."""
    newest_first = q.get("order") != "asc"
    items = sorted(items, key=key, reverse=newest_first)
    limit = max(1, min(_count(q.get("limit"), "limit", MAX_PAGE), MAX_PAGE))
    if q.get("nextToken"):
        cursor = _cursor(q["nextToken"])
        items = [i for i in items if (key(i) < cursor if newest_first else key(i) > cursor)]
    page = items[:limit]
    last = key(page[-1]) if page else None
    return page, ({"x-next-token": f"{last[0]!r}_{last[1]}"} if last and len(items) > limit else {})


class Control:
    def __init__(self, get_state: StateGetter) -> None:
        self.get_state = get_state

    async def ctx(self, request: Request) -> Ctx:
        st = self.get_state()
        key = request.headers.get("x-api-key")
        if not key:
            raise ApiError(Code.UNAUTHORIZED, "an API key is required (X-API-KEY)")
        team_id = await run_in_threadpool(team_for_key, st, key, request)  # as hutch's sync dependencies
        if team_id is None:
            raise ApiError(Code.INVALID_API_KEY, "Invalid API key")
        return Ctx(st, team_id)

    # --- views ----------------------------------------------------------------------------------

    def sandbox(self, c: Ctx, rec: SandboxRecord) -> dict[str, Any]:
        return {"templateID": rec.template_id or rec.template, "sandboxID": rec.id, "alias": rec.template,
                "clientID": "hutch", "envdVersion": ENVD_VERSION,
                "envdAccessToken": (token := c.st.sandboxes.access(rec).access_token), "domain": _domain(c),
                # what E2B's clients send to a box's other ports (the code interpreter's context
                # calls carry no other token): the box's own token (ports.py)
                "trafficAccessToken": token}

    def listed(self, c: Ctx, rec: SandboxRecord) -> dict[str, Any]:
        state = _state(rec)
        end = rec.pause_at if rec.pause_at is not None else (rec.delete_at or time.time())
        return {"templateID": rec.template_id or rec.template, "alias": rec.template, "sandboxID": rec.id,
                "clientID": "hutch", "startedAt": iso(rec.created_at), "endAt": iso(end),
                "cpuCount": rec.vcpu, "memoryMB": rec.memory_mib, "diskSizeMB": rec.disk_mib or 0,
                "state": state, "envdVersion": ENVD_VERSION, "metadata": rec.metadata}

    def detail(self, c: Ctx, rec: SandboxRecord) -> dict[str, Any]:
        on_timeout = "kill" if rec.auto_delete_seconds == 0 else "pause"
        network = rec.network or {}
        token = c.st.sandboxes.access(rec).access_token
        return {**self.listed(c, rec), "envdAccessToken": token, "trafficAccessToken": token, "domain": _domain(c),
                "allowInternetAccess": not _denies_everything(network),
                "network": {"allowOut": network.get("allow_out", []), "denyOut": network.get("deny_out", []),
                            "allowPublicTraffic": bool(rec.public_traffic), "rules": header_rules.as_e2b(rec.header_rules)},
                # unless told otherwise, a paused hutch box resumes on its next call or request
                "lifecycle": {"onTimeout": on_timeout,
                              "autoResume": rec.auto_resume if rec.auto_resume is not None else on_timeout == "pause"},
                "volumeMounts": volumes.mounted(rec.volumes)}

    def get(self, c: Ctx, sandbox_id: str) -> SandboxRecord:
        rec = c.st.store.get_sandbox(sandbox_id, c.team_id)
        if rec is None or _state(rec) is None:
            why = f"sandbox {sandbox_id!r} has failed: {rec.failure}" if rec else f"sandbox {sandbox_id!r} not found"
            raise ApiError(Code.NOT_FOUND, why)
        return rec

    # --- calls ----------------------------------------------------------------------------------

    async def create(self, c: Ctx, body: dict[str, Any]) -> dict[str, Any]:
        template = body.get("templateID") or "base"
        if not isinstance(template, str):
            raise ApiError(Code.INVALID_REQUEST, "templateID must be a string")
        if body.get("mcp") or body.get("iam"):
            raise ApiError(Code.INVALID_REQUEST, "mcp and iam are not supported by hutch")
        ref = BASE_TEMPLATE_ID if template == "base" else template
        snap = None  # a template's name wins over a snapshot's, as before snapshots
        if c.st.store.get_template(ref, c.team_id) is None and (snap := snapshots.find(c, template)) is None:
            ref = templates.split_name(ref)[0]  # "name:tag": the template's current build, whatever the tag
            if c.st.store.get_template(ref, c.team_id) is None:
                raise ApiError(Code.TEMPLATE_NOT_FOUND, f"template '{template[:256]}' not found")
        timeout = _clamp_timeout(_int(body, "timeout", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)
        auto_pause = body.get("autoPause") is True
        keep_memory = body.get("autoPauseMemory")
        if keep_memory is not None and not isinstance(keep_memory, bool):
            raise ApiError(Code.INVALID_REQUEST, "autoPauseMemory must be a boolean")
        secure = body.get("secure")
        if secure is not None and not isinstance(secure, bool):
            raise ApiError(Code.INVALID_REQUEST, "secure must be true or false")
        traits = E2BTraits(public_traffic=_public_traffic(body), auto_resume=_auto_resume(body, keep_memory),
                           secure=secure is not False)
        name = (snap.name or snap.template) if snap else template
        try:
            req = CreateSandbox(name=name[:128], from_template=None if snap else ref, timeout_seconds=timeout,
                                auto_delete_seconds=None if auto_pause else 0,
                                metadata=body.get("metadata") or None, env_vars=body.get("envVars") or None,
                                network=_network(body), pause_memory=keep_memory, volumes=volumes.mounts_of(body))
        except ValidationError as e:
            raise ApiError(Code.INVALID_REQUEST, validation_message(e)) from None
        rules = header_rules.parse((body.get("network") or {}).get("rules"))
        c.st.secrets.check_rules(c.team_id, rules)
        if snap is not None:  # env vars on top of the snapshot's; its processes and files
            if rules:
                raise ApiError(Code.INVALID_REQUEST, "network.rules are not supported on a box from a snapshot by hutch")
            return self.sandbox(c, await snapshots.boot(c, snap, req, traits))
        rec = await c.st.sandboxes.create(c.team_id, req, e2b=traits, header_rules=rules)
        return self.sandbox(c, rec)

    async def list_sandboxes(self, c: Ctx, request: Request, states: tuple[str, ...]) -> Response:
        q = request.query_params
        wanted = _metadata_query(q.get("metadata"))
        state_filter = tuple(s for s in (q.get("state") or "").split(",") if s) or states
        every = await run_in_threadpool(c.st.store.list_sandboxes, c.team_id, metadata=wanted)
        recs = [r for r in every if _state(r) in state_filter]
        if q.get("template"):
            recs = [r for r in recs if q["template"] in (r.template, r.template_id)
                    or (q["template"] == "base" and r.template_id == BASE_TEMPLATE_ID)]
        if q.get("startedAfter"):
            after = _parse_time(q["startedAfter"])
            recs = [r for r in recs if r.created_at > after]
        page, headers = _page(recs, q, lambda r: (r.created_at, r.id))
        return JSONResponse([self.listed(c, r) for r in page], headers=headers)

    async def list_snapshots(self, c: Ctx, request: Request) -> Response:
        q = request.query_params
        every = await run_in_threadpool(snapshots.listed, c, q.get("sandboxID"), q.get("name"))
        page, headers = _page(every, q, lambda s: (s.created_at, s.id))
        return JSONResponse([snapshots.info(s) for s in page], headers=headers)

    async def fork(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """E2B's fork: a snapshot of the running box (not kept), then `count` boxes of it, each
        its own result: {"sandbox"} or {"error"} (one fork's failure fails no other)."""
        rec = self.get(c, sandbox_id)
        count = _int(body, "count", 1) or 0
        if not 1 <= count <= MAX_FORKS:  # E2B's SDK's own cap (E2B's API takes 100)
            raise ApiError(Code.INVALID_REQUEST, f"count must be between 1 and {MAX_FORKS}")
        timeout = _int(body, "timeout", snapshots.FORK_TIMEOUT) or 0
        if timeout <= 0:
            raise ApiError(Code.INVALID_REQUEST, "timeout must be greater than 0")
        req = snapshots.fork_request(rec, count, _clamp_timeout(timeout))
        results = await c.st.snapshots.fork(c.team_id, rec.id, req, e2b=True)
        return [{"error": rest.error_body(r.code.status, r.message)} if isinstance(r, ApiError)
                else {"sandbox": self.sandbox(c, r)} for r in results]

    async def set_timeout(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> None:
        rec = self.get(c, sandbox_id)
        timeout = _int(body, "timeout")
        if timeout is None:
            raise ApiError(Code.INVALID_REQUEST, "timeout is required")
        await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(timeout_seconds=_clamp_timeout(timeout)))

    async def pause(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> None:
        rec = self.get(c, sandbox_id)
        memory = body.get("memory", True)
        if not isinstance(memory, bool):
            raise ApiError(Code.INVALID_REQUEST, "memory must be a boolean")
        if rec.status in PAUSED:
            raise ApiError(Code.ALREADY_PAUSED, f"sandbox {sandbox_id!r} is already paused")
        kill_at_timeout = rec.auto_delete_seconds == 0
        if kill_at_timeout:  # "kill" at its timeout, but a pause asked for is kept
            await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(auto_delete_seconds=None), said=False)
        try:
            await c.st.sandboxes.pause(c.team_id, rec.id, memory=memory)
        except BaseException:
            if kill_at_timeout:  # it runs on: its timeout still kills it
                await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(auto_delete_seconds=0), said=False)
            raise

    async def connect(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> Response:
        rec = self.get(c, sandbox_id)
        timeout = _int(body, "timeout")
        if body.get("memory") is False and rec.status in PAUSED and not c.st.sandboxes.files_only(rec):
            raise ApiError(Code.INVALID_REQUEST, NO_REBOOT)
        resumed = rec.status in PAUSED
        if resumed:
            rec = await c.st.sandboxes.resume(c.team_id, rec.id)
        if timeout is not None:  # a running box's deadline only moves later
            timeout = _clamp_timeout(timeout)
            # a running box's deadline only moves later; one without a deadline keeps none
            if resumed or (rec.pause_at is not None and rec.pause_at < time.time() + timeout):
                rec = await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(timeout_seconds=timeout))
        return JSONResponse(self.sandbox(c, rec), status_code=201 if resumed else 200)

    async def metrics(self, c: Ctx, sandbox_id: str, start: int | None, end: int | None) -> list[dict[str, Any]]:
        """What the box used, sampled from its cgroup every few seconds by its node: the samples
        between `start` and `end` (Unix seconds, both included) of the last hour it ran."""
        return await self._metrics(self.get(c, sandbox_id), c, start, end)

    async def _metrics(self, rec: SandboxRecord, c: Ctx, start: int | None, end: int | None) -> list[dict[str, Any]]:
        if rec.status not in RUNNING or rec.runtime_id is None:
            return []
        samples = await c.st.node.usage(rec.runtime_id)
        return [{"timestamp": iso(s.timestamp), "timestampUnix": int(s.timestamp), "cpuCount": rec.vcpu,
                 "cpuUsedPct": s.cpu_used_pct, "memUsed": s.mem_used, "memTotal": rec.memory_mib * 2**20,
                 "memCache": s.mem_cache, "diskUsed": s.disk_used, "diskTotal": (rec.disk_mib or 0) * 2**20}
                for s in samples
                if (start is None or s.timestamp >= start) and (end is None or int(s.timestamp) <= end)]

    async def many_metrics(self, c: Ctx, raw: str | None) -> dict[str, Any]:
        """Each named box's latest sample (E2B's GET /sandboxes/metrics); boxes that are not the
        team's, not running or without a sample yet are left out."""
        ids = [i for i in (raw or "").split(",") if i]
        if not ids or len(ids) > MAX_PAGE:
            raise ApiError(Code.INVALID_REQUEST, f"sandbox_ids names 1 to {MAX_PAGE} sandboxes")
        found: dict[str, Any] = {}
        for sandbox_id in dict.fromkeys(ids):
            rec = c.st.store.get_sandbox(sandbox_id[:64], c.team_id)
            if rec is not None and _state(rec) and (samples := await self._metrics(rec, c, None, None)):
                found[rec.id] = samples[-1]
        return {"sandboxes": found}

    async def update_network(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> None:
        """E2B's PUT /sandboxes/{id}/network: the box's egress rules replaced whole (what the body
        leaves out is cleared), read by the egress proxy at the box's next connection."""
        rec = self.get(c, sandbox_id)
        declined = {"egressProxy": "a BYO egress proxy", "dnsServers": "DNS servers of the box's own"}
        for key, what in declined.items():
            if body.get(key):
                raise ApiError(Code.INVALID_REQUEST, f"{key} ({what}) is not supported by hutch: the box's only way "
                                                     "out is hutch's egress proxy, which resolves names itself")
        rules = header_rules.parse(body.get("rules"))
        c.st.secrets.check_rules(c.team_id, rules)
        net = {k: body.get(k) for k in ("allowOut", "denyOut")}
        network = _network({"network": net, "allow_internet_access": body.get("allow_internet_access")})
        await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(network=network), header_rules=rules)

    async def refresh(self, c: Ctx, sandbox_id: str, body: dict[str, Any]) -> None:
        """E2B's keep-alive: the box runs at least `duration` seconds more (default 60, at most an
        hour); a deadline already later stays."""
        rec = self.get(c, sandbox_id)
        duration = _int(body, "duration", 60) or 0
        if not 0 <= duration <= 3600:
            raise ApiError(Code.INVALID_REQUEST, "duration must be between 0 and 3600 seconds")
        if rec.status in RUNNING and rec.pause_at is not None and rec.pause_at < time.time() + duration:
            await c.st.sandboxes.update(c.team_id, rec.id, UpdateSandbox(timeout_seconds=max(1, duration)))

    def log_entries(self, c: Ctx, sandbox_id: str, q: QueryParams, v2: bool) -> list[dict[str, Any]]:
        """The box's log as E2B's sandbox logs: hutch's audit log of what ran and what was read and
        written in it (commands, processes, files), oldest first unless `direction=backward`."""
        rec = self.get(c, sandbox_id)
        limit = max(1, min(_count(q.get("limit"), "limit", 1000), 1000))
        rows = list(reversed(c.st.store.audit_log(rec.id, 1000)))  # oldest first
        start = _unix(q.get("cursor" if v2 else "start"), "cursor" if v2 else "start")
        if start is not None:  # E2B's cursor and start are Unix milliseconds
            rows = [r for r in rows if r.at * 1000 >= start]
        level = q.get("level")
        if level not in (None, "", "debug", "info", "warn", "error"):
            raise ApiError(Code.INVALID_REQUEST, "level must be debug, info, warn or error")
        entries = [_log_entry(r) for r in rows]
        if level in ("warn", "error"):  # the entries are info (done) or error (refused or failed)
            entries = [e for e in entries if e["level"] == "error"]
        if search := q.get("search"):
            entries = [e for e in entries if search in e["message"]]
        if q.get("direction") == "backward":
            entries.reverse()
        return entries[:limit]


def _log_entry(r: AuditLogRecord) -> dict[str, Any]:
    ok = r.outcome == "ok"
    ended = f" (exit {r.exit_code})" if r.exit_code is not None else ""
    return {"timestamp": iso(r.at), "level": "info" if ok else "error",
            "message": f"{r.op}: {r.detail[:1000]}{ended}" + ("" if ok else f": {r.outcome}"),
            "fields": {"op": r.op, "actor": r.actor[:300], "outcome": r.outcome}}


DENY_ALL = ("0.0.0.0/0", "::/0")
NETWORK_KEYS = {"allowOut", "denyOut", "allowPublicTraffic", "rules"}


def _denies_everything(network: dict[str, list[str]]) -> bool:
    return "0.0.0.0/0" in network.get("deny_out", [])


def _rules(net: dict[str, Any], key: str) -> list[str]:
    value = net.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(Code.INVALID_REQUEST, f"network.{key} must be a list of strings")
    return value


def _auto_resume(body: dict[str, Any], keep_memory: bool | None) -> bool | None:
    """E2B's autoResume {"enabled"}: false, a paused box wakes only when resumed or connected
    (Sandboxes.running_box); so is one whose timeout keeps its files only, as E2B's (its processes
    are gone: traffic would find a fresh start). None: hutch's default, any call wakes it."""
    given = body.get("autoResume")
    if given is None:
        return False if keep_memory is False else None
    enabled = given.get("enabled") if isinstance(given, dict) else None
    if not isinstance(enabled, bool):
        raise ApiError(Code.INVALID_REQUEST, "autoResume must be {\"enabled\": true or false}")
    if enabled and keep_memory is False:
        raise ApiError(Code.INVALID_REQUEST, "autoResume cannot be on with autoPauseMemory false: a files-only "
                                             "pause is resumed explicitly (connect)")
    return enabled


def _public_traffic(body: dict[str, Any]) -> bool:
    """E2B's network.allowPublicTraffic, true unless said otherwise (E2B's default): the box's ports
    answer anyone at their E2B host names (hosts.py); false, only a caller with its traffic token.
    envd (49983) always wants the access token, and the path form (E2b-Sandbox-Port on hutch's own
    origin) always the traffic token."""
    net = body.get("network")
    public = net.get("allowPublicTraffic") if isinstance(net, dict) else None
    if public is not None and not isinstance(public, bool):
        raise ApiError(Code.INVALID_REQUEST, "network.allowPublicTraffic must be true or false")
    return public is not False


def _network(body: dict[str, Any]) -> NetworkConfig | None:
    """E2B's network settings as hutch's rules. allow_internet_access=false denies everything
    the allow list does not name (allow wins over deny in hutch, as in E2B)."""
    given = body.get("network")
    if given is not None and not isinstance(given, dict):
        raise ApiError(Code.INVALID_REQUEST, "network must be an object")
    net: dict[str, Any] = given or {}
    if unknown := sorted(k for k in set(net) - NETWORK_KEYS if net[k] is not None):
        raise ApiError(Code.INVALID_REQUEST, f"network.{unknown[0][:64]} is not supported by hutch")
    _public_traffic(body)
    allow, deny = _rules(net, "allowOut"), _rules(net, "denyOut")
    access = body.get("allow_internet_access", body.get("allowInternetAccess"))
    if access is not None and not isinstance(access, bool):
        raise ApiError(Code.INVALID_REQUEST, "allow_internet_access must be true or false")
    if access is False:
        deny = [*deny, *(d for d in DENY_ALL if d not in deny)]
    if not allow and not deny:
        return None
    try:
        return NetworkConfig(allow_out=allow, deny_out=deny)
    except ValidationError as e:  # E2B's deny rules are addresses only, as hutch's
        raise ApiError(Code.INVALID_REQUEST, f"network: {validation_message(e)}") from None


def _metadata_query(raw: str | None) -> dict[str, str] | None:
    """The SDK quotes each key and value, url-encodes the pairs, and the query encodes that again."""
    if not raw:
        return None
    return {unquote(k): unquote(v) for k, v in parse_qsl(raw, keep_blank_values=True)}


def _parse_time(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ApiError(Code.INVALID_REQUEST, "startedAfter must be an ISO 8601 time") from None


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(Code.INVALID_JSON, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(Code.INVALID_REQUEST, "the request body must be a JSON object")
    return body


def control_routes(app: FastAPI, get_state: StateGetter) -> None:
    ctl = Control(get_state)
    templates.template_routes(app, get_state, ctl.ctx, _body)  # before DELETE /templates/{ref}

    @app.post("/sandboxes", status_code=201)
    @app.post("/v2/sandboxes", status_code=201)
    async def create(request: Request) -> Any:
        c = await ctl.ctx(request)
        return JSONResponse(await ctl.create(c, await _body(request)), status_code=201)

    @app.get("/v2/sandboxes")
    async def list_v2(request: Request) -> Any:
        return await ctl.list_sandboxes(await ctl.ctx(request), request, ("running", "paused"))

    @app.get("/sandboxes")
    async def list_v1(request: Request) -> Any:
        return await ctl.list_sandboxes(await ctl.ctx(request), request, ("running",))

    # before /sandboxes/{sandbox_id}, which would take "metrics" for an id
    @app.get("/sandboxes/metrics")
    async def many_metrics(request: Request) -> Any:
        return await ctl.many_metrics(await ctl.ctx(request), request.query_params.get("sandbox_ids"))

    @app.get("/sandboxes/{sandbox_id}")
    async def get_info(sandbox_id: str, request: Request) -> Any:
        c = await ctl.ctx(request)
        return ctl.detail(c, ctl.get(c, sandbox_id))

    @app.delete("/sandboxes/{sandbox_id}", status_code=204)
    async def kill(sandbox_id: str, request: Request) -> Response:
        c = await ctl.ctx(request)
        rec = c.st.store.get_sandbox(sandbox_id, c.team_id)
        if rec is None:
            raise ApiError(Code.NOT_FOUND, f"sandbox {sandbox_id!r} not found")
        await c.st.sandboxes.kill(c.team_id, rec.id)
        return Response(status_code=204)

    @app.post("/sandboxes/{sandbox_id}/timeout", status_code=204)
    async def set_timeout(sandbox_id: str, request: Request) -> Response:
        await ctl.set_timeout(await ctl.ctx(request), sandbox_id, await _body(request))
        return Response(status_code=204)

    @app.post("/sandboxes/{sandbox_id}/pause", status_code=204)
    async def pause(sandbox_id: str, request: Request) -> Response:
        await ctl.pause(await ctl.ctx(request), sandbox_id, await _body(request))
        return Response(status_code=204)

    @app.post("/sandboxes/{sandbox_id}/connect")
    @app.post("/v2/sandboxes/{sandbox_id}/connect")
    @app.post("/sandboxes/{sandbox_id}/resume")
    async def connect(sandbox_id: str, request: Request) -> Any:
        return await ctl.connect(await ctl.ctx(request), sandbox_id, await _body(request))

    @app.post("/sandboxes/{sandbox_id}/snapshots", status_code=201)
    async def take_snapshot(sandbox_id: str, request: Request) -> Any:
        c = await ctl.ctx(request)
        body = await _body(request)
        return JSONResponse(await snapshots.take(c, ctl.get(c, sandbox_id), body), status_code=201)

    @app.get("/snapshots")
    async def list_snapshots(request: Request) -> Any:
        return await ctl.list_snapshots(await ctl.ctx(request), request)

    @app.delete("/templates/{ref}", status_code=204)
    async def delete_snapshot(ref: str, request: Request) -> Response:
        await snapshots.delete(await ctl.ctx(request), ref)
        return Response(status_code=204)

    @app.post("/sandboxes/{sandbox_id}/fork", status_code=201)
    async def fork(sandbox_id: str, request: Request) -> Any:
        c = await ctl.ctx(request)
        return JSONResponse(await ctl.fork(c, sandbox_id, await _body(request)), status_code=201)

    @app.get("/sandboxes/{sandbox_id}/metrics")
    async def metrics(sandbox_id: str, request: Request) -> Any:
        q = request.query_params
        return await ctl.metrics(await ctl.ctx(request), sandbox_id, _unix(q.get("start"), "start"), _unix(q.get("end"), "end"))

    @app.put("/sandboxes/{sandbox_id}/network", status_code=204)
    async def update_network(sandbox_id: str, request: Request) -> Response:
        await ctl.update_network(await ctl.ctx(request), sandbox_id, await _body(request))
        return Response(status_code=204)

    @app.post("/sandboxes/{sandbox_id}/refreshes", status_code=204)
    async def refresh(sandbox_id: str, request: Request) -> Response:
        await ctl.refresh(await ctl.ctx(request), sandbox_id, await _body(request))
        return Response(status_code=204)

    @app.get("/sandboxes/{sandbox_id}/logs")
    async def logs_v1(sandbox_id: str, request: Request) -> Any:
        entries = ctl.log_entries(await ctl.ctx(request), sandbox_id, request.query_params, v2=False)
        return {"logs": [{"timestamp": e["timestamp"], "line": e["message"]} for e in entries], "logEntries": entries}

    @app.get("/v2/sandboxes/{sandbox_id}/logs")
    async def logs_v2(sandbox_id: str, request: Request) -> Any:
        return {"logs": ctl.log_entries(await ctl.ctx(request), sandbox_id, request.query_params, v2=True)}

    @app.get("/health")
    async def health() -> Any:
        return {"status": "ok"}

    volumes.volume_routes(app, get_state, ctl.ctx, _body)
    secrets.secret_routes(app, ctl.ctx, _body, _page)
    events.event_routes(app, ctl.ctx)
    webhooks.webhook_routes(app, ctl.ctx, _body)
