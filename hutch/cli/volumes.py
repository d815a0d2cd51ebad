"""Volumes, a team's storage that outlives boxes: volume create, ls, info, rm, and cp to and from one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path, PurePosixPath

from hutch.cli.server import byte_size
from hutch.cli.shared import Subparsers, info_json, pairs, split_remote, table
from hutch.sdk import Volume, VolumeInfo


def mib_size(text: str) -> int:
    """A volume's size in MiB: a number is MiB, else a size with K, M, G or T that is whole MiB (2G, 512M)."""
    if text.strip().isdigit():
        return int(text)
    size = byte_size(text)
    if size % 2**20:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}")
    return size // 2**20


def add_volume(sub: Subparsers) -> None:
    s = sub.add_parser("volume", help="volumes, storage that outlives boxes: create, ls, info, rm, cp")
    vsub = s.add_subparsers(dest="volume_cmd", required=True)
    v = vsub.add_parser("create", help="create an empty volume and print its id")
    v.add_argument("name", help="unique in the team: letters, digits, '.', '_', '-'")
    v.add_argument("--size", type=mib_size, metavar="SIZE",
                   help="what its files may take: MiB, or with a unit, e.g. 2G (default: the server's, 1G)")
    v.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE", help="(repeatable)")
    v.set_defaults(fn=cmd_volume_create)

    v = vsub.add_parser("ls", help="list the team's volumes, oldest first")
    v.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE", help="only those with it (repeatable)")
    v.set_defaults(fn=cmd_volume_ls)

    v = vsub.add_parser("info", help="show a volume: its size, its use and the boxes that mount it")
    v.add_argument("volume", metavar="NAME_OR_ID")
    v.set_defaults(fn=cmd_volume_info)

    v = vsub.add_parser("rm", help="delete volumes and their files (not while a live box mounts one)")
    v.add_argument("volumes", nargs="+", metavar="NAME_OR_ID")
    v.set_defaults(fn=cmd_volume_rm)

    v = vsub.add_parser("cp", help="copy a file: hutch volume cp LOCAL VOLUME:/path, or hutch volume cp "
                                   "VOLUME:/path LOCAL ('-' is stdio); no box needed")
    v.add_argument("src")
    v.add_argument("dst")
    v.set_defaults(fn=cmd_volume_cp)


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:.1f} MiB"


def _row(v: VolumeInfo) -> list[str]:
    return [v.id, v.name, f"{v.size_mib} MiB", _mib(v.used_bytes), ",".join(v.mounted_by) or "-",
            v.created_at.strftime("%Y-%m-%d %H:%M:%S"), ",".join(f"{k}={val}" for k, val in v.metadata.items())]


HEADER = ["ID", "NAME", "SIZE", "USED", "MOUNTED BY", "CREATED", "METADATA"]


def cmd_volume_create(args: argparse.Namespace) -> int:
    vol = Volume.create(args.name, size_mib=args.size, metadata=pairs(args.metadata, "--metadata") or None)
    print(json.dumps(info_json(vol.info)) if args.json else vol.id)
    return 0


def cmd_volume_ls(args: argparse.Namespace) -> int:
    found = [v.info for v in Volume.list(metadata=pairs(args.metadata, "--metadata") or None)]
    print(json.dumps([info_json(v) for v in found]) if args.json else table([_row(v) for v in found], HEADER))
    return 0


def cmd_volume_info(args: argparse.Namespace) -> int:
    info = Volume.get(args.volume).info
    if args.json:
        print(json.dumps(info_json(info)))
        return 0
    shown = {"id": info.id, "name": info.name, "size": f"{info.size_mib} MiB", "used": _mib(info.used_bytes),
             "mounted_by": ",".join(info.mounted_by) or "-", "created_at": info.created_at,
             "metadata": ",".join(f"{k}={v}" for k, v in info.metadata.items()) or "-"}
    print("\n".join(f"{k:<20} {v}" for k, v in shown.items()))
    return 0


def cmd_volume_rm(args: argparse.Namespace) -> int:
    for ref in args.volumes:
        Volume.delete_by_id(ref)
        if not args.json:
            print(f"deleted {ref}")
    return 0


def cmd_volume_cp(args: argparse.Namespace) -> int:
    (src_vol, src), (dst_vol, dst) = split_remote(args.src), split_remote(args.dst)
    if (src_vol is None) == (dst_vol is None):
        raise SystemExit("hutch: volume cp copies between this machine and a volume: one side must be VOLUME:/path")
    try:
        if src_vol:
            data = Volume.get(src_vol).files.read(src)
            if dst == "-":
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            else:
                local = Path(dst)
                (local / PurePosixPath(src).name if local.is_dir() else local).write_bytes(data)  # as cp(1) does
        else:
            assert dst_vol is not None
            if dst.endswith("/"):  # VOLUME:/dir/ is the directory: the file keeps its name there
                if src == "-":
                    raise SystemExit("hutch: volume cp from stdin needs a file name: VOLUME:/dir/NAME")
                dst += Path(src).name
            data = sys.stdin.buffer.read() if src == "-" else Path(src).read_bytes()
            Volume.get(dst_vol).files.write(dst, data)
    except OSError as e:  # the local side: the volume's are the SDK's errors
        raise SystemExit(f"hutch: {e.filename}: {e.strerror}") from None
    return 0
