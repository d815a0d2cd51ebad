"""The commands the server itself runs in a box, through its agent: a template build's steps, a
template's start command and readiness probe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from hutch.errors import ApiError, BuildFailure
from hutch.node.api import AgentProtocolError, BoxAgent, ChannelError, Command, Exited, Output, StartFailed

READY_POLL_SECONDS = 0.5
READY_PROBE_TIMEOUT = 30.0  # one run of the readiness probe


@dataclass
class Defaults:
    """What a command in a box starts with, unless the call says otherwise."""

    env: dict[str, str]
    cwd: str | None
    user: str | None  # "root" or "user"; None: the box user

    def command(self, cmd: str) -> Command:
        return Command(cmd, self.cwd, self.env, self.user)


class CommandError(Exception):
    """The command could not start (a missing working directory, say)."""


class StartError(Exception):
    """A template's start command or readiness probe failed; `code` is the build error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


async def run(agent: BoxAgent, command: str, defaults: Defaults, timeout: float | None,
              on_output: Callable[[str, str], None] | None = None) -> int | None:
    """Run a command to its end; output goes to `on_output(stream, text)` as it comes. Returns
    its exit code (None if it timed out); raises CommandError if it could not start, and an
    ApiError (or ChannelError) if the agent refuses it or the box stops answering."""
    events = await agent.exec(defaults.command(command), timeout)
    try:
        async for ev in events:
            match ev:
                case Output(stream, data) if on_output is not None:
                    on_output(stream, data)
                case StartFailed(message=message):
                    raise CommandError(message[:2000])
                case Exited(code, timed_out):
                    return None if timed_out else code
    finally:
        await events.aclose()
    raise AgentProtocolError("the command's stream ended without its exit")


async def start_and_wait_ready(agent: BoxAgent, start_cmd: str | None, ready_cmd: str | None, defaults: Defaults,
                               timeout: float, log: Callable[[str], None] | None = None) -> None:
    """Start a template's start command (left running, as a spawned process of the box) and poll
    its readiness probe until it exits 0. Raises StartError ("start_failed" when the start command
    ends or cannot start, "ready_timeout" when the probe never passes in `timeout` seconds)."""
    pid: int | None = None
    if start_cmd:
        try:
            pid = (await agent.spawn(defaults.command(start_cmd), None))["pid"]
        except (ApiError, ChannelError) as e:
            raise StartError(BuildFailure.START_FAILED, f"the start command could not start: {e}") from e
        if log:
            log(f"start command running (pid {pid})")
    if not ready_cmd:
        return
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        if pid is not None:
            await _check_running(agent, pid)
        remaining = deadline - time.monotonic()
        tries += 1
        try:
            code = await run(agent, ready_cmd, defaults, max(1.0, min(READY_PROBE_TIMEOUT, remaining)))
        except CommandError as e:
            raise StartError(BuildFailure.START_FAILED, f"the readiness probe could not start: {e}") from e
        except (ApiError, ChannelError) as e:
            raise StartError(BuildFailure.START_FAILED, f"the box stopped answering its readiness probe: {e}") from e
        if code == 0:
            if log:
                log(f"ready (probe passed on try {tries})")
            return
        if time.monotonic() + READY_POLL_SECONDS > deadline:
            raise StartError(BuildFailure.READY_TIMEOUT, f"the readiness probe did not pass within {timeout:g} s "
                                                         f"({tries} tries; last exit code {code})")
        await asyncio.sleep(READY_POLL_SECONDS)


async def _check_running(agent: BoxAgent, pid: int) -> None:
    """The start command must still run: one that ended will never make the box ready."""
    try:
        code = (await agent.process(pid))["exit_code"]
    except (ApiError, ChannelError) as e:
        raise StartError(BuildFailure.START_FAILED, f"the box's agent did not answer well: {e}") from None
    if code is not None:
        raise StartError(BuildFailure.START_FAILED, f"the start command exited with code {code} before the box was ready")
