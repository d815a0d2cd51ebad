"""The node's driver table and the node over a scripted driver, with no runsc and no root: runsc's
calls through a stand-in binary, and what the node asks of its driver."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hutch.node.api import BoxStartError, NodeRuntime
from hutch.node.driver import Driver, DriverError
from hutch.node.hostlimits import _cgroup_refused
from hutch.node.node import DEFAULT_DRIVER, DRIVERS, Node
from hutch.node.runsc import Runsc, RunscConfig, tail_of
from hutch.node.spec import AgentRuntime

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro
    return asyncio.run(main())


@pytest.fixture
def work() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hutch-u", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fake_runsc(work: Path, script: str, timeout: float = 5) -> Runsc:
    """runsc from the table, its binary a shell script that sees runsc's arguments."""
    binary = work / "runsc"
    binary.write_text("#!/bin/sh\n" + script)
    binary.chmod(0o755)
    driver = DRIVERS["runsc"](RunscConfig(work / "state", binary=str(binary), timeout_seconds=timeout))
    assert isinstance(driver, Runsc)
    return driver


def test_the_table_names_runsc_and_runsc_is_a_driver(work: Path) -> None:
    assert DEFAULT_DRIVER in DRIVERS
    driver = fake_runsc(work, "exit 0")
    assert isinstance(driver, Driver)
    assert (work / "state").is_dir()


def test_runsc_is_called_with_the_nodes_flags_and_its_answers_read(work: Path) -> None:
    args = work / "args"
    driver = fake_runsc(work, f"""echo "$@" >> {args}
case "$*" in
  *" state hknown") echo '{{"status": "running", "pid": 42}}' ;;
  *" state hgone") echo "container does not exist" >&2; exit 1 ;;
  *" list --quiet") printf 'ha\\n\\nhb\\n' ;;
  *" kill hbroken"*) echo "it broke" >&2; exit 3 ;;
esac""")
    assert run(driver.state("hknown")) == {"status": "running", "pid": 42}
    assert run(driver.state("hgone")) is None  # not known: not an error
    assert run(driver.list_ids()) == ["ha", "hb"]
    run(driver.kill("hknown", "USR1"))
    with pytest.raises(DriverError, match="it broke"):
        run(driver.kill("hbroken"))
    calls = args.read_text().splitlines()
    assert all("--network=none" in c and "--host-uds=all" in c and f"--root={work / 'state'}" in c for c in calls)
    assert calls[3].endswith("kill hknown USR1")


def test_a_hung_runsc_call_is_cut_at_its_timeout(work: Path) -> None:
    driver = fake_runsc(work, "exec sleep 60", timeout=0.5)
    with pytest.raises(DriverError, match="timed out"):
        run(driver.run_detached("hx", work, work / "err", work / "pid"))
    assert not driver.running


class ScriptedDriver:
    """A driver whose containers are a dict: what the node asks, written down."""

    def __init__(self, states: dict[str, dict[str, Any]] | None = None, fail_state: bool = False) -> None:
        self.running: set[int] = set()
        self.states = states or {}
        self.fail_state = fail_state
        self.calls: list[tuple[str, ...]] = []

    async def run_detached(self, container_id: str, bundle: Path, stderr_path: Path, pid_file: Path,
                           overlay: str = "root:memory", cgroups: bool = True) -> None:
        raise DriverError("this driver boots nothing")

    async def restore_detached(self, container_id: str, bundle: Path, image_dir: Path, stderr_path: Path,
                               pid_file: Path, overlay: str = "root:memory", cgroups: bool = True) -> None:
        raise DriverError("this driver restores nothing")

    async def checkpoint(self, container_id: str, image_dir: Path, leave_running: bool = False,
                         overlay: str = "root:memory", cgroups: bool = True) -> None:
        self.calls.append(("checkpoint", container_id))

    async def kill(self, container_id: str, signal: str = "KILL") -> None:
        self.calls.append(("kill", container_id, signal))

    async def delete(self, container_id: str) -> None:
        self.calls.append(("delete", container_id))
        self.states.pop(container_id, None)

    async def state(self, container_id: str) -> dict[str, Any] | None:
        if self.fail_state:
            raise DriverError("state timed out")
        return self.states.get(container_id)

    async def list_ids(self) -> list[str]:
        return list(self.states)


def node_of(work: Path, driver: ScriptedDriver) -> NodeRuntime:
    runtime = AgentRuntime(work / "rt", "/ld.so", "/lib", "/python3")
    node: NodeRuntime = Node(work / "run", driver, runtime)
    return node


def test_the_node_asks_its_driver_and_reports_its_capacity(work: Path) -> None:
    driver = ScriptedDriver({"hrunning": {"status": "running", "pid": 1}, "hstopped": {"status": "stopped"}})
    node = node_of(work, driver)
    assert run(node.is_alive("hrunning")) and not run(node.is_alive("hstopped")) and not run(node.is_alive("hnone"))
    assert run(node_of(work, ScriptedDriver(fail_state=True)).is_alive("hrunning"))  # in doubt, alive
    run(node.wake("hrunning"))
    assert driver.calls == [("kill", "hrunning", "USR1")]
    assert not node.holds("hrunning") and node.agent("hrunning") is None and not node.is_running("hrunning")
    capacity = node.capacity()
    assert capacity.boxes == 0 and capacity.cpus >= 1 and 0 < capacity.memory_available_bytes <= capacity.memory_bytes


def test_adopt_keeps_no_container_and_no_directory_it_was_not_told_of(work: Path) -> None:
    driver = ScriptedDriver({"hstray": {"status": "running", "pid": 1}})
    node = node_of(work, driver)
    (work / "run" / "boxes" / "old-box").mkdir()
    (work / "run" / "boxes" / "old-box" / "config.json").write_text(json.dumps({}))
    assert run(node.adopt({})) == set()
    assert ("delete", "hstray") in driver.calls
    assert not list((work / "run" / "boxes").iterdir())


def test_a_boxs_stderr_is_read_by_its_tail_only_and_never_through_a_link(tmp_path: Path) -> None:
    err = tmp_path / "runsc.err"
    err.write_bytes(b"x" * 5_000_000 + b"the reason it failed")
    assert tail_of(err, 20) == "the reason it failed"
    assert tail_of(tmp_path / "absent", 20) == ""
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    link = tmp_path / "linked.err"
    link.symlink_to(secret)
    assert tail_of(link, 100) == ""


def test_only_runscs_own_refusal_is_taken_for_a_host_without_cgroups() -> None:
    """A boot's later end carries the tail of what the box's PID 1 wrote: a box writing "cgroup"
    there must not turn the node's CPU caps, or under --allow-unlimited-boxes every limit, off."""
    try:
        raise BoxStartError("the box ended as it booted; cannot set up cgroup") from RuntimeError("the box ended")
    except BoxStartError as e:
        assert not _cgroup_refused(e)
    try:
        raise BoxStartError("runsc run failed") from DriverError("cannot set up cgroup for root: read-only file system")
    except BoxStartError as e:
        assert _cgroup_refused(e)
