"""What every command group uses: KEY=VALUE arguments, tables and JSON, the client's environment, errors and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeAlias

from hutch.sdk import (
    AuditEntry,
    BuildInfo,
    BuildLogLine,
    Event,
    NetworkLogEntry,
    PreviewPort,
    ProcessInfo,
    Provider,
    SandboxError,
    SandboxInfo,
    SecretAuditEntry,
    SecretInfo,
    SnapshotInfo,
    TemplateInfo,
    VolumeInfo,
    WebhookDelivery,
    WebhookInfo,
)
from hutch.sdk.codes import SdkCode
from hutch.sdk.types import step_body
from hutch.sdk.volumes import VolumeMounts

# argparse has no public name for what add_subparsers returns
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler: TypeAlias = Callable[[argparse.Namespace], int]

CLIENT_ENV = "client.env"  # in the data dir: how a client on the server's machine reaches it

EXIT_FAILURE = 1
EXIT_TIMEOUT = 124  # a command ran out of time, as timeout(1) says it
EXIT_INTERRUPTED = 130  # ^C
EXIT_BROKEN_PIPE = 141  # the reader of stdout left


def client_env(data_dir: Path) -> None:
    """Fill HUTCH_API_KEY and HUTCH_BASE_URL from the local server's client.env when unset."""
    env_file = data_dir / CLIENT_ENV
    if os.environ.get("HUTCH_API_KEY") or not env_file.exists():
        return
    try:
        lines = env_file.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        key, _, value = line.partition("=")
        if key in ("HUTCH_API_KEY", "HUTCH_BASE_URL"):
            os.environ.setdefault(key, value)


def pairs(items: Sequence[str] | None, what: str) -> dict[str, str]:
    """Repeated KEY=VALUE arguments (`what` names the flag in the error) as a dict."""
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"hutch: {what} must be KEY=VALUE, not {item!r}")
        result[key] = value
    return result


def mounts(items: Sequence[str] | None) -> VolumeMounts:
    """Repeated --volume PATH=VOLUME[:ro] arguments as a create's `volumes`: a volume by its name or
    id, read-only with :ro (:rw, the default, may be said too)."""
    result: dict[str, str | dict[str, Any]] = {}
    for item in items or []:
        path, sep, volume = item.partition("=")
        name, colon, mode = volume.partition(":")
        if not sep or not path.startswith("/") or not name or (colon and mode not in ("ro", "rw")):
            raise SystemExit(f"hutch: --volume must be PATH=VOLUME or PATH=VOLUME:ro (PATH absolute), not {item!r}")
        if path in result:
            raise SystemExit(f"hutch: --volume mounts two volumes at {path}")
        result[path] = {"volume": name, "read_only": True} if mode == "ro" else name
    return result


def split_remote(spec: str) -> tuple[str | None, str]:
    """cp's NAME:/path (a box's or a volume's) as (NAME, /path); anything else is a local path, (None, spec)."""
    name, sep, path = spec.partition(":")
    return (name, path) if sep and name and path.startswith("/") else (None, spec)


def info_json(info: SandboxInfo | ProcessInfo | NetworkLogEntry | AuditEntry | PreviewPort | SecretInfo
              | SecretAuditEntry | Provider | TemplateInfo | BuildInfo | BuildLogLine | SnapshotInfo
              | VolumeInfo | Event | WebhookInfo | WebhookDelivery) -> dict[str, Any]:
    """An SDK record as --json prints it: times as strings, a template's steps as the HTTP API spells them."""
    data: dict[str, Any] = json.loads(json.dumps(asdict(info), default=str))
    if isinstance(info, TemplateInfo):
        data["steps"] = [step_body(step) for step in info.steps]
        data = {("from" if k == "from_" else k): v for k, v in data.items()}
    return data


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [header, *rows])


def exit_status(code: int) -> int:
    """A box command's exit code as this process's: one that no process can exit with is a failure."""
    return code if 0 <= code < 256 else EXIT_FAILURE


def report_error(e: SandboxError, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": {"code": e.code, "message": e.message, "status_code": e.status_code}}),
              file=sys.stderr)
    else:
        print(f"hutch: {e.message} ({e.code})", file=sys.stderr)


def run_handler(args: argparse.Namespace) -> int:
    """Run the parsed command's handler; the SDK's errors, ^C and a closed stdout become exit codes."""
    handler: Handler = args.fn
    try:
        return handler(args)
    except SandboxError as e:
        report_error(e, args.json)
        return EXIT_TIMEOUT if e.code == SdkCode.COMMAND_TIMEOUT else EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `hutch template logs NAME | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_BROKEN_PIPE


def fleet_installed() -> bool:
    """Whether Ray, which a fleet member needs, is installed (else the reason is printed)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        print("a fleet member needs Ray: pip install 'hutch[fleet]'", file=sys.stderr)
        return False
    return True
