"""The server's settings, with defaults that work on one machine out of the box."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DATA_DIR = Path(os.environ.get("HUTCH_DATA_DIR", "/var/lib/hutch"))
DEFAULT_CACHE_DIR = Path(os.environ.get("HUTCH_CACHE_DIR", "/var/cache/hutch"))
DEFAULT_PORT = 7423
DEFAULT_FREEZE_IDLE_AFTER = 10.0  # seconds: an idle box costs ~no CPU soon after its last call


@dataclass(frozen=True)
class FleetConfig:
    """A fleet member's: where Ray is, and the directory every member mounts (checkpoints)."""

    ray: str  # the Ray cluster's address (host:port of its head's GCS, or ray://host:10001)
    shared_dir: Path  # the same files on every member: an NFS mount, say
    ray_node_ip: str | None = None  # this host's Ray node's address, when it has several
    placement_wait: float = 10.0  # seconds a create waits for room (and the autoscaler) before no_capacity


@dataclass
class ServerConfig:
    data_dir: Path = DEFAULT_DATA_DIR
    cache_dir: Path = DEFAULT_CACHE_DIR  # built template roots, shared by every data dir on the host
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    database_url: str | None = None  # default: SQLite in the data dir
    public_url: str | None = None  # how clients reach this server; default http://host:port
    max_sandboxes: int = 256  # running boxes per node (an idle one takes ~50 MB); more is refused with 429
    team_max_sandboxes: int = 64  # running boxes per team, so one team cannot take the whole node
    # Checkpoints (paused boxes) on disk: a pause past one of these is refused (429 checkpoint_budget)
    # and the box runs on. Per team, how many and how many bytes (None: half the node's budget); the
    # node's bytes, all teams' (a fleet's: its shared directory's; None: 80% of that filesystem's size).
    team_max_paused: int = 256
    team_max_paused_bytes: int | None = None
    checkpoint_budget_bytes: int | None = None
    # Snapshots, per team: how many, and how many bytes (None: the team's checkpoint budget, again)
    team_max_snapshots: int = 100
    team_max_snapshot_bytes: int | None = None
    # Volumes, per team: how many, and their MiB in all (None: half the node's disk budget); a volume's
    # size when its create names none
    team_max_volumes: int = 100
    team_max_volume_mib: int | None = None
    volume_default_mib: int = 1024
    over_budget_grace: float = 3600.0  # seconds a box refused its timeout's pause runs on before it is stopped
    # Retention of the logs (network, commands and files, secrets' use): rows older than this go
    # (0: kept forever); and the newest entries of each box's network log that are kept.
    audit_retention_days: float = 30.0
    network_log_max_rows: int = 10_000
    memory_mib: int = 1024  # per box, unless the template says otherwise
    vcpu: int = 1
    pids: int = 1024
    # Where runsc cannot give boxes a cgroup (a container without cgroup delegation), run them without
    # memory, pid or CPU limits, logged, instead of refusing them (limits_unavailable)
    allow_unlimited_boxes: bool = False
    max_file_bytes: int = 4 * 2**30
    runsc_platform: str | None = None
    # base-template boxes booted ahead, so creates only claim one (None: sized by memory, warm_pool_max
    # boxes; a number: that many, grown after a burst up to warm_pool_max; see hutch.node.pool)
    warm_pool: int | None = None
    warm_pool_max: int | None = None  # the pool's most (None: hutch.node.pool.default_most)
    # Seconds a box nothing uses (no call, no open stream, tunnel or egress connection, little CPU)
    # runs before it is frozen, thawed by its next call and woken every 2 s for its timers
    # (hutch.node.idle); 0: never frozen
    freeze_idle_after: float = DEFAULT_FREEZE_IDLE_AFTER
    checkpoint_compression: str = "none"  # or "flate-best-speed": a quarter of the disk, slower pause/resume
    egress_hosts: Path | None = None  # an /etc/hosts-style map the egress proxy resolves with first
    egress_system_dns: bool = True  # names not in that map go to the host's resolver (off: they fail)
    # CA certificates (PEM files) trusted beyond the host's store: added to every box's bundle, and
    # used by the egress proxy to check the hosts it swaps secrets in for (a TLS-inspecting proxy's CA, say)
    trust_ca: tuple[Path, ...] = ()
    # Preview URLs: http://{port}-{sandbox id}.{preview_domain}:{preview_port}, served on this port of
    # `host`. Browsers resolve every name under "localhost" to this machine. With preview_https (a TLS
    # proxy in front, on 443), the URLs say https and carry no port, and preview cookies are Secure.
    preview_port: int = 7424
    preview_domain: str = "localhost"
    preview_https: bool = False
    # E2B's host form (hutch.e2b.hosts): https://api.{e2b_domain} and https://{port}-{id}.{e2b_domain},
    # over TLS on e2b_port of `host` (0: not served), with the operator's certificate or one hutch
    # issues (hutch.server.site_tls). e2b_public_port: the port clients reach, if a balancer fronts it.
    e2b_domain: str = "hutch.localhost"
    e2b_port: int = 7443
    e2b_public_port: int | None = None
    e2b_cert: Path | None = None
    e2b_key: Path | None = None
    # Templates: builds run at once (each a box at a time), where `from` may read local OCI images
    # (default: <data dir>/images), and whether `from` may pull from a registry over the host's network.
    max_builds: int = 2
    team_max_templates: int = 100
    team_max_builds: int = 10  # queued or running, per team
    image_dirs: tuple[Path, ...] = ()
    registry_pulls: bool = False
    # Webhooks: how many a team may register; where they may go beyond public addresses (host names,
    # addresses or CIDRs: a receiver on loopback or the LAN); how long one event is retried before
    # its endpoint is disabled
    team_max_webhooks: int = 20
    webhook_allow: tuple[str, ...] = ()
    webhook_retry_for: float = 900.0
    # OpenTelemetry: spans for API calls, node calls and box calls exported over OTLP/HTTP here
    # (None: OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing; hutch.tracing)
    otlp_endpoint: str | None = None
    fleet: FleetConfig | None = None  # a fleet's API server: no node of its own, PostgreSQL, Ray

    @property
    def checkpoint_dir(self) -> Path:
        """Paused boxes' images: a fleet's are in its shared directory, so any node resumes them."""
        return (self.fleet.shared_dir if self.fleet else self.data_dir) / "checkpoints"

    @property
    def snapshot_dir(self) -> Path:
        """Snapshots' images, beside the checkpoints (a fleet's in its shared directory too)."""
        return (self.fleet.shared_dir if self.fleet else self.data_dir) / "snapshots"

    @property
    def allowed_image_dirs(self) -> tuple[Path, ...]:
        return self.image_dirs or (self.data_dir / "images",)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'hutch.db'}"

    @property
    def run_dir(self) -> Path:
        # Short, per data dir, and on tmpfs: socket paths must stay under 108 bytes, and runsc's
        # state of running boxes is meaningless after a reboot.
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:10]
        return Path("/run/hutch") / digest

    @property
    def e2b_tls_dir(self) -> Path:
        """hutch's own certificate of E2B's host form (a fleet's API servers share one, and its CA)."""
        return (self.fleet.shared_dir if self.fleet else self.data_dir) / "e2b-tls"

    @property
    def e2b_site(self) -> str | None:
        """What E2B_DOMAIN is set to: the domain, and the port clients reach when it is not 443."""
        if not self.e2b_port:
            return None
        port = self.e2b_public_port or self.e2b_port
        return self.e2b_domain if port == 443 else f"{self.e2b_domain}:{port}"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")
