"""hutch.fleet.nodeside's checks of what a fleet's API server names before the node acts on it as
root: template roots under the node's roots (resolved, so neither `..` nor a symlink leads out),
checkpoints in the fleet's checkpoint directory, limits, box keys and runtime ids of the one
shape each. The node is a stand-in that records what reached it; there is no warm pool.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any, cast

import pytest

from hutch.fleet.nodeside import NodeCalls, limits_json
from hutch.fleet.relay import CallError
from hutch.node.api import BoxRef, BoxStartError, Capacity, LimitsUnavailable, NoSpaceError, VolumeMount
from hutch.node.node import Node
from hutch.node.spec import Limits
from hutch.services.checkpoints import CHECKPOINT_DONE

HELD = "h" + "a" * 24
NOT_HELD = "h" + "b" * 24
BAD_KEYS: list[Any] = ["", "-box", "a/b", "../x", ".", "a" * 65, "a_b", "a b", "box\n", "b\x00x", 5, None, ["box"]]
BAD_RUNTIME_IDS: list[Any] = ["", HELD[:-1], HELD + "a", HELD.upper(), "h" + "A" * 24, "../" + HELD, HELD + "\n",
                              "h" + "g" * 24, None, 5, [HELD]]


class StandIn:
    """The few methods of `hutch.node.Node` the calls use: what reached them is in `did`."""

    def __init__(self) -> None:
        self.did: list[tuple[Any, ...]] = []
        self.held = {HELD}
        self.fail: BaseException | None = None

    async def boot(self, key: str, rootfs: Path, limits: Limits, volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        if self.fail is not None:
            raise self.fail
        self.did.append(("boot", key, rootfs, limits) + ((volumes,) if volumes else ()))
        return BoxRef(HELD, key)

    async def restore(self, key: str, rootfs: Path, limits: Limits, image_dir: Path,
                      volumes: tuple[VolumeMount, ...] = ()) -> BoxRef:
        self.did.append(("restore", key, rootfs, limits, image_dir) + ((volumes,) if volumes else ()))
        return BoxRef(HELD, key)

    def capacity(self) -> Capacity:
        return Capacity(boxes=1, cpus=2, memory_bytes=4, memory_available_bytes=3, cpu_caps=True, disk_caps=False)

    async def is_alive(self, runtime_id: str) -> bool:
        self.did.append(("alive", runtime_id))
        return runtime_id in self.held

    def holds(self, runtime_id: str) -> bool:
        return runtime_id in self.held

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        self.did.append(("stop", runtime_id, key))

    async def pause(self, runtime_id: str, image_dir: Path) -> None:
        self.did.append(("pause", runtime_id, image_dir))
        image_dir.mkdir(parents=True, exist_ok=True)

    async def wake(self, runtime_id: str) -> None:
        self.did.append(("wake", runtime_id))


class Fleet:
    """A node's roots (its cache and the shared templates) and the checkpoint directory, in tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.cache, self.templates = tmp_path / "cache", tmp_path / "shared" / "templates"
        self.checkpoints = tmp_path / "shared" / "checkpoints"
        self.root = self.templates / "t1" / "rootfs"
        self.outside = tmp_path / "host-etc"
        for path in (self.cache / "base" / "rootfs", self.root, self.checkpoints, self.outside):
            path.mkdir(parents=True)
        self.node = StandIn()
        self.calls = NodeCalls("node-1", cast(Node, self.node), None, (self.cache, self.templates), self.checkpoints)

    def call(self, call: str, **args: Any) -> dict[str, Any]:
        return asyncio.run(self.calls(call, args))

    def refused(self, call: str, **args: Any) -> str:
        """The kind a call that must fail fails with; nothing of it reached the node."""
        before = list(self.node.did)
        with pytest.raises(CallError) as caught:
            asyncio.run(self.calls(call, args))
        assert self.node.did == before, f"{call} {args} reached the node"
        return caught.value.kind

    def boot_args(self, **args: Any) -> dict[str, Any]:
        return {"key": "box-1", "rootfs": str(self.root), "limits": {}} | args

    def restore_args(self, **args: Any) -> dict[str, Any]:
        return self.boot_args(image=str(self.checkpoints / "box-1")) | args


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


# --- template roots ------------------------------------------------------------------------------

def test_boot_of_a_root_under_the_node_s_roots(fleet: Fleet) -> None:
    limits = {"memory_mib": 512, "cpus": 2}
    assert fleet.call("boot", **fleet.boot_args(limits=limits)) == {"runtime_id": HELD, "key": "box-1", "node": "node-1"}
    base = fleet.cache / "base" / "rootfs"
    fleet.call("boot", **fleet.boot_args(rootfs=str(fleet.root / ".." / ".." / ".." / ".." / "cache" / "base" / "rootfs")))
    assert fleet.node.did == [("boot", "box-1", fleet.root, Limits(memory_mib=512, cpus=2)), ("boot", "box-1", base, Limits())]


def test_boot_takes_well_formed_volumes_only(fleet: Fleet) -> None:
    mount: dict[str, Any] = {"volume_id": "5f0c6a55-0000-4000-8000-000000000001", "path": "/mnt/v", "read_only": True}
    fleet.call("boot", **fleet.boot_args(), volumes=[mount])
    assert fleet.node.did[-1][-1] == (VolumeMount(**mount),), "the node mounts what the call names"
    for bad in ("x", [{"volume_id": 1, "path": "/a", "read_only": False}], [{**mount, "path": "relative"}],
                [{**mount, "read_only": "yes"}], [{**mount, "extra": 1}], [mount] * 17):
        assert fleet.refused("boot", **fleet.boot_args(), volumes=bad) == "invalid", bad


def test_a_symlink_between_allowed_roots_boots_its_target(fleet: Fleet) -> None:
    (fleet.templates / "alias").symlink_to(fleet.root)
    fleet.call("boot", **fleet.boot_args(rootfs=str(fleet.templates / "alias")))
    assert fleet.node.did[-1][2] == fleet.root, "what was checked (the target) is what is booted"


def test_the_roots_themselves_may_be_reached_through_symlinks(tmp_path: Path) -> None:
    (tmp_path / "real" / "t" / "rootfs").mkdir(parents=True)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    node = StandIn()
    calls = NodeCalls("node-1", cast(Node, node), None, (tmp_path / "linked",), tmp_path / "checkpoints")
    asyncio.run(calls("boot", {"key": "k", "rootfs": str(tmp_path / "linked" / "t" / "rootfs"), "limits": {}}))
    assert node.did[-1][2] == tmp_path / "real" / "t" / "rootfs"


def test_boot_refuses_a_root_outside_the_node_s_roots(fleet: Fleet) -> None:
    (fleet.tmp / "shared" / "templates-evil" / "rootfs").mkdir(parents=True)  # a sibling with the same prefix
    (fleet.root / "escape").symlink_to(fleet.outside)  # what a template's own files may hold
    (fleet.templates / "planted").symlink_to("/")
    (fleet.templates / "dangling").symlink_to(fleet.tmp / "nothing-here")
    for rootfs in [str(fleet.outside), "/", "/etc", str(fleet.templates / ".." / "checkpoints"),
                   str(fleet.root / ".." / ".." / ".." / ".." / "host-etc"),
                   str(fleet.tmp / "shared" / "templates-evil" / "rootfs"),
                   str(fleet.root / "escape"), str(fleet.templates / "planted"), str(fleet.templates / "planted" / "etc"),
                   str(fleet.templates / "dangling"), "shared/templates/t1/rootfs"]:
        assert fleet.refused("boot", **fleet.boot_args(rootfs=rootfs)) == "invalid", rootfs
        assert fleet.refused("restore", **fleet.restore_args(rootfs=rootfs)) == "invalid", rootfs


def test_boot_refuses_an_allowed_root_itself(fleet: Fleet) -> None:
    for rootfs in [fleet.templates, fleet.cache, f"{fleet.templates}/", fleet.templates / "t1" / "..",
                   fleet.root / ".." / ".."]:
        assert fleet.refused("boot", **fleet.boot_args(rootfs=str(rootfs))) == "invalid", rootfs
    (fleet.root / "whole-templates").symlink_to(fleet.templates)
    assert fleet.refused("boot", **fleet.boot_args(rootfs=str(fleet.root / "whole-templates"))) == "invalid"


def test_boot_refuses_a_malformed_root(fleet: Fleet) -> None:
    for rootfs in [None, 5, [str(fleet.root)], str(fleet.root) + "\x00/x"]:
        assert fleet.refused("boot", **fleet.boot_args(rootfs=rootfs)) == "invalid", rootfs


def test_a_missing_root_is_root_gone(fleet: Fleet) -> None:
    (fleet.templates / "t2").mkdir()
    (fleet.templates / "t2" / "rootfs").write_text("a file, not a root")
    for rootfs in [fleet.templates / "gone" / "rootfs", fleet.templates / "t2" / "rootfs"]:
        assert fleet.refused("boot", **fleet.boot_args(rootfs=str(rootfs))) == "root_gone"
        assert fleet.refused("restore", **fleet.restore_args(rootfs=str(rootfs))) == "root_gone"


# --- limits --------------------------------------------------------------------------------------

@pytest.mark.parametrize("limits", [None, [], "memory_mib=1", {"memory_mib": -1}, {"pids": True}, {"pids": False},
                                    {"memory_mib": 512.0}, {"memory_mib": "512"}, {"memory_mib": None},
                                    {"swap_mib": 1}, {"memory_mib": 1, "writable_root": 0}],
                         ids=["none", "list", "text", "negative", "true", "false", "float", "string", "null", "unknown",
                              "unknown-with-known"])
def test_malformed_limits_are_refused(fleet: Fleet, limits: Any) -> None:
    assert fleet.refused("boot", **fleet.boot_args(limits=limits)) == "invalid"
    assert fleet.refused("restore", **fleet.restore_args(limits=limits)) == "invalid"


def test_limits_round_trip(fleet: Fleet) -> None:
    limits = Limits(memory_mib=256, pids=64, cpu_shares=2048, nofile=1024, cpus=2, disk_mib=0)
    fleet.call("boot", **fleet.boot_args(limits=limits_json(limits)))
    assert fleet.node.did[-1][3] == limits


# --- checkpoints -----------------------------------------------------------------------------------

def test_restore_and_pause_in_the_checkpoint_directory(fleet: Fleet) -> None:
    image = fleet.checkpoints / "box-1"
    assert fleet.call("restore", **fleet.restore_args()) == {"runtime_id": HELD, "key": "box-1", "node": "node-1"}
    assert fleet.call("pause", runtime_id=HELD, image=str(image)) == {}
    assert fleet.node.did == [("restore", "box-1", fleet.root, Limits(), image), ("pause", HELD, image)]
    assert (image / CHECKPOINT_DONE).is_file(), "marked whole once paused"


def test_a_checkpoint_named_through_an_alias_of_the_directory_is_the_directory_s(fleet: Fleet) -> None:
    (fleet.tmp / "alias").symlink_to(fleet.checkpoints)
    fleet.call("restore", **fleet.restore_args(image=str(fleet.tmp / "alias" / "box-1")))
    assert fleet.node.did[-1][4] == fleet.checkpoints / "box-1"


def test_restore_and_pause_refuse_a_checkpoint_outside_the_checkpoint_directory(fleet: Fleet) -> None:
    (fleet.tmp / "elsewhere").symlink_to(fleet.outside)
    (fleet.checkpoints / "sub").mkdir()
    for image in [fleet.outside / "box-1", fleet.checkpoints / ".." / "box-1", fleet.checkpoints / "sub" / "box-1",
                  fleet.checkpoints / "box-1" / "..", fleet.checkpoints / "box-1" / "x", fleet.checkpoints,
                  fleet.tmp / "elsewhere" / "box-1", fleet.checkpoints / ".hidden", fleet.checkpoints / "a_b",
                  fleet.checkpoints / ("a" * 65), "/box-1", "box-1", f"{fleet.checkpoints}/box-1\x00"]:
        assert fleet.refused("restore", **fleet.restore_args(image=str(image))) == "invalid", image
        assert fleet.refused("pause", runtime_id=HELD, image=str(image)) == "invalid", image
    for image in [None, 5, [str(fleet.checkpoints / "box-1")]]:
        assert fleet.refused("restore", **fleet.restore_args(image=image)) == "invalid", image
        assert fleet.refused("pause", runtime_id=HELD, image=image) == "invalid", image
    assert not (fleet.outside / CHECKPOINT_DONE).exists()


def test_a_checkpoint_dir_that_is_a_symlink_out_of_the_directory_is_refused(fleet: Fleet) -> None:
    (fleet.checkpoints / "box-1").symlink_to(fleet.outside)
    image = str(fleet.checkpoints / "box-1")
    assert fleet.refused("restore", **fleet.restore_args(image=image)) == "invalid"
    assert fleet.refused("pause", runtime_id=HELD, image=image) == "invalid"
    assert not (fleet.outside / CHECKPOINT_DONE).exists()


# --- box keys, runtime ids, calls ----------------------------------------------------------------

@pytest.mark.parametrize("key", BAD_KEYS, ids=[repr(k)[:20] for k in BAD_KEYS])
def test_a_malformed_box_key_is_refused(fleet: Fleet, key: Any) -> None:
    assert fleet.refused("boot", **fleet.boot_args(key=key)) == "invalid"
    assert fleet.refused("restore", **fleet.restore_args(key=key)) == "invalid"
    if key is not None:  # a stop without a key is a stop of the box alone
        assert fleet.refused("stop", runtime_id=HELD, key=key) == "invalid"


def test_box_keys_of_the_one_shape_pass(fleet: Fleet) -> None:
    for key in ["a", "box-1", "A" + "0" * 63, "9-"]:
        fleet.call("boot", **fleet.boot_args(key=key))
    fleet.call("stop", runtime_id=HELD)
    fleet.call("stop", runtime_id=HELD, key="box-1")
    assert [d[1] for d in fleet.node.did[:4]] == ["a", "box-1", "A" + "0" * 63, "9-"]
    assert fleet.node.did[4:] == [("stop", HELD, None), ("stop", HELD, "box-1")]


@pytest.mark.parametrize("runtime_id", BAD_RUNTIME_IDS, ids=[repr(r)[:20] for r in BAD_RUNTIME_IDS])
def test_a_malformed_runtime_id_is_refused(fleet: Fleet, runtime_id: Any) -> None:
    image = str(fleet.checkpoints / "box-1")
    for call in ["alive", "stop", "pause", "wake", "nope"]:
        assert fleet.refused(call, runtime_id=runtime_id, image=image, key="box-1") == "invalid", call
    assert fleet.refused("alive") == "invalid", "none at all"


def test_calls_on_a_box_the_node_does_not_hold(fleet: Fleet) -> None:
    assert fleet.refused("pause", runtime_id=NOT_HELD, image=str(fleet.checkpoints / "box-1")) == "not_held"
    assert fleet.refused("wake", runtime_id=NOT_HELD) == "not_held"
    assert not (fleet.checkpoints / "box-1").exists()
    assert fleet.call("alive", runtime_id=NOT_HELD) == {"alive": False, "holds": False}
    assert fleet.call("alive", runtime_id=HELD) == {"alive": True, "holds": True}
    fleet.call("wake", runtime_id=HELD)
    assert fleet.node.did[-1] == ("wake", HELD)


def test_an_unknown_call_is_refused(fleet: Fleet) -> None:
    for call in ["nope", "", "boot ", "BOOT", "_dispatch", "__call__"]:
        assert fleet.refused(call, runtime_id=HELD) == "invalid", call
    assert fleet.call("capacity")["boxes"] == 1


def test_the_node_s_failures_become_call_errors_of_their_kind(fleet: Fleet) -> None:
    for error, kind in [(BoxStartError("no start"), "box_start"), (LimitsUnavailable("no cgroup"), "limits"),
                        (NoSpaceError("no room"), "no_space"),
                        (OSError(errno.ENOSPC, "disk full"), "disk_full")]:
        fleet.node.fail = error
        assert fleet.refused("boot", **fleet.boot_args()) == kind
    fleet.node.fail = PermissionError(errno.EACCES, "denied")
    with pytest.raises(PermissionError):  # anything else, the relay's 500
        fleet.call("boot", **fleet.boot_args())
