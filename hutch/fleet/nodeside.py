"""A fleet node's answers to its API servers' calls, over its own `hutch.node.Node` and warm pool.

The API servers are members of the fleet (they carry its key), but what they name is checked
before the host acts on it as root: a box key is a plain name, a template root lies under the
roots this node boots from, and a checkpoint lies in the shared checkpoint directory.
"""

from __future__ import annotations

import dataclasses
import errno
import re
from pathlib import Path
from typing import Any

from hutch.fleet.relay import CallError
from hutch.node.api import BoxRef, BoxStartError, LimitsUnavailable, NoSpaceError, VolumeMount
from hutch.node.node import Node
from hutch.node.nodebox import RUNTIME_ID_PATTERN
from hutch.node.pool import WarmPool
from hutch.node.spec import Limits
from hutch.services.checkpoints import CHECKPOINT_DONE
from hutch.services.models import MAX_MOUNTS

BOX_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
RUNTIME_ID = re.compile(RUNTIME_ID_PATTERN)


def limits_json(limits: Limits) -> dict[str, int]:
    return dataclasses.asdict(limits)


def limits_of(value: Any) -> Limits:
    fields = {f.name for f in dataclasses.fields(Limits)}
    if not isinstance(value, dict) or set(value) - fields or not all(type(v) is int and v >= 0 for v in value.values()):
        raise CallError("invalid", "malformed limits")
    return Limits(**value)


def volumes_json(volumes: tuple[VolumeMount, ...]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(v) for v in volumes]


def volumes_of(value: Any) -> tuple[VolumeMount, ...]:
    """A call's mounts, each field of its type (the node resolves each id to its directory)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_MOUNTS or not all(
            isinstance(v, dict) and set(v) == {"volume_id", "path", "read_only"} and isinstance(v["volume_id"], str)
            and isinstance(v["path"], str) and v["path"].startswith("/") and type(v["read_only"]) is bool
            for v in value):
        raise CallError("invalid", "malformed volumes")
    return tuple(VolumeMount(**v) for v in value)


class NodeCalls:
    """The calls of `hutch.fleet.relay`, each one of `hutch.node.api.NodeRuntime`'s."""

    def __init__(self, name: str, node: Node, pool: WarmPool | None, roots: tuple[Path, ...], checkpoints: Path,
                 snapshots: Path | None = None) -> None:
        self.name, self.node, self.pool = name, node, pool
        self.roots = tuple(r.resolve() for r in roots)
        self.checkpoints = checkpoints.resolve()
        # snapshots' images, beside the checkpoints in the shared directory (ServerConfig.snapshot_dir)
        self.snapshots = (snapshots or checkpoints.parent / "snapshots").resolve()

    async def __call__(self, call: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._dispatch(call, args)
        except LimitsUnavailable as e:
            raise CallError("limits", str(e)) from e
        except BoxStartError as e:
            raise CallError("box_start", str(e)) from e
        except NoSpaceError as e:
            raise CallError("no_space", str(e)) from e
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise CallError("disk_full", str(e)) from e
            raise

    async def _dispatch(self, call: str, args: dict[str, Any]) -> dict[str, Any]:
        if call == "boot":
            rootfs, limits = self._root(args.get("rootfs")), limits_of(args.get("limits"))
            volumes = volumes_of(args.get("volumes"))  # the pool's boxes mount none
            box = await self.pool.claim(rootfs, limits) if self.pool is not None and not volumes else None
            return self._ref(box or await self.node.boot(self._key(args.get("key")), rootfs, limits, volumes=volumes))
        if call == "restore":
            return self._ref(await self.node.restore(self._key(args.get("key")), self._root(args.get("rootfs")),
                                                     limits_of(args.get("limits")), self._image(args.get("image")),
                                                     volumes=volumes_of(args.get("volumes"))))
        if call == "capacity":
            return dataclasses.asdict(self.node.capacity())
        runtime_id = args.get("runtime_id")
        if not isinstance(runtime_id, str) or not RUNTIME_ID.fullmatch(runtime_id):
            raise CallError("invalid", "malformed runtime id")
        if call == "alive":
            return {"alive": await self.node.is_alive(runtime_id), "holds": self.node.holds(runtime_id)}
        if call == "usage":
            return {"samples": [dataclasses.asdict(sample) for sample in await self.node.usage(runtime_id)]}
        if call == "stop":
            key = args.get("key")
            await self.node.stop(runtime_id, self._key(key) if key is not None else None)
            return {}
        if not self.node.holds(runtime_id):
            raise CallError("not_held", f"box {runtime_id} does not run on node {self.name}")
        if call == "pause":
            image = self._image(args.get("image"), (self.checkpoints,))
            await self.node.pause(runtime_id, image)
            (image / CHECKPOINT_DONE).touch()  # whole: a pause whose API server died midway is kept
            return {}
        if call == "snapshot":
            image = self._image(args.get("image"), (self.snapshots,))
            await self.node.snapshot(runtime_id, image)
            (image / CHECKPOINT_DONE).touch()
            return {}
        if call == "wake":
            await self.node.wake(runtime_id)
            return {}
        raise CallError("invalid", f"no such call: {call!r}")

    def _ref(self, box: BoxRef) -> dict[str, Any]:
        return {"runtime_id": box.runtime_id, "key": box.key, "node": self.name}

    @staticmethod
    def _key(value: Any) -> str:
        if not isinstance(value, str) or not BOX_KEY.fullmatch(value):
            raise CallError("invalid", "malformed box key")
        return value

    def _root(self, value: Any) -> Path:
        if not isinstance(value, str) or "\x00" in value:
            raise CallError("invalid", "malformed template root")
        path = Path(value).resolve()
        if not any(path.is_relative_to(r) and path != r for r in self.roots):
            raise CallError("invalid", "a template root outside this node's roots")
        if not path.is_dir():
            raise CallError("root_gone", f"the template root {value} is not on node {self.name}")
        return path

    def _image(self, value: Any, within: tuple[Path, ...] | None = None) -> Path:
        """A checkpoint's directory of the fleet's own: in `within` (a restore: the checkpoints' or
        the snapshots'), named as a box key, never a link."""
        if not isinstance(value, str) or "\x00" in value:
            raise CallError("invalid", "malformed checkpoint path")
        path = Path(value)
        parent = path.parent.resolve()
        if parent not in (within or (self.checkpoints, self.snapshots)) or not BOX_KEY.fullmatch(path.name):
            raise CallError("invalid", "a checkpoint outside the fleet's checkpoint and snapshot directories")
        image = parent / path.name
        if image.is_symlink():  # never followed: a checkpoint is a directory of the checkpoint directory's own
            raise CallError("invalid", "a checkpoint that is a link")
        return image
