"""The store's records (one dataclass per row kind), the statuses they carry, and their JSON columns."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar


class SandboxStatus(StrEnum):
    """Where a sandbox is in its life; `failed` boxes keep their record (and `failure` says why)."""

    ACTIVE = "active"
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"
    FAILED = "failed"
    DELETED = "deleted"  # killed: the record stays (its audit log is read by id), calls find no box


# a sandbox that may run again
LIVE_STATUSES = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.RESUMING)
# a sandbox whose checkpoint is on disk, or being written (what the checkpoint budgets count): a
# resuming one's image stays until its restore succeeds
HOLDS_CHECKPOINT = (SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.RESUMING)


class BuildStatus(StrEnum):
    """Where a template build is: waiting, building, or ended one of three ways."""

    QUEUED = "queued"
    RUNNING = "running"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeState(StrEnum):
    """Whether a fleet node is taken to be running: `down` once it stopped answering (its boxes failed)."""

    UP = "up"
    DOWN = "down"


R = TypeVar("R")


@dataclass(frozen=True)
class JsonColumns:
    """The columns of a table that hold JSON: a record's values to a row and back (None stays NULL)."""

    names: tuple[str, ...]

    def encoded(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` with its JSON columns (those of them it has) as text."""
        return {k: json.dumps(v) if k in self.names and v is not None else v for k, v in values.items()}

    def row(self, rec: object) -> dict[str, Any]:
        return self.encoded(vars(rec))

    def record(self, cls: type[R], row: Any) -> R:
        """A record of `cls` from a result row (or a plain mapping of its columns)."""
        d = dict(row._mapping) if hasattr(row, "_mapping") else dict(row)
        for key in self.names:
            d[key] = None if d[key] is None else json.loads(d[key])
        return cls(**d)


@dataclass
class SandboxRecord:
    id: str
    team_id: str
    name: str
    template: str
    status: str
    memory_mib: int
    vcpu: int
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    timeout_seconds: int | None = None
    auto_delete_seconds: int | None = None
    runtime_id: str | None = None
    box_key: str = ""
    token_generation: int = 1
    failure: str | None = None
    pause_at: float | None = None
    delete_at: float | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    network: dict[str, list[str]] | None = None
    preview_access: str | None = None
    template_id: str | None = None
    rootfs: str | None = None
    disk_mib: int | None = None
    stable_token: bool | None = None
    node: str | None = None  # the fleet node it runs or last ran on
    checkpoint_bytes: int | None = None  # its checkpoint's size (pausing: the most it may take)
    pause_refused_at: float | None = None  # when a checkpoint budget first refused its automatic pause
    pause_memory: bool | None = None  # False: its timeout's pause keeps its files only
    volumes: list[dict[str, Any]] | None = None  # its mounts: {"volume_id", "name", "path", "read_only"}
    # headers its egress proxy sets: {domain: {header: {"format": str, "secret": name or None}}}
    header_rules: dict[str, dict[str, dict[str, Any]]] | None = None
    public_traffic: bool | None = None
    auto_resume: bool | None = None
    secure: bool | None = None


SANDBOX_JSON = JsonColumns(("metadata", "env_vars", "network", "volumes", "header_rules"))


@dataclass
class SnapshotRecord:
    """A box's saved state: its image (memory, processes and files; or with `memory` False its
    files only) and what a box booted from it is: the template, the shape, the env it started with."""

    id: str
    team_id: str
    name: str | None
    template: str
    vcpu: int
    memory_mib: int
    memory: bool
    size_bytes: int
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    network: dict[str, list[str]] | None = None
    secrets: dict[str, str] = field(default_factory=dict)  # env var -> secret name
    source_sandbox_id: str | None = None
    template_id: str | None = None
    rootfs: str | None = None
    disk_mib: int | None = None
    created_at: float = field(default_factory=time.time)
    volumes: list[dict[str, Any]] | None = None  # the source box's mounts, which its boxes mount again


SNAPSHOT_JSON = JsonColumns(("metadata", "env_vars", "network", "secrets", "volumes"))


@dataclass
class VolumeRecord:
    """A team's named storage; its filesystem is the node's (hutch.node.volumes)."""

    id: str
    team_id: str
    name: str
    size_mib: int
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)


VOLUME_JSON = JsonColumns(("metadata",))


@dataclass
class NetworkLogRecord:
    id: int
    sandbox_id: str
    at: float
    host: str
    port: int
    ip: str | None
    verdict: str
    rule: str
    bytes_out: int
    bytes_in: int
    error: str | None
    secrets: list[str] | None = None


@dataclass
class SecretRecord:
    id: str
    team_id: str
    name: str
    provider: str | None
    header: str
    format: str
    hosts: list[str]
    sealed: bytes
    version: int
    created_at: float
    updated_at: float
    metadata: dict[str, str] | None = None


SECRET_JSON = JsonColumns(("hosts", "metadata"))


@dataclass
class BindingRecord:
    sandbox_id: str
    env: str
    secret_id: str
    secret_name: str
    standin: str
    created_at: float
    revoked: bool = False  # its secret is gone

    def to_row(self) -> dict[str, Any]:
        """Its columns: `revoked` is none of them, but whether its secret still exists."""
        return {k: v for k, v in vars(self).items() if k != "revoked"}


@dataclass
class AuditRecord:
    id: int
    secret_id: str
    at: float
    sandbox_id: str
    env: str
    host: str
    method: str
    path: str
    status: int | None
    team_id: str | None = None
    secret_name: str | None = None


@dataclass
class AuditLogRecord:
    id: int
    sandbox_id: str
    at: float
    actor: str
    op: str
    detail: str
    exit_code: int | None
    outcome: str


@dataclass
class EventRecord:
    id: int  # the cursor: ids only grow, in the order the changes were made
    at: float
    team_id: str
    type: str
    sandbox_id: str | None
    data: dict[str, Any]


@dataclass
class WebhookRecord:
    """A team's endpoint for its events; its secret is sealed (hutch.secrets.vault)."""

    id: str
    team_id: str
    name: str
    url: str
    types: list[str]
    sealed: bytes
    flavor: str = "hutch"  # or "e2b": E2B's lifecycle payload and signature
    enabled: bool = True
    disabled_reason: str | None = None
    cursor: int = 0
    lease_owner: str | None = None
    lease_until: float = 0.0
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)


WEBHOOK_JSON = JsonColumns(("types",))


@dataclass
class DeliveryRecord:
    """One attempt to deliver an event to a webhook."""

    id: int
    webhook_id: str
    event_id: int
    event_type: str
    attempt: int
    at: float
    status: int | None
    error: str | None
    ok: bool
    duration_ms: int


@dataclass
class PreviewPortRecord:
    sandbox_id: str
    port: int
    access: str
    generation: int
    created_at: float


@dataclass
class TemplateRecord:
    id: str
    team_id: str | None
    name: str
    spec: dict[str, Any]
    rootfs: str | None = None
    build_id: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    user: str | None = None
    created_at: float = field(default_factory=time.time)


TEMPLATE_JSON = JsonColumns(("spec", "env"))


@dataclass
class BuildRecord:
    id: str
    template_id: str
    status: str
    spec: dict[str, Any]
    no_cache: bool = False
    error: dict[str, Any] | None = None
    steps_total: int = 0
    steps_cached: int = 0
    rootfs: str | None = None
    env: dict[str, str] | None = None
    workdir: str | None = None
    user: str | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    node: str | None = None  # the fleet node that claimed it
    parent_rootfs: str | None = None


BUILD_JSON = JsonColumns(("spec", "error", "env"))


@dataclass
class NodeRecord:
    """A node of a fleet: a host that runs boxes, by its name."""

    id: str
    url: str  # its internal address
    vcpu: int
    memory_mib: int
    started_at: float
    seen_at: float
    state: str = NodeState.UP
    ray_node_id: str | None = None
    disk_mib: int | None = None
