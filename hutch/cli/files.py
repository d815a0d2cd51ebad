"""Files between this machine and a sandbox: cp."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hutch.cli.shared import Subparsers, split_remote
from hutch.sdk import Sandbox


def add_cp(sub: Subparsers) -> None:
    s = sub.add_parser("cp", help="copy a file: hutch cp LOCAL ID:/path, or hutch cp ID:/path LOCAL ('-' is stdio)")
    s.add_argument("src")
    s.add_argument("dst")
    s.set_defaults(fn=cmd_cp)


def cmd_cp(args: argparse.Namespace) -> int:
    (src_box, src), (dst_box, dst) = split_remote(args.src), split_remote(args.dst)
    if (src_box is None) == (dst_box is None):
        raise SystemExit("hutch: cp copies between this machine and a sandbox: one side must be ID:/path")
    if src_box:
        sb = Sandbox.connect(src_box)
        try:
            data = sb.files.read(src)
        finally:
            sb.close()
        if dst == "-":
            sys.stdout.buffer.write(data)
        else:
            Path(dst).write_bytes(data)
    else:
        assert dst_box is not None
        data = sys.stdin.buffer.read() if src == "-" else Path(src).read_bytes()
        sb = Sandbox.connect(dst_box)
        try:
            sb.files.write(dst, data)
        finally:
            sb.close()
    return 0
