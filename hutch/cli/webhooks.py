"""Webhooks, endpoints the team's events are POSTed to: webhook create, ls, info, update, rm,
deliveries."""

from __future__ import annotations

import argparse
import json

from hutch.cli.shared import Subparsers, info_json, table
from hutch.sdk import WebhookInfo, Webhooks


def add_webhook(sub: Subparsers) -> None:
    s = sub.add_parser("webhook", help="webhooks, endpoints the team's events are POSTed to, signed: "
                                       "create, ls, info, update, rm, deliveries")
    wsub = s.add_subparsers(dest="webhook_cmd", required=True)
    w = wsub.add_parser("create", help="register a URL for the team's events from now on; print its id and secret")
    w.add_argument("url")
    w.add_argument("--type", action="append", default=[], metavar="TYPE",
                   help="only this event type (repeatable; default: every type)")
    w.add_argument("--name", default="")
    w.add_argument("--secret", help="sign with this (at least 16 characters; default: hutch makes one)")
    w.add_argument("--disabled", action="store_true", help="registered, but sent nothing until enabled")
    w.set_defaults(fn=cmd_webhook_create)

    w = wsub.add_parser("ls", help="list the team's webhooks")
    w.set_defaults(fn=cmd_webhook_ls)

    w = wsub.add_parser("info", help="show a webhook, and why hutch disabled it if it did")
    w.add_argument("webhook", metavar="ID")
    w.set_defaults(fn=cmd_webhook_info)

    w = wsub.add_parser("update", help="change a webhook; --enabled true after hutch disabled it goes on where it stopped")
    w.add_argument("webhook", metavar="ID")
    w.add_argument("--url")
    w.add_argument("--type", action="append", metavar="TYPE", help="only this event type (repeatable)")
    w.add_argument("--name")
    w.add_argument("--secret")
    w.add_argument("--enabled", choices=("true", "false"), help="send it events (true) or not (false)")
    w.set_defaults(fn=cmd_webhook_update)

    w = wsub.add_parser("rm", help="delete webhooks")
    w.add_argument("webhooks", nargs="+", metavar="ID")
    w.set_defaults(fn=cmd_webhook_rm)

    w = wsub.add_parser("deliveries", help="a webhook's delivery attempts, newest first")
    w.add_argument("webhook", metavar="ID")
    w.add_argument("--limit", type=int, default=50)
    w.set_defaults(fn=cmd_webhook_deliveries)


def _state(w: WebhookInfo) -> str:
    return "enabled" if w.enabled else f"disabled ({w.disabled_reason})" if w.disabled_reason else "disabled"


def cmd_webhook_create(args: argparse.Namespace) -> int:
    hook = Webhooks.create(args.url, types=args.type, name=args.name, secret=args.secret, enabled=not args.disabled)
    print(json.dumps(info_json(hook)) if args.json else f"{hook.id}\n{hook.secret}")
    return 0


def cmd_webhook_ls(args: argparse.Namespace) -> int:
    found = Webhooks.list()
    rows = [[w.id, w.name or "-", w.url, ",".join(w.types) or "all", _state(w)] for w in found]
    print(json.dumps([info_json(w) for w in found]) if args.json
          else table(rows, ["ID", "NAME", "URL", "TYPES", "STATE"]))
    return 0


def cmd_webhook_info(args: argparse.Namespace) -> int:
    w = Webhooks.get(args.webhook)
    if args.json:
        print(json.dumps(info_json(w)))
        return 0
    shown = {"id": w.id, "name": w.name or "-", "url": w.url, "types": ",".join(w.types) or "all",
             "state": _state(w), "created_at": w.created_at, "updated_at": w.updated_at}
    print("\n".join(f"{k:<12} {v}" for k, v in shown.items()))
    return 0


def cmd_webhook_update(args: argparse.Namespace) -> int:
    enabled = None if args.enabled is None else args.enabled == "true"
    w = Webhooks.update(args.webhook, url=args.url, types=args.type, name=args.name, secret=args.secret,
                        enabled=enabled)
    print(json.dumps(info_json(w)) if args.json else f"{w.id}  {_state(w)}")
    return 0


def cmd_webhook_rm(args: argparse.Namespace) -> int:
    for ref in args.webhooks:
        Webhooks.delete(ref)
        if not args.json:
            print(f"deleted {ref}")
    return 0


def cmd_webhook_deliveries(args: argparse.Namespace) -> int:
    found = Webhooks.deliveries(args.webhook, limit=args.limit)
    rows = [[str(d.id), d.at.strftime("%Y-%m-%d %H:%M:%S"), str(d.event_id), d.event_type, str(d.attempt),
             str(d.status or "-"), "ok" if d.ok else (d.error or "failed"), f"{d.duration_ms} ms"] for d in found]
    print(json.dumps([info_json(d) for d in found]) if args.json
          else table(rows, ["ID", "AT", "EVENT", "TYPE", "ATTEMPT", "STATUS", "OUTCOME", "TOOK"]))
    return 0
