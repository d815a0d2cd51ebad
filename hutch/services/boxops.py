"""The audited operations on a box: each does its work through the data plane and writes its row
in the box's audit log (hutch's data-plane routes and E2B's envd both call these, never their own).

What a row says is `audit`'s: the op's name, what it acted on and as whom, and how it ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from hutch.services import audit
from hutch.services.dataplane import DataPlane
from hutch.services.models import FsEntry, ProcessInfo, SpawnCommand
from hutch.store import SandboxRecord


class State(Protocol):
    """What these operations need of the server's state: its audit log and its data plane."""

    @property
    def audit(self) -> audit.AuditLog: ...
    @property
    def data(self) -> DataPlane: ...


async def write_file(st: State, rec: SandboxRecord, who: str, path: str, body: AsyncIterator[bytes],
                     user: str | None, metadata: dict[str, str] | None = None, *,
                     length: int | None = None) -> dict[str, Any]:
    async with st.audit.record(rec, who, "file_write", path + audit.acting(user)):
        return await st.data.write_file(rec, path, body, user, metadata, length=length)


async def read_file(st: State, rec: SandboxRecord, who: str, path: str,
                    user: str | None) -> tuple[int | None, AsyncIterator[bytes]]:
    """The file's size if the agent said it, and its bytes as they stream from the box."""
    async with st.audit.record(rec, who, "file_read", path + audit.acting(user)):
        head, body = await st.data.read_file(rec, path, user)
    return head.size, body


async def zip_dir(st: State, rec: SandboxRecord, who: str, path: str, user: str | None) -> AsyncIterator[bytes]:
    async with st.audit.record(rec, who, "dir_download", path + audit.acting(user)):
        _head, body = await st.data.zip_dir(rec, path, user)
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
        return await st.data.signal_process(rec, pid, sig)
