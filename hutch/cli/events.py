"""The team's events: hutch events [--after N] [--type T] [--sandbox ID] [--follow]."""

from __future__ import annotations

import argparse
import json

from hutch.cli.shared import Subparsers, info_json
from hutch.sdk import Event, Events


def add_events(sub: Subparsers) -> None:
    s = sub.add_parser("events", help="what happened to the team's sandboxes, snapshots and builds, in order")
    s.add_argument("--after", type=int, default=0, help="the cursor: events past this id (default: all kept)")
    s.add_argument("--type", action="append", default=[], metavar="TYPE", help="only this type (repeatable)")
    s.add_argument("--sandbox", help="only this sandbox's")
    s.add_argument("--limit", type=int, default=100, help="at most this many (without --follow)")
    s.add_argument("--follow", action="store_true", help="then go on printing events as they happen")
    s.set_defaults(fn=cmd_events)


def _line(e: Event, as_json: bool) -> str:
    """One line an event: printed as it comes (a table would wait for the last)."""
    if as_json:
        return json.dumps(info_json(e))
    data = " ".join(f"{k}={json.dumps(v)}" for k, v in e.data.items())
    return f"{e.id}  {e.at.strftime('%Y-%m-%d %H:%M:%S')}  {e.type:<24}  {e.sandbox_id or '-':<36}  {data}".rstrip()


def cmd_events(args: argparse.Namespace) -> int:
    if args.follow:  # the stream: what is past the cursor, then each event as it happens
        for e in Events.stream(after=args.after, types=args.type, sandbox_id=args.sandbox):
            print(_line(e, args.json), flush=True)
        return 0
    for e in Events.list(after=args.after, types=args.type, sandbox_id=args.sandbox, limit=args.limit).events:
        print(_line(e, args.json), flush=True)
    return 0
