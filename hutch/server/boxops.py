"""The audited operations on a box: each does its work through the data plane and writes its row
in the box's audit log (hutch's data-plane routes and E2B's envd both call these, never their own).

What a row says is `audit`'s: the op's name, what it acted on and as whom, and how it ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from hutch.guest import protocol
from hutch.server import audit
from hutch.server.models import FsEntry, ProcessInfo, SpawnCommand
from hutch.server.state import State
from hutch.store import SandboxRecord


async def write_file(st: State, rec: SandboxRecord, who: str, path: str, body: AsyncIterator[bytes],
                     user: str | None) -> dict[str, Any]:
    async with st.audit.record(rec, who, "file_write", path + audit.acting(user)):
        return await st.data.write_file(rec, path, body, user)


async def read_file(st: State, rec: SandboxRecord, who: str, path: str) -> tuple[int | None, AsyncIterator[bytes]]:
    """The file's size if the agent said it, and its bytes as they stream from the box."""
    async with st.audit.record(rec, who, "file_read", path):
        resp, body = await st.data.read_file(rec, path)
    size = resp.headers.get("content-length")
    return (int(size) if size is not None and size.isdigit() else None), body


async def zip_dir(st: State, rec: SandboxRecord, who: str, path: str) -> AsyncIterator[bytes]:
    async with st.audit.record(rec, who, "dir_download", path):
        _resp, body = await st.data.zip_dir(rec, path)
    return body


async def make_dir(st: State, rec: SandboxRecord, who: str, path: str, user: str | None) -> tuple[FsEntry, bool]:
    async with st.audit.record(rec, who, "dir_make", path + audit.acting(user)):
        return await st.data.make_dir(rec, path, user)


async def move(st: State, rec: SandboxRecord, who: str, source: str, destination: str, user: str | None) -> FsEntry:
    async with st.audit.record(rec, who, "file_move", f"{source} -> {destination}{audit.acting(user)}"):
        return await st.data.move(rec, source, destination, user)


async def remove(st: State, rec: SandboxRecord, who: str, path: str, user: str | None) -> None:
    async with st.audit.record(rec, who, "file_remove", path + audit.acting(user)):
        await st.data.remove(rec, path, user)


async def spawn(st: State, rec: SandboxRecord, who: str, req: SpawnCommand) -> ProcessInfo:
    async with st.audit.record(rec, who, "spawn", audit.describe(req.command, req.cwd, req.user, req.env)):
        return await st.data.spawn(rec, req)


async def signal(st: State, rec: SandboxRecord, who: str, pid: int, sig: int) -> bool:
    """Signal a spawned process' group; False if it had already ended."""
    async with st.audit.record(rec, who, "signal", f"signal {sig} to process {pid}"):
        answer = await st.data.process_call(rec, pid, protocol.PROC_SIGNAL, json={"signal": sig})
    return answer.get("signalled") is True
