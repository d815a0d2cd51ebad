"""Secrets a box's requests carry without the box seeing them: secret create/ls/rotate/rm/audit, and providers."""

from __future__ import annotations

import argparse
import json
import os
import sys

from hutch.cli.shared import Subparsers, info_json, table
from hutch.sdk import Provider, Secret


def add_secret(sub: Subparsers) -> None:
    s = sub.add_parser("secret", help="manage secrets: create, ls, rotate, rm, audit")
    s.add_argument("action", choices=["create", "ls", "rotate", "rm", "audit"])
    s.add_argument("name", nargs="?")
    s.add_argument("--provider", help="anthropic, openai, ... (hutch providers)")
    s.add_argument("--allowed-host", action="append", metavar="DOMAIN", help="where it may be sent (repeatable)")
    s.add_argument("--header", help="the header clients send it in (default: the provider's, else authorization)")
    s.add_argument("--format", default="{value}", help='the header value, "{value}" for the secret (e.g. "Bearer {value}")')
    s.add_argument("--from-env", metavar="VAR", help="read the value from this variable (default: stdin)")
    s.add_argument("--sandbox", help="audit: only this sandbox's requests")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_secret)


def add_providers(sub: Subparsers) -> None:
    s = sub.add_parser("providers", help="services a secret can name as its provider")
    s.set_defaults(fn=cmd_providers)


def _secret_value(args: argparse.Namespace) -> str:
    """Never from the command line, where `ps` shows it: a variable named by --from-env, else stdin."""
    if args.from_env:
        value = os.environ.get(args.from_env)
        if not value:
            raise SystemExit(f"hutch: ${args.from_env} is not set")
        return value
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("secret value: ")
    return sys.stdin.read().rstrip("\r\n")


def cmd_secret(args: argparse.Namespace) -> int:
    if args.action != "ls" and not args.name:
        raise SystemExit(f"hutch: secret {args.action} needs a secret name")
    if args.action == "create":
        secret = Secret.create(args.name, _secret_value(args), provider=args.provider,
                               allowed_hosts=args.allowed_host or None,
                               auth={"header": args.header, "format": args.format} if args.header else None)
        print(json.dumps(info_json(secret.info)) if args.json else f"created {secret.name}")
    elif args.action == "rotate":
        secret = Secret.get(args.name)
        secret.rotate(_secret_value(args))
        print(json.dumps(info_json(secret.info)) if args.json else f"rotated {secret.name} (version {secret.version})")
    elif args.action == "rm":
        Secret.delete_by_name(args.name)
        if not args.json:
            print(f"deleted {args.name}")
    elif args.action == "ls":
        secrets = Secret.list()
        if args.json:
            print(json.dumps([info_json(s.info) for s in secrets]))
        else:
            rows = [[s.name, s.provider or "-", ",".join(s.allowed_hosts), f"{s.auth.header}: {s.auth.format}",
                     str(s.version)] for s in secrets]
            print(table(rows, ["NAME", "PROVIDER", "HOSTS", "AUTH", "VERSION"]))
    elif args.action == "audit":
        page = Secret.audit_by_name(args.name, limit=args.limit, sandbox_id=args.sandbox)
        if args.json:
            print(json.dumps([info_json(e) for e in page.entries]))
        else:
            rows = [[e.at.strftime("%Y-%m-%d %H:%M:%S"), e.sandbox_id, e.env, e.host, e.method, e.path,
                     str(e.status or "-")] for e in page.entries]
            print(table(rows, ["TIME", "SANDBOX", "ENV", "HOST", "METHOD", "PATH", "STATUS"]))
    return 0


def cmd_providers(args: argparse.Namespace) -> int:
    providers = Provider.list()
    if args.json:
        print(json.dumps([info_json(p) for p in providers]))
        return 0
    rows = [[p.name, p.env, ",".join(p.allowed_hosts), f"{p.auth.header}: {p.auth.format}"] for p in providers]
    print(table(rows, ["PROVIDER", "ENV", "HOSTS", "AUTH"]))
    return 0
