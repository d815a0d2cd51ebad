"""The `hutch` program: the top-level parser, which each command group fills, and `main`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hutch.cli import (
    commands,
    events,
    files,
    fleet,
    mcp,
    previews,
    sandboxes,
    secrets,
    server,
    snapshots,
    templates,
    volumes,
    webhooks,
)
from hutch.cli.shared import Subparsers, client_env, run_handler
from hutch.services.config import DEFAULT_DATA_DIR

# In the order `hutch --help` lists them
COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    server.add_serve, server.add_build_base, server.add_team_create, sandboxes.add_create, templates.add_template,
    snapshots.add_snapshot, volumes.add_volume, secrets.add_secret, previews.add_preview, mcp.add_mcp, secrets.add_providers,
    sandboxes.add_ls, sandboxes.add_info, commands.add_exec, commands.add_shell, sandboxes.add_netlog,
    sandboxes.add_audit, events.add_events, webhooks.add_webhook, commands.add_ps, files.add_cp, sandboxes.add_kill,
    fleet.add_node, fleet.add_nodes,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hutch", description="Self-hosted gVisor sandboxes for AI agents.")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="server state (default %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in COMMANDS:
        add(sub)
    return p


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line as a namespace whose `fn` runs it; exec's and shell's command is what follows `--`."""
    argv, rest = list(argv), []
    if "--" in argv:  # everything after the first `--` is the command, whatever options it holds
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if args.cmd in commands.TAKE_A_COMMAND and rest:
        args.command = rest
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.cmd not in server.SERVER_COMMANDS:
        client_env(args.data_dir)
    return run_handler(args)
