"""The fleet's commands: `hutch node` (this host's node runtime) and `hutch nodes` (the fleet's nodes)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import httpx

from hutch.cli.server import add_fleet_options, add_unlimited_option, raise_open_files
from hutch.cli.shared import Subparsers, fleet_installed
from hutch.services.config import DEFAULT_CACHE_DIR, FleetConfig, ServerConfig

NODE_PORT = 7430


def add_node(sub: Subparsers) -> None:
    s = sub.add_parser("node", help="run this host's node runtime in a fleet (docs/fleet.md)")
    add_fleet_options(s, api=False)
    s.add_argument("--listen", required=True, metavar="IP[:PORT]",
                   help=f"this host's address in the fleet, where its API servers reach it (port default {NODE_PORT})")
    s.add_argument("--name", help="the node's name in the fleet (default: the host name)")
    s.add_argument("--vcpu", type=int, metavar="N", help="vcpu boxes may reserve here in all (default: 4 per core)")
    s.add_argument("--memory-mib", type=int, metavar="M",
                   help="memory boxes may reserve here in all (default: the host's, less 1 GiB)")
    s.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    s.add_argument("--warm-pool", type=int, default=2, metavar="N", help="base-template boxes kept booted here")
    s.add_argument("--warm-pool-max", type=int, metavar="N",
                   help="how far a burst of creates grows the pool (default: a sixth of the memory, at most 100)")
    s.add_argument("--egress-hosts", type=Path, metavar="FILE",
                   help="an /etc/hosts-style map the egress proxy resolves names with before DNS")
    s.add_argument("--egress-no-system-dns", action="store_true")
    s.add_argument("--trust-ca", action="append", type=Path, metavar="PEM")
    s.add_argument("--max-builds", type=int, default=2, help="template builds this host runs at once (default %(default)s)")
    s.add_argument("--image-dir", type=Path, action="append", metavar="DIR",
                   help="a directory templates may import local OCI images from (repeatable; the same on every "
                        "member as on the API servers)")
    s.add_argument("--registry-pulls", action="store_true",
                   help="let templates built here pull images from registries over the host's network")
    s.add_argument("--otlp-endpoint", metavar="URL",
                   help="send OpenTelemetry spans of the API servers' calls here (default: "
                        "OTEL_EXPORTER_OTLP_ENDPOINT, else none; needs hutch[otel])")
    s.add_argument("--ray-started", action="store_true",
                   help="a Ray node runs on this host already (KubeRay's pod): do not start one")
    add_unlimited_option(s)
    s.set_defaults(fn=cmd_node)


def add_nodes(sub: Subparsers) -> None:
    s = sub.add_parser("nodes", help="the fleet's nodes: capacity, boxes, health")
    s.set_defaults(fn=cmd_nodes)


def cmd_node(args: argparse.Namespace) -> int:
    import logging

    if not fleet_installed():
        return 2
    from hutch.fleet import noderole
    from hutch.node import base_image

    host, _, port = args.listen.partition(":")
    vcpu, memory = noderole.default_shape()
    settings = noderole.NodeSettings(name=args.name or socket.gethostname(), host=host, port=int(port or NODE_PORT),
                                     vcpu=args.vcpu or vcpu, memory_mib=args.memory_mib or memory,
                                     start_ray=not args.ray_started)
    config = ServerConfig(data_dir=args.data_dir, cache_dir=args.cache_dir, database_url=args.store,
                          warm_pool=args.warm_pool, warm_pool_max=args.warm_pool_max, egress_hosts=args.egress_hosts,
                          freeze_idle_after=0.0,  # the fleet's relay reaches a box's channel around the freezer's meter
                          egress_system_dns=not args.egress_no_system_dns, trust_ca=tuple(args.trust_ca or ()),
                          max_builds=args.max_builds, image_dirs=tuple(args.image_dir or ()),
                          registry_pulls=args.registry_pulls, fleet=FleetConfig(ray=args.ray, shared_dir=args.shared),
                          allow_unlimited_boxes=args.allow_unlimited_boxes, otlp_endpoint=args.otlp_endpoint)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    raise_open_files()
    if not base_image.is_built(config.cache_dir):
        base_image.build(config.cache_dir, progress=lambda line: print(line, flush=True))
    return noderole.run(config, settings)


def cmd_nodes(args: argparse.Namespace) -> int:
    base, key = os.environ.get("HUTCH_BASE_URL", ""), os.environ.get("HUTCH_API_KEY", "")
    if not base or not key:
        print("set HUTCH_BASE_URL and HUTCH_API_KEY (see `hutch serve`'s output)", file=sys.stderr)
        return 1
    resp = httpx.get(f"{base.rstrip('/')}/v1/nodes", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    if resp.status_code != 200:
        print(f"hutch: {resp.text}", file=sys.stderr)
        return 1
    nodes = resp.json()
    if args.json:
        print(json.dumps(nodes, indent=2))
        return 0
    print(f"{'NAME':<16} {'HEALTH':<8} {'BOXES':>5} {'VCPU':>11} {'MEMORY MIB':>15}  ADDRESS")
    for n in nodes:
        print(f"{n['name']:<16} {n['health']:<8} {n['boxes']:>5} {n['vcpu_reserved']:>5}/{n['vcpu']:<5} "
              f"{n['memory_mib_reserved']:>7}/{n['memory_mib']:<7}  {n['url']}")
    return 0
