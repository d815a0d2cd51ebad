"""Snapshots and forks: a running box saved and booted many times, each boot its own box (id,
token, stand-ins, egress rules, files from then on), the source running on; quotas and bad
references as typed errors; snapshots kept across a restart."""

from __future__ import annotations

import secrets as random
from typing import Any

import httpx
import pytest

from hutch import (
    ConflictError,
    NetworkConfig,
    NotFoundError,
    RateLimitError,
    Sandbox,
    SandboxError,
    Secret,
    Snapshot,
    Template,
    ValidationError,
)
from hutch.sdk.codes import ServerCode
from tests.integration.internet import Internet
from tests.integration.support import COUNTER, Env, counted, logged, make_server, retire, wait_for


def _kill_all(boxes: list[Any]) -> None:
    for b in boxes:
        b.kill()


def test_boxes_from_a_snapshot_continue_its_processes_and_files_and_go_their_own_ways(sdk: Any, box: Any) -> None:
    box.files.write("/home/user/work.txt", "prepared")
    box.commands.run("echo root-made > /etc/marker", user="root")
    box.commands.run(COUNTER)
    before = counted(box)
    snap = box.snapshot(name=f"prepared-{random.token_hex(4)}", metadata={"task": "t1"})
    assert snap.source_sandbox_id == box.id and snap.memory and snap.size_bytes > 0
    assert box.get_info().status == "active", "the source runs on"
    source_after = counted(box)
    wait_for(lambda: counted(box) > source_after, what="the source's counter to go on")

    forks = sdk.from_snapshot(snap, 3, metadata={"fork": "yes"})
    try:
        assert len({f.id for f in forks} | {box.id}) == 4
        for fork in forks:
            info = fork.get_info()
            assert info.status == "active" and info.metadata == {"fork": "yes"} and info.template == "hutch/base"
            first = counted(fork)
            assert first >= before, "the counter continues from the saved value, not from 0"
            wait_for(lambda: counted(fork) > first, what="the fork's counter to run")  # noqa: B023
            assert fork.files.read_text("/home/user/work.txt") == "prepared"
            assert fork.commands.run("cat /etc/marker").stdout == "root-made\n"
        forks[0].files.write("/home/user/work.txt", "changed in fork 0")
        assert forks[1].files.read_text("/home/user/work.txt") == "prepared", "a fork's write is its own"
        assert box.files.read_text("/home/user/work.txt") == "prepared"
        forks[1].kill()
        assert forks[2].commands.run("echo alive").stdout == "alive\n", "a fork's kill is its own"
        one = sdk.create(name="single", from_snapshot=snap.name)
        forks.append(one)
        assert one.files.read_text("/home/user/work.txt") == "prepared"
    finally:
        _kill_all(forks)
    assert [s.id for s in Snapshot.list(metadata={"task": "t1"})] == [snap.id]
    Snapshot.get(snap.name).delete()
    with pytest.raises(NotFoundError) as e:
        Snapshot.get(snap.id)
    assert e.value.code == ServerCode.SNAPSHOT_NOT_FOUND
    assert box.commands.run("cat /home/user/work.txt").stdout == "prepared", "boxes live on without their snapshot"


def test_a_fork_has_its_own_token_and_stand_ins_and_its_secrets_and_rules_apply(make_box: Any, internet: Internet,
                                                                                   env: Env) -> None:
    value = "sk-ant-REAL-" + random.token_hex(16)
    secret = Secret.create(name=f"fork-{random.token_hex(4)}", value=value, provider="anthropic")
    try:
        box = make_box(name="agent", secrets={"ANTHROPIC_API_KEY": secret.name},
                       network=NetworkConfig(allow_out=["api.anthropic.com"], deny_out=["0.0.0.0/0"]))
        box.commands.run("nohup sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 &")
        source_standin = box.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip()
        forks = box.fork(2)
        try:
            standins = [f.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip() for f in forks]
            assert all(s.startswith("hutch_standin_") for s in standins)
            assert len({source_standin, *standins}) == 3, "every box has stand-ins of its own"
            assert len({box._dp.token, *(f._dp.token for f in forks)}) == 3
            r = httpx.post(f"{forks[0]._dp.url}/commands/run", json={"command": "true"},
                           headers={"X-Access-Token": box._dp.token})
            assert r.status_code == 401, "the source's token opens no fork"
            # the fork's own stand-in is swapped on the secret's host; the source's is not
            curl = ("curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -H \"x-api-key: $K\" "
                    "https://api.anthropic.com/v1/messages")
            ok = forks[0].commands.run(curl, env={"K": standins[0]}, timeout_seconds=60)
            assert (ok.exit_code, ok.stdout) == (0, "200"), ok.stderr
            assert internet.seen()[-1]["headers"]["x-api-key"] == value
            forks[0].commands.run(curl, env={"K": source_standin}, timeout_seconds=60)
            assert internet.seen()[-1]["headers"]["x-api-key"] == source_standin, "another box's stand-in is not swapped"
            # the source's egress rules came with it; a deny-all given at boot applies instead
            # (other.test is served by the stand-in internet: only the rules keep the fork from it)
            denied = forks[1].commands.run("curl -sS --max-time 10 -o /dev/null https://other.test/", timeout_seconds=60)
            assert denied.exit_code != 0
            seen = logged(forks[1], "other.test")
            assert seen[0].verdict == "denied", "the source's egress rules came with the fork"
        finally:
            _kill_all(forks)
        assert Snapshot.list(sandbox_id=box.id) == [], "a fork's own snapshot is not kept"
        snap = box.snapshot()
        try:
            [closed] = Sandbox.from_snapshot(snap, 1, network=NetworkConfig(allow_out=[], deny_out=["0.0.0.0/0"]))
            try:
                refused = closed.commands.run("curl -sS --max-time 10 -o /dev/null -H \"x-api-key: $ANTHROPIC_API_KEY\" "
                                              "https://api.anthropic.com/v1/messages", timeout_seconds=60)
                assert refused.exit_code != 0, "the rules given at boot replace the snapshot's"
                assert closed.get_info().network == NetworkConfig(allow_out=[], deny_out=["0.0.0.0/0"])
            finally:
                closed.kill()
        finally:
            Snapshot.delete_by_id(snap)
    finally:
        secret.delete()


def test_a_paused_box_can_be_snapshotted_and_stays_paused(box: Any) -> None:
    box.commands.run(COUNTER)
    box.files.write("/tmp/state", "paused state")
    box.pause()
    snap = box.snapshot()
    try:
        assert box.get_info().status == "paused", "taking a snapshot of a paused box does not resume it"
        [fork] = Sandbox.from_snapshot(snap)
        try:
            assert fork.files.read_text("/tmp/state") == "paused state"
            first = counted(fork)
            wait_for(lambda: counted(fork) > first, what="the fork's counter")
        finally:
            fork.kill()
        assert box.files.read_text("/tmp/state") == "paused state", "the source resumes from its own checkpoint"
    finally:
        Snapshot.delete_by_id(snap)


def test_bad_references_names_and_bodies_are_typed_errors_that_change_nothing(box: Any, env: Env) -> None:
    with pytest.raises(NotFoundError) as e:
        Sandbox.create(name="x", from_snapshot="no-such-snapshot")
    assert e.value.code == ServerCode.SNAPSHOT_NOT_FOUND
    with pytest.raises(NotFoundError):
        Sandbox.from_snapshot("00000000-0000-0000-0000-000000000000")
    with pytest.raises(NotFoundError) as e:
        Snapshot.delete_by_id("no-such-snapshot")
    assert e.value.code == ServerCode.SNAPSHOT_NOT_FOUND
    with pytest.raises(NotFoundError):
        Sandbox.connect("00000000-0000-0000-0000-000000000000").snapshot()
    name = f"taken-{random.token_hex(4)}"
    snap = box.snapshot(name=name)
    try:
        with pytest.raises(ConflictError) as c:
            box.snapshot(name=name)
        assert c.value.code == ServerCode.SNAPSHOT_EXISTS
        api = env.api()
        for body in ({"count": 0}, {"count": 21}, {"count": "2"}, {"name": ""}, {"bogus": 1},
                     {"env_vars": {"K": "1"}, "secrets": {"K": "s"}}):
            r = api.post(f"/v1/snapshots/{snap.id}/sandboxes", json=body)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (body, r.text)
        r = api.post("/v1/sandboxes", json={"name": "x", "from_snapshot": snap.id, "from_template": "hutch/base"})
        assert r.status_code == 400
        for bad in ("bad\nname", "a/b", "x" * 129):
            with pytest.raises(ValidationError):
                box.snapshot(name=bad)
        other = env.api(env.key_b)
        assert other.get(f"/v1/snapshots/{snap.id}").status_code == 404, "another team sees nothing"
        assert other.post(f"/v1/snapshots/{snap.id}/sandboxes", json={}).status_code == 404
        assert other.delete(f"/v1/snapshots/{snap.id}").status_code == 404
        assert [s.id for s in Snapshot.list() if s.name == name] == [snap.id], "one snapshot of the name"
    finally:
        Snapshot.delete_by_id(snap)
    assert box.commands.run("echo fine").stdout == "fine\n"


def test_a_teams_snapshots_are_held_to_its_quotas_and_kept_across_a_restart() -> None:
    server = make_server("--warm-pool", "0", "--team-max-snapshots", "2")
    server.start()
    try:
        args = server.client_args()
        box = Sandbox.create(name="quota", **args)
        box.files.write("/tmp/kept", "across a restart")
        first = box.snapshot(name="first")
        box.snapshot(name="second")
        with pytest.raises(RateLimitError) as e:
            box.snapshot(name="third")
        assert e.value.code == ServerCode.TOO_MANY_SNAPSHOTS
        assert {s.name for s in Snapshot.list(**args)} == {"first", "second"}, "the refused one left nothing"
        assert len(list((server.data_dir / "snapshots").iterdir())) == 2, "nor an image"
        Snapshot.delete_by_id("second", **args)
        box.snapshot(name="third")
        box.kill()

        server.stop()
        server.start()
        [again] = Sandbox.from_snapshot("first", **args)
        try:
            assert again.files.read_text("/tmp/kept") == "across a restart"
            assert again.get_info().name == "quota"
        finally:
            again.kill()
        assert Snapshot.get(first.id, **args).name == "first"
    finally:
        retire(server)


def test_snapshots_of_many_bytes_are_refused_past_the_teams_bytes() -> None:
    server = make_server("--warm-pool", "0", "--team-max-snapshot-bytes", "1M")
    server.start()
    try:
        args = server.client_args()
        box = Sandbox.create(name="big", **args)
        with pytest.raises(RateLimitError) as e:
            box.snapshot()
        assert e.value.code == ServerCode.TOO_MANY_SNAPSHOTS and "MiB" in e.value.message
        assert Snapshot.list(**args) == []
        images = server.data_dir / "snapshots"
        assert not images.exists() or not any(images.iterdir()), "no image was kept, nor made"
        assert box.commands.run("echo runs").stdout == "runs\n", "the box runs on"
    finally:
        retire(server)


def test_a_files_only_snapshot_boots_afresh_with_the_files_the_box_changed(sdk: Any, box: Any) -> None:
    box.commands.run("mkdir -p ~/proj/sub && echo kept > ~/proj/sub/a.txt && ln -s sub/a.txt ~/proj/link")
    box.commands.run("rm /etc/issue && echo new > /etc/added && chmod 640 /etc/added && echo gone > /tmp/scratch",
                     user="root")
    box.commands.run(COUNTER)
    snap = box.snapshot(memory=False)
    try:
        assert not snap.memory and snap.size_bytes > 0
        assert counted(box) > 0 and box.get_info().status == "active", "the box ran on, unpaused"
        [fresh] = sdk.from_snapshot(snap, env_vars={"EXTRA": "x"})
        try:
            assert fresh.files.read_text("/home/user/proj/sub/a.txt") == "kept\n"
            assert fresh.commands.run("readlink ~/proj/link").stdout == "sub/a.txt\n"
            assert fresh.commands.run("stat -c '%a %U' /etc/added", user="root").stdout == "640 root\n"
            assert fresh.commands.run("stat -c %U ~/proj").stdout == "user\n", "owners are kept"
            assert not fresh.files.exists("/etc/issue"), "what the box removed stays removed"
            assert not fresh.files.exists("/tmp/scratch"), "a tmpfs is not the box's files: as after a reboot"
            assert not fresh.files.exists("/tmp/count"), "no process came with it"
            assert fresh.commands.run("echo $EXTRA").stdout == "x\n"
            assert box.files.exists("/etc/added") and box.files.exists("/tmp/scratch"), "the source is untouched"
        finally:
            fresh.kill()
    finally:
        Snapshot.delete_by_id(snap)


def test_a_files_only_pause_keeps_the_files_and_its_resume_boots_the_box_afresh(sdk: Any, box: Any) -> None:
    box.commands.run("echo kept > ~/notes.txt")
    box.commands.run("rm /etc/issue", user="root")
    box.commands.run(COUNTER)
    assert counted(box) > 0
    box.pause(memory=False)
    assert box.get_info().status == "paused"
    assert box.files.read_text("/home/user/notes.txt") == "kept\n", "any call resumes it, with its files"
    assert box.get_info().status == "active"
    assert not box.files.exists("/etc/issue")
    assert not box.files.exists("/tmp/count"), "booted afresh: no process of before, and a new /tmp"
    box.commands.run(COUNTER)
    first = counted(box)
    box.pause()  # and a pause with the memory, after it, keeps the processes again
    assert counted(box) >= first


def test_a_files_only_save_takes_no_more_than_the_box_can_hold_however_its_root_makes_the_tar() -> None:
    """The box's root controls the tar the host downloads: here it grows it, sparse, to 3 GiB as
    it is made. The host stops at what the box can hold of its own (its 1 GiB disk, its memory
    no more), not at the team's quota."""
    template = Template.create(f"small-disk-{random.token_hex(4)}", disk_mib=1024)
    template.wait_until_ready(timeout_seconds=600)
    box = Sandbox.create("sparse-tar", from_template=template)
    try:
        box.commands.run("head -c 64M /dev/urandom > /opt/changed", user="root")  # a tar that takes a while
        box.commands.spawn("while :; do for f in /var/tmp/.hutch-snapshot/*/files.tar; do "
                           "[ -f $f ] && truncate -s 3G $f 2>/dev/null; done; done", user="root")
        with pytest.raises(SandboxError) as refused:
            box.snapshot(memory=False)
        assert refused.value.code == ServerCode.SNAPSHOT_FAILED, refused.value
        assert "more than its own disk holds" in str(refused.value)
        assert Snapshot.list(sandbox_id=box.id) == []  # nothing of it kept
        assert box.commands.run("echo alive").stdout == "alive\n"
    finally:
        box.kill()
        template.delete()
