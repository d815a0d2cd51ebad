"""`Volume` and `AsyncVolume`: storage that outlives boxes and that many boxes mount at once.

    vol = Volume.create("repo", size_mib=2048)
    vol.files.write("/README", "hello")                       # no box needed
    box = Sandbox.create("agent", volumes={"/mnt/repo": vol, "/srv/cache": {"volume": "cache", "read_only": True}})
    Volume.get("repo").delete()                               # 409 volume_in_use while a box mounts it

Every call is written once, on the shared bases (see `hutch.sdk.front`); what it sends lives in
`hutch.sdk.ops.volumes`, and a volume's files calls are a sandbox's (`hutch.sdk.ops.files`).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar

from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import ValidationError
from hutch.sdk.flow import Flow, mapped
from hutch.sdk.front import AsyncFront, Job, SyncFront, call, classcall, making, making_each
from hutch.sdk.ops import files, volumes
from hutch.sdk.session import Session
from hutch.sdk.types import EntryInfo, VolumeInfo

VolumeT = TypeVar("VolumeT", bound="_VolumeBase[Any]")
VolumeRef: TypeAlias = "str | VolumeInfo | _VolumeBase[Any]"  # a volume, or its id or name
# what a create's `volumes=` maps a path in the box to: a volume, or {"volume": ..., "read_only": bool}
VolumeMounts: TypeAlias = "Mapping[str, VolumeRef | Mapping[str, Any]]"


def volume_ref(ref: VolumeRef) -> str:
    """What a call sends for a volume given as an object: its id (anything else as it is)."""
    return ref.id if isinstance(ref, VolumeInfo | _VolumeBase) else ref


def mounts_body(mounts: VolumeMounts | None) -> dict[str, Any] | None:
    """A create's `volumes` as the server takes them."""
    if mounts is None:
        return None
    if not isinstance(mounts, Mapping):
        raise ValidationError("volumes maps a path in the box to a volume", code=SdkCode.INVALID_ARGUMENT)
    body: dict[str, Any] = {}
    for path, value in mounts.items():
        if isinstance(value, Mapping):
            unknown = set(value) - {"volume", "read_only"}
            if "volume" not in value or unknown:
                raise ValidationError(f"volumes[{path!r}] is a volume or {{'volume': ..., 'read_only': bool}}",
                                      code=SdkCode.INVALID_ARGUMENT)
            body[path] = {"volume": volume_ref(value["volume"]), "read_only": bool(value.get("read_only", False))}
        else:
            body[path] = volume_ref(value)
    return body


class _VolumeBase(Generic[VolumeT]):
    """Both fronts' calls, and the volume as it was read."""

    def __init__(self, info: VolumeInfo, session: Session) -> None:
        self._info, self._session = info, session
        self._plane = volumes.VolumePlane(session.cfg, info.id)

    @property
    def info(self) -> VolumeInfo:
        return self._info

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def size_mib(self) -> int:
        return self._info.size_mib

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._info.metadata)

    @property
    def created_at(self) -> datetime:
        return self._info.created_at

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, size_mib={self.size_mib})"

    # --- the class's own calls --------------------------------------------------------------------

    @classcall
    def create(cls: type[VolumeT], name: str, *, size_mib: int | None = None, metadata: dict[str, str] | None = None,
               api_key: str | None = None, base_url: str | None = None) -> Job[VolumeT]:
        """An empty volume. `name` is unique in the team (letters, digits, '.', '_', '-'), and
        mounts and lookups may use it; `size_mib` is what its files may take (default 1024): a
        write past it fails with ENOSPC in a box, insufficient_storage here."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, volumes.create(session.cfg, name, size_mib, metadata), cls)

    @classcall
    def get(cls: type[VolumeT], name_or_id: str, *, api_key: str | None = None,
            base_url: str | None = None) -> Job[VolumeT]:
        """A volume of the team's by id or name."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, volumes.get(session.cfg, name_or_id), cls)

    @classcall
    def list(cls: type[VolumeT], *, metadata: dict[str, str] | None = None, api_key: str | None = None,
             base_url: str | None = None) -> Job[builtins.list[VolumeT]]:
        """The team's volumes (those with all of `metadata`, if given), oldest first."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making_each(session, volumes.list_volumes(session.cfg, metadata), cls)

    @classcall
    def delete_by_id(cls, name_or_id: str, *, api_key: str | None = None, base_url: str | None = None) -> Job[None]:
        """As `delete`, by id or name."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), volumes.delete(cfg, name_or_id))

    # --- the volume's -----------------------------------------------------------------------------

    @call
    def get_info(self) -> Flow[VolumeInfo]:
        """The volume now: its use in bytes, and the boxes that mount it."""
        self._info = yield from volumes.get(self._session.cfg, self.id)
        return self._info

    @call
    def update_metadata(self, metadata: dict[str, str]) -> Flow[VolumeInfo]:
        """Replace its metadata."""
        self._info = yield from volumes.update_metadata(self._session.cfg, self.id, metadata)
        return self._info

    @call
    def delete(self) -> Flow[None]:
        """The volume and its files; refused (ConflictError, volume_in_use) while a box, running
        or paused, mounts it."""
        return volumes.delete(self._session.cfg, self.id)


class _VolumeFilesBase:
    """Both fronts' `volume.files`: a sandbox's files calls, on the volume with no box. What the
    host writes belongs to the box user; links in the volume are described, never followed.
    `timeout` (seconds), on every call: the most it may take, else SandboxTimeoutError."""

    _session: Session

    def __init__(self, volume: _VolumeBase[Any]) -> None:
        self._session, self._plane = volume._session, volume._plane

    @call
    def write(self, path: str, content: str | bytes, *, timeout: float | None = None) -> Flow[None]:
        """Write a file whole (parents made); a reader, in a box or here, never sees part of it."""
        return files.write_file(self._plane, path, content, None, timeout)

    @call
    def read(self, path: str, *, timeout: float | None = None) -> Flow[bytes]:
        return files.read_file(self._plane, path, None, timeout)

    @call
    def read_text(self, path: str, encoding: str = "utf-8", *, timeout: float | None = None) -> Flow[str]:
        return mapped(files.read_file(self._plane, path, None, timeout), lambda data: data.decode(encoding))

    @call
    def list(self, path: str, depth: int = 1, *, timeout: float | None = None) -> Flow[builtins.list[EntryInfo]]:
        """A directory's entries, `depth` levels down (1-16), sorted; at most 10,000."""
        return files.list_dir(self._plane, path, depth, None, timeout)

    @call
    def get_info(self, path: str, *, timeout: float | None = None) -> Flow[EntryInfo]:
        return files.get_entry(self._plane, path, None, timeout)

    @call
    def exists(self, path: str, *, timeout: float | None = None) -> Flow[bool]:
        return files.exists(self._plane, path, None, timeout)

    @call
    def remove(self, path: str, *, timeout: float | None = None) -> Flow[None]:
        """A file or link, or a directory with everything in it."""
        return files.remove(self._plane, path, None, timeout)

    @call
    def rename(self, source: str, destination: str, *, timeout: float | None = None) -> Flow[EntryInfo]:
        return files.rename(self._plane, source, destination, None, timeout)

    @call
    def make_dir(self, path: str, *, timeout: float | None = None) -> Flow[bool]:
        """mkdir -p; False if it was a directory already."""
        return files.make_dir(self._plane, path, None, timeout)


class Volume(_VolumeBase["Volume"], SyncFront):
    """A volume. Blocking calls; `files` reads and writes it with no box."""

    def __init__(self, info: VolumeInfo, session: Session) -> None:
        super().__init__(info, session)
        self.files = VolumeFiles(self)


class VolumeFiles(_VolumeFilesBase, SyncFront):
    pass


class AsyncVolume(_VolumeBase["AsyncVolume"], AsyncFront):
    """`Volume`, for asyncio code."""

    def __init__(self, info: VolumeInfo, session: Session) -> None:
        super().__init__(info, session)
        self.files = AsyncVolumeFiles(self)


class AsyncVolumeFiles(_VolumeFilesBase, AsyncFront):
    pass
