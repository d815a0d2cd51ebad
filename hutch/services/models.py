"""Request and response bodies of the HTTP API, with the limits every field is held to."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Base64Bytes, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from hutch.egress.rules import MAX_RULES, parse_allow, parse_cidr, parse_domain
from hutch.errors import BuildFailure
from hutch.node.api import ChangeType, EntryType
from hutch.node.box import PROXY_PORT, path_problem
from hutch.store import BuildStatus, SandboxStatus

MAX_METADATA_KEYS = 64
MAX_ENV_VARS = 256
MAX_TIMEOUT_SECONDS = 30 * 24 * 3600

Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
MetaValue = Annotated[str, StringConstraints(max_length=1024)]
EnvName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[str, StringConstraints(max_length=32768, pattern=r"^[^\x00]*$")]
Seconds = Annotated[int, Field(ge=0, le=MAX_TIMEOUT_SECONDS)]
User = Literal["user", "root"]


def _few_keys(limit: int) -> AfterValidator:
    def check(value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and len(value) > limit:
            raise ValueError(f"at most {limit} entries")
        return value
    return AfterValidator(check)


Metadata = Annotated[dict[MetaKey, MetaValue], _few_keys(MAX_METADATA_KEYS)]
EnvVars = Annotated[dict[EnvName, EnvValue], _few_keys(MAX_ENV_VARS)]


class Strict(BaseModel):
    # strict: `false` is not 0 and "5" is not 5; unknown fields are refused
    model_config = ConfigDict(extra="forbid", strict=True)


def _rule(parse: Callable[[str], object]) -> AfterValidator:
    def check(value: str) -> str:
        parse(value)  # ValueError names the entry
        return value
    return AfterValidator(check)


Rule = Annotated[str, StringConstraints(min_length=1, max_length=260)]


class NetworkConfig(Strict):
    """Egress rules. allow_out: CIDRs and domains ("*.example.com": any name below, not the apex);
    deny_out: CIDRs. Allow wins over deny; private, loopback and link-local ranges and the host's
    own addresses are denied whatever the rules say."""

    allow_out: Annotated[list[Annotated[Rule, _rule(parse_allow)]], Field(max_length=MAX_RULES)] = []
    deny_out: Annotated[list[Annotated[Rule, _rule(parse_cidr)]], Field(max_length=MAX_RULES)] = []


# --- secrets --------------------------------------------------------------------------------------

MAX_SECRET_HOSTS = 32
MAX_BOUND_SECRETS = 64
SecretName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
# a value travels in an HTTP header: printable, no line breaks
SecretValue = Annotated[str, StringConstraints(
    min_length=1, max_length=8192, pattern=r"^[\x21-\x7e\x80-\xff](?:[\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?$")]
HeaderName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")]
SecretHost = Annotated[str, StringConstraints(min_length=1, max_length=255), _rule(parse_domain)]
BoundSecrets = Annotated[dict[EnvName, SecretName], _few_keys(MAX_BOUND_SECRETS)]


class SecretAuth(Strict):
    """Where a client puts the credential: the header, and its value with "{value}" standing
    for the credential (e.g. "Bearer {value}")."""

    header: HeaderName
    format: Annotated[str, StringConstraints(min_length=7, max_length=256,
                                             pattern=r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")] = "{value}"

    @model_validator(mode="after")
    def _one_value(self) -> SecretAuth:
        if self.format.count("{value}") != 1:
            raise ValueError('format must hold "{value}" exactly once')
        return self


class CreateSecret(Strict):
    """`provider` sets the auth scheme and hosts of a known service (GET /v1/providers);
    `allowed_hosts` and `auth` set or override them. Without a provider, allowed_hosts is
    required and auth defaults to "authorization: Bearer {value}"."""

    name: SecretName
    value: SecretValue
    provider: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    allowed_hosts: Annotated[list[SecretHost], Field(min_length=1, max_length=MAX_SECRET_HOSTS)] | None = None
    auth: SecretAuth | None = None


class RotateSecret(Strict):
    value: SecretValue


class SecretInfo(BaseModel):
    """A secret as the API shows it: everything but its value, which no call returns."""

    name: str
    provider: str | None
    allowed_hosts: list[str]
    auth: SecretAuth
    version: int  # 1, and one more with each rotation
    created_at: datetime
    updated_at: datetime


class ProviderInfo(BaseModel):
    name: str
    description: str
    allowed_hosts: list[str]
    auth: SecretAuth
    env: str  # the variable its client libraries read


class SecretBinding(BaseModel):
    env: str
    secret: str
    revoked: bool  # the secret was deleted: the stand-in is swapped for nothing any more
    created_at: datetime


class AttachSecret(Strict):
    secret: SecretName


class SecretAuditEntry(BaseModel):
    id: int
    at: datetime
    sandbox_id: str
    env: str
    host: str
    method: str
    path: str  # without the query
    status: int | None  # null: no answer came


class SecretAuditPage(BaseModel):
    entries: list[SecretAuditEntry]
    next_before: int | None


# --- preview ports ------------------------------------------------------------------------------

PREVIEW_PORT_MIN = 1024
Access = Literal["public", "private"]


def _preview_port(port: int) -> int:
    if port == PROXY_PORT:
        raise ValueError(f"port {PROXY_PORT} is the box's egress relay and cannot be published")
    return port


PreviewPortNumber = Annotated[int, Field(ge=PREVIEW_PORT_MIN, le=65535), AfterValidator(_preview_port)]


class PublishPreviewPort(Strict):
    port: PreviewPortNumber
    access: Access | None = None  # default: the sandbox's preview_access


class PreviewPort(BaseModel):
    port: int
    access: Access
    url: str
    created_at: datetime


class SignPreviewUrl(Strict):
    expires_in_seconds: Annotated[int, Field(ge=1, le=7 * 24 * 3600)] = 60


class SignedPreviewUrl(BaseModel):
    url: str  # opened in a browser, it is exchanged for a cookie for this port
    expires_at: datetime


class PreviewToken(BaseModel):
    token: str
    header: str  # send the token in this header


# --- volumes --------------------------------------------------------------------------------------

# a volume's name stands for it in paths (/v1/volumes/{ref}), as E2B's do: letters, digits, . _ -
VolumeName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
VolumeRef = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f/]+$")]
MountPath = Annotated[str, StringConstraints(min_length=2, max_length=1024, pattern=r"^/[^\x00-\x1f\x7f]*$")]
MAX_MOUNTS = 16  # volumes one box mounts


class VolumeMountSpec(Strict):
    volume: VolumeRef  # the volume's id or name
    read_only: bool = False


Mounts = Annotated[dict[MountPath, VolumeRef | VolumeMountSpec], _few_keys(MAX_MOUNTS)]


class CreateVolume(Strict):
    name: Annotated[VolumeName, Field(description="unique within the team; lookups and mounts may use it")]
    size_mib: Annotated[int, Field(ge=16, le=1024 * 1024, description="what its files may take, in MiB")] | None = None
    metadata: Metadata | None = None


class UpdateVolume(Strict):
    metadata: Metadata


class VolumeInfo(BaseModel):
    id: str
    name: str
    size_mib: int
    used_bytes: int | None  # what its files take now (None: its node cannot tell from here)
    metadata: dict[str, str]
    created_at: datetime
    mounted_by: list[str]  # the live sandboxes that mount it


class MountedVolume(BaseModel):
    """A volume a sandbox mounts."""

    volume_id: str
    name: str
    path: str
    read_only: bool


# --- sandboxes ------------------------------------------------------------------------------------

class BoxSettings(Strict):
    """What a new box is given, whatever it boots from (a template, or a snapshot)."""

    timeout_seconds: Annotated[int, Field(ge=1, le=MAX_TIMEOUT_SECONDS)] | None = None
    auto_delete_seconds: Seconds | None = None
    metadata: Metadata | None = None
    env_vars: EnvVars | None = None
    network: NetworkConfig | None = None
    secrets: Annotated[BoundSecrets, Field(description="env var -> secret name: the box sees a stand-in")] | None = None
    preview_access: Access | None = None  # for ports published later without an access of their own (public)
    volumes: Annotated[Mounts, Field(description="path in the box -> a volume's id or name, or "
                                                 "{volume, read_only}")] | None = None

    @model_validator(mode="after")
    def _env_once(self) -> BoxSettings:
        both = sorted(set(self.env_vars or ()) & set(self.secrets or ()))
        if both:
            raise ValueError(f"{', '.join(both)} cannot be both an env var and a secret")
        return self

    def settings(self) -> dict[str, Any]:
        """These fields, as another of these models takes them."""
        return {k: getattr(self, k) for k in BoxSettings.model_fields}


class CreateSandbox(BoxSettings):
    name: Name
    from_template: Name | None = None
    from_snapshot: Annotated[Name, Field(description="a snapshot's id or name: the box continues from it")] | None = None
    pause_memory: Annotated[bool, Field(description="false: its timeout's pause keeps its files only")] | None = None

    @model_validator(mode="after")
    def _one_origin(self) -> CreateSandbox:
        if self.from_template is not None and self.from_snapshot is not None:
            raise ValueError("from_template and from_snapshot cannot both be given: a snapshot has its template")
        return self


MAX_FORKS = 20  # boxes booted from one snapshot by one call


class BootSnapshot(BoxSettings):
    """Boxes from a snapshot (or a fork of a running box): what create takes, for `count` boxes at
    once; `name` defaults to the snapshot's source box's."""

    count: Annotated[int, Field(ge=1, le=MAX_FORKS)] = 1
    name: Name | None = None

    def create(self, name: str, snapshot: str) -> CreateSandbox:
        """The create each of the boxes is."""
        return CreateSandbox(name=self.name or name, from_snapshot=snapshot, **self.settings())


# a snapshot's name stands for it in paths (/v1/snapshots/{ref}): no "/"
SnapshotName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f/]+$")]


class CreateSnapshot(Strict):
    name: Annotated[SnapshotName, Field(description="unique within the team; boots and lookups may use it")] | None = None
    metadata: Metadata | None = None
    memory: Annotated[bool, Field(description="false: the files only (its boxes boot afresh, with no processes)")] = True


class SnapshotInfo(BaseModel):
    id: str
    name: str | None
    metadata: dict[str, str]
    source_sandbox_id: str | None
    template: str
    vcpu_count: int
    memory_mib: int
    memory: bool  # false: files only
    size_bytes: int
    created_at: datetime


class UpdateSandbox(Strict):
    """Fields left out are unchanged; a field sent as null is cleared."""

    metadata: Metadata | None = None
    timeout_seconds: Annotated[int, Field(ge=1, le=MAX_TIMEOUT_SECONDS)] | None = None
    auto_delete_seconds: Seconds | None = None
    network: NetworkConfig | None = None


class SandboxInfo(BaseModel):
    id: str
    name: str
    status: SandboxStatus
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
    secrets: list[SecretBinding] = []
    preview_access: Access = "public"
    preview_url_template: str = ""  # a published port's URL, with "{port}" for the port
    node: str | None = None  # the fleet node it runs or last ran on (None on a single host)
    volumes: list[MountedVolume] = []


class SandboxAccess(SandboxInfo):
    """What create and connect return: the box, and how to reach its data plane."""

    access_token: str
    data_plane_url: str


Command = Annotated[str, StringConstraints(min_length=1, max_length=256 * 1024, pattern=r"^[^\x00]*$")]
BoxPath = Annotated[str, StringConstraints(max_length=4096)]


class RunCommand(Strict):
    command: Command
    cwd: BoxPath | None = None
    env: EnvVars | None = None
    timeout_seconds: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_SECONDS)] | None = None
    user: User | None = None


class PtySize(Strict):
    rows: Annotated[int, Field(ge=1, le=1000)]
    cols: Annotated[int, Field(ge=1, le=1000)]


class SpawnCommand(Strict):
    """A long-lived process: attach to its output and stdin over /commands/{pid}/ws."""

    command: Command
    cwd: BoxPath | None = None
    env: EnvVars | None = None
    user: User | None = None
    pty: PtySize | None = None


class RunCode(Strict):
    """Code for the box's code interpreter (a box of hutch/code-interpreter): a context's kernel
    runs it, the default context of `language` (python, the default; bash; javascript or js and
    typescript or ts, Deno's; r) unless `context_id` names one."""

    code: Annotated[str, StringConstraints(max_length=2**20)]
    language: Annotated[str, StringConstraints(max_length=64)] | None = None
    context_id: Annotated[str, StringConstraints(max_length=64)] | None = None
    env: EnvVars | None = None  # for this run only
    timeout_seconds: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_SECONDS)] | None = None


class CreateCodeContext(Strict):
    language: Annotated[str, StringConstraints(max_length=64)] | None = None
    cwd: BoxPath | None = None


class CodeContext(BaseModel):
    """A code-interpreter context: its own kernel, so its own variables."""

    id: str
    language: str
    cwd: str


class ProcessInfo(BaseModel):
    pid: int
    command: str
    user: User
    pty: bool
    started_at: datetime


class SignalProcess(Strict):
    signal: Annotated[int, Field(ge=1, le=64)] = 15


class StdinFrame(Strict):
    """Bytes for a process' stdin, as text (`d`) or base64 (`b`)."""

    model_config = ConfigDict(extra="forbid", strict=False)  # base64 arrives as a str to decode

    d: str | None = None
    b: Base64Bytes | None = None

    @model_validator(mode="after")
    def _one(self) -> StdinFrame:
        if (self.d is None) == (self.b is None):
            raise ValueError("give exactly one of d (text) and b (base64)")
        return self

    def data(self) -> bytes:
        return self.d.encode() if self.d is not None else (self.b or b"")


class NetworkLogEntry(BaseModel):
    id: int
    at: datetime
    host: str
    port: int
    ip: str | None
    verdict: Literal["allowed", "denied", "failed"]
    rule: str
    bytes_out: int
    bytes_in: int
    error: str | None = None
    secrets: list[str] | None = None  # the secrets swapped into this connection's requests


class NetworkLogPage(BaseModel):
    entries: list[NetworkLogEntry]
    next_before: int | None  # pass as `before` for the next (older) page; null at the end


class AuditEntry(BaseModel):
    id: int
    at: datetime
    actor: str  # the client's address, and its X-Hutch-Actor header (else its User-Agent)
    op: Literal["exec", "exit", "spawn", "signal", "file_write", "file_read", "dir_download", "file_remove",
                "file_move", "dir_make", "run_code", "desktop"]
    detail: str  # the command, or the path
    exit_code: int | None  # a command's, once it ended
    outcome: str  # "ok", or the error code the call ended with


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_before: int | None


class Signalled(BaseModel):
    signalled: bool


class CommandResult(BaseModel):
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool


class FileWritten(BaseModel):
    path: str
    size: int


def timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


# --- events ---------------------------------------------------------------------------------------

class EventInfo(BaseModel):
    """One change of state: `id` is its cursor (ids only grow, in the order the changes were made)."""

    id: int
    type: str = Field(description="sandbox.created, .updated, .paused, .resumed, .killed, .failed; "
                                  "snapshot.created, .deleted; template.build.queued, .running, .ready, "
                                  ".failed, .cancelled; volume.created, .deleted; webhook.disabled")
    at: datetime
    sandbox_id: str | None = None
    data: dict[str, Any] = Field(default_factory=dict, description="what else it says: a reason, a template, an id")


class EventPage(BaseModel):
    events: list[EventInfo]
    next: int = Field(description="the cursor to ask from next (`after`): the last event's id, or the one asked "
                                  "from if there was none")


# --- webhooks -------------------------------------------------------------------------------------

WebhookTypes = Annotated[list[Annotated[str, Field(max_length=64)]],
                         Field(max_length=32, description="the event types it is sent (empty: every type)")]
WebhookSecret = Annotated[str, Field(min_length=16, max_length=256,
                                     description="what deliveries are signed with (HMAC-SHA256); "
                                                 "none given: hutch makes one and shows it once")]


class CreateWebhook(Strict):
    url: Annotated[str, Field(max_length=2048, description="http(s) URL the events are POSTed to")]
    types: WebhookTypes = []
    name: Annotated[str, Field(max_length=128)] = ""
    secret: WebhookSecret | None = None
    enabled: bool = True


class UpdateWebhook(Strict):
    url: Annotated[str, Field(max_length=2048)] | None = None
    types: WebhookTypes | None = None
    name: Annotated[str, Field(max_length=128)] | None = None
    secret: WebhookSecret | None = None
    enabled: bool | None = Field(default=None, description="true again after it was disabled: deliveries go on "
                                                            "from the first event it was not delivered")


class WebhookInfo(BaseModel):
    id: str
    name: str
    url: str
    types: list[str]
    enabled: bool
    disabled_reason: str | None = Field(default=None, description="why hutch stopped its deliveries, if it did")
    created_at: datetime
    updated_at: datetime
    secret: str | None = Field(default=None, description="the signing secret: only in the answer that made it")


class DeliveryInfo(BaseModel):
    """One attempt to deliver an event."""

    id: int
    event_id: int
    event_type: str
    attempt: int
    at: datetime
    status: int | None = Field(description="the endpoint's HTTP status (none: no answer came)")
    ok: bool
    error: str | None = None
    duration_ms: int

# --- files: entries and events --------------------------------------------------------------------

class LinkEnd(BaseModel):
    """Where a link leads, every link on the way resolved, and what is there."""

    path: str
    type: EntryType
    mode: int


class FsEntry(BaseModel):
    """A file, directory or link in the box, as lstat sees it (a link is described, not followed)."""

    name: str
    path: str
    type: EntryType
    size: int
    mode: int  # permission bits, e.g. 0o644 (setuid, setgid and sticky included)
    permissions: str  # as ls shows them: "-rw-r--r--"
    owner: str  # the box's name for the uid, else the number
    group: str
    modified_time: datetime
    symlink_target: str | None = None  # the link's text, as readlink has it
    link: LinkEnd | None = None  # for a link: where it leads (None: nowhere, or not a link)
    metadata: dict[str, str] | None = None  # E2B's file metadata (user.e2b.* xattrs), if any


class FsEntries(BaseModel):
    entries: list[FsEntry]


class FsEvent(BaseModel):
    name: str  # relative to the watched directory
    type: ChangeType
    entry: FsEntry | None = None  # asked for: what a create, write or chmod left (if it is still there)


class MakeDir(Strict):
    path: BoxPath
    user: User | None = None


class DirMade(BaseModel):
    entry: FsEntry
    created: bool  # false: it was a directory already


class MoveEntry(Strict):
    source: BoxPath
    destination: BoxPath
    user: User | None = None


# --- templates ------------------------------------------------------------------------------------

# Never "/" or ":": "hutch/..." names are the system's, and a "from" with a ":" is an image.
TemplateName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
TemplateRef = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")]
BuildId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
MAX_STEPS = 100
MAX_LAYER_STEPS = 60  # run and workdir steps make layers: one overlay mount of all must fit a page of options


def _box_dir(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class RunStep(Strict):
    run: Command


class EnvPair(Strict):
    key: EnvName
    value: EnvValue


class EnvStep(Strict):
    env: EnvPair


class WorkdirStep(Strict):
    workdir: Annotated[BoxPath, AfterValidator(_box_dir)]


class StepUser(Strict):
    # The box knows two users: root, and "user" (uid 1000) that commands run as by default.
    name: User
    sudo: Literal[False] = False


class UserStep(Strict):
    user: StepUser


FilesHash = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
CopySource = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[^\x00-\x1f\x7f]+$")]


def _relative_source(value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise ValueError("a copy's source is relative to its files and has no '..'")
    return value


class CopySpec(Strict):
    """Files uploaded for the build (a tar, gzipped or not, named by `files`: E2B's filesHash),
    those matching `src` (a glob relative to the upload) copied to `dest` (relative: to the
    workdir), owned by `user` (default: the build's user then), with `mode` if given."""

    files: FilesHash
    src: Annotated[CopySource, AfterValidator(_relative_source)]
    dest: Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")]
    user: User | None = None
    mode: Annotated[str, StringConstraints(pattern=r"^[0-7]{3,4}$")] | None = None


class CopyStep(Strict):
    copy_: Annotated[CopySpec, Field(alias="copy")]

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


Step = RunStep | EnvStep | WorkdirStep | UserStep | CopyStep


class CreateTemplate(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: TemplateName
    from_: Annotated[TemplateRef, Field(alias="from")] = "hutch/base"
    steps: Annotated[list[Step], Field(max_length=MAX_STEPS)] = []
    start_cmd: Command | None = None  # runs for the whole life of every box booted from it
    ready_cmd: Command | None = None  # polled until it exits 0 before such a box is handed out
    ready_timeout_seconds: Annotated[int, Field(ge=1, le=3600)] = 600
    vcpu: Annotated[int, Field(ge=1, le=4)] = 1
    memory_mib: Annotated[int, Field(ge=256, le=4096)] = 1024
    disk_mib: Annotated[int, Field(ge=1024, le=8192)] = 4096

    @model_validator(mode="after")
    def _few_layers(self) -> CreateTemplate:
        if sum(isinstance(s, RunStep | WorkdirStep | CopyStep) for s in self.steps) > MAX_LAYER_STEPS:
            raise ValueError(f"at most {MAX_LAYER_STEPS} run and workdir steps (join commands with &&)")
        return self


class Rebuild(Strict):
    no_cache: bool = False


class BuildErrorInfo(BaseModel):
    code: BuildFailure
    message: str
    step: int | None = None  # index into the steps
    exit_code: int | None = None


class BuildInfo(BaseModel):
    id: str
    template_id: str
    template: str
    status: BuildStatus
    error: BuildErrorInfo | None = None
    steps_total: int
    steps_cached: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class TemplateInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)  # FastAPI answers by alias: "from"

    id: str
    name: str
    system: bool
    status: Literal["building", "ready", "failed"]
    from_: str | None = Field(alias="from")
    steps: list[Step]
    start_cmd: str | None
    ready_cmd: str | None
    ready_timeout_seconds: int
    vcpu: int
    memory_mib: int
    disk_mib: int
    env: dict[str, str]  # what its boxes start with (from its last good build)
    workdir: str | None
    user: str | None
    created_at: datetime
    latest_build: BuildInfo | None = None


class NodeInfo(BaseModel):
    """A host that runs boxes: a fleet's node, or a single host's own."""

    name: str
    url: str
    health: Literal["up", "down"]
    boxes: int  # active boxes on it
    vcpu: int  # what boxes may reserve there in all
    memory_mib: int
    vcpu_reserved: int  # what its active boxes hold
    memory_mib_reserved: int
    started_at: datetime | None = None
