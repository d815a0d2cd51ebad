"""Durable state: teams, API keys, sandboxes, snapshots, templates, secrets, previews, logs, volumes
and the fleet's nodes, in SQLite or PostgreSQL.

Every change is one transaction. Secrets that authenticate (API keys) are kept only as hashes.
`Store` is composed of one query class per aggregate, all on one `Database`; `schema` holds the
tables, `migrations` the revisions that make them (Alembic), `records` the rows as dataclasses.
Several processes may share one PostgreSQL: a change that depends on what a row holds is one
conditional statement, or holds the row it depends on.
"""

from __future__ import annotations

from hutch.store.database import POOL_SIZE
from hutch.store.events import Event, EventQueries
from hutch.store.logs import LogQueries
from hutch.store.nodes import NodeQueries
from hutch.store.previews import PreviewQueries
from hutch.store.records import (
    HOLDS_CHECKPOINT,
    LIVE_STATUSES,
    AuditLogRecord,
    AuditRecord,
    BindingRecord,
    BuildRecord,
    BuildStatus,
    DeliveryRecord,
    EventRecord,
    NetworkLogRecord,
    NodeRecord,
    NodeState,
    PreviewPortRecord,
    SandboxRecord,
    SandboxStatus,
    SecretRecord,
    SnapshotRecord,
    TemplateRecord,
    VolumeRecord,
    WebhookRecord,
)
from hutch.store.sandboxes import CheckpointBudgets, PauseRefused, SandboxQueries
from hutch.store.secrets import SecretQueries
from hutch.store.sessions import ConsoleSession, SessionQueries
from hutch.store.snapshots import SnapshotQueries
from hutch.store.teams import API_KEY_PREFIX, E2B_KEY_PREFIX, TeamQueries, hash_secret
from hutch.store.templates import TemplateQueries
from hutch.store.volumes import VolumeQueries
from hutch.store.webhooks import WebhookQueries


class Store(TeamQueries, SandboxQueries, TemplateQueries, SecretQueries, PreviewQueries, LogQueries, NodeQueries,
            SessionQueries, SnapshotQueries, VolumeQueries, EventQueries, WebhookQueries):
    """Every query of the durable state; `Store(url)` opens the database and brings its schema up to date."""


__all__ = [
    "API_KEY_PREFIX",
    "E2B_KEY_PREFIX",
    "HOLDS_CHECKPOINT",
    "LIVE_STATUSES",
    "POOL_SIZE",
    "AuditLogRecord",
    "AuditRecord",
    "BindingRecord",
    "BuildRecord",
    "BuildStatus",
    "CheckpointBudgets",
    "ConsoleSession",
    "DeliveryRecord",
    "Event",
    "EventRecord",
    "NetworkLogRecord",
    "NodeRecord",
    "NodeState",
    "PauseRefused",
    "PreviewPortRecord",
    "SandboxRecord",
    "SandboxStatus",
    "SecretRecord",
    "SnapshotRecord",
    "Store",
    "TemplateRecord",
    "VolumeRecord",
    "WebhookRecord",
    "hash_secret",
]
