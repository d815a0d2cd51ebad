"""A sandbox's commands: one run to its end over a stream of events, and long-lived spawned processes."""

from __future__ import annotations

import contextlib
import json
import signal as signals
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode, ServerCode
from hutch.sdk.deadline import within
from hutch.sdk.errors import ConflictError, SandboxError, SandboxTimeoutError, ServerError, ValidationError
from hutch.sdk.flow import Await, Call, Callback, Flow, NextLine
from hutch.sdk.ops.sandboxes import STREAM_TIMEOUT, DataPlane, send_data
from hutch.sdk.process import AsyncProcess
from hutch.sdk.types import CommandResult, ProcessInfo

OutputCallback = Callable[[str], Any]  # on the async SDK it may also return an awaitable


@dataclass
class _Output:
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def run(dp: DataPlane, command: str, *, cwd: str | None, env: dict[str, str] | None,
        timeout_seconds: float | None, user: str | None, on_stdout: OutputCallback | None,
        on_stderr: OutputCallback | None) -> Flow[CommandResult]:
    """Run a command to its end over a server-sent event stream, passing output to the callbacks
    as it comes; a non-zero exit is a result, a timeout is a SandboxTimeoutError."""
    body = {"command": command, "cwd": cwd, "env": env, "timeout_seconds": timeout_seconds, "user": user}
    yield from send_data(dp, lambda: Call(
        *routes.RUN_COMMAND.at(dp.url), {**dp.headers(), "Accept": "text/event-stream"},
        json={k: v for k, v in body.items() if v is not None}, stream=True, timeout=STREAM_TIMEOUT))
    out = _Output()
    event, data = "message", []
    while True:
        try:
            line = yield NextLine()
        except httpx.TimeoutException as e:
            raise SandboxTimeoutError("the command's stream went silent; the command may still be running "
                                      "in the sandbox", code=SdkCode.STREAM_TIMEOUT) from e
        except httpx.TransportError:
            line = None  # the connection broke: an early end, said below
        if line is None:
            raise ServerError("the command's stream ended before it finished; the command may still "
                              "be running in the sandbox", code=SdkCode.STREAM_ENDED)
        if line.startswith(":"):
            continue  # keep-alive
        if line:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            continue
        if data:
            payload = json.loads("\n".join(data))
            result = yield from _on_event(event, payload, out, on_stdout, on_stderr)
            if result is not None:
                return result
        event, data = "message", []


def _on_event(event: str, payload: dict[str, Any], out: _Output, on_stdout: OutputCallback | None,
              on_stderr: OutputCallback | None) -> Flow[CommandResult | None]:
    if event in ("stdout", "stderr"):
        text = payload["data"]
        (out.stdout if event == "stdout" else out.stderr).append(text)
        callback = on_stdout if event == "stdout" else on_stderr
        if callback is not None:
            yield Callback(callback, text)
    elif event == "exit":
        stdout, stderr = "".join(out.stdout), "".join(out.stderr)
        if payload["timed_out"]:
            err = SandboxTimeoutError("the command ran out of time and was killed with its process group",
                                      code=SdkCode.COMMAND_TIMEOUT)
            err.stdout, err.stderr = stdout, stderr
            raise err
        return CommandResult(stdout=stdout, stderr=stderr, exit_code=payload["exit_code"])
    elif event == "error":
        code = payload.get("code", SdkCode.ERROR)
        cls = ConflictError if code == ServerCode.SANDBOX_FAILED else ServerError
        raise cls(payload.get("message", "the command failed"), code=code)
    return None


def _pty(pty: tuple[int, int] | None) -> dict[str, int] | None:
    if pty is None:
        return None
    rows, cols = pty
    if not all(type(v) is int and 1 <= v <= 1000 for v in (rows, cols)):
        raise ValidationError("pty takes rows and cols within 1..1000", code=SdkCode.INVALID_ARGUMENT)
    return {"rows": rows, "cols": cols}


def spawn(dp: DataPlane, command: str, *, cwd: str | None, env: dict[str, str] | None, user: str | None,
          pty: tuple[int, int] | None, on_stdout: OutputCallback | None,
          on_stderr: OutputCallback | None) -> Flow[AsyncProcess]:
    """Start a long-lived process and attach to it; if the attach fails, kill it (nobody could ever
    reach it)."""
    body = {"command": command, "cwd": cwd, "env": env, "user": user, "pty": _pty(pty)}
    reply = yield from send_data(dp, lambda: Call(*routes.SPAWN_COMMAND.at(dp.url), dp.headers(),
                                                  json={k: v for k, v in body.items() if v is not None}))
    pid: int = json.loads(reply.body)["pid"]
    try:
        return (yield from attach(dp, pid, on_stdout, on_stderr))
    except GeneratorExit:
        raise
    except BaseException:
        with contextlib.suppress(SandboxError):
            yield from signal_process(dp, pid, signals.SIGKILL, None)
        raise


def attach(dp: DataPlane, pid: int, on_stdout: OutputCallback | None,
           on_stderr: OutputCallback | None) -> Flow[AsyncProcess]:
    """Attach to a spawned process over its WebSocket: async underneath, on both fronts."""
    process: AsyncProcess = yield Await(lambda: AsyncProcess.attach(dp, pid, on_stdout, on_stderr))
    return process


def list_processes(dp: DataPlane, timeout: float | None) -> Flow[list[ProcessInfo]]:
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.LIST_PROCESSES.at(dp.url), dp.headers())))
    return [ProcessInfo.from_json(d) for d in json.loads(reply.body)]


def signal_process(dp: DataPlane, pid: int, signal: int, timeout: float | None) -> Flow[bool]:
    """Signal a spawned process' group; False if it had already ended."""
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.SIGNAL_PROCESS.at(dp.url, pid=pid),
                                                                  dp.headers(), json={"signal": int(signal)})))
    return bool(json.loads(reply.body)["signalled"])
