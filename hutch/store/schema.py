"""The store's schema: its tables and indexes, as the newest migration (hutch.store.migrations) leaves them.

A change here is a change of the schema: it comes with a revision in migrations/versions/ that
makes it, and `tests/unit/test_store.py` fails while the two differ.
"""

from __future__ import annotations

import sqlalchemy as sa

# ids of append-only logs: 64-bit on PostgreSQL (a fleet's network log passes 2**31 rows), SQLite's
# rowid (INTEGER PRIMARY KEY is what makes it one there, and it is 64-bit already)
LOG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

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
    sa.Column("node", sa.String(64), index=True),  # the fleet node it runs or last ran on (null: this server's own)
    # its checkpoint's size on disk while it has one (pausing: the most it may take, held against the budgets)
    sa.Column("checkpoint_bytes", sa.BigInteger),
    sa.Column("pause_refused_at", sa.Float),  # when a checkpoint budget first refused its automatic pause
    sa.Column("pause_memory", sa.Boolean),  # false: its timeout's pause keeps its files only (null: all of it)
    # JSON list of its mounts [{"volume_id", "name", "path", "read_only"}], or null: none
    sa.Column("volumes", sa.Text),
    # JSON {domain: {header: {"format", "secret"}}}: headers the egress proxy sets on its requests to
    # the domain (E2B's network rules), a secret's value in "{value}"; or null: none
    sa.Column("header_rules", sa.Text),
    # E2B's allowPublicTraffic: its ports answer at their E2B host names without its traffic token
    sa.Column("public_traffic", sa.Boolean),
    # false: paused, it wakes only when resumed or connected, never by a call or a request to a port
    # (E2B's lifecycle.autoResume off, or its files-only pause); null: any call wakes it
    sa.Column("auto_resume", sa.Boolean),
    # E2B's `secure`, false: its code interpreter's port answers without a token when its ports are public
    sa.Column("secure", sa.Boolean),
    sa.Index("ix_sandboxes_box_key", "box_key"),
)
network_log = sa.Table(
    "network_log", meta,
    sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
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
    sa.Column("rootfs", sa.Text),  # the root it made (a fleet's: the root it makes, from when it chose it)
    sa.Column("env", sa.Text),  # JSON: the defaults it made
    sa.Column("workdir", sa.Text),
    sa.Column("user", sa.String(64)),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float),
    sa.Column("finished_at", sa.Float),
    sa.Column("node", sa.String(64)),  # the fleet node that claimed it (null: queued, or a single host's)
    sa.Column("parent_rootfs", sa.Text),  # the root it builds on (a fleet's: kept from removal while it runs)
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
    sa.Column("metadata", sa.Text),  # JSON, the owner's (E2B's secrets have it); null: none
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
    sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
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
    sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
    sa.Column("sandbox_id", sa.String(36), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(300), nullable=False),  # who: the client's address and its X-Hutch-Actor or User-Agent
    sa.Column("op", sa.String(32), nullable=False),  # exec | spawn | signal | file_write | file_read | dir_download
    sa.Column("detail", sa.Text, nullable=False),  # the command, or the path (at most 4 KiB)
    sa.Column("exit_code", sa.Integer),  # a command's, once it ended (null: still running, or cut off)
    sa.Column("outcome", sa.String(64), nullable=False),  # ok, or the error code the call ended with
    sa.Index("ix_audit_log_sandbox", "sandbox_id", "id"),
)

# Every change of state, one row each, in one order (ids grow in commit order: hold_all on insert)
events = sa.Table(
    "events", meta,
    sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("team_id", sa.String(36), nullable=False),
    sa.Column("type", sa.String(64), nullable=False),  # sandbox.created, sandbox.paused, snapshot.deleted, ...
    sa.Column("sandbox_id", sa.String(36)),  # the box it is about, if any
    sa.Column("data", sa.Text, nullable=False),  # JSON: what else the event says (a reason, a template, an id)
    sa.Index("ix_events_team", "team_id", "id"),
    sa.Index("ix_events_sandbox", "sandbox_id", "id"),
    sqlite_autoincrement=True,  # an id is never given twice, even once retention emptied the table
)

# A team's webhook endpoints, each delivered its team's events in order past its cursor by whichever
# API server holds its lease (hutch.services.webhooks)
webhooks = sa.Table(
    "webhooks", meta,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("url", sa.String(2048), nullable=False),
    sa.Column("types", sa.Text, nullable=False),  # JSON list of event types (empty: every type)
    sa.Column("sealed", sa.LargeBinary, nullable=False),  # the signing secret, sealed by hutch.secrets.vault
    sa.Column("flavor", sa.String(8), nullable=False),  # hutch | e2b: how a delivery is shaped and signed
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("disabled_reason", sa.Text),  # why deliveries stopped on their own (null: they did not)
    sa.Column("cursor", LOG_ID, nullable=False),  # events up to this id were delivered or passed over
    sa.Column("lease_owner", sa.String(64)),  # the API server delivering now, until lease_until
    sa.Column("lease_until", sa.Float, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Index("ix_webhooks_team", "team_id"),
)
webhook_deliveries = sa.Table(
    "webhook_deliveries", meta,
    sa.Column("id", LOG_ID, primary_key=True, autoincrement=True),
    sa.Column("webhook_id", sa.String(36), nullable=False),
    sa.Column("event_id", LOG_ID, nullable=False),
    sa.Column("event_type", sa.String(64), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),  # 1 for the first, counting the retries
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("status", sa.Integer),  # the endpoint's answer (null: none came)
    sa.Column("error", sa.String(500)),  # why it failed, if it did
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("duration_ms", sa.Integer, nullable=False),
    sa.Index("ix_webhook_deliveries_webhook", "webhook_id", "id"),
)


# --- the fleet ------------------------------------------------------------------------------------

nodes = sa.Table(
    "nodes", meta,
    sa.Column("id", sa.String(64), primary_key=True),  # the node's name
    sa.Column("url", sa.Text, nullable=False),  # its internal address
    sa.Column("ray_node_id", sa.String(64)),
    sa.Column("vcpu", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("disk_mib", sa.Integer),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("seen_at", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # up | down
)
fleet_keys = sa.Table(
    "fleet_keys", meta,  # keys every process of a fleet must share, made once by whichever asks first
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
)

# --- the web console (hutch.console) --------------------------------------------------------------

console_sessions = sa.Table(
    "console_sessions", meta,  # a signed-in browser: its cookie's hash, never the cookie or the API key
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False),
    sa.Column("csrf", sa.String(64), nullable=False),  # the token its pages send back with every change
    sa.Column("key_prefix", sa.String(16), nullable=False),  # which API key signed in (its first characters)
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False, index=True),
)

# --- snapshots (hutch.services.snapshots) -----------------------------------------------------------

snapshots = sa.Table(
    "snapshots", meta,  # a box's saved state, booted any number of times; its image is in the snapshots' dir
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False, index=True),
    sa.Column("name", sa.String(128)),  # unique within its team when given
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("source_sandbox_id", sa.String(36)),
    sa.Column("template_id", sa.String(36), index=True),
    sa.Column("template", sa.String(128), nullable=False),
    sa.Column("rootfs", sa.Text),  # the template root its boxes boot over (kept while the snapshot is)
    sa.Column("vcpu", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("disk_mib", sa.Integer),
    sa.Column("env_vars", sa.Text, nullable=False),  # the source box's, which its boxes start with
    sa.Column("network", sa.Text),  # the source box's egress rules, its boxes' unless their create says
    sa.Column("secrets", sa.Text, nullable=False),  # the source box's env -> secret name (stand-ins are new)
    sa.Column("memory", sa.Boolean, nullable=False),  # false: its files only (its boxes boot afresh)
    sa.Column("volumes", sa.Text),  # the source box's mounts (as sandboxes.volumes): its boxes mount them again
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("team_id", "name", name="uq_snapshots_team_name"),
)

# --- volumes (hutch.services.volumes) ---------------------------------------------------------------

volumes = sa.Table(
    "volumes", meta,  # storage that outlives boxes; its filesystem is in the node's volumes' dir
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("team_id", sa.String(36), sa.ForeignKey("teams.id"), nullable=False, index=True),
    sa.Column("name", sa.String(128), nullable=False),  # unique within its team
    sa.Column("size_mib", sa.Integer, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("team_id", "name", name="uq_volumes_team_name"),
)
