"""The data plane's work: relaying commands and files between a client and a box's agent.

Bodies stream through in both directions; nothing here holds a whole file or a command's whole
output in memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from hutch.guest import protocol
from hutch.server.errors import ApiError
from hutch.server.models import CommandResult, RunCommand
from hutch.server.sandboxes import Sandboxes
from hutch.store import SandboxRecord

# The agent pings every 10 s while a command runs: three missed pings mean the box is gone.
EXEC_TIMEOUT = httpx.Timeout(connect=5.0, read=35.0, write=35.0, pool=10.0)
FILE_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=120.0, pool=10.0)


def check_path(path: str) -> str:
    problem = protocol.path_problem(path)
    if problem:
        raise ApiError(400, "invalid_path", f"{problem}: {path!r}")
    return path


async def _agent_error(resp: httpx.Response) -> ApiError:
    body = await resp.aread()
    try:
        err = json.loads(body)
        return ApiError(resp.status_code if resp.status_code < 500 else 502, err["code"], err["message"])
    except (ValueError, KeyError, TypeError):
        return ApiError(502, "agent_error", f"the sandbox's agent answered {resp.status_code}")


@dataclass
class CommandStream:
    """A started command: its pid, then its events until it exits."""

    pid: int
    events: AsyncIterator[dict[str, Any]]


class DataPlane:
    def __init__(self, sandboxes: Sandboxes, max_file_bytes: int) -> None:
        self.sandboxes = sandboxes
        self.max_file_bytes = max_file_bytes

    async def _open(self, rec: SandboxRecord, method: str, route: str, **kwargs: Any) -> httpx.Response:
        box = await self.sandboxes.running_box(rec)
        request = box.agent.build_request(method, route, **kwargs)
        try:
            resp = await box.agent.send(request, stream=True)
        except httpx.TransportError:
            raise await self.sandboxes.box_unreachable(rec) from None
        if resp.status_code != 200:
            err = await _agent_error(resp)
            await resp.aclose()
            raise err
        return resp

    # --- commands -------------------------------------------------------------------------------

    async def start_command(self, rec: SandboxRecord, req: RunCommand) -> CommandStream:
        template = self.sandboxes.store.get_template(rec.template)
        env = {**(template.env if template else {}), **rec.env_vars, **(req.env or {})}
        cwd = req.cwd or (template.workdir if template else None)
        if cwd is not None:
            check_path(cwd)
        body = {"cmd": req.command, "cwd": cwd, "env": env, "timeout": req.timeout_seconds, "user": req.user}
        resp = await self._open(rec, "POST", protocol.EXEC, json=body, timeout=EXEC_TIMEOUT)
        lines = resp.aiter_lines()
        try:
            first = json.loads(await anext(lines))
        except (StopAsyncIteration, ValueError, httpx.TransportError):
            await resp.aclose()
            raise await self.sandboxes.box_unreachable(rec) from None
        if first["t"] == protocol.EVENT_ERROR:
            await resp.aclose()
            status = 400 if first["code"] == protocol.ERR_BAD_CWD else 503  # 503: e.g. the box is out of pids
            raise ApiError(status, first["code"], first["message"])
        return CommandStream(first["pid"], self._events(rec, resp, lines))

    async def _events(self, rec: SandboxRecord, resp: httpx.Response,
                      lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
        try:
            async for line in lines:
                if line:
                    yield json.loads(line)
        except httpx.TransportError:
            pass
        finally:
            await resp.aclose()  # if the client went away, the command runs on in the box

    async def run_to_end(self, stream: CommandStream, rec: SandboxRecord) -> CommandResult:
        out: list[str] = []
        err: list[str] = []
        async for ev in stream.events:
            if ev["t"] == protocol.EVENT_STDOUT:
                out.append(ev["d"])
            elif ev["t"] == protocol.EVENT_STDERR:
                err.append(ev["d"])
            elif ev["t"] == protocol.EVENT_EXIT:
                return CommandResult(stdout="".join(out), stderr="".join(err), exit_code=ev["code"],
                                     timed_out=ev["timed_out"])
        raise await self.sandboxes.box_unreachable(rec)

    # --- files ----------------------------------------------------------------------------------

    async def write_file(self, rec: SandboxRecord, path: str, body: AsyncIterator[bytes],
                         user: str | None) -> dict[str, Any]:
        check_path(path)
        limit = self.max_file_bytes

        async def capped() -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in body:
                seen += len(chunk)
                if seen > limit:
                    raise ApiError(413, "payload_too_large", f"files are limited to {limit} bytes")
                yield chunk

        params = {"path": path, **({"user": user} if user else {})}
        resp = await self._open(rec, "PUT", protocol.FILES, params=params, content=capped(), timeout=FILE_TIMEOUT)
        try:
            result: dict[str, Any] = json.loads(await resp.aread())
        finally:
            await resp.aclose()
        return result

    async def read_file(self, rec: SandboxRecord, path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        return await self._download(rec, protocol.FILES, path)

    async def zip_dir(self, rec: SandboxRecord, path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        return await self._download(rec, protocol.DIR_ZIP, path)

    async def _download(self, rec: SandboxRecord, route: str,
                        path: str) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        check_path(path)
        resp = await self._open(rec, "GET", route, params={"path": path}, timeout=FILE_TIMEOUT)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()

        return resp, body()
