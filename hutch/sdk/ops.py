"""Every SDK call, written once as a flow: the request it makes and how its answer is read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import (
    AuthenticationError,
    BuildError,
    ConflictError,
    NotFoundError,
    SandboxTimeoutError,
    ServerError,
    ValidationError,
    error_for,
)
from hutch.sdk.flow import RETRIES, Call, Callback, Emit, Flow, NextLine, Reply, Sleep, backoff, send

# A command's stream carries a keep-alive every 10 s, so a minute of silence means a dead stream.
STREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=60.0, write=60.0, pool=10.0)
FILE_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=300.0, pool=10.0)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "leave as it is", where None means "clear"


@dataclass
class NetworkConfig:
    """Egress rules. `allow_out`: CIDRs and domains ("*.example.com" matches any name below it,
    not the apex); `deny_out`: CIDRs. Allow wins over deny, so `deny_out=["0.0.0.0/0"]` with an
    allow list lets only that list out. Private, loopback and link-local ranges (169.254.169.254
    too) and the server's own addresses are denied whatever the rules say."""

    allow_out: list[str] = field(default_factory=list)
    deny_out: list[str] = field(default_factory=list)


def network_body(network: NetworkConfig | dict[str, Any] | None) -> dict[str, Any] | None:
    if network is None or isinstance(network, dict):
        return network
    return {"allow_out": list(network.allow_out), "deny_out": list(network.deny_out)}


@dataclass
class NetworkLogEntry:
    id: int
    at: datetime
    host: str
    port: int
    ip: str | None
    verdict: str  # "allowed", "denied", or "failed" (allowed, but it could not be made)
    rule: str  # what decided: "default", "allow_out:*.example.com", "deny_out:0.0.0.0/0", "always_denied:..."
    bytes_out: int
    bytes_in: int
    error: str | None = None
    secrets: list[str] | None = None  # the secrets swapped into its requests


@dataclass
class NetworkLogPage:
    entries: list[NetworkLogEntry]
    next_before: int | None  # pass as `before` for older entries; None at the end


@dataclass
class SecretBinding:
    """A secret bound to an env var of a sandbox (the box sees only a stand-in)."""

    env: str
    secret: str
    revoked: bool  # the secret was deleted: its stand-in is not swapped any more
    created_at: datetime

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SecretBinding:
        return cls(d["env"], d["secret"], d["revoked"], datetime.fromisoformat(d["created_at"]))


@dataclass
class SandboxInfo:
    """The server's view of a sandbox at the moment it was asked."""

    id: str
    name: str
    status: str
    template: str
    metadata: dict[str, str]
    timeout_seconds: int | None
    auto_delete_seconds: int | None
    vcpu_count: int
    memory_mib: int
    created_at: datetime
    updated_at: datetime
    failure: str | None = None
    network: NetworkConfig | None = None
    secrets: list[SecretBinding] = field(default_factory=list)
    preview_access: str = "public"  # what a port published without an access of its own gets
    preview_url_template: str = ""  # a published port's URL, "{port}" standing for the port

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SandboxInfo:
        return cls(
            id=d["id"], name=d["name"], status=d["status"], template=d["template"], metadata=d["metadata"],
            timeout_seconds=d.get("timeout_seconds"), auto_delete_seconds=d.get("auto_delete_seconds"),
            vcpu_count=d["vcpu_count"], memory_mib=d["memory_mib"],
            created_at=datetime.fromisoformat(d["created_at"]), updated_at=datetime.fromisoformat(d["updated_at"]),
            failure=d.get("failure"),
            network=NetworkConfig(**d["network"]) if d.get("network") else None,
            secrets=[SecretBinding.from_json(b) for b in d.get("secrets", ())],
            preview_access=d.get("preview_access", "public"), preview_url_template=d.get("preview_url_template", ""),
        )


@dataclass
class DataPlane:
    """Where a sandbox's commands and files go, and the token they carry. The token rotates
    when the sandbox resumes; `send_data` then fetches the new one through the control plane."""

    url: str
    token: str
    sandbox_id: str
    cfg: ConnectionConfig

    def headers(self) -> dict[str, str]:
        return {"X-Access-Token": self.token, **_actor(self.cfg)}


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int


@dataclass
class _Output:
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def _actor(cfg: ConnectionConfig) -> dict[str, str]:
    return {"X-Hutch-Actor": cfg.actor} if cfg.actor else {}


def _auth(cfg: ConnectionConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {cfg.api_key}", **_actor(cfg)}


def _json(body: bytes) -> Any:
    return json.loads(body)


# --- control plane ------------------------------------------------------------------------------

def create(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[tuple[SandboxInfo, DataPlane]]:
    reply = yield from send(Call("POST", f"{cfg.base_url}/v1/sandboxes", _auth(cfg), json=body))
    return _access(cfg, _json(reply.body))


def connect(cfg: ConnectionConfig, sandbox_id: str) -> Flow[tuple[SandboxInfo, DataPlane]]:
    """The sandbox and a fresh data-plane token; the server resumes a paused box first."""
    reply = yield from send(Call("POST", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/connect", _auth(cfg)))
    return _access(cfg, _json(reply.body))


def _access(cfg: ConnectionConfig, d: dict[str, Any]) -> tuple[SandboxInfo, DataPlane]:
    return SandboxInfo.from_json(d), DataPlane(d["data_plane_url"], d["access_token"], d["id"], cfg)


def pause(cfg: ConnectionConfig, sandbox_id: str) -> Flow[None]:
    yield from send(Call("POST", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/pause", _auth(cfg)))


def resume(dp: DataPlane) -> Flow[SandboxInfo]:
    """Resume (a no-op when active) and take the rotated token."""
    reply = yield from send(Call("POST", f"{dp.cfg.base_url}/v1/sandboxes/{dp.sandbox_id}/resume", _auth(dp.cfg)))
    info, fresh = _access(dp.cfg, _json(reply.body))
    dp.url, dp.token = fresh.url, fresh.token
    return info


def send_data(dp: DataPlane, make: Callable[[], Call]) -> Flow[Reply]:
    """A data-plane request. If the token was rotated (the box resumed since), reconnect once for
    the new one and send again."""
    try:
        return (yield from send(make()))
    except AuthenticationError as e:
        if e.code != "invalid_access_token":
            raise
    yield from refresh_token(dp)
    return (yield from send(make()))


def refresh_token(dp: DataPlane) -> Flow[None]:
    """Take the sandbox's current data-plane token (connect resumes it if it is paused)."""
    _info, fresh = yield from connect(dp.cfg, dp.sandbox_id)
    dp.url, dp.token = fresh.url, fresh.token


def get_info(cfg: ConnectionConfig, sandbox_id: str) -> Flow[SandboxInfo]:
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}", _auth(cfg)))
    return SandboxInfo.from_json(_json(reply.body))


def list_sandboxes(cfg: ConnectionConfig, metadata: dict[str, str] | None,
                   status: str | None) -> Flow[list[SandboxInfo]]:
    params = {}
    if metadata:
        params["metadata"] = urlencode(metadata)
    if status:
        params["status"] = status
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/sandboxes", _auth(cfg), params=params))
    return [SandboxInfo.from_json(d) for d in _json(reply.body)]


def update(cfg: ConnectionConfig, sandbox_id: str, changes: dict[str, Any]) -> Flow[SandboxInfo]:
    body = {k: v for k, v in changes.items() if v is not UNSET}
    reply = yield from send(Call("PATCH", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}", _auth(cfg), json=body))
    return SandboxInfo.from_json(_json(reply.body))


def network_log(cfg: ConnectionConfig, sandbox_id: str, limit: int, before: int | None) -> Flow[NetworkLogPage]:
    params = {"limit": str(limit), **({"before": str(before)} if before is not None else {})}
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/network-log", _auth(cfg),
                                 params=params))
    d = _json(reply.body)
    entries = [NetworkLogEntry(**{**e, "at": datetime.fromisoformat(e["at"])}) for e in d["entries"]]
    return NetworkLogPage(entries, d["next_before"])


@dataclass
class AuditEntry:
    """A command or file operation on a sandbox."""

    id: int
    at: datetime
    actor: str  # the client's address and what it calls itself (HUTCH_ACTOR, else its User-Agent)
    op: str  # exec, exit, spawn, signal, file_write, file_read, dir_download, file_remove, file_move, dir_make
    detail: str  # the command, or the path
    exit_code: int | None  # a command's, once it ended
    outcome: str  # "ok", or the error code the call ended with


@dataclass
class AuditPage:
    entries: list[AuditEntry]
    next_before: int | None


def audit_log(cfg: ConnectionConfig, sandbox_id: str, limit: int, before: int | None) -> Flow[AuditPage]:
    params = {"limit": str(limit), **({"before": str(before)} if before is not None else {})}
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/audit", _auth(cfg), params=params))
    d = _json(reply.body)
    return AuditPage([AuditEntry(**{**e, "at": datetime.fromisoformat(e["at"])}) for e in d["entries"]],
                     d["next_before"])


def kill(cfg: ConnectionConfig, sandbox_id: str) -> Flow[None]:
    """Idempotent: a sandbox that is already gone is not an error."""
    try:
        yield from send(Call("DELETE", f"{cfg.base_url}/v1/sandboxes/{sandbox_id}", _auth(cfg)))
    except NotFoundError:
        pass


def sandbox_secrets(cfg: ConnectionConfig, sandbox_id: str, method: str = "GET", env: str | None = None,
                    secret: str | None = None) -> Flow[list[SecretBinding]]:
    """A sandbox's bindings: listed (GET), one attached (PUT) or detached (DELETE) first."""
    url = f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/secrets" + (f"/{quote(env, safe='')}" if env else "")
    reply = yield from send(Call(method, url, _auth(cfg), json={"secret": secret} if secret is not None else None))
    return [SecretBinding.from_json(b) for b in _json(reply.body)]


# --- preview ports --------------------------------------------------------------------------------

PREVIEW_PORTS = range(1024, 65536)
RELAY_PORT = 3128  # the box's egress relay: never published


def check_preview_port(port: int) -> int:
    """Ports 1024-65535, not the box's relay: a ValidationError before any request."""
    if isinstance(port, bool) or not isinstance(port, int) or port not in PREVIEW_PORTS or port == RELAY_PORT:
        raise ValidationError(f"a preview port is an int in 1024-65535 other than {RELAY_PORT}, not {port!r}",
                              code="invalid_port")
    return port


@dataclass
class PreviewPort:
    port: int
    access: str  # "public" or "private"
    url: str
    created_at: datetime

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PreviewPort:
        return cls(d["port"], d["access"], d["url"], datetime.fromisoformat(d["created_at"]))


def preview_ports(cfg: ConnectionConfig, sandbox_id: str, method: str = "GET", port: int | None = None,
                  tail: str = "", body: dict[str, Any] | None = None) -> Flow[Any]:
    """The preview-port routes: the answer's JSON (None for a 204)."""
    url = f"{cfg.base_url}/v1/sandboxes/{sandbox_id}/preview-ports" + (f"/{port}" if port is not None else "") + tail
    reply = yield from send(Call(method, url, _auth(cfg), json=body))
    return _json(reply.body) if reply.body else None


# --- secrets --------------------------------------------------------------------------------------

@dataclass
class SecretAuth:
    """Where clients send the credential: a header, and its value with "{value}" for the
    credential ("Bearer {value}"). The stand-in is swapped only there."""

    header: str
    format: str = "{value}"


@dataclass
class SecretInfo:
    name: str
    provider: str | None
    allowed_hosts: list[str]
    auth: SecretAuth
    version: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SecretInfo:
        return cls(d["name"], d.get("provider"), d["allowed_hosts"], SecretAuth(**d["auth"]), d["version"],
                   datetime.fromisoformat(d["created_at"]), datetime.fromisoformat(d["updated_at"]))


@dataclass
class ProviderInfo:
    """A service whose auth scheme and hosts a secret takes by name (`provider="openai"`)."""

    name: str
    description: str
    allowed_hosts: list[str]
    auth: SecretAuth
    env: str  # the variable its client libraries read


@dataclass
class SecretAuditEntry:
    id: int
    at: datetime
    sandbox_id: str
    env: str
    host: str
    method: str
    path: str
    status: int | None  # None: no answer came


@dataclass
class SecretAuditPage:
    entries: list[SecretAuditEntry]
    next_before: int | None


def _secret_url(cfg: ConnectionConfig, name: str, tail: str = "") -> str:
    return f"{cfg.base_url}/v1/secrets/{quote(name, safe='')}{tail}"


def create_secret(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[SecretInfo]:
    reply = yield from send(Call("POST", f"{cfg.base_url}/v1/secrets", _auth(cfg), json=body))
    return SecretInfo.from_json(_json(reply.body))


def get_secret(cfg: ConnectionConfig, name: str) -> Flow[SecretInfo]:
    reply = yield from send(Call("GET", _secret_url(cfg, name), _auth(cfg)))
    return SecretInfo.from_json(_json(reply.body))


def list_secrets(cfg: ConnectionConfig) -> Flow[list[SecretInfo]]:
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/secrets", _auth(cfg)))
    return [SecretInfo.from_json(d) for d in _json(reply.body)]


def rotate_secret(cfg: ConnectionConfig, name: str, value: str) -> Flow[SecretInfo]:
    reply = yield from send(Call("POST", _secret_url(cfg, name, "/rotate"), _auth(cfg), json={"value": value}))
    return SecretInfo.from_json(_json(reply.body))


def delete_secret(cfg: ConnectionConfig, name: str) -> Flow[None]:
    yield from send(Call("DELETE", _secret_url(cfg, name), _auth(cfg)))


def secret_audit(cfg: ConnectionConfig, name: str, limit: int, before: int | None,
                 sandbox_id: str | None) -> Flow[SecretAuditPage]:
    params = {"limit": str(limit), **({"before": str(before)} if before is not None else {}),
              **({"sandbox_id": sandbox_id} if sandbox_id else {})}
    reply = yield from send(Call("GET", _secret_url(cfg, name, "/audit"), _auth(cfg), params=params))
    d = _json(reply.body)
    return SecretAuditPage([SecretAuditEntry(**{**e, "at": datetime.fromisoformat(e["at"])}) for e in d["entries"]],
                           d["next_before"])


def list_providers(cfg: ConnectionConfig) -> Flow[list[ProviderInfo]]:
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/providers", _auth(cfg)))
    return [ProviderInfo(**{**d, "auth": SecretAuth(**d["auth"])}) for d in _json(reply.body)]


# --- templates ------------------------------------------------------------------------------------
# A template: an image built from a base and steps, that sandboxes boot from. Creating one queues a
# build; its log is an NDJSON stream that a reconnect resumes after the last line seen.

# The server may send nothing while a step is silent: a read timeout then only means "ask again".
BUILD_LOG_TIMEOUT = httpx.Timeout(connect=10.0, read=60.0, write=60.0, pool=10.0)
BUILD_ENDED = ("ready", "failed", "cancelled")
VCPUS, MEMORY_MIB, DISK_MIB, READY_TIMEOUT_SECONDS = range(1, 5), range(256, 4097), range(1024, 8193), range(1, 3601)


@dataclass
class RunStep:
    """Run a shell command (as root unless a UserStep came before)."""

    run: str


@dataclass
class EnvStep:
    """Set a variable for the later steps and the template's boxes."""

    key: str
    value: str


@dataclass
class WorkdirStep:
    """The directory later steps, and the boxes' commands, start in (made if missing)."""

    workdir: str


@dataclass
class UserStep:
    """Switch the later steps and the boxes' commands to a user: the box knows "user" (uid 1000,
    commands' default) and "root". `sudo` is in the contract; this server takes only False."""

    name: str
    sudo: bool = False


Step = RunStep | EnvStep | WorkdirStep | UserStep


def step_body(step: Step | dict[str, Any]) -> dict[str, Any]:
    """A step as the contract's object of exactly one key; a ValidationError for a wrong type."""
    if isinstance(step, dict):
        step = step_from_json(step)
    if isinstance(step, RunStep) and isinstance(step.run, str):
        return {"run": step.run}
    if isinstance(step, EnvStep) and isinstance(step.key, str) and isinstance(step.value, str):
        return {"env": {"key": step.key, "value": step.value}}
    if isinstance(step, WorkdirStep) and isinstance(step.workdir, str):
        return {"workdir": step.workdir}
    if isinstance(step, UserStep) and isinstance(step.name, str) and isinstance(step.sudo, bool):
        return {"user": {"name": step.name, "sudo": step.sudo}}
    raise ValidationError(f"a step is a RunStep, EnvStep, WorkdirStep or UserStep of strings, not {step!r}",
                          code="invalid_spec")


def step_from_json(d: dict[str, Any]) -> Step:
    try:
        (kind, value), = d.items()
        if kind == "run":
            return RunStep(value)
        if kind == "env":
            return EnvStep(value["key"], value["value"])
        if kind == "workdir":
            return WorkdirStep(value)
        if kind == "user":
            return UserStep(value["name"], value.get("sudo", False))
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    raise ValidationError(f"a step sets exactly one of run, env, workdir, user; not {d!r}", code="invalid_spec")


def template_body(name: str, from_: str, steps: Sequence[Step | dict[str, Any]] | None, start_cmd: str | None,
                  ready_cmd: str | None, ready_timeout_seconds: int | None, vcpu: int | None, memory_mib: int | None,
                  disk_mib: int | None) -> dict[str, Any]:
    """The create request, checked for what is plain before any request: types and ranges."""
    texts: list[tuple[str, object, bool]] = [("name", name, False), ("from_", from_, False),
                                             ("start_cmd", start_cmd, True), ("ready_cmd", ready_cmd, True)]
    for what, text, optional in texts:
        if not (optional and text is None) and (not isinstance(text, str) or not text):
            raise ValidationError(f"{what} is a non-empty str, not {text!r}", code="invalid_spec")
    numbers: list[tuple[str, object, range]] = [
        ("ready_timeout_seconds", ready_timeout_seconds, READY_TIMEOUT_SECONDS), ("vcpu", vcpu, VCPUS),
        ("memory_mib", memory_mib, MEMORY_MIB), ("disk_mib", disk_mib, DISK_MIB)]
    for what, number, allowed in numbers:
        if number is not None and (type(number) is not int or number not in allowed):
            raise ValidationError(f"{what} is an int in {allowed.start}..{allowed.stop - 1}, not {number!r}",
                                  code="invalid_spec")
    if steps is not None and (isinstance(steps, (str, bytes, dict)) or not isinstance(steps, Sequence)):
        raise ValidationError(f"steps is a list of steps, not {steps!r}", code="invalid_spec")
    body = {"name": name, "from": from_, "steps": None if steps is None else [step_body(s) for s in steps],
            "start_cmd": start_cmd, "ready_cmd": ready_cmd, "ready_timeout_seconds": ready_timeout_seconds,
            "vcpu": vcpu, "memory_mib": memory_mib, "disk_mib": disk_mib}
    return {k: v for k, v in body.items() if v is not None}


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass
class BuildErrorInfo:
    code: str  # step_failed, image_not_found, image_pull_failed, ready_timeout, cancelled, build_failed, ...
    message: str
    step: int | None = None  # the index (from 0) into the template's steps of the one at fault; None: none's
    exit_code: int | None = None  # that step's command's

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> BuildErrorInfo | None:
        return None if d is None else cls(d["code"], d["message"], d.get("step"), d.get("exit_code"))


@dataclass
class BuildInfo:
    id: str
    template_id: str
    template: str  # its name
    status: str  # queued, running, ready, failed, cancelled
    error: BuildErrorInfo | None
    steps_total: int
    steps_cached: int  # taken from an earlier build's layers instead of run again
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def ended(self) -> bool:
        return self.status in BUILD_ENDED

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BuildInfo:
        return cls(d["id"], d["template_id"], d["template"], d["status"], BuildErrorInfo.from_json(d.get("error")),
                   d["steps_total"], d["steps_cached"], datetime.fromisoformat(d["created_at"]),
                   _time(d.get("started_at")), _time(d.get("finished_at")))


@dataclass
class TemplateInfo:
    """The server's view of a template when it was asked. `status` is "ready" once any build
    succeeded (a rebuild keeps it so), else "building" or "failed" as its latest build."""

    id: str
    name: str
    system: bool  # hutch/base and the like: every team's, never deleted
    status: str
    from_: str | None  # None: a system template, built by the server itself
    steps: list[Step]
    start_cmd: str | None
    ready_cmd: str | None
    ready_timeout_seconds: int
    vcpu: int
    memory_mib: int
    disk_mib: int
    env: dict[str, str]  # what its boxes start with (from the last successful build)
    workdir: str | None
    user: str | None
    created_at: datetime
    latest_build: BuildInfo | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TemplateInfo:
        latest = d.get("latest_build")
        return cls(d["id"], d["name"], d.get("system", False), d["status"], d.get("from"),
                   [step_from_json(s) for s in d.get("steps") or ()], d.get("start_cmd"), d.get("ready_cmd"),
                   d["ready_timeout_seconds"], d["vcpu"], d["memory_mib"], d["disk_mib"], d.get("env") or {},
                   d.get("workdir"), d.get("user"), datetime.fromisoformat(d["created_at"]),
                   None if latest is None else BuildInfo.from_json(latest))


@dataclass
class BuildLogLine:
    seq: int  # rises by one a line, from 1
    time: datetime
    step: int | None  # the index (from 0) of the step it belongs to; None: the builder's own lines
    stream: str  # system, stdout, stderr
    text: str


@dataclass
class BuildEnd:
    """The last line of a build's log: how it ended."""

    status: str
    error: BuildErrorInfo | None


def _templates_url(cfg: ConnectionConfig, ref: str = "", tail: str = "") -> str:
    return f"{cfg.base_url}/v1/templates" + (f"/{quote(ref, safe='')}" if ref else "") + tail


def create_template(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[TemplateInfo]:
    """Answers at once: the build is queued, not run."""
    reply = yield from send(Call("POST", _templates_url(cfg), _auth(cfg), json=body))
    return TemplateInfo.from_json(_json(reply.body))


def list_templates(cfg: ConnectionConfig) -> Flow[list[TemplateInfo]]:
    reply = yield from send(Call("GET", _templates_url(cfg), _auth(cfg)))
    return [TemplateInfo.from_json(d) for d in _json(reply.body)]


def get_template(cfg: ConnectionConfig, name_or_id: str) -> Flow[TemplateInfo]:
    """A name holding "/" (a system template's, "hutch/base") is looked up in the list: a path
    segment cannot carry a slash through every router, escaped or not."""
    if "/" in name_or_id:
        for info in (yield from list_templates(cfg)):
            if name_or_id in (info.name, info.id):
                return info
        raise error_for(404, "template_not_found", f"template {name_or_id!r} does not exist")
    reply = yield from send(Call("GET", _templates_url(cfg, name_or_id), _auth(cfg)))
    return TemplateInfo.from_json(_json(reply.body))


def delete_template(cfg: ConnectionConfig, name_or_id: str) -> Flow[None]:
    """Cancels a running build. A template boxes or builds use is a ConflictError (template_in_use)."""
    ref = (yield from get_template(cfg, name_or_id)).id if "/" in name_or_id else name_or_id
    yield from send(Call("DELETE", _templates_url(cfg, ref), _auth(cfg)))


def start_build(cfg: ConnectionConfig, template_id: str, no_cache: bool) -> Flow[BuildInfo]:
    body = {"no_cache": True} if no_cache else {}
    reply = yield from send(Call("POST", _templates_url(cfg, template_id, "/builds"), _auth(cfg), json=body))
    return BuildInfo.from_json(_json(reply.body))


def list_builds(cfg: ConnectionConfig, template_id: str) -> Flow[list[BuildInfo]]:
    """Newest first."""
    reply = yield from send(Call("GET", _templates_url(cfg, template_id, "/builds"), _auth(cfg)))
    return [BuildInfo.from_json(d) for d in _json(reply.body)]


def _build_url(cfg: ConnectionConfig, template_id: str, build_id: str, tail: str = "") -> str:
    return _templates_url(cfg, template_id, f"/builds/{quote(build_id, safe='')}{tail}")


def get_build(cfg: ConnectionConfig, template_id: str, build_id: str) -> Flow[BuildInfo]:
    reply = yield from send(Call("GET", _build_url(cfg, template_id, build_id), _auth(cfg)))
    return BuildInfo.from_json(_json(reply.body))


def cancel_build(cfg: ConnectionConfig, template_id: str, build_id: str) -> Flow[BuildInfo]:
    """A build that had already ended is a ConflictError (build_finished)."""
    reply = yield from send(Call("POST", _build_url(cfg, template_id, build_id, "/cancel"), _auth(cfg)))
    return BuildInfo.from_json(_json(reply.body))


def build_logs(cfg: ConnectionConfig, template_id: str, build_id: str, *, follow: bool,
               deadline: float | None = None) -> Flow[BuildEnd | None]:
    """Emit each line of a build's log as a BuildLogLine; return how the build ended (None: it had
    not, and `follow` is off). A stream that breaks is asked for again after the last line seen,
    so no line comes twice; past `deadline` (time.monotonic()) a SandboxTimeoutError."""
    after, failures = 0, 0
    while True:
        params = {"follow": "true" if follow else "false", **({"after": str(after)} if after else {})}
        yield from send(Call("GET", _build_url(cfg, template_id, build_id, "/logs"), _auth(cfg), params=params,
                             stream=True, timeout=_log_timeout(deadline)))
        seen, broken, silent = False, False, False
        while True:
            try:
                line = yield NextLine()
            except httpx.ReadTimeout:
                line, silent = None, True
            except httpx.TransportError:
                line, broken = None, True
            if line is None:
                break
            if not line.strip():
                continue  # a keep-alive, if the server sends them
            try:
                d = json.loads(line)
            except ValueError:  # the tail of a line cut short by a broken connection
                broken = True
                break
            if d.get("done"):
                return BuildEnd(d["status"], BuildErrorInfo.from_json(d.get("error")))
            if d["seq"] <= after:
                continue
            after, seen = d["seq"], True
            yield Emit(BuildLogLine(d["seq"], datetime.fromisoformat(d["time"]), d.get("step"), d["stream"],
                                    d["text"]))
        if not (follow or broken or silent):
            return None  # the whole log so far, and the build goes on
        _check_deadline(deadline)
        if silent:
            continue  # the server answered, the build is quiet: ask again at once
        failures = 0 if seen else failures + 1
        if failures > RETRIES:
            raise ServerError("the build's log stream kept ending before the build did", code="stream_ended")
        yield Sleep(backoff(failures or 1))


def _log_timeout(deadline: float | None) -> httpx.Timeout:
    if deadline is None:
        return BUILD_LOG_TIMEOUT
    read = min(BUILD_LOG_TIMEOUT.read or 60.0, max(deadline - time.monotonic(), 0.1))
    return httpx.Timeout(connect=10.0, read=read, write=60.0, pool=10.0)


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise SandboxTimeoutError("the build did not end in time (it goes on: wait again, or cancel it)",
                                  code="wait_timeout")


def wait_for_build(cfg: ConnectionConfig, template_id: str, build_id: str | None,
                   deadline: float | None) -> Flow[tuple[TemplateInfo, BuildInfo | None]]:
    """Follow a build's log to its end (emitting the lines), then read the build and the template.
    With no build named, the template's latest; None if it has none (a system template)."""
    if build_id is None:
        info = yield from get_template(cfg, template_id)
        if info.latest_build is None:
            return info, None
        build_id = info.latest_build.id
    end = yield from build_logs(cfg, template_id, build_id, follow=True, deadline=deadline)
    build = yield from get_build(cfg, template_id, build_id)
    if not build.ended and end is not None:  # the stream's last word came before the build's record
        build.status, build.error = end.status, end.error
    return (yield from get_template(cfg, template_id)), build


def check_build(build: BuildInfo | None) -> None:
    """Raise the BuildError of a build that ended without an image."""
    if build is None or build.status == "ready":
        return
    error = build.error or BuildErrorInfo("cancelled" if build.status == "cancelled" else "build_failed",
                                          f"the build ended {build.status}")
    raise BuildError(error.message, code=error.code, build_id=build.id, template_id=build.template_id,
                     step=error.step, exit_code=error.exit_code)


# --- data plane ---------------------------------------------------------------------------------

def run(dp: DataPlane, command: str, *, cwd: str | None, env: dict[str, str] | None,
        timeout_seconds: float | None, user: str | None, on_stdout: Callable[[str], Any] | None,
        on_stderr: Callable[[str], Any] | None) -> Flow[CommandResult]:
    """Run a command to its end over a server-sent event stream, passing output to the callbacks
    as it comes; a non-zero exit is a result, a timeout is a SandboxTimeoutError."""
    body = {"command": command, "cwd": cwd, "env": env, "timeout_seconds": timeout_seconds, "user": user}
    yield from send_data(dp, lambda: Call(
        "POST", f"{dp.url}/commands/run", {**dp.headers(), "Accept": "text/event-stream"},
        json={k: v for k, v in body.items() if v is not None}, stream=True, timeout=STREAM_TIMEOUT))
    out = _Output()
    event, data = "message", []
    while True:
        try:
            line = yield NextLine()
        except httpx.TimeoutException as e:
            raise SandboxTimeoutError("the command's stream went silent; the command may still be running "
                                      "in the sandbox", code="stream_timeout") from e
        except httpx.TransportError:
            line = None  # the connection broke: an early end, said below
        if line is None:
            raise ServerError("the command's stream ended before it finished; the command may still "
                              "be running in the sandbox", code="stream_ended")
        if line.startswith(":"):
            continue  # keep-alive
        if line:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            continue
        if data:
            payload = json.loads("\n".join(data))
            result = yield from _on_event(event, payload, out, on_stdout, on_stderr)
            if result is not None:
                return result
        event, data = "message", []


def _on_event(event: str, payload: dict[str, Any], out: _Output, on_stdout: Callable[[str], Any] | None,
              on_stderr: Callable[[str], Any] | None) -> Flow[CommandResult | None]:
    if event in ("stdout", "stderr"):
        text = payload["data"]
        (out.stdout if event == "stdout" else out.stderr).append(text)
        callback = on_stdout if event == "stdout" else on_stderr
        if callback is not None:
            yield Callback(callback, text)
    elif event == "exit":
        stdout, stderr = "".join(out.stdout), "".join(out.stderr)
        if payload["timed_out"]:
            err = SandboxTimeoutError("the command ran out of time and was killed with its process group",
                                      code="command_timeout")
            err.stdout, err.stderr = stdout, stderr
            raise err
        return CommandResult(stdout=stdout, stderr=stderr, exit_code=payload["exit_code"])
    elif event == "error":
        cls = ConflictError if payload.get("code") == "sandbox_failed" else ServerError
        raise cls(payload.get("message", "the command failed"), code=payload.get("code", "error"))
    return None


@dataclass
class ProcessInfo:
    """A spawned process that is still running."""

    pid: int
    command: str
    user: str
    pty: bool
    started_at: datetime


def spawn(dp: DataPlane, command: str, *, cwd: str | None, env: dict[str, str] | None, user: str | None,
          pty: tuple[int, int] | None) -> Flow[int]:
    """Start a long-lived process; its pid. Attach to it with `hutch.sdk.process`."""
    body = {"command": command, "cwd": cwd, "env": env, "user": user,
            "pty": {"rows": pty[0], "cols": pty[1]} if pty else None}
    reply = yield from send_data(dp, lambda: Call("POST", f"{dp.url}/commands/spawn", dp.headers(),
                                                  json={k: v for k, v in body.items() if v is not None}))
    pid: int = _json(reply.body)["pid"]
    return pid


def list_processes(dp: DataPlane) -> Flow[list[ProcessInfo]]:
    reply = yield from send_data(dp, lambda: Call("GET", f"{dp.url}/commands", dp.headers()))
    return [ProcessInfo(pid=d["pid"], command=d["command"], user=d["user"], pty=d["pty"],
                        started_at=datetime.fromisoformat(d["started_at"])) for d in _json(reply.body)]


def signal_process(dp: DataPlane, pid: int, signal: int) -> Flow[bool]:
    """Signal a spawned process' group; False if it had already ended."""
    reply = yield from send_data(dp, lambda: Call("POST", f"{dp.url}/commands/{pid}/signal", dp.headers(),
                                                  json={"signal": int(signal)}))
    return bool(_json(reply.body)["signalled"])


def write_file(dp: DataPlane, path: str, data: bytes, user: str | None) -> Flow[None]:
    params = {"path": path, **({"user": user} if user else {})}
    yield from send_data(dp, lambda: Call("PUT", f"{dp.url}/files", dp.headers(), params=params, content=data,
                                          timeout=FILE_TIMEOUT))


def read_file(dp: DataPlane, path: str) -> Flow[bytes]:
    reply = yield from send_data(dp, lambda: Call("GET", f"{dp.url}/files", dp.headers(), params={"path": path},
                                                  timeout=FILE_TIMEOUT))
    return reply.body


def download_dir(dp: DataPlane, path: str) -> Flow[bytes]:
    reply = yield from send_data(dp, lambda: Call("GET", f"{dp.url}/files/zip", dp.headers(), params={"path": path},
                                                  timeout=FILE_TIMEOUT))
    return reply.body


def as_bytes(content: str | bytes) -> bytes:
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise ValidationError(f"file content must be str or bytes, not {type(content).__name__}", code="invalid_argument")


# --- filesystem operations ------------------------------------------------------------------------

@dataclass
class EntryInfo:
    """A file, directory or link in the box, as lstat sees it (a link is described, not followed)."""

    name: str
    path: str
    type: str  # "file", "dir", "symlink" or "other"
    size: int
    mode: int  # permission bits, e.g. 0o644
    permissions: str  # as ls shows them: "-rw-r--r--"
    owner: str
    group: str
    modified_time: datetime
    symlink_target: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EntryInfo:
        return cls(d["name"], d["path"], d["type"], d["size"], d["mode"], d["permissions"], d["owner"], d["group"],
                   datetime.fromisoformat(d["modified_time"]), d.get("symlink_target"))


@dataclass
class FilesystemEvent:
    """A change in a watched directory; `name` is relative to it."""

    name: str
    type: str  # "create", "write", "remove", "rename" or "chmod"


WATCH_OPENED = object()  # emitted once by watch_dir when the watch is in place, before any event


def _user(user: str | None) -> dict[str, str]:
    return {"user": user} if user else {}


def get_entry(dp: DataPlane, path: str, user: str | None) -> Flow[EntryInfo]:
    params = {"path": path, **_user(user)}
    reply = yield from send_data(dp, lambda: Call("GET", f"{dp.url}/files/stat", dp.headers(), params=params))
    return EntryInfo.from_json(_json(reply.body))


def exists(dp: DataPlane, path: str, user: str | None) -> Flow[bool]:
    try:
        yield from get_entry(dp, path, user)
    except NotFoundError:
        return False
    return True


def list_dir(dp: DataPlane, path: str, depth: int, user: str | None) -> Flow[list[EntryInfo]]:
    if type(depth) is not int or not 1 <= depth <= 16:
        raise ValidationError(f"depth is an int in 1..16, not {depth!r}", code="invalid_argument")
    params = {"path": path, "depth": str(depth), **_user(user)}
    reply = yield from send_data(dp, lambda: Call("GET", f"{dp.url}/files/list", dp.headers(), params=params,
                                                  timeout=FILE_TIMEOUT))
    return [EntryInfo.from_json(d) for d in _json(reply.body)["entries"]]


def make_dir(dp: DataPlane, path: str, user: str | None) -> Flow[bool]:
    body = {"path": path, **_user(user)}
    reply = yield from send_data(dp, lambda: Call("POST", f"{dp.url}/files/mkdir", dp.headers(), json=body))
    return bool(_json(reply.body)["created"])


def rename(dp: DataPlane, source: str, destination: str, user: str | None) -> Flow[EntryInfo]:
    body = {"source": source, "destination": destination, **_user(user)}
    reply = yield from send_data(dp, lambda: Call("POST", f"{dp.url}/files/move", dp.headers(), json=body))
    return EntryInfo.from_json(_json(reply.body))


def remove(dp: DataPlane, path: str, user: str | None) -> Flow[None]:
    params = {"path": path, **_user(user)}
    yield from send_data(dp, lambda: Call("DELETE", f"{dp.url}/files", dp.headers(), params=params,
                                          timeout=FILE_TIMEOUT))


def watch_dir(dp: DataPlane, path: str, recursive: bool) -> Flow[None]:
    """Emit WATCH_OPENED once the watch is in place, then a FilesystemEvent per change, until the
    directory goes or the caller stops reading."""
    params = {"path": path, "recursive": "true" if recursive else "false"}
    yield from send_data(dp, lambda: Call("GET", f"{dp.url}/files/watch", dp.headers(), params=params, stream=True,
                                          timeout=STREAM_TIMEOUT))
    yield Emit(WATCH_OPENED)
    data: list[str] = []
    while True:
        try:
            line = yield NextLine()
        except httpx.TimeoutException as e:
            raise SandboxTimeoutError("the watch's stream went silent", code="stream_timeout") from e
        except httpx.TransportError as e:
            raise ServerError("the watch's stream broke", code="stream_ended") from e
        if line is None:
            return  # the directory went (or the sandbox was paused): the watch is over
        if line.startswith(":"):
            continue  # keep-alive
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            d = json.loads("\n".join(data))
            data = []
            yield Emit(FilesystemEvent(d["name"], d["type"]))
