"""Sandboxes themselves: create, ls, info and kill, and the network and audit logs they keep."""

from __future__ import annotations

import argparse
import json

from hutch.cli.shared import Subparsers, info_json, mounts, pairs, table
from hutch.sdk import NetworkConfig, Sandbox


def add_create(sub: Subparsers) -> None:
    s = sub.add_parser("create", help="create a sandbox and print its id")
    s.add_argument("--name", default="cli")
    s.add_argument("--template", help="the template to boot from, by name or id (default hutch/base)")
    s.add_argument("--timeout", type=int, help="seconds of activity before it pauses")
    s.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE")
    s.add_argument("--env", "-e", action="append", metavar="KEY=VALUE")
    s.add_argument("--allow-out", action="append", metavar="CIDR|DOMAIN", help="egress allow rule (repeatable)")
    s.add_argument("--deny-out", action="append", metavar="CIDR", help="egress deny rule (repeatable)")
    s.add_argument("--secret", "-s", action="append", metavar="ENV=SECRET",
                   help="bind a secret to an env var: the box sees only a stand-in (repeatable)")
    s.add_argument("--volume", "-v", action="append", metavar="PATH=VOLUME[:ro]",
                   help="mount a volume (its name or id) at PATH in the box, read-only with :ro (repeatable)")
    s.set_defaults(fn=cmd_create)


def add_ls(sub: Subparsers) -> None:
    s = sub.add_parser("ls", help="list sandboxes")
    s.add_argument("--status")
    s.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE")
    s.set_defaults(fn=cmd_ls)


def add_info(sub: Subparsers) -> None:
    s = sub.add_parser("info", help="show a sandbox")
    s.add_argument("id")
    s.set_defaults(fn=cmd_info)


def add_netlog(sub: Subparsers) -> None:
    s = sub.add_parser("netlog", help="a sandbox's network log: every connection it tried, newest first")
    s.add_argument("id")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_netlog)


def add_audit(sub: Subparsers) -> None:
    s = sub.add_parser("audit", help="a sandbox's audit log: every command and file operation, newest first")
    s.add_argument("id")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_audit)


def add_kill(sub: Subparsers) -> None:
    s = sub.add_parser("kill", help="delete sandboxes")
    s.add_argument("ids", nargs="+")
    s.set_defaults(fn=cmd_kill)


def cmd_create(args: argparse.Namespace) -> int:
    network = NetworkConfig(allow_out=args.allow_out or [], deny_out=args.deny_out or []) \
        if args.allow_out or args.deny_out else None
    sb = Sandbox.create(args.name, from_template=args.template, timeout_seconds=args.timeout,
                        metadata=pairs(args.metadata, "--metadata") or None, env_vars=pairs(args.env, "--env") or None,
                        network=network, secrets=pairs(args.secret, "--secret") or None,
                        volumes=mounts(args.volume) or None)
    info = sb.get_info()
    sb.close()
    print(json.dumps(info_json(info)) if args.json else info.id)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    boxes = Sandbox.list(metadata=pairs(args.metadata, "--metadata") or None, status=args.status)
    if args.json:
        print(json.dumps([info_json(b) for b in boxes]))
        return 0
    rows = [[b.id, b.name, b.status, b.template, b.created_at.strftime("%Y-%m-%d %H:%M:%S"),
             ",".join(f"{k}={v}" for k, v in b.metadata.items())] for b in boxes]
    print(table(rows, ["ID", "NAME", "STATUS", "TEMPLATE", "CREATED", "METADATA"]))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    info = sb.get_info()
    sb.close()
    data = info_json(info)
    if args.json:
        print(json.dumps(data))
    else:
        print("\n".join(f"{k:<20} {v}" for k, v in data.items()))
    return 0


def cmd_netlog(args: argparse.Namespace) -> int:
    page = Sandbox.get_network_log_by_id(args.id, limit=args.limit)  # no resume: a paused box's log reads too
    if args.json:
        print(json.dumps([info_json(e) for e in page.entries]))
        return 0
    rows = [[e.at.strftime("%H:%M:%S"), f"{e.host}:{e.port}", e.ip or "-", e.verdict, e.rule,
             str(e.bytes_out), str(e.bytes_in)] for e in page.entries]
    print(table(rows, ["TIME", "DESTINATION", "ADDRESS", "VERDICT", "RULE", "OUT", "IN"]))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    page = Sandbox.get_audit_log_by_id(args.id, limit=args.limit)
    if args.json:
        print(json.dumps([info_json(e) for e in page.entries]))
        return 0
    rows = [[e.at.strftime("%Y-%m-%d %H:%M:%S"), e.actor, e.op, "-" if e.exit_code is None else str(e.exit_code),
             e.outcome, e.detail.replace("\n", " ")[:80]] for e in page.entries]
    print(table(rows, ["TIME", "WHO", "OP", "EXIT", "OUTCOME", "WHAT"]))
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    for sandbox_id in args.ids:
        Sandbox.kill_by_id(sandbox_id)
        if not args.json:
            print(f"killed {sandbox_id}")
    return 0
