"""`hutch mcp serve`: hutch's sandboxes as an MCP server, over stdio or streamable HTTP."""

from __future__ import annotations

import argparse
import os
import sys

from hutch.cli.shared import EXIT_FAILURE, Subparsers


def add_mcp(sub: Subparsers) -> None:
    s = sub.add_parser("mcp", help="an MCP server of hutch's sandboxes: hutch mcp serve [--listen HOST:PORT]")
    s.add_argument("action", choices=["serve"])
    s.add_argument("--listen", metavar="HOST:PORT",
                   help="streamable HTTP at /mcp instead of stdio; clients send Authorization: Bearer $HUTCH_MCP_TOKEN")
    s.add_argument("--ephemeral", action="store_true",
                   help="one tool, sandbox_exec, each call in a fresh box deleted afterwards (fails closed)")
    s.set_defaults(fn=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from hutch.integrations.mcp_server import IsolationError, serve  # the mcp extra: only when asked for

    try:
        serve(args.listen, os.environ.get("HUTCH_MCP_TOKEN"), args.ephemeral)
    except IsolationError as e:
        print(f"hutch: {e}: refusing to serve", file=sys.stderr)
        return EXIT_FAILURE
    return 0
