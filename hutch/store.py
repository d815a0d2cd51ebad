"""Durable state: teams, API keys, sandboxes and templates, in SQLite (or any SQLAlchemy URL).

Every change is one transaction. Secrets that authenticate (API keys) are kept only as hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

meta = sa.MetaData()

teams = sa.Table(
    "teams", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
)
api_keys = sa.Table(
    "api_keys", meta,
    sa.Column("key_hash", sa.String(64), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False),
    sa.Column("prefix", sa.String(16), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)
sandboxes = sa.Table(
    "sandboxes", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False, index=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("template", sa.String(128), nullable=False),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("env_vars", sa.Text, nullable=False),
    sa.Column("timeout_seconds", sa.Integer),
    sa.Column("auto_delete_seconds", sa.Integer),
    sa.Column("runtime_id", sa.String(32), index=True),
    sa.Column("box_key", sa.String(64), nullable=False),  # the box's host directory, for its whole life
    sa.Column("token_generation", sa.Integer, nullable=False, default=1),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("vcpu", sa.Integer, nullable=False),
    sa.Column("failure", sa.Text),
    sa.Column("pause_at", sa.Float),  # when an active box pauses on its own (timeout_seconds)
    sa.Column("delete_at", sa.Float),  # when a paused box is deleted (auto_delete_seconds)
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("network", sa.Text),  # {"allow_out": [...], "deny_out": [...]}, or null: no rules
    sa.Column("preview_access", sa.String(16)),  # what a newly published port gets: public (null) or private
    sa.Column("template_id", sa.String(36), index=True),
    sa.Column("rootfs", sa.Text),  # the template root it boots from: a rebuild never changes a box's root
    sa.Column("disk_mib", sa.Integer),
    # made through the E2B API: its access token stays the same across resumes (the e2b SDK keeps it)
    sa.Column("stable_token", sa.Boolean),
    sa.Index("ix_sandboxes_box_key", "box_key"),
)
network_log = sa.Table(
    "network_log", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sandbox_id", sa.String(36), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("port", sa.Integer, nullable=False),
    sa.Column("ip", sa.String(64)),
    sa.Column("verdict", sa.String(16), nullable=False),
    sa.Column("rule", sa.String(300), nullable=False),
    sa.Column("bytes_out", sa.BigInteger, nullable=False),
    sa.Column("bytes_in", sa.BigInteger, nullable=False),
    sa.Column("error", sa.String(300)),
    sa.Column("secrets", sa.Text),  # JSON list of the secrets swapped into its requests, or null
    sa.Index("ix_network_log_sandbox", "sandbox_id", "id"),
)
NETWORK_LOG_KEEP = 10_000  # newest entries kept per sandbox
templates = sa.Table(
    "templates", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id")),  # null: a system template, every team's
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),  # JSON: from, steps, start and ready commands, shape
    sa.Column("rootfs", sa.Text),  # what its boxes boot from: its last good build's root; null before one
    sa.Column("build_id", sa.String(36)),  # that build
    sa.Column("env", sa.Text, nullable=False),  # that build's defaults for its boxes
    sa.Column("workdir", sa.Text),
    sa.Column("user", sa.String(64)),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("team_id", "name", name="uq_templates_team_name"),
)
template_builds = sa.Table(
    "template_builds", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("template_id", sa.String(36), nullable=False, index=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),  # queued running ready failed cancelled
    sa.Column("spec", sa.Text, nullable=False),  # the spec it builds (a template's spec never changes)
    sa.Column("no_cache", sa.Boolean, nullable=False),
    sa.Column("error", sa.Text),  # JSON {"code", "message", "step", "exit_code"}
    sa.Column("steps_total", sa.Integer, nullable=False),
    sa.Column("steps_cached", sa.Integer, nullable=False),
    sa.Column("rootfs", sa.Text),  # the root it made
    sa.Column("env", sa.Text),  # JSON: the defaults it made
    sa.Column("workdir", sa.Text),
    sa.Column("user", sa.String(64)),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float),
    sa.Column("finished_at", sa.Float),
)

secrets_table = sa.Table(
    "secrets", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("provider", sa.String(64)),
    sa.Column("header", sa.String(128), nullable=False),
    sa.Column("format", sa.String(256), nullable=False),
    sa.Column("hosts", sa.Text, nullable=False),  # JSON list of domain patterns
    sa.Column("sealed", sa.LargeBinary, nullable=False),  # the value, sealed by hutch.secrets.vault
    sa.Column("version", sa.Integer, nullable=False),  # counts rotations
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.UniqueConstraint("team_id", "name"),
)
secret_bindings = sa.Table(
    "secret_bindings", meta,
    sa.Column("sandbox_id", sa.String(36), primary_key=True),
    sa.Column("env", sa.String(128), primary_key=True),
    sa.Column("secret_id", sa.String(36), nullable=False),  # no foreign key: a deleted secret leaves it revoked
    sa.Column("secret_name", sa.String(128), nullable=False),
    sa.Column("standin", sa.String(128), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
)
secret_audit = sa.Table(
    "secret_audit", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("secret_id", sa.String(36), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("sandbox_id", sa.String(36), nullable=False),
    sa.Column("env", sa.String(128), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("method", sa.String(32), nullable=False),
    sa.Column("path", sa.String(300), nullable=False),
    sa.Column("status", sa.Integer),  # null: no answer came
    # by team and name, so a secret's history outlives the secret (deleted, or made anew)
    sa.Column("team_id", sa.String(36)),
    sa.Column("secret_name", sa.String(128)),
    sa.Index("ix_secret_audit_secret", "secret_id", "id"),
    sa.Index("ix_secret_audit_name", "team_id", "secret_name", "id"),
)

preview_ports = sa.Table(
    "preview_ports", meta,
    sa.Column("sandbox_id", sa.String(36), primary_key=True),
    sa.Column("port", sa.Integer, primary_key=True),
    sa.Column("access", sa.String(16), nullable=False),  # public | private
    sa.Column("generation", sa.Integer, nullable=False),  # a rotation bumps it: older links, cookies and tokens fail
    sa.Column("created_at", sa.Float, nullable=False),
)

audit_log = sa.Table(
    "audit_log", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sandbox_id", sa.String(36), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(300), nullable=False),  # who: the client's address and its X-Hutch-Actor or User-Agent
    sa.Column("op", sa.String(32), nullable=False),  # exec | spawn | signal | file_write | file_read | dir_download
    sa.Column("detail", sa.Text, nullable=False),  # the command, or the path (at most 4 KiB)
    sa.Column("exit_code", sa.Integer),  # a command's, once it ended (null: still running, or cut off)
    sa.Column("outcome", sa.String(64), nullable=False),  # ok, or the error code the call ended with
    sa.Index("ix_audit_log_sandbox", "sandbox_id", "id"),
)

API_KEY_PREFIX = "hutch_"
E2B_KEY_PREFIX = "e2b_"
POOL_SIZE = 5  # database connections kept open (route dependencies run on worker threads)


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class SandboxStatus(StrEnum):
    """Where a sandbox is in its life; `failed` boxes keep their record (and `failure` says why)."""

    ACTIVE = "active"
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"
    FAILED = "failed"
    DELETED = "deleted"  # killed: the record stays (its audit log is read by id), calls find no box


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

    @classmethod
    def from_row(cls, row: Any) -> SandboxRecord:
        rec: SandboxRecord = _from_json_row(cls, row, JSON_COLUMNS)
        return rec

    def to_row(self) -> dict[str, Any]:
        return _json_row(self, JSON_COLUMNS)


JSON_COLUMNS = ("metadata", "env_vars", "network")


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


@dataclass
class BindingRecord:
    sandbox_id: str
    env: str
    secret_id: str
    secret_name: str
    standin: str
    created_at: float
    revoked: bool = False  # its secret is gone


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


def _encoded(values: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """`values` with its JSON columns (those of `keys` it has) as text; None stays NULL."""
    return {k: json.dumps(v) if k in keys and v is not None else v for k, v in values.items()}


def _json_row(rec: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return _encoded(dict(rec.__dict__), keys)


def _from_json_row(cls: Any, row: Any, keys: tuple[str, ...]) -> Any:
    d = dict(row._mapping)
    for key in keys:
        d[key] = None if d[key] is None else json.loads(d[key])
    return cls(**d)


TEMPLATE_JSON = ("spec", "env")
BUILD_JSON = ("spec", "error", "env")
# a sandbox that may run again
LIVE_STATUSES = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.RESUMING)


class Store:
    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_size=POOL_SIZE, max_overflow=10)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        _drop_old_templates(self.engine)
        meta.create_all(self.engine)
        _add_missing_columns(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    # --- teams and keys -------------------------------------------------------------------------

    def create_team(self, name: str) -> str:
        team_id = str(uuid.uuid4())
        with self._tx() as c:
            c.execute(teams.insert().values(id=team_id, name=name, created_at=time.time()))
        return team_id

    def team_by_name(self, name: str) -> str | None:
        with self._tx() as c:
            return c.execute(sa.select(teams.c.id).where(teams.c.name == name)).scalar()

    def create_api_key(self, team_id: str, e2b: bool = False) -> str:
        """A new key for the team. `e2b`: shaped as E2B's (`e2b_` + 40 hex digits), which the e2b
        SDK before 2.63 demands; it works on hutch's own API as well."""
        raw = E2B_KEY_PREFIX + secrets.token_hex(20) if e2b else API_KEY_PREFIX + secrets.token_urlsafe(32)
        with self._tx() as c:
            c.execute(api_keys.insert().values(key_hash=hash_secret(raw), team_id=team_id,
                                               prefix=raw[:12], created_at=time.time()))
        return raw

    def team_for_api_key(self, raw: str) -> str | None:
        digest = hash_secret(raw)
        with self._tx() as c:
            row = c.execute(sa.select(api_keys.c.key_hash, api_keys.c.team_id)
                            .where(api_keys.c.key_hash == digest)).first()
        # the lookup is by hash, so timing tells nothing of the key; compare anyway, in constant time
        if row is None or not hmac.compare_digest(row.key_hash, digest):
            return None
        return str(row.team_id)

    # --- sandboxes ------------------------------------------------------------------------------

    def insert_sandbox(self, rec: SandboxRecord, bindings: Sequence[BindingRecord] = ()) -> None:
        """The sandbox and its secret bindings, in one transaction."""
        with self._tx() as c:
            c.execute(sandboxes.insert().values(**rec.to_row()))
            for b in bindings:
                c.execute(secret_bindings.insert().values(**{k: v for k, v in b.__dict__.items() if k != "revoked"}))

    def get_sandbox(self, sandbox_id: str, team_id: str | None = None) -> SandboxRecord | None:
        q = sa.select(sandboxes).where(sandboxes.c.id == sandbox_id, sandboxes.c.status != SandboxStatus.DELETED)
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        with self._tx() as c:
            row = c.execute(q).first()
        return SandboxRecord.from_row(row) if row else None

    def list_sandboxes(self, team_id: str | None, status: str | None = None,
                       metadata: dict[str, str] | None = None) -> list[SandboxRecord]:
        q = sa.select(sandboxes).where(sandboxes.c.status != SandboxStatus.DELETED).order_by(sandboxes.c.created_at)
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        if status is not None:
            q = q.where(sandboxes.c.status == status)
        with self._tx() as c:
            recs = [SandboxRecord.from_row(r) for r in c.execute(q)]
        wanted = (metadata or {}).items()
        return [r for r in recs if all(r.metadata.get(k) == v for k, v in wanted)]

    def update_sandbox(self, sandbox_id: str, *, only_if_status: tuple[str, ...] | None = None,
                       **values: Any) -> bool:
        """Change a sandbox; with `only_if_status`, only while it is in one of those states.
        Returns whether it changed."""
        values = _encoded(values, JSON_COLUMNS)
        values["updated_at"] = time.time()
        q = sandboxes.update().where(sandboxes.c.id == sandbox_id)
        if only_if_status is not None:
            q = q.where(sandboxes.c.status.in_(only_if_status))
        with self._tx() as c:
            return bool(c.execute(q.values(**values)).rowcount)

    def count_by_status(self, team_id: str | None = None) -> dict[str, int]:
        q = sa.select(sandboxes.c.status, sa.func.count()).group_by(sandboxes.c.status)
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        with self._tx() as c:
            return {str(status): int(n) for status, n in c.execute(q)}

    def sandbox_by_runtime(self, runtime_id: str) -> SandboxRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(sandboxes).where(sandboxes.c.runtime_id == runtime_id)).first()
        return SandboxRecord.from_row(row) if row else None

    def sandbox_by_box_key(self, box_key: str) -> SandboxRecord | None:
        """The live sandbox whose box has this host directory."""
        q = sa.select(sandboxes).where(sandboxes.c.box_key == box_key, sandboxes.c.status.in_(
            (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)))
        with self._tx() as c:
            row = c.execute(q).first()
        return SandboxRecord.from_row(row) if row else None

    # --- network log ----------------------------------------------------------------------------

    def add_network_log(self, **entry: Any) -> None:
        entry["secrets"] = json.dumps(entry["secrets"]) if entry.get("secrets") else None
        with self._tx() as c:
            key = c.execute(network_log.insert().values(**entry)).inserted_primary_key
            if key is not None and key[0] % 500 == 0:  # now and then, keep only the newest entries of this sandbox
                q = network_log.c
                cutoff = c.execute(sa.select(q.id).where(q.sandbox_id == entry["sandbox_id"]).order_by(q.id.desc())
                                   .offset(NETWORK_LOG_KEEP).limit(1)).scalar()
                if cutoff is not None:
                    c.execute(network_log.delete().where(q.sandbox_id == entry["sandbox_id"], q.id <= cutoff))

    def network_log(self, sandbox_id: str, limit: int, before: int | None = None) -> list[NetworkLogRecord]:
        """Newest first; `before` an id from an earlier page."""
        q = sa.select(network_log).where(network_log.c.sandbox_id == sandbox_id)
        if before is not None:
            q = q.where(network_log.c.id < before)
        with self._tx() as c:
            rows = c.execute(q.order_by(network_log.c.id.desc()).limit(limit))
            return [NetworkLogRecord(**{**r._mapping, "secrets": json.loads(r.secrets) if r.secrets else None})
                    for r in rows]

    def delete_network_log(self, sandbox_id: str) -> None:
        with self._tx() as c:
            c.execute(network_log.delete().where(network_log.c.sandbox_id == sandbox_id))

    # --- secrets ---------------------------------------------------------------------------------

    def insert_secret(self, rec: SecretRecord) -> bool:
        """False if the team has a secret of that name already."""
        try:
            with self._tx() as c:
                c.execute(secrets_table.insert().values(**dict(rec.__dict__, hosts=json.dumps(rec.hosts))))
        except sa.exc.IntegrityError:
            return False
        return True

    def _secret(self, c: Connection, *where: Any) -> SecretRecord | None:
        row = c.execute(sa.select(secrets_table).where(*where)).first()
        return _secret_from(row) if row else None

    def get_secret(self, team_id: str, name: str) -> SecretRecord | None:
        with self._tx() as c:
            return self._secret(c, secrets_table.c.team_id == team_id, secrets_table.c.name == name)

    def secret_by_id(self, secret_id: str) -> SecretRecord | None:
        with self._tx() as c:
            return self._secret(c, secrets_table.c.id == secret_id)

    def list_secrets(self, team_id: str) -> list[SecretRecord]:
        with self._tx() as c:
            rows = c.execute(sa.select(secrets_table).where(secrets_table.c.team_id == team_id)
                             .order_by(secrets_table.c.name))
            return [_secret_from(r) for r in rows]

    def rotate_secret(self, secret_id: str, sealed: bytes) -> None:
        with self._tx() as c:
            c.execute(secrets_table.update().where(secrets_table.c.id == secret_id).values(
                sealed=sealed, version=secrets_table.c.version + 1, updated_at=time.time()))

    def delete_secret(self, secret_id: str) -> None:
        with self._tx() as c:
            c.execute(secrets_table.delete().where(secrets_table.c.id == secret_id))

    def bind_secret(self, b: BindingRecord) -> None:
        """Bind a secret to an env var of a sandbox, in place of any binding it had."""
        with self._tx() as c:
            c.execute(secret_bindings.delete().where(secret_bindings.c.sandbox_id == b.sandbox_id,
                                                     secret_bindings.c.env == b.env))
            c.execute(secret_bindings.insert().values(**{k: v for k, v in b.__dict__.items() if k != "revoked"}))

    def unbind_secret(self, sandbox_id: str, env: str) -> bool:
        with self._tx() as c:
            return bool(c.execute(secret_bindings.delete().where(secret_bindings.c.sandbox_id == sandbox_id,
                                                                 secret_bindings.c.env == env)).rowcount)

    def bindings(self, sandbox_id: str) -> list[BindingRecord]:
        """A sandbox's bindings, each marked revoked if its secret is gone."""
        return self.bindings_of([sandbox_id]).get(sandbox_id, [])

    def bindings_of(self, sandbox_ids: Sequence[str]) -> dict[str, list[BindingRecord]]:
        """The bindings of several sandboxes in one query (a list of sandboxes shows them all)."""
        b, s = secret_bindings.c, secrets_table.c
        q = (sa.select(secret_bindings, s.id.label("live")).select_from(
            secret_bindings.outerjoin(secrets_table, s.id == b.secret_id))
             .where(b.sandbox_id.in_(sandbox_ids)).order_by(b.env))
        found: dict[str, list[BindingRecord]] = {}
        with self._tx() as c:
            for r in c.execute(q):
                rec = BindingRecord(**{k: v for k, v in r._mapping.items() if k != "live"}, revoked=r.live is None)
                found.setdefault(rec.sandbox_id, []).append(rec)
        return found

    def bound_secrets(self, sandbox_id: str) -> list[tuple[BindingRecord, SecretRecord]]:
        """A sandbox's live bindings with their secrets, in one query (the egress proxy asks at
        every connection)."""
        b, s = secret_bindings.c, secrets_table.c
        q = sa.select(*secret_bindings.c, *[col.label(f"s_{col.name}") for col in secrets_table.c]).select_from(
            secret_bindings.join(secrets_table, s.id == b.secret_id)).where(b.sandbox_id == sandbox_id)
        with self._tx() as c:
            rows = c.execute(q.order_by(b.env)).all()
        out = []
        for r in rows:
            m = r._mapping
            binding = BindingRecord(**{col.name: m[col.name] for col in secret_bindings.c})
            out.append((binding, _secret_from({col.name: m[f"s_{col.name}"] for col in secrets_table.c})))
        return out

    def secret_for_standin(self, standin: str, secret_id: str) -> SecretRecord | None:
        """The secret a stand-in is bound to now, if that is still `secret_id` (one query: the
        egress proxy asks at every request it swaps in)."""
        b, s = secret_bindings.c, secrets_table.c
        with self._tx() as c:
            row = c.execute(sa.select(secrets_table).select_from(secret_bindings.join(secrets_table, s.id == b.secret_id))
                            .where(b.standin == standin, s.id == secret_id)).first()
        return _secret_from(row) if row else None

    def delete_bindings(self, sandbox_id: str) -> None:
        with self._tx() as c:
            c.execute(secret_bindings.delete().where(secret_bindings.c.sandbox_id == sandbox_id))

    def add_secret_audit(self, **entry: Any) -> None:
        with self._tx() as c:
            c.execute(secret_audit.insert().values(**entry))

    def secret_audit(self, team_id: str, name: str, limit: int, before: int | None = None,
                     sandbox_id: str | None = None) -> list[AuditRecord]:
        """Every use of the team's secrets of that name (this one, and any deleted before it),
        newest first; `before` an id from an earlier page."""
        a = secret_audit.c
        q = sa.select(secret_audit).where(a.team_id == team_id, a.secret_name == name)
        if before is not None:
            q = q.where(a.id < before)
        if sandbox_id is not None:
            q = q.where(a.sandbox_id == sandbox_id)
        with self._tx() as c:
            return [AuditRecord(**r._mapping) for r in c.execute(q.order_by(a.id.desc()).limit(limit))]

    # --- the audit log of commands and file operations (append-only) -----------------------------

    def add_audit(self, **entry: Any) -> None:
        with self._tx() as c:
            c.execute(audit_log.insert().values(**entry))

    def audit_log(self, sandbox_id: str, limit: int, before: int | None = None) -> list[AuditLogRecord]:
        """Newest first; `before` an id from an earlier page."""
        q = sa.select(audit_log).where(audit_log.c.sandbox_id == sandbox_id)
        if before is not None:
            q = q.where(audit_log.c.id < before)
        with self._tx() as c:
            return [AuditLogRecord(**r._mapping) for r in c.execute(q.order_by(audit_log.c.id.desc()).limit(limit))]

    # --- preview ports ---------------------------------------------------------------------------

    def publish_port(self, rec: PreviewPortRecord) -> PreviewPortRecord:
        """Publish, or change the access of a published port (its credentials stay valid)."""
        with self._tx() as c:
            found = c.execute(sa.select(preview_ports).where(preview_ports.c.sandbox_id == rec.sandbox_id,
                                                             preview_ports.c.port == rec.port)).first()
            if found is None:
                c.execute(preview_ports.insert().values(**rec.__dict__))
                return rec
            c.execute(preview_ports.update().where(preview_ports.c.sandbox_id == rec.sandbox_id,
                                                   preview_ports.c.port == rec.port).values(access=rec.access))
            return PreviewPortRecord(**{**found._mapping, "access": rec.access})

    def published_port(self, sandbox_id: str, port: int) -> PreviewPortRecord | None:
        """A published port of a sandbox that still exists, in one query (every preview request)."""
        p, sb = preview_ports.c, sandboxes.c
        with self._tx() as c:
            row = c.execute(sa.select(preview_ports).select_from(preview_ports.join(sandboxes, sb.id == p.sandbox_id))
                            .where(p.sandbox_id == sandbox_id, p.port == port, sb.status != SandboxStatus.DELETED)).first()
        return PreviewPortRecord(**row._mapping) if row else None

    def preview_port(self, sandbox_id: str, port: int) -> PreviewPortRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(preview_ports).where(preview_ports.c.sandbox_id == sandbox_id,
                                                           preview_ports.c.port == port)).first()
        return PreviewPortRecord(**row._mapping) if row else None

    def preview_ports(self, sandbox_id: str) -> list[PreviewPortRecord]:
        with self._tx() as c:
            rows = c.execute(sa.select(preview_ports).where(preview_ports.c.sandbox_id == sandbox_id)
                             .order_by(preview_ports.c.port))
            return [PreviewPortRecord(**r._mapping) for r in rows]

    def rotate_preview_port(self, sandbox_id: str, port: int) -> bool:
        with self._tx() as c:
            return bool(c.execute(preview_ports.update().where(
                preview_ports.c.sandbox_id == sandbox_id, preview_ports.c.port == port).values(
                generation=preview_ports.c.generation + 1)).rowcount)

    def unpublish_port(self, sandbox_id: str, port: int | None = None) -> bool:
        """One port, or (None) every port of the sandbox."""
        q = preview_ports.delete().where(preview_ports.c.sandbox_id == sandbox_id)
        if port is not None:
            q = q.where(preview_ports.c.port == port)
        with self._tx() as c:
            return bool(c.execute(q).rowcount)

    def due(self, now: float) -> tuple[list[str], list[str]]:
        """Ids of active sandboxes past their pause deadline, and of paused ones past deletion."""
        c_ = sandboxes.c
        with self._tx() as c:
            to_pause = c.execute(sa.select(c_.id).where(c_.status == SandboxStatus.ACTIVE, c_.pause_at <= now)).scalars().all()
            to_delete = c.execute(sa.select(c_.id).where(c_.status == SandboxStatus.PAUSED, c_.delete_at <= now)).scalars().all()
        return list(to_pause), list(to_delete)

    # --- templates ------------------------------------------------------------------------------

    def put_template(self, rec: TemplateRecord) -> None:
        """Insert a template; a name its team (or the system) already uses raises KeyError."""
        with self._tx() as c:
            if c.execute(sa.select(templates.c.id).where(templates.c.name == rec.name, _team_is(rec.team_id))).first():
                raise KeyError(rec.name)
            c.execute(templates.insert().values(**_json_row(rec, TEMPLATE_JSON)))

    def put_system_template(self, rec: TemplateRecord) -> None:
        """Insert or replace a system template (the base, at each start: its root may have moved)."""
        with self._tx() as c:
            c.execute(templates.delete().where(templates.c.id == rec.id))
            c.execute(templates.insert().values(**_json_row(rec, TEMPLATE_JSON)))

    def get_template(self, ref: str, team_id: str | None = None) -> TemplateRecord | None:
        """By id or name: the team's own, or a system template. With no team, by id only."""
        q = sa.select(templates)
        if team_id is None:
            q = q.where(templates.c.id == ref)
        else:  # an id before a name that looks like one
            q = q.where(sa.or_(templates.c.id == ref, templates.c.name == ref),
                        sa.or_(templates.c.team_id == team_id, templates.c.team_id.is_(None))
                        ).order_by(sa.case((templates.c.id == ref, 0), else_=1))
        with self._tx() as c:
            row = c.execute(q).first()
        return _from_json_row(TemplateRecord, row, TEMPLATE_JSON) if row else None

    def list_templates(self, team_id: str) -> list[TemplateRecord]:
        q = (sa.select(templates).where(sa.or_(templates.c.team_id == team_id, templates.c.team_id.is_(None)))
             .order_by(templates.c.created_at))
        with self._tx() as c:
            return [_from_json_row(TemplateRecord, r, TEMPLATE_JSON) for r in c.execute(q)]

    def count_templates(self, team_id: str) -> tuple[int, int]:
        """A team's templates, and its builds queued or running."""
        with self._tx() as c:
            n = c.execute(sa.select(sa.func.count()).where(templates.c.team_id == team_id)).scalar() or 0
            b = c.execute(sa.select(sa.func.count()).select_from(template_builds.join(
                templates, templates.c.id == template_builds.c.template_id)).where(
                templates.c.team_id == team_id, template_builds.c.status.in_(("queued", "running")))).scalar() or 0
        return int(n), int(b)

    def update_template(self, template_id: str, **values: Any) -> None:
        values = _encoded(values, TEMPLATE_JSON)
        with self._tx() as c:
            c.execute(templates.update().where(templates.c.id == template_id).values(**values))

    def delete_template(self, template_id: str) -> bool:
        """Remove a template and its builds, unless a sandboxes that may run again boots from it
        (then False, nothing changed)."""
        with self._tx() as c:
            if c.execute(sa.select(sandboxes.c.id).where(sandboxes.c.template_id == template_id,
                                                         sandboxes.c.status.in_(LIVE_STATUSES))).first():
                return False
            c.execute(template_builds.delete().where(template_builds.c.template_id == template_id))
            c.execute(templates.delete().where(templates.c.id == template_id))
        return True

    def templates_in_use(self) -> set[str]:
        """Ids of the templates some sandbox that may run again boots from."""
        q = sa.select(sandboxes.c.template_id).where(sandboxes.c.status.in_(LIVE_STATUSES)).distinct()
        with self._tx() as c:
            return {str(t) for t in c.execute(q).scalars() if t}

    def roots_in_use(self) -> set[str]:
        """Every template root something may still boot from: templates' current roots and the
        roots of sandboxes that may run again."""
        with self._tx() as c:
            a = c.execute(sa.select(templates.c.rootfs).where(templates.c.rootfs.is_not(None))).scalars().all()
            b = c.execute(sa.select(sandboxes.c.rootfs).where(sandboxes.c.rootfs.is_not(None),
                                                              sandboxes.c.status.in_(LIVE_STATUSES))).scalars().all()
        return {str(r) for r in (*a, *b)}

    # --- template builds ------------------------------------------------------------------------

    def insert_build(self, rec: BuildRecord) -> None:
        with self._tx() as c:
            c.execute(template_builds.insert().values(**_json_row(rec, BUILD_JSON)))

    def get_build(self, build_id: str, template_id: str | None = None) -> BuildRecord | None:
        q = sa.select(template_builds).where(template_builds.c.id == build_id)
        if template_id is not None:
            q = q.where(template_builds.c.template_id == template_id)
        with self._tx() as c:
            row = c.execute(q).first()
        return _from_json_row(BuildRecord, row, BUILD_JSON) if row else None

    def list_builds(self, template_id: str | None = None, statuses: Sequence[str] | None = None,
                    limit: int = 100) -> list[BuildRecord]:
        """Newest first."""
        q = sa.select(template_builds).order_by(template_builds.c.created_at.desc()).limit(limit)
        if template_id is not None:
            q = q.where(template_builds.c.template_id == template_id)
        if statuses is not None:
            q = q.where(template_builds.c.status.in_(statuses))
        with self._tx() as c:
            return [_from_json_row(BuildRecord, r, BUILD_JSON) for r in c.execute(q)]

    def latest_builds(self, template_ids: Sequence[str]) -> dict[str, BuildRecord]:
        """Each template's newest build, in one query."""
        newest = (sa.select(template_builds.c.template_id, sa.func.max(template_builds.c.created_at).label("at"))
                  .where(template_builds.c.template_id.in_(template_ids)).group_by(template_builds.c.template_id)
                  .subquery())
        q = sa.select(template_builds).join(newest, sa.and_(template_builds.c.template_id == newest.c.template_id,
                                                            template_builds.c.created_at == newest.c.at))
        with self._tx() as c:
            builds = [_from_json_row(BuildRecord, r, BUILD_JSON) for r in c.execute(q)]
        return {b.template_id: b for b in builds}

    def update_build(self, build_id: str, *, only_if_status: tuple[str, ...] | None = None, **values: Any) -> bool:
        """Change a build; with `only_if_status`, only while it is in one of those states."""
        values = _encoded(values, BUILD_JSON)
        q = template_builds.update().where(template_builds.c.id == build_id)
        if only_if_status is not None:
            q = q.where(template_builds.c.status.in_(only_if_status))
        with self._tx() as c:
            return bool(c.execute(q.values(**values)).rowcount)


def _team_is(team_id: str | None) -> Any:
    return templates.c.team_id.is_(None) if team_id is None else templates.c.team_id == team_id


def _drop_old_templates(engine: sa.Engine) -> None:
    """hutch before templates could be built kept only the base in a `templates` keyed by name:
    pin the sandboxes booted from it to its root, and drop the table (the base is registered
    again at every start)."""
    inspector = sa.inspect(engine)
    if "templates" not in inspector.get_table_names():
        return
    if "id" in {col["name"] for col in inspector.get_columns("templates")}:
        return
    with engine.begin() as c:
        roots: dict[str, str] = {str(n): str(r) for n, r in c.execute(sa.text("SELECT name, rootfs FROM templates"))}
    _add_missing_columns(engine)  # the sandboxes' rootfs column
    with engine.begin() as c:
        for name, rootfs in roots.items():
            c.execute(sa.text("UPDATE sandboxes SET rootfs = :r WHERE template = :n AND rootfs IS NULL"),
                      {"r": rootfs, "n": name})
        c.execute(sa.text("DROP TABLE templates"))


def _secret_from(row: Any) -> SecretRecord:
    d = dict(row._mapping) if hasattr(row, "_mapping") else dict(row)
    return SecretRecord(**{**d, "hosts": json.loads(d["hosts"])})


def _add_missing_columns(engine: sa.Engine) -> None:
    """A database made by an older hutch gets the nullable columns added since (nothing else
    changes shape in place)."""
    inspector = sa.inspect(engine)
    existing = set(inspector.get_table_names())
    for table in meta.sorted_tables:
        if table.name not in existing:
            continue
        have = {col["name"] for col in inspector.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have and col.nullable:
                with engine.begin() as c:
                    c.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{col.name}" '
                                      f"{col.type.compile(engine.dialect)}"))


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across a crash of hutch; fsync at checkpoints
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()
