"""Snapshots of boxes: snapshot take/ls/info/rm, boot (boxes from one) and fork (of a box)."""

from __future__ import annotations

import argparse
import json

from hutch.cli.shared import Subparsers, info_json, pairs, table
from hutch.sdk import Sandbox, Snapshot, SnapshotInfo


def add_snapshot(sub: Subparsers) -> None:
    s = sub.add_parser("snapshot", help="snapshots of boxes: take, ls, info, rm, boot, fork")
    s.add_argument("action", choices=["take", "ls", "info", "rm", "boot", "fork"])
    s.add_argument("target", nargs="?", help="take, fork: a sandbox id; info, rm, boot: a snapshot's id or name")
    s.add_argument("--name", help="take: the snapshot's name; boot, fork: the new boxes' name")
    s.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE",
                   help="take: the snapshot's; ls: only those with it; boot, fork: the boxes' (repeatable)")
    s.add_argument("--sandbox", help="ls: only the snapshots of this box")
    s.add_argument("--count", type=int, default=1, help="boot, fork: how many boxes (at most 20)")
    s.set_defaults(fn=cmd_snapshot)


def _row(s: SnapshotInfo) -> list[str]:
    return [s.id, s.name or "-", s.template, f"{s.size_bytes / 2**20:.1f} MiB", s.source_sandbox_id or "-",
            s.created_at.strftime("%Y-%m-%d %H:%M:%S")]


HEADER = ["ID", "NAME", "TEMPLATE", "SIZE", "SOURCE", "CREATED"]


def cmd_snapshot(args: argparse.Namespace) -> int:
    if args.action != "ls" and not args.target:
        what = "sandbox id" if args.action in ("take", "fork") else "snapshot"
        raise SystemExit(f"hutch: snapshot {args.action} needs a {what}")
    metadata = pairs(args.metadata, "--metadata") or None
    if args.action == "take":
        box = Sandbox.connect(args.target)
        try:
            info = box.snapshot(name=args.name, metadata=metadata)
        finally:
            box.close()
        print(json.dumps(info_json(info)) if args.json else info.id)
    elif args.action == "ls":
        found = [s.info for s in Snapshot.list(metadata=metadata, sandbox_id=args.sandbox)]
        print(json.dumps([info_json(s) for s in found]) if args.json else table([_row(s) for s in found], HEADER))
    elif args.action == "info":
        info = Snapshot.get(args.target).info
        print(json.dumps(info_json(info)) if args.json else table([_row(info)], HEADER))
    elif args.action == "rm":
        Snapshot.delete_by_id(args.target)
        if not args.json:
            print(f"deleted {args.target}")
    else:
        if args.action == "boot":
            boxes = Sandbox.from_snapshot(args.target, args.count, name=args.name, metadata=metadata)
        else:
            source = Sandbox.connect(args.target)
            try:
                boxes = source.fork(args.count, name=args.name, metadata=metadata)
            finally:
                source.close()
        print(json.dumps([box.id for box in boxes]) if args.json else "\n".join(box.id for box in boxes))
        for box in boxes:
            box.close()
    return 0
