"""What the E2B facade's modules share: the server's state, a call's team, and E2B's constants."""

from __future__ import annotations

import asyncio
import contextlib
import math
import posixpath
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError
from starlette.requests import Request

from hutch.node.box import USER

if TYPE_CHECKING:
    from hutch.server.state import State

# The envd version the facade claims: it passes the SDK's gates for stdin control, close_stdin,
# octet-stream uploads (0.5.7), file metadata (0.6.2), watch events' entries (0.6.3) and watches'
# allowNetworkMounts (0.6.4: a box has no network mounts to refuse).
ENVD_VERSION = "0.6.4"

StateGetter = Callable[[], "State"]
T = TypeVar("T")


def iso(seconds: float) -> str:
    """A time as E2B's API writes one: RFC 3339 in UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass
class Ctx:
    st: State
    team_id: str


def validation_message(e: ValidationError) -> str:
    """A pydantic error's first problem, as "<where>: <what>"."""
    problem = e.errors()[0]
    return f"{'.'.join(map(str, problem.get('loc', ())))}: {problem.get('msg', 'invalid')}"


def home_of(user: str | None) -> str:
    return "/root" if user == "root" else USER.home


def box_path(path: str, user: str | None) -> str:
    """A path as envd takes it (relative to the user's home) made absolute and normal."""
    normal = posixpath.normpath(posixpath.join(home_of(user), path or "."))
    return "/" + normal.lstrip("/")  # normpath keeps a leading "//"


async def with_keepalive(events: AsyncIterator[T], interval: float) -> AsyncGenerator[T | None, None]:
    """The events, with None after each `interval` seconds without one. The pending read is
    kept across the pauses, never cancelled (that would end the stream)."""
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            task, pending = pending, None
            try:
                item = task.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


DEFAULT_KEEPALIVE = 50.0
MIN_KEEPALIVE, MAX_KEEPALIVE = 1.0, 300.0


def header_number(request: Request, name: str) -> float:
    """A header's non-negative number; 0 when absent or not a finite number."""
    try:
        value = float(request.headers.get(name) or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


def keepalive(request: Request) -> float:
    """The client's Keepalive-Ping-Interval (seconds), held to 1..300."""
    given = header_number(request, "keepalive-ping-interval") or DEFAULT_KEEPALIVE
    return max(MIN_KEEPALIVE, min(given, MAX_KEEPALIVE))
