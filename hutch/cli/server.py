"""The commands run on the server's own machine: serve, build-base and team-create."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from hutch.cli.shared import CLIENT_ENV, Subparsers, fleet_installed
from hutch.services.config import DEFAULT_CACHE_DIR, DEFAULT_FREEZE_IDLE_AFTER, DEFAULT_PORT, FleetConfig, ServerConfig

# They read the data dir themselves, not a client's environment
SERVER_COMMANDS = ("serve", "build-base", "team-create", "node")


def add_serve(sub: Subparsers) -> None:
    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--public-url", metavar="URL",
                   help="how clients reach this server (a load balancer's URL, say): data-plane URLs name it "
                        "(default http://HOST:PORT)")
    s.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    s.add_argument("--warm-pool", type=int, metavar="N",
                   help="base-template boxes kept booted so creates are instant, growing after a burst of "
                        "creates (0: none; default: sized by memory, --warm-pool-max boxes kept booted ahead)")
    s.add_argument("--warm-pool-max", type=int, metavar="N",
                   help="how many boxes the pool holds (waiting boxes are frozen: memory only; default: a sixth "
                        "of the host's memory at 64 MiB a box, at most 100)")
    s.add_argument("--freeze-idle-after", type=float, default=DEFAULT_FREEZE_IDLE_AFTER, metavar="S",
                   help="freeze a box nothing has used for S seconds (no call, stream, tunnel or egress "
                        "connection, little CPU), so it costs ~no CPU; its next call thaws it, and it wakes "
                        "every 2 s for its timers (default %(default)s; 0: never)")
    s.add_argument("--max-sandboxes", type=int, default=256, metavar="N",
                   help="running sandboxes this node takes before it answers 429 (default %(default)s)")
    s.add_argument("--team-max-sandboxes", type=int, default=64, metavar="N",
                   help="running sandboxes one team may have (default %(default)s)")
    s.add_argument("--team-max-paused", type=int, default=256, metavar="N",
                   help="paused sandboxes one team may have; a pause past it is refused, the box runs on "
                        "(default %(default)s)")
    s.add_argument("--team-max-paused-bytes", type=byte_size, metavar="SIZE",
                   help="disk one team's checkpoints may take, e.g. 20G (default: half the checkpoint budget)")
    s.add_argument("--team-max-snapshots", type=int, default=100, metavar="N",
                   help="snapshots one team may keep (default %(default)s)")
    s.add_argument("--team-max-snapshot-bytes", type=byte_size, metavar="SIZE",
                   help="disk one team's snapshots may take, e.g. 20G (default: as --team-max-paused-bytes)")
    s.add_argument("--team-max-volumes", type=int, default=100, metavar="N",
                   help="volumes one team may keep (default %(default)s)")
    s.add_argument("--team-max-volume-size", type=byte_size, metavar="SIZE",
                   help="what one team's volumes may hold in all, e.g. 100G (default: half the node's disk budget)")
    s.add_argument("--checkpoint-budget-bytes", type=byte_size, metavar="SIZE",
                   help="disk every checkpoint may take in all, e.g. 200G (default: 80%% of the size of the "
                        "checkpoints' filesystem)")
    s.add_argument("--over-budget-grace", type=float, default=3600.0, metavar="S",
                   help="seconds a sandbox whose timeout's pause a budget refused runs on before it is stopped "
                        "(default %(default)s)")
    s.add_argument("--audit-retention-days", type=float, default=30.0, metavar="D",
                   help="network, command and secret-use log rows older than this are deleted "
                        "(default %(default)s; 0: kept forever)")
    s.add_argument("--egress-hosts", type=Path, metavar="FILE",
                   help="an /etc/hosts-style map the egress proxy resolves names with before DNS")
    s.add_argument("--egress-no-system-dns", action="store_true",
                   help="resolve boxes' destinations only with --egress-hosts (others fail)")
    s.add_argument("--trust-ca", action="append", type=Path, metavar="PEM",
                   help="a CA certificate boxes and the secret-swapping proxy trust beyond the host's store "
                        "(a TLS-inspecting proxy's, say; repeatable)")
    s.add_argument("--webhook-allow", action="append", metavar="HOST",
                   help="a host name, address or CIDR webhooks may be sent to although it is private, loopback "
                        "or link-local (a receiver on this machine or the LAN; repeatable, or comma-separated)")
    s.add_argument("--webhook-retry-for", type=float, default=900.0, metavar="S",
                   help="seconds an event is retried before its webhook is disabled (default %(default)s)")
    s.add_argument("--team-max-webhooks", type=int, default=20, metavar="N",
                   help="webhooks per team (default %(default)s)")
    s.add_argument("--otlp-endpoint", metavar="URL",
                   help="send OpenTelemetry spans of API, node and box calls over OTLP/HTTP here (default: "
                        "OTEL_EXPORTER_OTLP_ENDPOINT, else none; needs hutch[otel])")
    s.add_argument("--preview-port", type=int, default=7424, metavar="P",
                   help="where preview URLs are served (default %(default)s)")
    s.add_argument("--preview-domain", default="localhost",
                   help="preview URLs are http://PORT-ID.DOMAIN:P (default %(default)s: this machine's browsers)")
    s.add_argument("--preview-https", action="store_true",
                   help="a TLS proxy on 443 fronts the preview port: URLs say https, cookies are Secure")
    s.add_argument("--e2b-domain", default="hutch.localhost", metavar="DOMAIN",
                   help="E2B's host form: https://api.DOMAIN and https://PORT-ID.DOMAIN, so E2B_DOMAIN=DOMAIN[:P] "
                        "alone points e2b's SDKs here (default %(default)s: this machine resolves *.localhost)")
    s.add_argument("--e2b-port", type=int, default=7443, metavar="P",
                   help="where E2B's host form is served, over TLS (default %(default)s; 0: not served)")
    s.add_argument("--e2b-public-port", type=int, metavar="P",
                   help="the port clients reach it on, when a proxy or balancer fronts it (443: none in URLs)")
    s.add_argument("--e2b-cert", type=Path, metavar="PEM",
                   help="its certificate chain (a wildcard for *.DOMAIN and DOMAIN); default: one hutch issues "
                        "from a CA of its own, constrained to DOMAIN")
    s.add_argument("--e2b-key", type=Path, metavar="PEM", help="the private key of --e2b-cert")
    s.add_argument("--max-builds", type=int, default=2, help="template builds run at once (default %(default)s)")
    s.add_argument("--image-dir", type=Path, action="append", metavar="DIR",
                   help="a directory templates may import local OCI images from (repeatable; "
                        "default: <data dir>/images)")
    s.add_argument("--registry-pulls", action="store_true",
                   help="let templates pull images from registries (docker://...) over the host's network")
    add_unlimited_option(s)
    add_fleet_options(s, api=True)
    s.set_defaults(fn=cmd_serve)


def add_unlimited_option(s: argparse.ArgumentParser) -> None:
    s.add_argument("--allow-unlimited-boxes", action="store_true",
                   help="where runsc cannot give boxes a cgroup (a container without cgroup delegation), run them "
                        "WITHOUT memory, pid or CPU limits instead of refusing them (logged loudly)")


def byte_size(text: str) -> int:
    """A size in bytes, with an optional K, M, G or T (powers of 1024)."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    try:
        value = float(text[:-1] if scale > 1 else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or a number with K, M, G or T)") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a size is not negative")
    return int(value * scale)


def add_fleet_options(s: argparse.ArgumentParser, api: bool) -> None:
    g = s.add_argument_group("fleet", "a fleet member (docs/fleet.md); with neither --store nor --ray, one host"
                             if api else "this host's node runtime in a fleet (docs/fleet.md)")
    g.add_argument("--store", metavar="URL", required=not api,
                   help="the fleet's PostgreSQL (postgresql://user@host/db); default: SQLite in the data dir")
    g.add_argument("--ray", metavar="ADDRESS", required=not api,
                   help="the Ray cluster's address (head:6379): run as a stateless API server of that fleet"
                   if api else "the Ray cluster's address (head:6379)")
    g.add_argument("--shared", type=Path, metavar="DIR", required=not api,
                   help="the directory every fleet member mounts (an NFS share): paused boxes' checkpoints")
    if api:
        g.add_argument("--ray-node-ip", metavar="IP", help="this host's Ray node's address, if it has several")
        g.add_argument("--placement-wait", type=float, default=10.0, metavar="S",
                       help="seconds a create waits for a node with room before no_capacity (default %(default)s)")


def add_build_base(sub: Subparsers) -> None:
    s = sub.add_parser("build-base", help="build the system templates' roots (the base, the code interpreter) if not built")
    s.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    s.add_argument("--desktop", action="store_true",
                   help="also the desktop's (template `desktop`: Xvfb, XFCE, Firefox, noVNC; ~2 GB, about 4 minutes)")
    s.set_defaults(fn=cmd_build_base)


def add_team_create(sub: Subparsers) -> None:
    s = sub.add_parser("team-create", help="make a team and print its API key (on the server machine)")
    s.add_argument("name")
    s.add_argument("--e2b", action="store_true",
                   help="an E2B-shaped key (e2b_<hex>), for the e2b SDK at E2B_API_URL=<server>/e2b")
    s.add_argument("--store", metavar="URL", help="a fleet's PostgreSQL (default: SQLite in the data dir)")
    s.set_defaults(fn=cmd_team_create)


# The server's own modules (but its light config) are imported in the handlers, so that client
# commands start fast.

def cmd_build_base(args: argparse.Namespace) -> int:
    from hutch.node import base_image

    def progress(line: str) -> None:
        print(line, flush=True)

    root = base_image.build(args.cache_dir, progress=progress, recipe=base_image.BASE)
    print(f"{base_image.BASE.name} template: {root}")
    try:  # the code interpreter is the second system template: boxes work without it
        root = base_image.build(args.cache_dir, progress=progress, recipe=base_image.CODE_INTERPRETER)
    except RuntimeError as e:
        print(f"warning: the code-interpreter template could not be built (run `hutch build-base` again): {e}",
              file=sys.stderr)
    else:
        print(f"{base_image.CODE_INTERPRETER.name} template: {root}")
    if args.desktop:  # asked for: its failure is the command's
        try:
            root = base_image.build(args.cache_dir, progress=progress, recipe=base_image.DESKTOP)
        except RuntimeError as e:
            print(f"error: the desktop template could not be built: {e}", file=sys.stderr)
            return 1
        print(f"{base_image.DESKTOP.name} template: {root} (a running server registers it at the first create naming it)")
    return 0


def _admin_key(store: Any, data_dir: Path, variable: str = "HUTCH_API_KEY") -> str:
    """The default team's key (or its E2B-shaped key, for E2B_API_KEY): made on first start, kept
    (0600) in the data dir to print again."""
    env_file = data_dir / CLIENT_ENV
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith(f"{variable}="):
                key = line.split("=", 1)[1]
                if store.team_for_api_key(key):
                    return key
    import sqlalchemy.exc

    team_id = store.team_by_name("default")
    if team_id is None:
        try:
            team_id = store.create_team("default")
        except sqlalchemy.exc.IntegrityError:  # a fleet's other API server, starting at the same moment
            team_id = store.team_by_name("default")
            assert team_id is not None
    new_key: str = store.create_api_key(team_id, e2b=variable == "E2B_API_KEY")
    return new_key


OPEN_FILES = 65536  # sockets of every box's channel, egress and preview connections, and the store


def raise_open_files(want: int = OPEN_FILES) -> None:
    """Raise the open-files limit (a systemd service starts with 1024, which a few boxes' idle
    connections exhaust): to `want` where root may, else to the hard limit. Said in the log."""
    import logging
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    except (ValueError, OSError):  # not root, or above fs.nr_open: take what the hard limit allows
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, hard), hard))
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    logging.getLogger("hutch.server").log(logging.INFO if now >= want else logging.WARNING,
                                          "open files: %d (wanted %d)", now, want)


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from hutch.node import base_image
    from hutch.server.app import create_app
    from hutch.server.site_tls import site_tls
    from hutch.store import Store

    fleet = None
    if args.ray or args.shared:
        if not (args.ray and args.shared and args.store and args.store.startswith(("postgresql", "postgres:"))):
            print("a fleet's API server takes --ray, --shared and a PostgreSQL --store together", file=sys.stderr)
            return 2
        if not fleet_installed():
            return 2
        fleet = FleetConfig(ray=args.ray, shared_dir=args.shared, ray_node_ip=args.ray_node_ip,
                            placement_wait=args.placement_wait)
    config = ServerConfig(data_dir=args.data_dir, database_url=args.store, fleet=fleet, cache_dir=args.cache_dir,
                          host=args.host, port=args.port, public_url=args.public_url,
                          warm_pool=args.warm_pool, warm_pool_max=args.warm_pool_max,
                          freeze_idle_after=args.freeze_idle_after,
                          max_sandboxes=args.max_sandboxes,
                          team_max_sandboxes=args.team_max_sandboxes, team_max_paused=args.team_max_paused,
                          team_max_paused_bytes=args.team_max_paused_bytes,
                          team_max_snapshots=args.team_max_snapshots,
                          team_max_snapshot_bytes=args.team_max_snapshot_bytes,
                          team_max_volumes=args.team_max_volumes,
                          team_max_volume_mib=(args.team_max_volume_size // 2**20
                                               if args.team_max_volume_size is not None else None),
                          checkpoint_budget_bytes=args.checkpoint_budget_bytes, over_budget_grace=args.over_budget_grace,
                          audit_retention_days=args.audit_retention_days, egress_hosts=args.egress_hosts,
                          egress_system_dns=not args.egress_no_system_dns, trust_ca=tuple(args.trust_ca or ()),
                          preview_port=args.preview_port, preview_domain=args.preview_domain,
                          preview_https=args.preview_https, max_builds=args.max_builds,
                          e2b_domain=args.e2b_domain, e2b_port=args.e2b_port, e2b_public_port=args.e2b_public_port,
                          e2b_cert=args.e2b_cert, e2b_key=args.e2b_key,
                          image_dirs=tuple(args.image_dir or ()), registry_pulls=args.registry_pulls,
                          allow_unlimited_boxes=args.allow_unlimited_boxes,
                          webhook_allow=tuple(h.strip() for each in args.webhook_allow or () for h in each.split(",")
                                              if h.strip()),
                          webhook_retry_for=args.webhook_retry_for, team_max_webhooks=args.team_max_webhooks,
                          otlp_endpoint=args.otlp_endpoint)
    from hutch import tracing
    from hutch.services.deliveries import Destinations

    if tracing.endpoint_from(config.otlp_endpoint) and not tracing.available():
        print("traces (--otlp-endpoint, OTEL_EXPORTER_OTLP_ENDPOINT) need the opentelemetry SDK: "
              "pip install 'hutch[otel]'", file=sys.stderr)
        return 2

    try:
        Destinations.parse(config.webhook_allow)
    except ValueError as e:
        print(f"--webhook-allow: {e}", file=sys.stderr)
        return 2
    if (args.e2b_cert is None) != (args.e2b_key is None):
        print("--e2b-cert and --e2b-key go together", file=sys.stderr)
        return 2
    config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if fleet is None and not base_image.is_built(config.cache_dir):
        base_image.build(config.cache_dir, progress=lambda line: print(line, flush=True))
    store = Store(config.db_url)
    key = _admin_key(store, config.data_dir)
    e2b_key = _admin_key(store, config.data_dir, "E2B_API_KEY")
    env_file = config.data_dir / CLIENT_ENV
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:  # and the same team for the e2b SDK (hutch.e2b)
        f.write(f"HUTCH_BASE_URL={config.base_url}\nHUTCH_API_KEY={key}\n"
                f"E2B_API_URL={config.base_url}/e2b\nE2B_SANDBOX_URL={config.base_url}/e2b/envd\n"
                f"E2B_VOLUME_API_URL={config.base_url}/e2b\n"
                f"E2B_API_KEY={e2b_key}\n")
        if config.e2b_site:  # E2B's host form, for the SDKs that speak only it (hutch.e2b.hosts)
            tls = site_tls(config.e2b_tls_dir, config.e2b_domain, config.e2b_cert, config.e2b_key)
            f.write(f"E2B_DOMAIN={config.e2b_site}\n")
            if tls.bundle is not None:  # Python's clients take one file; Node's adds to its own roots
                f.write(f"SSL_CERT_FILE={tls.bundle}\nNODE_EXTRA_CA_CERTS={tls.ca_file}\n")
    # The key goes to a person at a terminal, never into a log file (stdout redirected)
    shown = key if sys.stdout.isatty() else f"$(grep HUTCH_API_KEY= {env_file} | cut -d= -f2)"
    print(f"hutch is serving on {config.base_url}\n"
          f"  export HUTCH_BASE_URL={config.base_url}\n  export HUTCH_API_KEY={shown}\n"
          f"  (also in {env_file})", flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per channel request is noise
    raise_open_files()
    from hutch.server.attach import MAX_FRAME

    # A WebSocket frame is held whole before the app sees it: keep frames and the queue small.
    # The standard asyncio loop, not uvloop: uvloop's start_tls (the egress proxy terminating a
    # box's TLS to swap a secret in) lost the tail of large answers when the server closed first.
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="warning", loop="asyncio",
                access_log=False, timeout_graceful_shutdown=5, ws_max_size=MAX_FRAME + 4096, ws_max_queue=4)
    return 0


def cmd_team_create(args: argparse.Namespace) -> int:
    from hutch.store import Store

    store = Store(ServerConfig(data_dir=args.data_dir, database_url=args.store).db_url)
    if store.team_by_name(args.name):
        print(f"a team named {args.name!r} exists already", file=sys.stderr)
        return 1
    key = store.create_api_key(store.create_team(args.name), e2b=args.e2b)
    print(json.dumps({"team": args.name, "api_key": key}) if args.json else key)
    return 0
