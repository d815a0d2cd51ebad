"""E2B's snapshots as hutch's own (hutch.services.snapshots), for control.py's routes: a snapshot taken
(POST /sandboxes/{id}/snapshots), listed (GET /snapshots), deleted the way the SDK deletes one (as a
template: DELETE /templates/{id}), booted (POST /sandboxes with its id or name as templateID) and a
running box forked (POST /sandboxes/{id}/fork: a snapshot taken for it, then the boxes).

E2B's snapshot is a template, named "<id>:<tag>" or "<team>/<name>:<tag>". hutch's has no tag and no
namespace: its snapshotID is hutch's snapshot id, its names its name (if it has one), and a ref that
ends in E2B's default tag (":default") is looked up without it too.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from hutch.e2b.common import Ctx, validation_message
from hutch.errors import ApiError, Code
from hutch.services.creation import E2BTraits
from hutch.services.models import BootSnapshot, CreateSandbox
from hutch.store import SandboxRecord, SnapshotRecord

DEFAULT_TAG = ":default"
MAX_REF = 256  # longer is no id or name of hutch's
FORK_TIMEOUT = 15  # E2B's API default for a fork's timeout, in seconds


def info(snap: SnapshotRecord) -> dict[str, Any]:
    """E2B's SnapshotInfo."""
    return {"snapshotID": snap.id, "names": [snap.name] if snap.name else []}


def find(c: Ctx, ref: str) -> SnapshotRecord | None:
    """The team's snapshot with this id or name (E2B's default tag allowed), or None."""
    if not ref or len(ref) > MAX_REF:
        return None
    for candidate in dict.fromkeys((ref, ref.removesuffix(DEFAULT_TAG))):
        try:
            return c.st.snapshots.get(c.team_id, candidate)
        except ApiError as e:
            if e.code != Code.SNAPSHOT_NOT_FOUND:
                raise
    return None


def _name(body: dict[str, Any]) -> str | None:
    """The snapshot's name, if one is given. E2B's "<team>/" and ":<tag>" have no meaning in hutch,
    so they are refused (its default tag is dropped) rather than kept as part of the name."""
    name = body.get("name")
    if name is None or name == "":
        return None
    if not isinstance(name, str):
        raise ApiError(Code.INVALID_REQUEST, "name must be a string")
    name = name.removesuffix(DEFAULT_TAG)
    if "/" in name or ":" in name:
        raise ApiError(Code.INVALID_REQUEST, "a snapshot's name has no namespace or tag in hutch (no '/' or ':')")
    if not 1 <= len(name) <= 128 or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ApiError(Code.INVALID_REQUEST, "name must be 1 to 128 printable characters")
    return name


async def take(c: Ctx, rec: SandboxRecord, body: dict[str, Any]) -> dict[str, Any]:
    """E2B's create_snapshot: `memory` false (mode "filesystem") keeps the files only."""
    memory = body.get("memory", True)
    if not isinstance(memory, bool):
        raise ApiError(Code.INVALID_REQUEST, "memory must be true or false")
    snap = await c.st.snapshots.take(c.team_id, rec.id, name=_name(body), memory=memory)
    return info(snap)


def listed(c: Ctx, sandbox_id: str | None, name: str | None) -> list[SnapshotRecord]:
    """The team's snapshots, by E2B's filters: the box one was taken of; its name or id."""
    every = c.st.snapshots.find(c.team_id, source_sandbox_id=sandbox_id or None)
    if name:
        refs = {name, name.removesuffix(DEFAULT_TAG)}
        every = [s for s in every if s.id in refs or s.name in refs]
    return every


async def delete(c: Ctx, ref: str) -> None:
    """E2B's DELETE /templates/{id}: a snapshot (delete_snapshot), else a template of the team's
    (one built from code, say); a 404 is the SDK's False."""
    snap = find(c, ref)
    if snap is not None:
        await c.st.snapshots.delete(c.team_id, snap.id)
        return
    template = c.st.store.get_template(ref.partition(":")[0], c.team_id) if 0 < len(ref) <= MAX_REF else None
    if template is None or template.team_id != c.team_id:
        raise ApiError(Code.NOT_FOUND, f"template or snapshot '{ref[:MAX_REF]}' not found")
    await c.st.templates.delete(c.team_id, template.id)


async def boot(c: Ctx, snap: SnapshotRecord, req: CreateSandbox, traits: E2BTraits) -> SandboxRecord:
    """One box from the snapshot (E2B's create with a snapshot as its template)."""
    return await c.st.snapshots.boot_one(c.team_id, snap.id, req, e2b=traits)


def fork_request(rec: SandboxRecord, count: int, timeout: int) -> BootSnapshot:
    """A fork is its box again, as E2B's are: its metadata, preview access and what its timeout
    does (the service gives it the box's name, and the snapshot its env, egress rules and
    secrets); only the timeout is the request's."""
    try:
        return BootSnapshot.model_validate({
            "count": count, "timeout_seconds": timeout, "auto_delete_seconds": rec.auto_delete_seconds,
            "metadata": rec.metadata or None,
            "preview_access": rec.preview_access})  # a private box's forks are private
    except ValidationError as e:  # a record the models no longer take (never for one they made)
        raise ApiError(Code.INVALID_REQUEST, f"sandbox {rec.id} cannot be forked: {validation_message(e)}") from None
