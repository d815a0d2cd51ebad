"""Commands in a sandbox: exec (one command, its output streamed), shell (a terminal) and ps."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict

from hutch.cli.shared import Subparsers, exit_status, info_json, pairs, table
from hutch.sdk import Sandbox

# They take everything after `--` as the command
TAKE_A_COMMAND = ("exec", "shell")


def add_exec(sub: Subparsers) -> None:
    s = sub.add_parser("exec", help="run a command in a sandbox: hutch exec ID -- CMD ...")
    s.add_argument("id")
    s.add_argument("--cwd")
    s.add_argument("--env", "-e", action="append", metavar="KEY=VALUE")
    s.add_argument("--timeout", type=float)
    s.add_argument("--user", choices=["user", "root"])
    s.add_argument("command", nargs="*", help="everything after --")
    s.set_defaults(fn=cmd_exec)


def add_shell(sub: Subparsers) -> None:
    s = sub.add_parser("shell", help="an interactive terminal in a sandbox: hutch shell ID [-- CMD ...]")
    s.add_argument("id")
    s.add_argument("--user", choices=["user", "root"])
    s.add_argument("command", nargs="*", help="everything after -- (default: a login shell)")
    s.set_defaults(fn=cmd_shell)


def add_ps(sub: Subparsers) -> None:
    s = sub.add_parser("ps", help="the processes spawned in a sandbox that still run")
    s.add_argument("id")
    s.set_defaults(fn=cmd_ps)


def _command_line(words: Sequence[str]) -> str:
    """One word is a shell line already (`-- 'echo $X'`); several are quoted into one."""
    return words[0] if len(words) == 1 else shlex.join(words)


def cmd_exec(args: argparse.Namespace) -> int:
    if not args.command:
        raise SystemExit("hutch: exec needs a command after --")
    sb = Sandbox.connect(args.id)
    try:
        result = sb.commands.run(
            _command_line(args.command), cwd=args.cwd, env=pairs(args.env, "--env") or None,
            timeout_seconds=args.timeout, user=args.user,
            on_stdout=None if args.json else lambda d: (sys.stdout.write(d), sys.stdout.flush()),
            on_stderr=None if args.json else lambda d: (sys.stderr.write(d), sys.stderr.flush()))
    finally:
        sb.close()
    if args.json:
        print(json.dumps(asdict(result)))
    return exit_status(result.exit_code)


def cmd_shell(args: argparse.Namespace) -> int:
    import asyncio

    from hutch.shell import run_shell

    if not os.isatty(sys.stdin.fileno()) and not args.command:
        raise SystemExit("hutch: shell needs a terminal (or a command after --)")
    line = _command_line(args.command) if args.command else None
    return exit_status(asyncio.run(run_shell(args.id, line, args.user)))


def cmd_ps(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    try:
        procs = sb.commands.list()
    finally:
        sb.close()
    if args.json:
        print(json.dumps([info_json(p) for p in procs]))
        return 0
    rows = [[str(p.pid), p.user, "yes" if p.pty else "no", p.started_at.strftime("%Y-%m-%d %H:%M:%S"),
             p.command.replace("\n", " ")[:80]] for p in procs]
    print(table(rows, ["PID", "USER", "TTY", "STARTED", "COMMAND"]))
    return 0
