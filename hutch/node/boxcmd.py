"""Talking to a box's agent: reading its answers and events as hostile input (shared with the
data plane, which relays a client's commands), and the commands the server itself runs straight on
a node `Box`: a template build's steps, a template's start command and readiness probe.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from hutch.errors import BuildFailure
from hutch.guest import protocol
from hutch.node.node import Box

# The agent pings every 10 s while a command runs: three missed pings mean the box is gone.
EXEC_TIMEOUT = httpx.Timeout(connect=5.0, read=35.0, write=35.0, pool=10.0)
MAX_EVENT_BYTES = 8 * 2**20  # one event line (the agent sends at most 256 KiB of output in one)
MAX_REPLY_BYTES = 64 * 2**10  # an error body or a small JSON answer
READY_POLL_SECONDS = 0.5
READY_PROBE_TIMEOUT = 30.0  # one run of the readiness probe


class AgentProtocolError(Exception):
    """The agent sent something that is not the protocol."""


async def read_capped(resp: httpx.Response, limit: int = MAX_REPLY_BYTES) -> bytes:
    body = bytearray()
    async for chunk in resp.aiter_raw():
        body += chunk
        if len(body) > limit:
            raise AgentProtocolError("the agent's answer is too long")
    return bytes(body)


async def event_lines(resp: httpx.Response) -> AsyncIterator[str]:
    """The body's lines, none longer than MAX_EVENT_BYTES."""
    buf = b""
    async for chunk in resp.aiter_raw():
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
        if len(buf) > MAX_EVENT_BYTES:
            raise AgentProtocolError("an event line from the agent is too long")
    if buf:
        yield buf.decode("utf-8", "replace")


def parse_event(line: str) -> dict[str, Any]:
    """One exec or process event, checked: its kind is known and its fields have their types."""
    try:
        ev = json.loads(line)
        kind = ev["t"]
        if "s" in ev and type(ev["s"]) is not int:
            ok = False
        elif kind in (protocol.EVENT_STDOUT, protocol.EVENT_STDERR):
            ok = isinstance(ev["d"], str)
        elif kind == protocol.EVENT_EXIT:
            ok = (ev["code"] is None or type(ev["code"]) is int) and isinstance(ev["timed_out"], bool)
        elif kind == protocol.EVENT_START:
            ok = type(ev["pid"]) is int
        elif kind == protocol.EVENT_ERROR:
            ok = isinstance(ev["code"], str) and isinstance(ev["message"], str)
        elif kind == protocol.EVENT_DROPPED:
            ok = type(ev["chars"]) is int
        else:
            ok = kind == protocol.EVENT_PING
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise AgentProtocolError("the agent sent a malformed event")
    result: dict[str, Any] = ev
    return result


@dataclass
class Defaults:
    """What a command in a box starts with, unless the call says otherwise."""

    env: dict[str, str]
    cwd: str | None
    user: str | None  # "root" or "user"; None: the box user


class CommandError(Exception):
    """The command could not start (a missing working directory, say)."""


class StartError(Exception):
    """A template's start command or readiness probe failed; `code` is the build error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def run(box: Box, command: str, defaults: Defaults, timeout: float | None,
              on_output: Callable[[str, str], None] | None = None) -> int | None:
    """Run a command to its end; output goes to `on_output(stream, text)` as it comes. Returns
    its exit code (None if it timed out); raises CommandError if it could not start, and
    AgentProtocolError if the box stops answering."""
    body = {"cmd": command, "cwd": defaults.cwd, "env": defaults.env, "user": defaults.user, "timeout": timeout}
    async with box.agent.stream("POST", protocol.EXEC, json=body, timeout=EXEC_TIMEOUT) as resp:
        if resp.status_code != 200:
            raise AgentProtocolError(f"the agent refused the command ({resp.status_code}): "
                                     f"{(await resp.aread())[:500].decode(errors='replace')}")
        async for line in event_lines(resp):
            if not line:
                continue
            ev = parse_event(line)
            if ev["t"] in (protocol.EVENT_STDOUT, protocol.EVENT_STDERR) and on_output is not None:
                on_output(ev["t"], ev["d"])
            elif ev["t"] == protocol.EVENT_ERROR:
                raise CommandError(ev["message"][:2000])
            elif ev["t"] == protocol.EVENT_EXIT:
                return None if ev["timed_out"] else ev["code"]
    raise AgentProtocolError("the command's stream ended without its exit")


async def _ask(box: Box, method: str, route: str, **kwargs: Any) -> dict[str, Any]:
    """A small JSON answer of the agent's, read as hostile (its size capped)."""
    try:
        async with box.agent.stream(method, route, timeout=EXEC_TIMEOUT, **kwargs) as resp:
            answer = json.loads(await read_capped(resp))
            status = resp.status_code
    except (ValueError, AgentProtocolError, httpx.HTTPError) as e:
        raise StartError(BuildFailure.START_FAILED, f"the box's agent did not answer well: {e}") from None
    if status != 200 or not isinstance(answer, dict):
        message = answer.get("message") if isinstance(answer, dict) else None
        raise StartError(BuildFailure.START_FAILED, f"the agent answered {status}: {str(message or '')[:500]}")
    return answer


async def start_and_wait_ready(box: Box, start_cmd: str | None, ready_cmd: str | None, defaults: Defaults,
                               timeout: float, log: Callable[[str], None] | None = None) -> None:
    """Start a template's start command (left running, as a spawned process of the box) and poll
    its readiness probe until it exits 0. Raises StartError ("start_failed" when the start command
    ends or cannot start, "ready_timeout" when the probe never passes in `timeout` seconds)."""
    pid: int | None = None
    body = {"cwd": defaults.cwd, "env": defaults.env, "user": defaults.user}
    if start_cmd:
        try:
            pid = int((await _ask(box, "POST", protocol.PROCS, json={"cmd": start_cmd, **body}))["pid"])
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as e:
            raise StartError(BuildFailure.START_FAILED, f"the start command could not start: {e}") from e
        if log:
            log(f"start command running (pid {pid})")
    if not ready_cmd:
        return
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        if pid is not None:
            await _check_running(box, pid)
        remaining = deadline - time.monotonic()
        tries += 1
        try:
            code = await run(box, ready_cmd, defaults, max(1.0, min(READY_PROBE_TIMEOUT, remaining)))
        except CommandError as e:
            raise StartError(BuildFailure.START_FAILED, f"the readiness probe could not start: {e}") from e
        except (httpx.HTTPError, AgentProtocolError) as e:
            raise StartError(BuildFailure.START_FAILED, f"the box stopped answering its readiness probe: {e}") from e
        if code == 0:
            if log:
                log(f"ready (probe passed on try {tries})")
            return
        if time.monotonic() + READY_POLL_SECONDS > deadline:
            raise StartError(BuildFailure.READY_TIMEOUT, f"the readiness probe did not pass within {timeout:g} s "
                                              f"({tries} tries; last exit code {code})")
        await asyncio.sleep(READY_POLL_SECONDS)


async def _check_running(box: Box, pid: int) -> None:
    """The start command must still run: one that ended will never make the box ready."""
    code = (await _ask(box, "GET", f"{protocol.PROCS}/{pid}")).get("exit_code")
    if code is not None:
        raise StartError(BuildFailure.START_FAILED, f"the start command exited with code {code} before the box was ready")
