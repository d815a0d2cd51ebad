"""Template builds in a fleet, without a box: an API server queues, a node claims and runs (its
build stands in for the builder), anyone ends a build in the store and the node that runs it
stops, a stopping node's build goes back to the queue for another, a node that starts again
fails only its own; and the collector of the shared roots, which other hosts boot and build from.

Two `Templates` on two stores over one SQLite file stand in for two processes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hutch.node.api import NodeRuntime
from hutch.services import build_queue as build_queue_module
from hutch.services.build_roots import UNUSED_GRACE
from hutch.services.config import FleetConfig, ServerConfig
from hutch.services.models import CreateTemplate
from hutch.services.templates import Templates
from hutch.store import BuildRecord, BuildStatus, Store, TemplateRecord
from hutch.templates.buildlog import BuildLog
from hutch.templates.builds import Built


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_queue_module, "CLAIM_EVERY", 0.02)
    monkeypatch.setattr("hutch.templates.buildlog.FILE_POLL_SECONDS", 0.02)
    monkeypatch.setattr("hutch.templates.buildlog.STATUS_POLL_SECONDS", 0.02)
    monkeypatch.setattr("hutch.templates.buildlog.DONE_GRACE", 0.5)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    return tmp_path / "shared"


def config_of(tmp_path: Path, shared: Path, name: str) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path / name, cache_dir=tmp_path / "cache",
                        database_url=f"sqlite:///{tmp_path / 'hutch.db'}",
                        fleet=FleetConfig(ray="127.0.0.1:6379", shared_dir=shared))


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[[], Store]]:
    made: list[Store] = []

    def make() -> Store:
        made.append(Store(f"sqlite:///{tmp_path / 'hutch.db'}"))
        return made[-1]

    yield make
    for s in made:
        s.engine.dispose()


class Member:
    """A fleet process's Templates: an API server's (queues only) or a node's."""

    def __init__(self, tmp_path: Path, shared: Path, store: Store, name: str) -> None:
        self.store = store
        self.t = Templates(config_of(tmp_path, shared, name), store, cast(NodeRuntime, object()))
        base = tmp_path / "cache" / "base" / "rootfs"
        base.mkdir(parents=True, exist_ok=True)
        self.t.register_base(base)
        self.started: list[str] = []
        self.release = asyncio.Event()  # a build returns once set

    async def build(self, build: BuildRecord, blog: BuildLog) -> Built:
        """In place of the builder: a build that waits, then makes its root."""
        self.started.append(build.id)
        blog.system("step 1/1: RUN true", 0)
        await self.release.wait()
        root = self.t.builder.roots_dir / f"root-{build.id[:8]}" / "rootfs"
        root.mkdir(parents=True)
        return Built(root, {"A": "1"}, None, None, 0)


def members(tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch,
            *nodes: str) -> tuple[Member, list[Member]]:
    api = Member(tmp_path, shared, stores(), "api")
    made = [Member(tmp_path, shared, stores(), n) for n in nodes]
    for m in made:
        monkeypatch.setattr(m.t.sources, "build", m.build)
    return api, made


async def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "it did not happen in time"
        await asyncio.sleep(0.01)
    return got


def create(api: Member, team: str, name: str = "mine") -> tuple[TemplateRecord, BuildRecord]:
    rec = api.t.create(team, CreateTemplate.model_validate({"name": name, "steps": [{"run": "true"}]}))
    [build] = api.store.list_builds(rec.id)
    return rec, build


async def read(lines: Awaitable[Any]) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in await lines]


def test_an_api_server_queues_a_build_that_a_node_claims_and_makes_ready(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
        team = api.store.create_team("team-a")
        rec, build = create(api, team)
        assert build.status == BuildStatus.QUEUED and not api.t.queue._tasks, "the API server starts nothing"
        follower = asyncio.get_running_loop().create_task(read(api.t.logs(team, rec.id, build.id, 0, True)))
        await node.t.queue.serve("node-a")
        await until(lambda: node.started)
        got = api.store.get_build(build.id)
        assert got is not None and (got.status, got.node) == (BuildStatus.RUNNING, "node-a")
        node.release.set()
        lines = await asyncio.wait_for(follower, 10)
        assert [e.get("text") for e in lines][:3] == ["running on node node-a", "building from hutch/base",
                                                      "step 1/1: RUN true"]
        assert lines[-1]["done"] and lines[-1]["status"] == BuildStatus.READY
        done = api.store.get_template(rec.id)
        assert done is not None and done.rootfs == str(shared / "templates" / f"root-{build.id[:8]}" / "rootfs")
        assert (shared / "build-logs" / f"{build.id}.ndjson").is_file(), "the log is in the shared directory"
        await node.t.queue.close()

    asyncio.run(main())


def test_a_running_build_cancelled_through_an_api_server_stops_on_its_node(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
        team = api.store.create_team("team-a")
        rec, build = create(api, team)
        await node.t.queue.serve("node-a")
        await until(lambda: node.started)
        follower = asyncio.get_running_loop().create_task(read(api.t.logs(team, rec.id, build.id, 0, True)))
        cancelled = await api.t.cancel(team, rec.id, build.id)
        assert cancelled.status == BuildStatus.CANCELLED
        await until(lambda: not node.t.queue._tasks, timeout=3.0)  # within a second or two
        lines = await asyncio.wait_for(follower, 10)
        assert "cancelled" in [e.get("text") for e in lines]
        assert lines[-1]["done"] and lines[-1]["status"] == BuildStatus.CANCELLED
        assert sum(bool(e.get("done")) for e in lines) == 1
        got = api.store.get_build(build.id)
        assert got is not None and got.status == BuildStatus.CANCELLED, "the node's end does not overwrite it"
        with pytest.raises(Exception, match="already ended"):
            await api.t.cancel(team, rec.id, build.id)
        await node.t.queue.close()

    asyncio.run(main())


def test_a_queued_build_cancelled_ends_at_once_and_no_node_takes_it(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
        team = api.store.create_team("team-a")
        rec, build = create(api, team)
        assert (await api.t.cancel(team, rec.id, build.id)).status == BuildStatus.CANCELLED
        lines = await read(api.t.logs(team, rec.id, build.id, 0, False))
        assert [e.get("text") for e in lines] == ["cancelled", None] and lines[-1]["status"] == BuildStatus.CANCELLED
        await node.t.queue.serve("node-a")
        await asyncio.sleep(0.1)
        assert not node.started
        await node.t.queue.close()

    asyncio.run(main())


def test_a_template_deleted_while_a_node_builds_it_leaves_no_log_and_its_build_stops(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
        team = api.store.create_team("team-a")
        rec, build = create(api, team)
        await node.t.queue.serve("node-a")
        await until(lambda: node.started)
        await api.t.delete(team, rec.id)
        await until(lambda: not node.t.queue._tasks, timeout=3.0)
        assert not (shared / "build-logs" / f"{build.id}.ndjson").exists()
        assert api.store.get_build(build.id) is None
        await node.t.queue.close()

    asyncio.run(main())


def test_a_stopping_node_queues_its_build_again_and_another_node_finishes_it(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [a, b] = members(tmp_path, shared, stores, monkeypatch, "node-a", "node-b")
        team = api.store.create_team("team-a")
        rec, build = create(api, team)
        await a.t.queue.serve("node-a")
        await until(lambda: a.started)
        await a.t.queue.close()
        got = api.store.get_build(build.id)
        assert got is not None and (got.status, got.node, got.started_at) == (BuildStatus.QUEUED, None, None)
        b.release.set()
        await b.t.queue.serve("node-b")
        await until(lambda: (r := api.store.get_build(build.id)) is not None and r.status == BuildStatus.READY)
        lines = await read(api.t.logs(team, rec.id, build.id, 0, False))
        texts = [e.get("text") for e in lines]
        assert "node node-a is stopping: the build starts again on a node" in texts
        assert "running on node node-b" in texts and lines[-1]["status"] == BuildStatus.READY
        assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1)), "one log, in order, across both"
        await b.t.queue.close()

    asyncio.run(main())


def test_a_node_that_starts_again_fails_only_the_builds_it_was_running(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        api, [a] = members(tmp_path, shared, stores, monkeypatch, "node-a")
        team = api.store.create_team("team-a")
        rec, mine = create(api, team)
        _, theirs = create(api, team, "other")
        api.store.update_build(mine.id, status=BuildStatus.RUNNING, node="node-a")
        api.store.update_build(theirs.id, status=BuildStatus.RUNNING, node="node-b")
        await a.t.queue.serve("node-a")
        failed, untouched = api.store.get_build(mine.id), api.store.get_build(theirs.id)
        assert failed is not None and failed.status == BuildStatus.FAILED
        assert failed.error is not None and failed.error["message"] == "node node-a stopped during the build"
        assert untouched is not None and (untouched.status, untouched.node) == (BuildStatus.RUNNING, "node-b")
        lines = await read(api.t.logs(team, rec.id, mine.id, 0, False))
        assert lines[-1]["done"] and lines[-1]["status"] == BuildStatus.FAILED
        await a.t.queue.close()

    asyncio.run(main())


# --- the shared roots ----------------------------------------------------------------------------


def root(shared: Path, name: str) -> Path:
    rootfs = shared / "templates" / name / "rootfs"
    rootfs.mkdir(parents=True)
    (rootfs / "file").write_text("x")
    return rootfs


def test_a_shared_root_goes_only_once_nothing_has_referred_to_it_for_the_grace(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
    node.t.queue.owner = "node-a"
    store, team = api.store, api.store.create_team("team-a")
    current, unused, built_on, making = (root(shared, n) for n in ("current", "unused", "built-on", "making"))
    rec, build = create(api, team)
    store.update_template(rec.id, rootfs=str(current))
    store.update_build(build.id, status=BuildStatus.RUNNING, node="node-b", parent_rootfs=str(built_on),
                       rootfs=str(making))
    partial_running = shared / "templates" / f"k1.partial-{build.id}"
    partial_gone = shared / "templates" / "k2.partial-no-such-build"
    old_trash = shared / "templates" / f"k3.trash-{int(time.time() - 3600)}-ab"
    new_trash = shared / "templates" / f"k4.trash-{int(time.time())}-cd"
    for d in (partial_running, partial_gone, old_trash, new_trash):
        d.mkdir()
    collect = node.t.roots.collect_shared
    collect(set(), set())
    left = {d.name for d in (shared / "templates").iterdir()}
    assert left == {"current", "unused", "unused.unused", "built-on", "making", partial_running.name, new_trash.name}
    collect(set(), set())
    assert unused.is_dir(), "seen unused twice, but not for the grace"
    mark = shared / "templates" / "unused.unused"
    mark.write_text(f"{time.time() - UNUSED_GRACE - 1}\n")
    collect(set(), set())
    assert not unused.parent.exists() and not mark.exists()
    assert current.is_dir() and built_on.is_dir() and making.is_dir()


def test_a_shared_root_a_build_takes_again_loses_its_mark_or_is_put_back(
        tmp_path: Path, shared: Path, stores: Callable[[], Store], monkeypatch: pytest.MonkeyPatch) -> None:
    api, [node] = members(tmp_path, shared, stores, monkeypatch, "node-a")
    node.t.queue.owner = "node-a"
    store, team = api.store, api.store.create_team("team-a")
    again = root(shared, "again")
    _, build = create(api, team)
    node.t.roots.collect_shared(set(), set())
    assert (shared / "templates" / "again.unused").exists()
    store.update_build(build.id, status=BuildStatus.RUNNING, node="node-a")
    node.t.roots.root_chosen(build.id, again)  # a rebuild on this stack, on some node
    assert not (shared / "templates" / "again.unused").exists()
    assert store.builds_in_flight()[1] == {str(again)}

    real = node.t.roots.shared_in_use
    calls = 0

    def taken_between(*_: Any) -> tuple[set[str], set[str]]:
        """The store read once, and then a build took the root (the store says so the second time)."""
        nonlocal calls
        calls += 1
        builds, in_use = real()
        return (builds, in_use - {"again"}) if calls == 1 else (builds, in_use)

    monkeypatch.setattr(node.t.roots, "shared_in_use", taken_between)
    (shared / "templates" / "again.unused").write_text(f"{time.time() - UNUSED_GRACE - 1}\n")
    node.t.roots.collect_shared(set(), set())
    assert (again / "file").read_text() == "x", "moved aside, seen taken, and put back"
    assert calls == 2
