"""The store's queries, aggregate by aggregate, on a real SQLite file as the server uses; its
migrations, from nothing and from a database an older hutch made; and what two callers at once get.

tests/integration/store runs every test here again on PostgreSQL, but those that read the SQLite
file itself (they take `db`): the store's fixtures below are all there is to change.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from hutch.errors import ApiError, Code
from hutch.node import base_image
from hutch.secrets.vault import Vault
from hutch.services.boxsetup import BoxSetup
from hutch.services.config import ServerConfig
from hutch.services.retention import LogRetention
from hutch.services.secrets import Secrets
from hutch.store import (
    API_KEY_PREFIX,
    E2B_KEY_PREFIX,
    BindingRecord,
    BuildRecord,
    BuildStatus,
    Event,
    NodeRecord,
    NodeState,
    PreviewPortRecord,
    SandboxRecord,
    SandboxStatus,
    SecretRecord,
    SnapshotRecord,
    Store,
    TemplateRecord,
    migrations,
    schema,
)
from hutch.store.database import engine_for
from hutch.store.records import SANDBOX_JSON

T = TypeVar("T")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "hutch.db"


@pytest.fixture
def url(db: Path) -> str:
    return f"sqlite:///{db}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = Store(url)
    yield s
    s.engine.dispose()


@pytest.fixture
def another(url: str) -> Iterator[Store]:
    """A second store on the same database, as a second process would open it."""
    s = Store(url)
    yield s
    s.engine.dispose()


@pytest.fixture
def team(store: Store) -> str:
    return store.create_team("team-a")


def new_record(team_id: str, **fields: Any) -> SandboxRecord:
    sandbox_id = str(uuid.uuid4())
    values: dict[str, Any] = {"name": "box", "template": "base", "status": SandboxStatus.ACTIVE,
                              "memory_mib": 512, "vcpu": 1, "box_key": sandbox_id, **fields}
    return SandboxRecord(id=sandbox_id, team_id=team_id, **values)


def add_sandbox(store: Store, team_id: str, **fields: Any) -> SandboxRecord:
    rec = new_record(team_id, **fields)
    assert store.insert_sandbox(rec)
    return rec


# --- teams and API keys -------------------------------------------------------------------------


def test_a_team_is_found_by_name(store: Store, team: str) -> None:
    assert store.team_by_name("team-a") == team
    assert store.team_by_name("team-b") is None


def test_an_api_key_finds_its_team_and_a_wrong_key_finds_nothing(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    key, e2b_key, other_key = store.create_api_key(team), store.create_api_key(team, e2b=True), store.create_api_key(other)
    assert key.startswith(API_KEY_PREFIX)
    assert e2b_key.startswith(E2B_KEY_PREFIX) and len(e2b_key) == len(E2B_KEY_PREFIX) + 40
    int(e2b_key.removeprefix(E2B_KEY_PREFIX), 16)  # hex digits, as the e2b SDK demands
    assert store.team_for_api_key(key) == team
    assert store.team_for_api_key(e2b_key) == team
    assert store.team_for_api_key(other_key) == other
    for wrong in (key[:-1], key + "x", "", API_KEY_PREFIX, key.upper()):
        assert store.team_for_api_key(wrong) is None


def test_api_keys_are_kept_only_as_hashes(store: Store, team: str, db: Path) -> None:
    key = store.create_api_key(team)
    store.engine.dispose()  # everything on disk: the database and its write-ahead log
    on_disk = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert key.encode() not in on_disk


# --- sandboxes ----------------------------------------------------------------------------------


def test_a_sandbox_comes_back_as_it_went_in(store: Store, team: str) -> None:
    rec = add_sandbox(store, team, metadata={"owner": "ann"}, env_vars={"A": "1"},
                      network={"allow_out": ["example.com"], "deny_out": []}, timeout_seconds=60)
    assert store.get_sandbox(rec.id) == rec
    assert store.get_sandbox(rec.id, team) == rec
    assert store.get_sandbox(rec.id, store.create_team("team-b")) is None, "another team's sandbox is not found"
    assert store.get_sandbox("no-such-id") is None
    assert store.sandbox_by_runtime("no-such-runtime") is None


def test_sandboxes_are_listed_by_team_status_and_metadata_oldest_first(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    a = add_sandbox(store, team, metadata={"env": "prod", "owner": "ann"}, created_at=3.0)
    b = add_sandbox(store, team, metadata={"env": "prod"}, status=SandboxStatus.PAUSED, created_at=1.0)
    c = add_sandbox(store, other, metadata={"env": "prod"}, created_at=2.0)
    assert [r.id for r in store.list_sandboxes(team)] == [b.id, a.id]
    assert [r.id for r in store.list_sandboxes(None)] == [b.id, c.id, a.id]
    assert [r.id for r in store.list_sandboxes(team, status=SandboxStatus.PAUSED)] == [b.id]
    assert [r.id for r in store.list_sandboxes(team, metadata={"env": "prod", "owner": "ann"})] == [a.id]
    assert store.list_sandboxes(team, metadata={"env": "dev"}) == []


def test_an_update_with_only_if_status_changes_nothing_in_another_state(store: Store, team: str) -> None:
    rec = add_sandbox(store, team, updated_at=1.0)
    assert not store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSED,), status=SandboxStatus.RESUMING)
    assert store.get_sandbox(rec.id) == rec
    assert store.update_sandbox(rec.id, only_if_status=(SandboxStatus.ACTIVE,), status=SandboxStatus.PAUSING,
                                metadata={"k": "v"}, network=None)
    got = store.get_sandbox(rec.id)
    assert got is not None
    assert (got.status, got.metadata, got.network) == (SandboxStatus.PAUSING, {"k": "v"}, None)
    assert got.updated_at > 1.0, "an update stamps the record"
    assert not store.update_sandbox("no-such-id", status=SandboxStatus.FAILED)


def test_a_deleted_sandbox_is_invisible_but_still_counted(store: Store, team: str) -> None:
    rec = add_sandbox(store, team, runtime_id="rt-1")
    store.update_sandbox(rec.id, status=SandboxStatus.DELETED)
    assert store.get_sandbox(rec.id) is None
    assert store.list_sandboxes(team) == []
    assert store.list_sandboxes(team, status=SandboxStatus.DELETED) == []
    assert store.count_by_status(team) == {SandboxStatus.DELETED: 1}
    found = store.sandbox_by_runtime("rt-1")  # the node asks of every box it finds, whatever its record says
    assert found is not None and found.id == rec.id


def test_sandboxes_are_counted_by_status_overall_and_by_team(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    for status in (SandboxStatus.ACTIVE, SandboxStatus.ACTIVE, SandboxStatus.PAUSED):
        add_sandbox(store, team, status=status)
    add_sandbox(store, other, status=SandboxStatus.FAILED)
    assert store.count_by_status(team) == {"active": 2, "paused": 1}
    assert store.count_by_status() == {"active": 2, "paused": 1, "failed": 1}


def test_a_box_key_finds_only_a_sandbox_whose_box_runs(store: Store, team: str) -> None:
    for status in SandboxStatus:
        rec = add_sandbox(store, team, status=status)
        found = store.sandbox_by_box_key(rec.box_key)
        runs = status in (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)
        assert (found is not None and found.id == rec.id) == runs, status


def test_due_lists_active_sandboxes_to_pause_and_paused_ones_to_delete(store: Store, team: str) -> None:
    now = 1000.0
    to_pause = add_sandbox(store, team, pause_at=now)
    add_sandbox(store, team, pause_at=now + 1)
    add_sandbox(store, team)  # no timeout
    add_sandbox(store, team, status=SandboxStatus.PAUSED, pause_at=now - 10)  # paused already
    to_delete = add_sandbox(store, team, status=SandboxStatus.PAUSED, delete_at=now - 1)
    add_sandbox(store, team, status=SandboxStatus.PAUSED, delete_at=now + 1)
    add_sandbox(store, team, status=SandboxStatus.ACTIVE, delete_at=now - 1)  # runs: not deleted on its own
    add_sandbox(store, team, status=SandboxStatus.DELETED, pause_at=now - 1, delete_at=now - 1)
    assert store.due(now) == ([(to_pause.id, team)], [(to_delete.id, team)])


# --- templates and builds -----------------------------------------------------------------------


def add_template(store: Store, team_id: str | None, name: str, **fields: Any) -> TemplateRecord:
    rec = TemplateRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, spec={"from": "base"}, **fields)
    store.put_template(rec)
    return rec


def test_a_template_is_found_by_id_or_name_by_its_team_and_system_ones_by_every_team(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    base = add_template(store, None, "base", rootfs="/roots/base", env={"PATH": "/bin"}, created_at=1.0)
    own = add_template(store, team, "mine", created_at=2.0)
    assert store.get_template("mine", team) == own
    assert store.get_template(own.id, team) == own
    assert store.get_template("base", other) == base
    assert store.get_template("mine", other) is None
    assert store.get_template(own.id, other) is None
    assert store.get_template(own.id) == own, "with no team, by id"
    assert store.get_template("mine") is None, "with no team, never by name"
    assert store.list_templates(team) == [base, own]
    assert store.list_templates(other) == [base]


def test_an_id_is_found_before_a_name_that_looks_like_one(store: Store, team: str) -> None:
    target = add_template(store, team, "target")
    add_template(store, team, target.id)
    assert store.get_template(target.id, team) == target


def test_a_template_name_is_unique_within_its_team(store: Store, team: str) -> None:
    add_template(store, team, "mine")
    with pytest.raises(KeyError):
        add_template(store, team, "mine")
    add_template(store, store.create_team("team-b"), "mine")
    add_template(store, None, "shared")
    with pytest.raises(KeyError):
        add_template(store, None, "shared")


def test_a_system_template_is_replaced_and_a_template_updated(store: Store, team: str) -> None:
    base = TemplateRecord(id="base-id", team_id=None, name="base", spec={}, rootfs="/roots/old")
    store.put_system_template(base)
    store.put_system_template(TemplateRecord(id="base-id", team_id=None, name="base", spec={}, rootfs="/roots/new"))
    got = store.get_template("base", team)
    assert got is not None and got.rootfs == "/roots/new"
    store.update_template("base-id", env={"A": "1"}, build_id="b1")
    got = store.get_template("base-id")
    assert got is not None and (got.env, got.build_id) == ({"A": "1"}, "b1")


def test_a_template_a_sandbox_may_still_boot_from_is_not_deleted(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine", rootfs="/roots/mine")
    store.insert_build(BuildRecord(id="b1", template_id=tpl.id, status=BuildStatus.READY, spec=tpl.spec))
    box = add_sandbox(store, team, template_id=tpl.id, rootfs="/roots/old-mine", status=SandboxStatus.PAUSED)
    assert store.templates_in_use() == {tpl.id}
    assert store.roots_in_use() == {"/roots/mine", "/roots/old-mine"}
    assert not store.delete_template(tpl.id)
    assert store.get_template(tpl.id) is not None and store.get_build("b1") is not None
    store.update_sandbox(box.id, status=SandboxStatus.FAILED)
    assert store.templates_in_use() == set()
    assert store.roots_in_use() == {"/roots/mine"}
    assert store.delete_template(tpl.id)
    assert store.get_template(tpl.id) is None and store.get_build("b1") is None, "its builds go with it"


def new_snapshot(team_id: str, name: str | None = None, size: int = 100, **fields: Any) -> SnapshotRecord:
    return SnapshotRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, template="base", vcpu=1, memory_mib=512,
                          memory=True, size_bytes=size, **fields)


def test_snapshots_are_found_by_id_or_name_within_their_team_and_listed_by_metadata(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    a = new_snapshot(team, "a", metadata={"task": "1"}, env_vars={"K": "v"}, network={"allow_out": ["x.example"],
                                                                                         "deny_out": []},
                     secrets={"KEY": "s"}, created_at=1.0)
    b = new_snapshot(team, None, metadata={"task": "2"}, created_at=2.0)
    assert store.insert_snapshot(a, 10, 10_000) is None and store.insert_snapshot(b, 10, 10_000) is None
    assert store.get_snapshot("a", team) == a and store.get_snapshot(a.id, team) == a
    assert store.get_snapshot("a", other) is None and store.get_snapshot(a.id, other) is None
    assert store.get_snapshot(a.id) == a and store.get_snapshot("a") is None, "with no team, by id only"
    assert store.list_snapshots(team) == [b, a], "newest first"
    assert store.list_snapshots(team, {"task": "1"}) == [a]
    assert store.list_snapshots(other) == []
    assert store.snapshot_usage(team) == (2, 200)
    assert store.delete_snapshot(a.id) and not store.delete_snapshot(a.id)
    assert store.list_snapshots(team) == [b]


def test_a_teams_snapshots_are_refused_past_its_count_its_bytes_or_a_taken_name(store: Store, team: str) -> None:
    assert store.insert_snapshot(new_snapshot(team, "one", size=600), 2, 1000) is None
    assert store.insert_snapshot(new_snapshot(team, "one", size=1), 2, 1000) == "name"
    assert store.insert_snapshot(new_snapshot(team, "big", size=401), 2, 1000) == "bytes"
    assert store.insert_snapshot(new_snapshot(team, "two", size=400), 2, 1000) is None
    assert store.insert_snapshot(new_snapshot(team, "three", size=0), 2, 1000) == "count"
    assert {s.name for s in store.list_snapshots(team)} == {"one", "two"}, "a refusal changes nothing"
    assert store.insert_snapshot(new_snapshot(store.create_team("team-b"), "one"), 2, 1000) is None, \
        "names are the team's own"


def test_a_template_a_snapshot_boots_from_is_not_deleted_and_its_root_kept(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine", rootfs="/roots/mine")
    snap = new_snapshot(team, template_id=tpl.id, rootfs="/roots/old-mine")
    assert store.insert_snapshot(snap, 10, 10_000) is None
    assert store.templates_in_use() == {tpl.id}
    assert store.roots_in_use() == {"/roots/mine", "/roots/old-mine"}
    assert not store.delete_template(tpl.id)
    store.delete_snapshot(snap.id)
    assert store.roots_in_use() == {"/roots/mine"}
    assert store.delete_template(tpl.id)


def test_builds_are_listed_newest_first_and_counted_while_queued_or_running(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    other = add_template(store, team, "other")
    for i, status in enumerate(BuildStatus):
        store.insert_build(BuildRecord(id=f"b{i}", template_id=tpl.id, status=status, spec=tpl.spec, created_at=float(i)))
    store.insert_build(BuildRecord(id="o1", template_id=other.id, status=BuildStatus.QUEUED, spec={}, created_at=10.0))
    assert [b.id for b in store.list_builds(tpl.id)] == ["b4", "b3", "b2", "b1", "b0"]
    assert [b.id for b in store.list_builds(tpl.id, limit=2)] == ["b4", "b3"]
    assert [b.id for b in store.list_builds(statuses=(BuildStatus.QUEUED,))] == ["o1", "b0"]
    assert store.count_templates(team) == (2, 3)
    assert store.count_templates(store.create_team("team-b")) == (0, 0)
    latest = store.latest_builds([tpl.id, other.id, "no-such-template"])
    assert {t: b.id for t, b in latest.items()} == {tpl.id: "b4", other.id: "o1"}


def test_a_build_comes_back_and_changes_only_in_the_states_asked(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    build = BuildRecord(id="b1", template_id=tpl.id, status=BuildStatus.QUEUED, spec={"steps": [{"run": "true"}]},
                        steps_total=1)
    store.insert_build(build)
    assert store.get_build("b1") == build
    assert store.get_build("b1", tpl.id) == build
    assert store.get_build("b1", "another-template") is None
    assert not store.update_build("b1", only_if_status=(BuildStatus.RUNNING,), status=BuildStatus.CANCELLED)
    error = {"code": "step_failed", "message": "exit 1", "step": 0, "exit_code": 1}
    assert store.update_build("b1", only_if_status=(BuildStatus.QUEUED, BuildStatus.RUNNING),
                              status=BuildStatus.FAILED, error=error, env={"A": "1"})
    got = store.get_build("b1")
    assert got is not None and (got.status, got.error, got.env) == (BuildStatus.FAILED, error, {"A": "1"})



# --- a fleet's build queue ----------------------------------------------------------------------


def add_build(store: Store, template_id: str, status: str = BuildStatus.QUEUED, **fields: Any) -> BuildRecord:
    rec = BuildRecord(id=str(uuid.uuid4()), template_id=template_id, status=status, spec={"steps": []}, **fields)
    store.insert_build(rec)
    return rec


def test_the_oldest_queued_build_is_claimed_running_on_the_node(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    add_build(store, tpl.id, BuildStatus.RUNNING, node="node-b", created_at=1.0)
    newer = add_build(store, tpl.id, created_at=3.0)
    older = add_build(store, tpl.id, created_at=2.0)
    got = store.claim_build("node-a", now=5.0)
    assert got == dataclasses.replace(older, status=BuildStatus.RUNNING, node="node-a", started_at=5.0)
    assert store.get_build(older.id) == got
    claimed = store.claim_build("node-b")
    assert claimed is not None and claimed.id == newer.id and claimed.node == "node-b"
    assert store.claim_build("node-a") is None, "nothing queued is left"


def test_of_nodes_claiming_at_once_each_build_goes_to_one(store: Store, another: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    queued = {add_build(store, tpl.id, created_at=float(i)).id for i in range(20)}

    def drain(s: Store, node: str) -> Callable[[], list[str]]:
        def claims() -> list[str]:
            got = []
            while (build := s.claim_build(node)) is not None:
                got.append(build.id)
            return got
        return claims

    a, b = at_once(drain(store, "node-a"), drain(another, "node-b"))
    assert not set(a) & set(b), "no build is claimed twice"
    assert set(a) | set(b) == queued
    owner = {build.id: build.node for build in store.list_builds(tpl.id)}
    assert all(owner[i] == "node-a" for i in a) and all(owner[i] == "node-b" for i in b)


def test_a_build_is_changed_only_by_the_node_that_holds_it(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    build = add_build(store, tpl.id, BuildStatus.RUNNING, node="node-a")
    assert not store.update_build(build.id, only_if_status=(BuildStatus.RUNNING,), only_if_node="node-b",
                                  status=BuildStatus.READY)
    assert store.update_build(build.id, only_if_status=(BuildStatus.RUNNING,), only_if_node="node-a",
                              status=BuildStatus.QUEUED, node=None)
    got = store.get_build(build.id)
    assert got is not None and (got.status, got.node) == (BuildStatus.QUEUED, None)
    assert [b.id for b in store.list_builds(node="node-a")] == []


def test_failing_a_nodes_builds_fails_its_running_ones_and_no_other(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    mine = add_build(store, tpl.id, BuildStatus.RUNNING, node="node-a")
    ended = add_build(store, tpl.id, BuildStatus.READY, node="node-a")
    theirs = add_build(store, tpl.id, BuildStatus.RUNNING, node="node-b")
    queued = add_build(store, tpl.id)
    assert store.fail_builds_of("node-a", "node node-a was lost") == [mine.id]
    got = store.get_build(mine.id)
    assert got is not None and got.status == BuildStatus.FAILED and got.finished_at is not None
    assert got.error == {"code": "build_failed", "message": "node node-a was lost"}
    for rec in (ended, theirs, queued):
        assert store.get_build(rec.id) == rec
    assert store.fail_builds_of("node-a", "again") == []


def test_builds_in_flight_tell_the_roots_they_make_and_build_on(store: Store, team: str) -> None:
    tpl = add_template(store, team, "mine")
    running = add_build(store, tpl.id, BuildStatus.RUNNING, rootfs="/s/templates/k1/rootfs",
                        parent_rootfs="/s/templates/k0/rootfs")
    queued = add_build(store, tpl.id)
    add_build(store, tpl.id, BuildStatus.FAILED, rootfs="/s/templates/k2/rootfs", parent_rootfs="/s/templates/k3/rootfs")
    assert store.builds_in_flight() == ({running.id, queued.id}, {"/s/templates/k1/rootfs", "/s/templates/k0/rootfs"})

# --- secrets and bindings -----------------------------------------------------------------------


def add_secret(store: Store, team_id: str, name: str) -> SecretRecord:
    rec = SecretRecord(id=str(uuid.uuid4()), team_id=team_id, name=name, provider=None, header="Authorization",
                       format="Bearer {value}", hosts=["api.example.com", "*.example.org"], sealed=b"sealed",
                       version=1, created_at=1.0, updated_at=1.0)
    assert store.insert_secret(rec)
    return rec


def binding(sandbox_id: str, env: str, secret: SecretRecord) -> BindingRecord:
    return BindingRecord(sandbox_id=sandbox_id, env=env, secret_id=secret.id, secret_name=secret.name,
                         standin=f"standin-{uuid.uuid4().hex}", created_at=1.0)


def test_a_secret_is_found_by_team_and_name_and_its_name_is_unique_in_the_team(store: Store, team: str) -> None:
    other = store.create_team("team-b")
    b = add_secret(store, team, "b-token")
    a = add_secret(store, team, "a-token")
    assert store.get_secret(team, "a-token") == a
    assert store.secret_by_id(b.id) == b
    assert store.get_secret(other, "a-token") is None
    assert [s.name for s in store.list_secrets(team)] == ["a-token", "b-token"]
    assert not store.insert_secret(SecretRecord(**{**vars(a), "id": str(uuid.uuid4())}))
    add_secret(store, other, "a-token")


def test_a_rotation_bumps_the_version_and_a_deleted_secret_is_gone(store: Store, team: str) -> None:
    s = add_secret(store, team, "token")
    store.rotate_secret(s.id, b"new")
    got = store.secret_by_id(s.id)
    assert got is not None and (got.sealed, got.version) == (b"new", 2) and got.updated_at > s.updated_at
    store.delete_secret(s.id)
    assert store.secret_by_id(s.id) is None and store.get_secret(team, "token") is None


def test_bindings_replace_each_other_and_are_revoked_when_their_secret_goes(store: Store, team: str) -> None:
    s1, s2 = add_secret(store, team, "one"), add_secret(store, team, "two")
    box = add_sandbox(store, team)
    store.bind_secret(binding(box.id, "TOKEN", s1))
    later = binding(box.id, "TOKEN", s2)
    store.bind_secret(later)
    other = binding(box.id, "API_KEY", s1)
    store.bind_secret(other)
    assert store.bindings(box.id) == [other, later], "one binding per env var, ordered by env"
    assert [(b.env, s.id) for b, s in store.bound_secrets(box.id)] == [("API_KEY", s1.id), ("TOKEN", s2.id)]
    assert store.bound_secrets(box.id)[0] == (other, s1)
    assert store.secret_for_standin(later.standin, s2.id) == s2
    assert store.secret_for_standin(later.standin, s1.id) is None, "a stand-in swaps in only the secret it is bound to"
    store.delete_secret(s1.id)
    assert [(b.env, b.revoked) for b in store.bindings(box.id)] == [("API_KEY", True), ("TOKEN", False)]
    assert [b.env for b, _ in store.bound_secrets(box.id)] == ["TOKEN"]
    assert store.unbind_secret(box.id, "TOKEN")
    assert not store.unbind_secret(box.id, "TOKEN")
    assert [b.env for b in store.bindings(box.id)] == ["API_KEY"]


def test_a_sandbox_is_inserted_with_its_bindings_and_they_are_read_for_many_at_once(store: Store, team: str) -> None:
    s = add_secret(store, team, "token")
    a = SandboxRecord(id="a", team_id=team, name="a", template="base", status=SandboxStatus.ACTIVE, memory_mib=512, vcpu=1)
    store.insert_sandbox(a, [binding("a", "TOKEN", s), binding("a", "OTHER", s)])
    b = add_sandbox(store, team)
    store.bind_secret(binding(b.id, "TOKEN", s))
    found = store.bindings_of(["a", b.id, "none"])
    assert {k: [x.env for x in v] for k, v in found.items()} == {"a": ["OTHER", "TOKEN"], b.id: ["TOKEN"]}
    store.delete_bindings("a")
    assert store.bindings("a") == []
    assert len(store.bindings(b.id)) == 1


def test_a_secrets_audit_is_read_newest_first_by_name_and_outlives_the_secret(store: Store, team: str) -> None:
    s = add_secret(store, team, "token")

    def use(secret: SecretRecord, sandbox_id: str, path: str) -> None:
        store.add_secret_audit(secret_id=secret.id, at=1.0, sandbox_id=sandbox_id, env="TOKEN", host="api.example.com",
                               method="GET", path=path, status=200, team_id=team, secret_name=secret.name)

    use(s, "box-1", "/1")
    use(s, "box-2", "/2")
    store.delete_secret(s.id)
    use(add_secret(store, team, "token"), "box-1", "/3")  # made anew, same name
    use(add_secret(store, team, "other"), "box-1", "/other")
    entries = store.secret_audit(team, "token", limit=10)
    assert [e.path for e in entries] == ["/3", "/2", "/1"]
    assert [e.path for e in store.secret_audit(team, "token", limit=1, before=entries[0].id)] == ["/2"]
    assert [e.path for e in store.secret_audit(team, "token", limit=10, sandbox_id="box-1")] == ["/3", "/1"]
    assert store.secret_audit(store.create_team("team-b"), "token", limit=10) == []


# --- preview ports ------------------------------------------------------------------------------


def test_a_port_published_again_changes_its_access_and_keeps_its_credentials(store: Store, team: str) -> None:
    box = add_sandbox(store, team)
    first = PreviewPortRecord(sandbox_id=box.id, port=8080, access="public", generation=7, created_at=1.0)
    assert store.publish_port(first) == first
    again = store.publish_port(PreviewPortRecord(sandbox_id=box.id, port=8080, access="private", generation=99,
                                                 created_at=2.0))
    assert again == PreviewPortRecord(sandbox_id=box.id, port=8080, access="private", generation=7, created_at=1.0)
    assert store.preview_port(box.id, 8080) == again
    assert store.published_port(box.id, 8080) == (again, team)
    assert store.preview_port(box.id, 9000) is None


def test_ports_are_listed_rotated_and_unpublished(store: Store, team: str) -> None:
    box = add_sandbox(store, team)
    for port in (9000, 3000, 8080):
        store.publish_port(PreviewPortRecord(sandbox_id=box.id, port=port, access="public", generation=1, created_at=1.0))
    assert [p.port for p in store.preview_ports(box.id)] == [3000, 8080, 9000]
    assert store.rotate_preview_port(box.id, 3000)
    assert not store.rotate_preview_port(box.id, 1)
    rotated = store.preview_port(box.id, 3000)
    assert rotated is not None and rotated.generation == 2
    assert store.unpublish_port(box.id, 3000)
    assert not store.unpublish_port(box.id, 3000)
    assert [p.port for p in store.preview_ports(box.id)] == [8080, 9000]
    assert store.unpublish_port(box.id)
    assert store.preview_ports(box.id) == []


def test_a_deleted_sandboxs_port_is_no_longer_published(store: Store, team: str) -> None:
    box = add_sandbox(store, team)
    store.publish_port(PreviewPortRecord(sandbox_id=box.id, port=8080, access="public", generation=1, created_at=1.0))
    store.update_sandbox(box.id, status=SandboxStatus.DELETED)
    assert store.published_port(box.id, 8080) is None
    assert store.published_port("no-such-box", 8080) is None


# --- the audit log and the network log ----------------------------------------------------------


def log_connection(store: Store, sandbox_id: str, host: str, secrets: list[str] | None = None) -> None:
    store.add_network_log(sandbox_id=sandbox_id, at=1.0, host=host, port=443, ip="192.0.2.1", verdict="allowed",
                          rule="default", bytes_out=10, bytes_in=20, error=None, secrets=secrets)


def test_the_network_log_is_read_newest_first_in_pages(store: Store) -> None:
    log_connection(store, "box-1", "a.example", secrets=["token"])
    log_connection(store, "box-1", "b.example", secrets=[])
    log_connection(store, "box-2", "elsewhere.example")
    log_connection(store, "box-1", "c.example")
    page = store.network_log("box-1", limit=2)
    assert [e.host for e in page] == ["c.example", "b.example"]
    rest = store.network_log("box-1", limit=2, before=page[-1].id)
    assert [(e.host, e.secrets) for e in rest] == [("a.example", ["token"])]
    assert page[1].secrets is None, "no secrets swapped in reads as None"
    store.delete_network_log("box-1")
    assert store.network_log("box-1", limit=10) == []
    assert [e.host for e in store.network_log("box-2", limit=10)] == ["elsewhere.example"]


def test_the_audit_log_is_read_newest_first_in_pages(store: Store) -> None:
    for i, sandbox_id in enumerate(("box-1", "box-1", "box-2", "box-1")):
        store.add_audit(sandbox_id=sandbox_id, at=float(i), actor="127.0.0.1 test", op="exec", detail=f"echo {i}",
                        exit_code=0, outcome="ok")
    page = store.audit_log("box-1", limit=2)
    assert [e.detail for e in page] == ["echo 3", "echo 1"]
    assert [e.detail for e in store.audit_log("box-1", limit=2, before=page[-1].id)] == ["echo 0"]
    assert store.audit_log("box-3", limit=10) == []


# --- the fleet: nodes and keys -------------------------------------------------------------------


def a_node(name: str, **fields: Any) -> NodeRecord:
    values: dict[str, Any] = {"url": f"http://{name}.internal:7070", "vcpu": 4, "memory_mib": 8192,
                              "started_at": 1.0, "seen_at": 1.0, **fields}
    return NodeRecord(id=name, **values)


def test_a_node_is_upserted_listed_by_name_and_marked_down_once(store: Store) -> None:
    b = a_node("node-b")
    a = a_node("node-a", ray_node_id="ray-1", disk_mib=100_000)
    store.upsert_node(b)
    store.upsert_node(a)
    assert store.get_node("node-b") == b
    assert store.get_node("node-c") is None
    seen = dataclasses.replace(b, seen_at=5.0, url="http://10.0.0.2:7070")
    store.upsert_node(seen)
    assert store.list_nodes() == [a, seen]
    assert store.mark_node_down("node-b"), "the caller that marks it down is told"
    assert not store.mark_node_down("node-b"), "and only that one"
    assert not store.mark_node_down("node-c")
    assert store.list_nodes(NodeState.UP) == [a]
    assert [n.id for n in store.list_nodes(NodeState.DOWN)] == ["node-b"]
    store.upsert_node(dataclasses.replace(seen, started_at=9.0, seen_at=9.0))  # it started again
    assert store.get_node("node-b") == dataclasses.replace(seen, started_at=9.0, seen_at=9.0, state=NodeState.UP)


def test_failing_a_node_fails_the_boxes_on_it_and_no_other(store: Store, team: str) -> None:
    """A paused box is on no node (its checkpoint is in the fleet's shared directory): it stays paused;
    so does a resuming one (it is being restored from that checkpoint wherever Ray placed it)."""
    on_it = {status: add_sandbox(store, team, status=status, node="node-a", pause_at=10.0) for status in SandboxStatus}
    elsewhere = add_sandbox(store, team, node="node-b")
    local = add_sandbox(store, team)
    running = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING)
    failed = store.fail_boxes_of("node-a", "node node-a stopped answering")
    assert failed == sorted(on_it[s].id for s in running)
    for status, rec in on_it.items():
        got = store.get_sandbox(rec.id, include_deleted=True)
        assert got is not None
        if status in running:
            assert (got.status, got.failure, got.pause_at, got.node) == (
                SandboxStatus.FAILED, "node node-a stopped answering", None, "node-a")
        else:
            assert got == rec, f"a {status} box stays as it was"
    assert store.get_sandbox(elsewhere.id) == elsewhere
    assert store.get_sandbox(local.id) == local
    told = [(e.sandbox_id, e.data) for e in store.events(team, types=["sandbox.failed"])]
    assert told == [(i, {"reason": "node node-a stopped answering", "node": "node-a"}) for i in failed]
    assert store.fail_boxes_of("node-a", "again") == []
    assert len(store.events(team, types=["sandbox.failed"])) == len(failed), "no event for a box not failed"


def test_a_sandboxs_node_is_set_with_its_runtime_id_and_kept_once_it_stops(store: Store, team: str) -> None:
    rec = add_sandbox(store, team, runtime_id="rt-1", node="node-a")
    assert store.get_sandbox(rec.id) == rec
    assert store.update_sandbox(rec.id, status=SandboxStatus.PAUSED, runtime_id=None)
    got = store.get_sandbox(rec.id)
    assert got is not None and (got.runtime_id, got.node) == (None, "node-a"), "the node it last ran on"
    assert store.update_sandbox(rec.id, status=SandboxStatus.ACTIVE, runtime_id="rt-2", node="node-b")
    got = store.get_sandbox(rec.id)
    assert got is not None and (got.runtime_id, got.node) == ("rt-2", "node-b")
    assert store.sandbox_by_runtime("rt-2") == got


def test_a_fleet_key_is_made_once_and_then_read(store: Store, another: Store) -> None:
    made: list[bytes] = []

    def make() -> bytes:
        made.append(os.urandom(32))
        return made[-1]

    key = store.key("server", make)
    assert key == made[0]
    assert store.key("server", make) == key
    assert another.key("server", make) == key, "another process reads the same"
    assert len(made) == 1
    assert store.key("other", lambda: b"\x00\xff") == b"\x00\xff"


def at_once(*calls: Callable[[], T]) -> list[T]:
    """Run the calls on threads of their own, started together; their results in order (or what one raised)."""
    start = threading.Barrier(len(calls), timeout=10)

    def run(call: Callable[[], T]) -> T:
        start.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [f.result(timeout=60) for f in futures]


def test_two_processes_making_a_key_at_once_get_the_same_bytes(store: Store, another: Store) -> None:
    both_made = threading.Barrier(2, timeout=10)

    def make(value: bytes) -> Callable[[], bytes]:
        def made() -> bytes:
            both_made.wait()  # each found no key before either stores its own
            return value
        return made

    got = at_once(lambda: store.key("k", make(b"one")), lambda: another.key("k", make(b"two")))
    assert got[0] == got[1] and got[0] in (b"one", b"two")
    assert store.key("k", make(b"three")) == got[0]


def test_of_two_status_changes_at_once_one_is_made(store: Store, another: Store, team: str) -> None:
    rec = add_sandbox(store, team)

    def pause(s: Store) -> Callable[[], bool]:
        return lambda: s.update_sandbox(rec.id, only_if_status=(SandboxStatus.ACTIVE,), status=SandboxStatus.PAUSING)

    assert sorted(at_once(pause(store), pause(another))) == [False, True]


def test_a_team_at_its_limit_gets_no_new_sandbox(store: Store, team: str) -> None:
    add_sandbox(store, team)
    add_sandbox(store, team, status=SandboxStatus.RESUMING)
    for status in (SandboxStatus.PAUSED, SandboxStatus.FAILED, SandboxStatus.DELETED):
        add_sandbox(store, team, status=status)  # none of these run
    add_sandbox(store, store.create_team("team-b"))
    rec = new_record(team)
    assert not store.insert_sandbox(rec, team_max=2)
    assert store.get_sandbox(rec.id) is None
    assert store.insert_sandbox(rec, team_max=3)
    assert store.get_sandbox(rec.id) == rec


def test_of_two_creates_at_once_for_a_teams_last_place_one_is_made(store: Store, another: Store, team: str) -> None:
    add_sandbox(store, team)
    a, b = new_record(team), new_record(team)
    assert sorted(at_once(lambda: store.insert_sandbox(a, team_max=2), lambda: another.insert_sandbox(b, team_max=2))) \
        == [False, True]
    assert store.count_by_status(team) == {SandboxStatus.ACTIVE: 2}


def test_a_log_row_is_kept_whatever_its_strings(store: Store) -> None:
    """PostgreSQL refuses NULs in text and strings longer than their column; a log row keeps the rest."""
    store.add_audit(sandbox_id="box", at=1.0, actor="x" * 400, op="file_write", detail="/tmp/a\x00b", exit_code=None,
                    outcome="ok")
    [entry] = store.audit_log("box", limit=10)
    assert (entry.actor, entry.detail) == ("x" * 300, "/tmp/a\ufffdb")
    store.add_network_log(sandbox_id="box", at=1.0, host="a.example", port=443, ip=None, verdict="failed",
                          rule="default", bytes_out=0, bytes_in=0, error="e\x00" * 200, secrets=None)
    [logged] = store.network_log("box", limit=10)
    assert logged.error == ("e\ufffd" * 200)[:300]


# --- the schema ---------------------------------------------------------------------------------


def test_reopening_a_database_keeps_what_it_holds(store: Store, team: str, url: str) -> None:
    rec = add_sandbox(store, team)
    again = Store(url)
    try:
        assert again.get_sandbox(rec.id) == rec
    finally:
        again.engine.dispose()


def test_a_database_of_a_hutch_before_built_templates_is_upgraded(db: Path) -> None:
    old = sqlite3.connect(db)
    old.executescript("""
        CREATE TABLE teams (id VARCHAR(36) PRIMARY KEY, name VARCHAR(128) NOT NULL UNIQUE, created_at FLOAT NOT NULL);
        CREATE TABLE sandboxes (
            id VARCHAR(36) PRIMARY KEY, team_id VARCHAR(36) NOT NULL REFERENCES teams(id), name VARCHAR(128) NOT NULL,
            template VARCHAR(128) NOT NULL, status VARCHAR(16) NOT NULL, metadata TEXT NOT NULL, env_vars TEXT NOT NULL,
            timeout_seconds INTEGER, auto_delete_seconds INTEGER, runtime_id VARCHAR(32), box_key VARCHAR(64) NOT NULL,
            token_generation INTEGER NOT NULL, memory_mib INTEGER NOT NULL, vcpu INTEGER NOT NULL, failure TEXT,
            pause_at FLOAT, delete_at FLOAT, created_at FLOAT NOT NULL, updated_at FLOAT NOT NULL);
        CREATE TABLE templates (name VARCHAR(128) PRIMARY KEY, rootfs TEXT NOT NULL, env TEXT NOT NULL, workdir TEXT,
            vcpu INTEGER NOT NULL, memory_mib INTEGER NOT NULL, created_at FLOAT NOT NULL);
        INSERT INTO teams VALUES ('t1', 'team-a', 1.0);
        INSERT INTO templates VALUES ('base', '/roots/base-old', '{}', NULL, 1, 512, 1.0);
        INSERT INTO sandboxes VALUES ('s1', 't1', 'box', 'base', 'paused', '{"k": "v"}', '{}', NULL, NULL, NULL, 's1',
            1, 512, 1, NULL, NULL, NULL, 1.0, 1.0);
    """)
    old.close()
    store = Store(f"sqlite:///{db}")
    try:
        rec = store.get_sandbox("s1", "t1")
        assert rec is not None
        assert (rec.status, rec.metadata, rec.rootfs) == (SandboxStatus.PAUSED, {"k": "v"}, "/roots/base-old"), \
            "its sandboxes keep booting from the root they had"
        assert (rec.network, rec.template_id, rec.disk_mib, rec.stable_token) == (None, None, None, None)
        assert store.roots_in_use() == {"/roots/base-old"}
        assert store.get_template("base", "t1") is None, "the base is registered again at start"
        tpl = add_template(store, "t1", "base")
        assert store.get_template("base", "t1") == tpl
        assert store.update_sandbox("s1", network={"allow_out": ["example.com"]})
    finally:
        store.engine.dispose()


def schema_differences(url: str) -> list[Any]:
    """What the database at `url` has otherwise than schema.py says (Alembic's comparison)."""
    engine = engine_for(url)
    try:
        with engine.connect() as c:
            return list(compare_metadata(MigrationContext.configure(c), schema.meta))
    finally:
        engine.dispose()


def revision_of(url: str) -> str | None:
    engine = engine_for(url)
    try:
        with engine.connect() as c:
            return migrations.current(c)
    finally:
        engine.dispose()


def test_a_new_database_is_made_by_the_migrations_as_schema_py_says(store: Store, url: str) -> None:
    assert revision_of(url) == migrations.head()
    assert schema_differences(url) == [], "schema.py changed without a revision in hutch/store/migrations/versions"


def test_a_database_of_the_hutch_before_migrations_keeps_its_rows_and_is_stamped(url: str) -> None:
    team = "t1"
    engine = engine_for(url)  # the tables as the hutch before migrations made them: no fleet, no version
    with engine.begin() as c:
        schema.meta.create_all(c)
        c.execute(sa.text("DROP INDEX ix_sandboxes_node"))
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN node"))
        c.execute(sa.text("DROP TABLE nodes"))
        c.execute(sa.text("DROP TABLE fleet_keys"))
        c.execute(sa.text("ALTER TABLE template_builds DROP COLUMN node"))  # revision 0002's
        c.execute(sa.text("ALTER TABLE template_builds DROP COLUMN parent_rootfs"))
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN checkpoint_bytes"))  # revision 0003's
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN pause_refused_at"))
        c.execute(sa.text("DROP TABLE console_sessions"))  # revision 0004's
        c.execute(sa.text("DROP TABLE snapshots"))  # revision 0005's
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN pause_memory"))
        c.execute(sa.text("DROP TABLE volumes"))  # revision 0006's
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN volumes"))
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN header_rules"))  # revision 0007's
        c.execute(sa.text("ALTER TABLE secrets DROP COLUMN metadata"))
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN public_traffic"))  # revision 0008's
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN auto_resume"))
        c.execute(sa.text("ALTER TABLE sandboxes DROP COLUMN secure"))  # revision 0009's
        c.execute(sa.text("DROP TABLE events"))  # revision 0010's
        c.execute(sa.text("DROP TABLE webhooks"))  # revision 0011's
        c.execute(sa.text("DROP TABLE webhook_deliveries"))
        c.execute(schema.teams.insert().values(id=team, name="team-a", created_at=1.0))
        c.execute(schema.api_keys.insert().values(key_hash="h" * 64, team_id=team, prefix="hutch_abc", created_at=1.0))
        rec = new_record(team, metadata={"k": "v"}, runtime_id="rt-1", status=SandboxStatus.PAUSED)
        c.execute(schema.sandboxes.insert().values(**{k: v for k, v in SANDBOX_JSON.row(rec).items()
                                                       if k not in ("node", "checkpoint_bytes", "pause_refused_at",
                                                                    "pause_memory", "volumes", "header_rules",
                                                                    "public_traffic", "auto_resume", "secure")}))
        c.execute(schema.templates.insert().values(id="tpl", team_id=team, name="mine", spec="{}", env="{}", created_at=1.0))
        c.execute(schema.network_log.insert().values(sandbox_id=rec.id, at=1.0, host="a.example", port=443, verdict="allowed",
                                                     rule="default", bytes_out=1, bytes_in=2))
    engine.dispose()
    assert revision_of(url) is None
    store = Store(url)
    try:
        assert store.get_sandbox(rec.id, team) == rec
        assert store.team_by_name("team-a") == team
        got = store.get_template("mine", team)
        assert got is not None and got.id == "tpl"
        assert [e.host for e in store.network_log(rec.id, limit=10)] == ["a.example"]
        assert store.update_sandbox(rec.id, status=SandboxStatus.ACTIVE, node="node-a")
        store.upsert_node(a_node("node-a"))
        assert store.fail_boxes_of("node-a", "gone") == [rec.id]
    finally:
        store.engine.dispose()
    assert revision_of(url) == migrations.head()
    assert schema_differences(url) == [], "it has what a new database has, the node's index too"


def test_a_database_a_newer_hutch_migrated_is_not_touched(store: Store, url: str) -> None:
    with store.engine.begin() as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = 'from-a-newer-hutch'"))
    with pytest.raises(RuntimeError, match="a newer hutch migrated it"):
        Store(url)
    assert revision_of(url) == "from-a-newer-hutch"


# --- checkpoint budgets, and the logs' retention ---------------------------------------------------


def test_a_pause_is_held_to_its_teams_paused_count_and_bytes_and_to_every_checkpoints_bytes(
        store: Store, team: str) -> None:
    from hutch.store import CheckpointBudgets, PauseRefused

    add_sandbox(store, team, status=SandboxStatus.PAUSED, checkpoint_bytes=100)
    add_sandbox(store, team, status=SandboxStatus.RESUMING, checkpoint_bytes=50)  # its image stays until restored
    add_sandbox(store, team, status=SandboxStatus.FAILED, checkpoint_bytes=10**9)  # holds nothing now
    add_sandbox(store, store.create_team("team-b"), status=SandboxStatus.PAUSED, checkpoint_bytes=400)
    rec = add_sandbox(store, team)
    refusals = [
        (CheckpointBudgets(team_paused=2), PauseRefused("team_paused", 2, 2)),
        (CheckpointBudgets(team_bytes=159), PauseRefused("team_bytes", 150, 159)),
        (CheckpointBudgets(all_bytes=559), PauseRefused("all_bytes", 550, 559)),
    ]
    for budgets, refused in refusals:
        assert store.begin_pause(rec.id, 10, budgets) == refused
        got = store.get_sandbox(rec.id)
        assert got is not None and (got.status, got.checkpoint_bytes) == (SandboxStatus.ACTIVE, None), "untouched"
    assert store.begin_pause(rec.id, 10, CheckpointBudgets(team_paused=3, team_bytes=160, all_bytes=560)) is None
    got = store.get_sandbox(rec.id)
    assert got is not None and (got.status, got.checkpoint_bytes) == (SandboxStatus.PAUSING, 10), "its reservation"
    assert store.begin_pause(rec.id, 10, CheckpointBudgets()) == PauseRefused("state"), "pausing already"


def test_of_two_pauses_at_once_for_the_last_room_one_is_made(store: Store, another: Store, team: str) -> None:
    from hutch.store import CheckpointBudgets

    other = store.create_team("team-b")
    for budgets, teams in ((CheckpointBudgets(team_paused=1), (team, team)),
                           (CheckpointBudgets(team_bytes=150), (team, team)),
                           (CheckpointBudgets(all_bytes=150), (team, other))):  # the store's sum: any teams
        with store.engine.begin() as c:
            c.execute(schema.sandboxes.delete())
        a, b = (add_sandbox(store, t) for t in teams)
        results = at_once(lambda: store.begin_pause(a.id, 100, budgets),  # noqa: B023 (run in this turn)
                          lambda: another.begin_pause(b.id, 100, budgets))  # noqa: B023
        assert sorted(r is None for r in results) == [False, True], budgets
        assert sorted(str(store.get_sandbox(r.id).status) for r in (a, b)) == ["active", "pausing"]  # type: ignore[union-attr]


def test_the_logs_rows_older_than_the_retention_go_and_the_newer_stay(store: Store) -> None:
    def netlog(sandbox_id: str, at: float) -> None:
        store.add_network_log(sandbox_id=sandbox_id, at=at, host="a.example", port=443, ip=None, verdict="allowed",
                              rule="default", bytes_out=0, bytes_in=0, error=None, secrets=None)

    for at in (1.0, 2.0, 3.0, 1000.0):
        netlog("box", at)
        store.add_audit(sandbox_id="box", at=at, actor="me", op="exec", detail="true", exit_code=0, outcome="ok")
        store.add_secret_audit(secret_id="s", at=at, sandbox_id="box", env="KEY", host="a.example", method="GET",
                               path="/", status=200, team_id="t", secret_name="key")
    netlog("box", 2.5)  # logged late (a long connection's row is written at its end): its turn comes all the same
    assert store.prune_logs_before(100.0, batch=2) == 10
    assert [e.at for e in store.network_log("box", limit=10)] == [1000.0]
    assert [e.at for e in store.audit_log("box", limit=10)] == [1000.0]
    assert [e.at for e in store.secret_audit("t", "key", limit=10)] == [1000.0]
    assert store.prune_logs_before(100.0) == 0


def test_each_boxs_network_log_keeps_its_newest_rows(store: Store) -> None:
    for i in range(7):
        for box in ("chatty", "quiet"):
            if box == "chatty" or i < 2:
                store.add_network_log(sandbox_id=box, at=float(i), host=f"h{i}.example", port=443, ip=None,
                                      verdict="allowed", rule="default", bytes_out=0, bytes_in=0, error=None, secrets=None)
    newest, removed = store.cap_network_logs(3, batch=2)
    assert removed == 4
    assert [e.host for e in store.network_log("chatty", limit=10)] == ["h6.example", "h5.example", "h4.example"]
    assert len(store.network_log("quiet", limit=10)) == 2
    assert store.cap_network_logs(3, after=newest) == (newest, 0), "no box logged since: none looked at"


# --- events ---------------------------------------------------------------------------------------


def test_an_event_is_kept_only_with_its_change_and_only_for_its_team(store: Store, team: str) -> None:
    box = add_sandbox(store, team)
    assert not store.update_sandbox(box.id, only_if_status=(SandboxStatus.PAUSED,), status=SandboxStatus.ACTIVE,
                                    event=Event("sandbox.resumed"))
    assert store.events(team) == []  # no change, no event
    assert store.update_sandbox(box.id, only_if_status=(SandboxStatus.ACTIVE,), status=SandboxStatus.PAUSED,
                                event=Event("sandbox.paused", {"reason": "x" * 5000}))
    store.add_event(team, "sandbox.killed", box.id, reason="asked")
    got = store.events(team)
    assert [(e.type, e.sandbox_id) for e in got] == [("sandbox.paused", box.id), ("sandbox.killed", box.id)]
    assert got[0].id < got[1].id and len(got[0].data["reason"]) == 2000  # a long text is cut, never the event
    assert store.events(team, after=got[0].id) == [got[1]]
    assert store.events(team, types=["sandbox.killed"]) == [got[1]]
    assert store.events(store.create_team("team-b")) == []
    assert store.last_event_id() == got[1].id


@pytest.mark.parametrize(("days", "seconds"), [(0, 60), (30, 60), (0.0002, 1), (0.001, 8), (1 / 1440 * 5, 30)])
def test_retention_passes_come_a_minute_apart_or_within_a_tenth_of_a_short_retention(
        store: Store, tmp_path: Path, days: float, seconds: int) -> None:
    retention = LogRetention(ServerConfig(data_dir=tmp_path, audit_retention_days=days), store)
    assert retention.every_seconds == seconds


def test_a_system_template_built_while_the_server_runs_is_registered_at_its_first_create(
        store: Store, tmp_path: Path) -> None:
    """`hutch build-base --desktop` on a running server: the next create naming `desktop` finds it;
    before the build, the refusal says how to build it."""
    config = ServerConfig(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    setup = BoxSetup(config, store, Secrets(store, Vault(tmp_path / "vault.key")))
    with pytest.raises(ApiError) as refused:
        setup.template("team", "desktop")
    assert refused.value.code == Code.TEMPLATE_NOT_FOUND and "hutch build-base --desktop" in refused.value.message
    with pytest.raises(ApiError) as unknown:
        setup.template("team", "no-such")
    assert unknown.value.message == "template 'no-such' does not exist"
    root = base_image.base_root_path(config.cache_dir, base_image.DESKTOP)
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_text("")  # what is_built looks for: the root is built
    template = setup.template("team", "desktop")
    assert template.name == "desktop" and template.rootfs == str(root) and template.env == {"DISPLAY": ":0"}
