"""A sandbox's preview URLs: list its ports, publish one, print a (signed) link."""

from __future__ import annotations

import argparse
import json

from hutch.cli.shared import Subparsers, info_json, table
from hutch.sdk import Sandbox


def add_preview(sub: Subparsers) -> None:
    s = sub.add_parser("preview", help="a box's preview URLs: hutch preview ID [PORT [--publish | --private]]")
    s.add_argument("id")
    s.add_argument("port", type=int, nargs="?")
    s.add_argument("--publish", action="store_true", help="publish the port, public")
    s.add_argument("--private", action="store_true", help="publish the port, private, and print a signed link")
    s.add_argument("--expires", type=int, default=3600, metavar="SECONDS", help="the signed link's life (default 1 h)")
    s.set_defaults(fn=cmd_preview)


def cmd_preview(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    try:
        if args.port is None:
            ports = sb.list_preview_ports()
            if args.json:
                print(json.dumps([info_json(p) for p in ports]))
            else:
                print(table([[str(p.port), p.access, p.url] for p in ports], ["PORT", "ACCESS", "URL"]))
            return 0
        if args.private:
            sb.publish_preview_port(args.port, access="private")
            out = sb.get_signed_preview_url(args.port, expires_in_seconds=args.expires)
        else:
            if args.publish:
                sb.publish_preview_port(args.port, access="public")
            out = sb.get_preview_url(args.port)
    finally:
        sb.close()
    print(json.dumps({"url": out}) if args.json else out)
    return 0
