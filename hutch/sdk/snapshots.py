"""`Snapshot` and `AsyncSnapshot`: a box's saved state, which new boxes boot from.

    snap = sandbox.snapshot(name="prepared")          # the box runs on
    boxes = Sandbox.from_snapshot(snap, 3)            # three boxes continuing from it
    Snapshot.list(metadata={"task": "t1"}); Snapshot.get("prepared").delete()

Every call is written once, on the shared base (see `hutch.sdk.front`); what it sends lives in
`hutch.sdk.ops.snapshots`.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar, overload

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Flow
from hutch.sdk.front import AsyncFront, Job, SyncFront, call, classcall, making, making_each
from hutch.sdk.ops import snapshots
from hutch.sdk.session import Session
from hutch.sdk.types import SnapshotInfo

SnapshotT = TypeVar("SnapshotT", bound="_SnapshotBase[Any]")
SnapshotRef: TypeAlias = "str | SnapshotInfo | _SnapshotBase[Any]"  # a snapshot, or its id or name


@overload
def snapshot_ref(ref: SnapshotRef) -> str: ...
@overload
def snapshot_ref(ref: None) -> None: ...
def snapshot_ref(ref: SnapshotRef | None) -> str | None:
    """What a call sends for a snapshot given as an object: its id (anything else as it is)."""
    return ref.id if isinstance(ref, SnapshotInfo | _SnapshotBase) else ref


class _SnapshotBase(Generic[SnapshotT]):
    """Both fronts' calls, and the snapshot as it was read."""

    def __init__(self, info: SnapshotInfo, session: Session) -> None:
        self._info, self._session = info, session

    @property
    def info(self) -> SnapshotInfo:
        return self._info

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def name(self) -> str | None:
        return self._info.name

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._info.metadata)

    @property
    def size_bytes(self) -> int:
        return self._info.size_bytes

    @property
    def source_sandbox_id(self) -> str | None:
        return self._info.source_sandbox_id

    @property
    def created_at(self) -> datetime:
        return self._info.created_at

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, size_bytes={self.size_bytes!r})"

    # --- the class's own calls --------------------------------------------------------------------

    @classcall
    def get(cls: type[SnapshotT], snapshot: str, *, api_key: str | None = None,
            base_url: str | None = None) -> Job[SnapshotT]:
        """A snapshot by id or name."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, snapshots.get(session.cfg, snapshot), cls)

    @classcall
    def list(cls: type[SnapshotT], *, metadata: dict[str, str] | None = None, sandbox_id: str | None = None,
             api_key: str | None = None, base_url: str | None = None) -> Job[builtins.list[SnapshotT]]:
        """The team's snapshots, newest first: those with all of `metadata`, of box `sandbox_id`."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making_each(session, snapshots.list_snapshots(session.cfg, metadata, sandbox_id), cls)

    @classcall
    def delete_by_id(cls, snapshot: SnapshotRef, *, api_key: str | None = None,
                     base_url: str | None = None) -> Job[None]:
        """Delete a snapshot (by id or name) and its image; refused (`snapshot_in_use`) while
        boxes boot from it. Boxes booted from it run on."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), snapshots.delete(cfg, snapshot_ref(snapshot)))

    # --- the snapshot's ---------------------------------------------------------------------------

    @call
    def delete(self) -> Flow[None]:
        """As `delete_by_id`."""
        return snapshots.delete(self._session.cfg, self.id)


class Snapshot(_SnapshotBase["Snapshot"], SyncFront):
    """A saved state of a box. Blocking calls."""


class AsyncSnapshot(_SnapshotBase["AsyncSnapshot"], AsyncFront):
    """`Snapshot`, for asyncio code."""
