"""The SDK's wire types: what the server answers (SandboxInfo, EntryInfo, BuildInfo, ...) and the
few things sent as they are (NetworkConfig, the template steps). Each `Wire` type is read off JSON
from its fields (hutch.sdk.wire); tests/unit/test_sdk_openapi.py checks them against the server's
OpenAPI document."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hutch.sdk.codes import ServerCode
from hutch.sdk.errors import ValidationError
from hutch.sdk.wire import READER, Wire, renamed

BUILD_ENDED = ("ready", "failed", "cancelled")


# --- sandboxes ------------------------------------------------------------------------------------

@dataclass
class NetworkConfig(Wire):
    """Egress rules. `allow_out`: CIDRs and domains ("*.example.com" matches any name below it,
    not the apex); `deny_out`: CIDRs. Allow wins over deny, so `deny_out=["0.0.0.0/0"]` with an
    allow list lets only that list out. Private, loopback and link-local ranges (169.254.169.254
    too) and the server's own addresses are denied whatever the rules say."""

    allow_out: list[str] = field(default_factory=list)
    deny_out: list[str] = field(default_factory=list)


@dataclass
class NetworkLogEntry(Wire):
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
class NetworkLogPage(Wire):
    entries: list[NetworkLogEntry]
    next_before: int | None  # pass as `before` for older entries; None at the end


@dataclass
class SecretBinding(Wire):
    """A secret bound to an env var of a sandbox (the box sees only a stand-in)."""

    env: str
    secret: str
    revoked: bool  # the secret was deleted: its stand-in is not swapped any more
    created_at: datetime


@dataclass
class SandboxInfo(Wire):
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
    node: str | None = None  # the fleet node it runs or last ran on (None on a single host)
    volumes: list[MountedVolume] = field(default_factory=list)  # what it mounts


@dataclass
class MountedVolume(Wire):
    """A volume a sandbox mounts, at `path` in the box."""

    volume_id: str
    name: str
    path: str
    read_only: bool


@dataclass
class VolumeInfo(Wire):
    """A volume: storage that outlives boxes, which many boxes mount at once."""

    id: str
    name: str
    size_mib: int
    used_bytes: int | None  # what its files take now (None: not known here)
    metadata: dict[str, str]
    created_at: datetime
    mounted_by: list[str]  # the live sandboxes (running or paused) that mount it


@dataclass
class SnapshotInfo(Wire):
    """A saved state of a box (memory, processes and files; with `memory` False its files only),
    which new boxes boot from."""

    id: str
    name: str | None
    metadata: dict[str, str]
    source_sandbox_id: str | None
    template: str
    vcpu_count: int
    memory_mib: int
    memory: bool
    size_bytes: int
    created_at: datetime


@dataclass
class AuditEntry(Wire):
    """A command or file operation on a sandbox."""

    id: int
    at: datetime
    actor: str  # the client's address and what it calls itself (HUTCH_ACTOR, else its User-Agent)
    op: str  # exec, exit, spawn, signal, file_write, file_read, dir_download, file_remove, file_move, dir_make,
    # run_code
    detail: str  # the command, or the path
    exit_code: int | None  # a command's, once it ended
    outcome: str  # "ok", or the error code the call ended with


@dataclass
class AuditPage(Wire):
    entries: list[AuditEntry]
    next_before: int | None


@dataclass
class PreviewPort(Wire):
    port: int
    access: str  # "public" or "private"
    url: str
    created_at: datetime


# --- commands, processes and files ----------------------------------------------------------------

@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int


@dataclass
class ProcessInfo(Wire):
    """A spawned process that is still running."""

    pid: int
    command: str
    user: str
    pty: bool
    started_at: datetime


@dataclass
class LinkEnd(Wire):
    """Where a link leads, and what is there."""

    path: str
    type: str  # "file", "dir", "symlink" or "other"
    mode: int


@dataclass
class EntryInfo(Wire):
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
    symlink_target: str | None = None  # the link's text, as readlink has it
    link: LinkEnd | None = None  # for a link: where it leads, every link on the way resolved (None: nowhere)
    metadata: dict[str, str] | None = None  # E2B's file metadata (user.e2b.* xattrs), if the file has any


@dataclass
class FilesystemEvent:
    """A change in a watched directory; `name` is relative to it."""

    name: str
    type: str  # "create", "write", "remove", "rename" or "chmod"


# --- secrets --------------------------------------------------------------------------------------

@dataclass
class SecretAuth(Wire):
    """Where clients send the credential: a header, and its value with "{value}" for the
    credential ("Bearer {value}"). The stand-in is swapped only there."""

    header: str
    format: str = "{value}"


@dataclass
class SecretInfo(Wire):
    name: str
    provider: str | None
    allowed_hosts: list[str]
    auth: SecretAuth
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass
class ProviderInfo(Wire):
    """A service whose auth scheme and hosts a secret takes by name (`provider="openai"`)."""

    name: str
    description: str
    allowed_hosts: list[str]
    auth: SecretAuth
    env: str  # the variable its client libraries read


@dataclass
class SecretAuditEntry(Wire):
    id: int
    at: datetime
    sandbox_id: str
    env: str
    host: str
    method: str
    path: str
    status: int | None  # None: no answer came


@dataclass
class SecretAuditPage(Wire):
    entries: list[SecretAuditEntry]
    next_before: int | None


# --- events ---------------------------------------------------------------------------------------

@dataclass
class Event(Wire):
    """One change of state of the team's: `id` is its cursor (ids only grow, in the order the
    changes were made)."""

    id: int
    type: str  # sandbox.created, sandbox.paused, snapshot.deleted, template.build.ready, ...
    at: datetime
    sandbox_id: str | None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class EventPage(Wire):
    events: list[Event]
    next: int  # the cursor to ask from next


# --- webhooks -------------------------------------------------------------------------------------

@dataclass
class WebhookInfo(Wire):
    """An endpoint the team's events are POSTed to, signed. `secret` only in what `create` returned."""

    id: str
    name: str
    url: str
    types: list[str]  # empty: every type
    enabled: bool
    disabled_reason: str | None  # why hutch stopped its deliveries, if it did
    created_at: datetime
    updated_at: datetime
    secret: str | None = None


@dataclass
class WebhookDelivery(Wire):
    """One attempt to deliver an event."""

    id: int
    event_id: int
    event_type: str
    attempt: int  # 1, then each retry
    at: datetime
    status: int | None  # the endpoint's answer (None: none came)
    ok: bool
    error: str | None
    duration_ms: int


# --- templates ------------------------------------------------------------------------------------

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


@dataclass
class CopyStep:
    """Copy files uploaded for the build (`files`: their hash; E2B's Template.copy uploads them)
    that match `src` to `dest`, owned by `user`, with `mode` (e.g. "0755") if given."""

    files: str
    src: str
    dest: str
    user: str | None = None
    mode: str | None = None


Step = RunStep | EnvStep | WorkdirStep | UserStep | CopyStep


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
    if isinstance(step, CopyStep) and all(isinstance(v, str) for v in (step.files, step.src, step.dest)):
        return {"copy": {k: v for k, v in vars(step).items() if v is not None}}
    raise ValidationError(f"a step is a RunStep, EnvStep, WorkdirStep or UserStep of strings, not {step!r}",
                          code=ServerCode.INVALID_SPEC)


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
        if kind == "copy":
            return CopyStep(value["files"], value["src"], value["dest"], value.get("user"), value.get("mode"))
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    raise ValidationError(f"a step sets exactly one of run, env, workdir, user, copy; not {d!r}",
                          code=ServerCode.INVALID_SPEC)


@dataclass
class BuildErrorInfo(Wire):
    code: str  # step_failed, image_not_found, image_pull_failed, ready_timeout, cancelled, build_failed, ...
    message: str
    step: int | None = None  # the index (from 0) into the template's steps of the one at fault; None: none's
    exit_code: int | None = None  # that step's command's


@dataclass
class BuildInfo(Wire):
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


@dataclass
class TemplateInfo(Wire):
    """The server's view of a template when it was asked. `status` is "ready" once any build
    succeeded (a rebuild keeps it so), else "building" or "failed" as its latest build."""

    id: str
    name: str
    system: bool  # hutch/base and the like: every team's, never deleted
    status: str
    from_: str | None = field(metadata=renamed("from"))  # None: a system template, built by the server itself
    steps: list[Step] = field(metadata={READER: lambda steps: [step_from_json(s) for s in steps]})
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


@dataclass
class BuildLogLine(Wire):
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


# --- the code interpreter -------------------------------------------------------------------------

RESULT_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript", "data",
                  "chart")


@dataclass
class Result:
    """One output of a cell, in each format the kernel gave it (E2B's shape): `png`, `jpeg` and
    `pdf` are base64; `is_main_result` marks the cell's value (its last expression), as opposed
    to a display (a chart, say). Formats with no name of their own are in `extra`, by MIME type."""

    text: str | None = None
    html: str | None = None
    markdown: str | None = None
    svg: str | None = None
    png: str | None = None
    jpeg: str | None = None
    pdf: str | None = None
    latex: str | None = None
    json: dict[str, Any] | None = None
    javascript: str | None = None
    data: dict[str, Any] | None = None
    chart: dict[str, Any] | None = None
    is_main_result: bool = False
    extra: dict[str, Any] | None = None

    def formats(self) -> list[str]:
        """The formats this result has, in E2B's order, then the extra MIME types."""
        return [name for name in RESULT_FORMATS if getattr(self, name)] + list(self.extra or {})

    def __str__(self) -> str:
        return self.text or ""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        known = {name: d[name] for name in RESULT_FORMATS if d.get(name) is not None}
        return cls(**known, is_main_result=bool(d.get("is_main_result")), extra=d.get("extra") or None)


@dataclass
class Logs:
    """What the code printed, message by message, as it came."""

    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """An exception the code raised: its class name, its message and the kernel's traceback."""

    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    """What a `run_code` did: its results, its output, the error it raised (None if none) and the
    kernel's execution count."""

    results: list[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: ExecutionError | None = None
    execution_count: int | None = None

    @property
    def text(self) -> str | None:
        """The text of the cell's value (its main result), if it had one."""
        return next((r.text for r in self.results if r.is_main_result), None)


@dataclass
class CodeContext(Wire):
    """A code-interpreter context: its own kernel (own variables), started in `cwd`."""

    id: str
    language: str
    cwd: str
