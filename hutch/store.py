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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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
)
templates = sa.Table(
    "templates", meta,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("rootfs", sa.Text, nullable=False),
    sa.Column("env", sa.Text, nullable=False),
    sa.Column("workdir", sa.Text),
    sa.Column("vcpu", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

API_KEY_PREFIX = "hutch_"


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


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

    @classmethod
    def from_row(cls, row: Any) -> SandboxRecord:
        d = dict(row._mapping)
        d["metadata"] = json.loads(d["metadata"])
        d["env_vars"] = json.loads(d["env_vars"])
        return cls(**d)

    def to_row(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["metadata"] = json.dumps(self.metadata)
        d["env_vars"] = json.dumps(self.env_vars)
        return d


@dataclass
class TemplateRecord:
    name: str
    rootfs: str
    env: dict[str, str]
    workdir: str | None
    vcpu: int
    memory_mib: int
    created_at: float


class Store:
    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        meta.create_all(self.engine)

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

    def create_api_key(self, team_id: str) -> str:
        raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
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

    def insert_sandbox(self, rec: SandboxRecord) -> None:
        with self._tx() as c:
            c.execute(sandboxes.insert().values(**rec.to_row()))

    def get_sandbox(self, sandbox_id: str, team_id: str | None = None) -> SandboxRecord | None:
        q = sa.select(sandboxes).where(sandboxes.c.id == sandbox_id, sandboxes.c.status != "deleted")
        if team_id is not None:
            q = q.where(sandboxes.c.team_id == team_id)
        with self._tx() as c:
            row = c.execute(q).first()
        return SandboxRecord.from_row(row) if row else None

    def list_sandboxes(self, team_id: str | None, status: str | None = None,
                       metadata: dict[str, str] | None = None) -> list[SandboxRecord]:
        q = sa.select(sandboxes).where(sandboxes.c.status != "deleted").order_by(sandboxes.c.created_at)
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
        for key in ("metadata", "env_vars"):
            if key in values:
                values[key] = json.dumps(values[key])
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

    def due(self, now: float) -> tuple[list[str], list[str]]:
        """Ids of active sandboxes past their pause deadline, and of paused ones past deletion."""
        c_ = sandboxes.c
        with self._tx() as c:
            to_pause = c.execute(sa.select(c_.id).where(c_.status == "active", c_.pause_at <= now)).scalars().all()
            to_delete = c.execute(sa.select(c_.id).where(c_.status == "paused", c_.delete_at <= now)).scalars().all()
        return list(to_pause), list(to_delete)

    # --- templates ------------------------------------------------------------------------------

    def put_template(self, rec: TemplateRecord) -> None:
        row = dict(rec.__dict__, env=json.dumps(rec.env))
        with self._tx() as c:
            c.execute(templates.delete().where(templates.c.name == rec.name))
            c.execute(templates.insert().values(**row))

    def get_template(self, name: str) -> TemplateRecord | None:
        with self._tx() as c:
            row = c.execute(sa.select(templates).where(templates.c.name == name)).first()
        if row is None:
            return None
        d = dict(row._mapping)
        d["env"] = json.loads(d["env"])
        return TemplateRecord(**d)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
    cur.execute("PRAGMA synchronous=NORMAL")  # durable across a crash of hutch; fsync at checkpoints
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()
