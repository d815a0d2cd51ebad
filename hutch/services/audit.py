"""The audit log of a sandbox: every command and file operation, who asked, and how it ended.

Append-only: a row is written once and no route changes or deletes one. A command gets two: "exec"
when it starts (or fails to), "exit" when it ends, with its exit code; the first is written before
any output is sent, so a client that leaves at once still leaves a trace. "Who" is the client's address and what it calls
itself: its X-Hutch-Actor header (the SDK sends HUTCH_ACTOR there; hutch's agent tools name
themselves), else its User-Agent.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from hutch.errors import ApiError
from hutch.services.models import AuditEntry, AuditPage, timestamp
from hutch.store import SandboxRecord, Store

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def describe(command: str, cwd: str | None, user: str | None, env: dict[str, str] | None) -> str:
    """A command as the log shows it: with where, as whom, and the names (never the values) of
    the variables the call set, which can carry the real command (sh -c "$X")."""
    extra = [f"cwd={cwd}"] if cwd else []
    extra += [f"user={user}"] if user else []
    extra += [f"env={','.join(sorted(env))}"] if env else []
    return command + (f"  [{' '.join(extra)}]" if extra else "")


def acting(user: str | None) -> str:
    """How the audit log notes who a file operation acted as."""
    return f"  [user={user}]" if user else ""


def actor(conn: HTTPConnection) -> str:
    said = conn.headers.get("x-hutch-actor") or conn.headers.get("user-agent") or "-"
    address = conn.client.host if conn.client else "-"
    return _UNPRINTABLE.sub("?", f"{address} {said}")[:300]


@dataclass
class Outcome:
    exit_code: int | None = None
    outcome: str = "ok"


class AuditLog:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add(self, rec: SandboxRecord, who: str, op: str, detail: str, outcome: Outcome | None = None) -> None:
        out = outcome or Outcome()
        self.store.add_audit(sandbox_id=rec.id, at=time.time(), actor=who, op=op, detail=detail[:4096],
                             exit_code=out.exit_code, outcome=out.outcome)

    @asynccontextmanager
    async def record(self, rec: SandboxRecord, who: str, op: str, detail: str) -> AsyncIterator[Outcome]:
        """Write the operation's row when the block ends, with what the block set or raised."""
        out = Outcome()
        try:
            yield out
        except ApiError as e:
            out.outcome = e.code
            raise
        except GeneratorExit:  # a streamed command's client went away; the command runs on
            out.outcome = "detached"
            raise
        except BaseException:
            out.outcome = "error"
            raise
        finally:
            self.add(rec, who, op, detail, out)

    def page(self, sandbox_id: str, limit: int, before: int | None) -> AuditPage:
        rows = self.store.audit_log(sandbox_id, limit, before)
        entries = [AuditEntry(**{k: v for k, v in r.__dict__.items() if k not in ("sandbox_id", "at")},
                              at=timestamp(r.at)) for r in rows]
        return AuditPage(entries=entries, next_before=rows[-1].id if len(rows) == limit else None)
