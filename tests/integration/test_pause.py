"""Pause and resume keep everything: memory, processes, files; twice in a row; transparently on
any call; with token rotation, lifetimes, races, and a server restart in between."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import AuthenticationError, NotFoundError, Sandbox, SandboxError
from tests.integration.support import COUNTER, Env, counted, in_background, make_server, wait_for

HOLDER = ("nohup python3 -c 'import time\nsecret = sum(range(1000))\nwhile True:\n"
          "    open(\"/tmp/held\", \"w\").write(str(secret)); time.sleep(0.1)' >/dev/null 2>&1 &")


def test_state_survives_pause_and_resume_twice(sdk: Any, box: Any) -> None:
    box.files.write("/home/user/notes.txt", "written before")
    box.commands.run("echo root-file > /etc/marker", user="root")
    box.commands.run(COUNTER)
    box.commands.run(HOLDER)
    wait_for(lambda: box.commands.run("cat /tmp/held").stdout == "499500", what="the holder to write")
    last = counted(box)
    for _ in range(2):
        box.pause()
        assert box.get_info().status == "paused"
        box.pause()  # twice is fine
        box.resume()
        assert box.get_info().status == "active"
        box.resume()  # twice is fine
        assert box.files.read_text("/home/user/notes.txt") == "written before"
        assert box.commands.run("cat /etc/marker").stdout == "root-file\n"
        now = counted(box)
        assert now >= last, "the counter process went on from where it was"
        wait_for(lambda: counted(box) > now, what="the counter, still running")  # noqa: B023 (waited for in this turn)
        last = counted(box)
        box.commands.run("rm -f /tmp/held")
        wait_for(lambda: box.commands.run("cat /tmp/held 2>/dev/null").stdout == "499500",
                 what="the python process to write its value again")


def test_any_call_resumes_a_paused_box_and_the_token_rotates(sdk: Any, box: Any) -> None:
    box.commands.run(COUNTER)
    old_token = box._dp.token
    box.pause()
    assert box.commands.run("echo back").stdout == "back\n"  # resumes on its own
    assert box.get_info().status == "active"
    box.pause()
    assert box.files.read_text("/tmp/count").strip().isdigit()
    box.pause()
    again = sdk.connect(box.id)
    assert again.get_info().status == "active"
    new_token = again._dp.token
    assert new_token != old_token
    r = httpx.post(f"{box._dp.url}/commands/run", json={"command": "true"}, headers={"X-Access-Token": old_token})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_access_token"
    assert box.commands.run("echo still").stdout == "still\n"  # the SDK took the new token itself
    again.close()


def test_a_paused_box_costs_no_running_processes(env: Env) -> None:
    sb = Sandbox.create(name="cheap")
    try:
        box_dir = env.server.box_dir(sb.id)
        assert box_dir.exists()
        sb.pause()
        assert not box_dir.exists(), "nothing of a paused box stays on the host but its image"
        image = env.server.data_dir / "checkpoints" / sb.id
        size = sum(f.stat().st_size for f in image.rglob("*") if f.is_file())
        assert 0 < size < 64 * 2**20, f"an idle box's checkpoint should be a few MB, not {size}"
        assert sb.commands.run("echo ok").stdout == "ok\n"
        assert not image.exists(), "the image is removed once the box runs again"
    finally:
        sb.kill()
    assert not (env.server.data_dir / "checkpoints" / sb.id).exists()


def test_kill_a_paused_box_reclaims_its_image(env: Env) -> None:
    sb = Sandbox.create(name="gone")
    sb.pause()
    image = env.server.data_dir / "checkpoints" / sb.id
    assert image.exists()
    sb.kill()
    assert not image.exists()
    with pytest.raises(NotFoundError):
        Sandbox.connect(sb.id)


def test_statuses_are_listed_truthfully(sdk: Any, make_box: Any) -> None:
    a = make_box(metadata={"group": "status"})
    b = make_box(metadata={"group": "status"})
    a.pause()
    assert [i.id for i in sdk.list(metadata={"group": "status"}, status="paused")] == [a.id]
    assert [i.id for i in sdk.list(metadata={"group": "status"}, status="active")] == [b.id]


def test_concurrent_pause_connect_resume_and_kill_are_safe(env: Env) -> None:
    sb = Sandbox.create(name="races")
    sb.commands.run(COUNTER)
    results: dict[str, Any] = {}

    def run(name: str, fn: Any) -> None:
        try:
            results[name] = fn()
        except Exception as e:  # recorded and checked below
            results[name] = e

    threads = [threading.Thread(target=run, args=("pause", sb.pause)),
               threading.Thread(target=run, args=("connect", lambda: Sandbox.connect(sb.id).get_info().status)),
               threading.Thread(target=run, args=("resume", lambda: Sandbox.connect(sb.id).resume()))]
    for t in threads:
        t.start()
        time.sleep(0.02)  # on purpose: a race, each call just under way as the next starts
    for t in threads:
        t.join(60)
    assert not any(isinstance(v, Exception) for v in results.values()), results
    info = sb.get_info()
    assert info.status in ("active", "paused")
    assert counted(sb) > 0
    # two resumes at once restore once
    sb.pause()
    both = [threading.Thread(target=run, args=(f"resume{i}", lambda: Sandbox.connect(sb.id).resume())) for i in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join(60)
    assert not any(isinstance(results[f"resume{i}"], Exception) for i in range(2)), results
    assert sb.get_info().status == "active"
    # a kill during a pause wins cleanly
    killer = threading.Thread(target=run, args=("kill", lambda: Sandbox.kill_by_id(sb.id)))
    pauser = threading.Thread(target=run, args=("pause2", sb.pause))
    pauser.start()
    time.sleep(0.05)  # on purpose: the kill lands while the pause is under way
    killer.start()
    pauser.join(60)
    killer.join(60)
    assert not isinstance(results["kill"], Exception), results
    with pytest.raises(NotFoundError):
        sb.get_info()
    assert not (env.server.data_dir / "checkpoints" / sb.id).exists()


def test_timeout_auto_pauses_and_auto_delete_deletes(env: Env) -> None:
    sb = Sandbox.create(name="lifetimes", timeout_seconds=2, auto_delete_seconds=3)
    sb.commands.run(COUNTER)
    wait_for(lambda: sb.get_info().status == "paused", timeout=15, what="the timeout to pause the box")
    assert counted(sb) > 0  # a call resumes it, state kept
    assert sb.get_info().status == "active"
    wait_for(lambda: sb.get_info().status == "paused", timeout=15, what="the timeout to pause it again")
    wait_for(lambda: sb.id not in {i.id for i in Sandbox.list()}, timeout=15, what="auto-delete")
    with pytest.raises(NotFoundError):
        sb.get_info()


def test_update_sets_and_clears_lifetimes(env: Env) -> None:
    sb = Sandbox.create(name="update-lifetimes")
    try:
        sb.update(timeout_seconds=1)
        wait_for(lambda: sb.get_info().status == "paused", timeout=15, what="the new timeout to pause it")
        sb.resume()
        sb.update(timeout_seconds=None)
        time.sleep(2.5)  # on purpose: past the old timeout, which must not fire
        assert sb.get_info().status == "active", "a cleared timeout never pauses"
        sb.update(auto_delete_seconds=0)
        sb.pause()  # 0: deleted on pause
        wait_for(lambda: sb.id not in {i.id for i in Sandbox.list()}, timeout=15, what="delete on pause")
    finally:
        sb.kill()


def test_an_old_token_is_refused_after_resume(env: Env) -> None:
    sb = Sandbox.create(name="tokens")
    try:
        url, token = sb._dp.url, sb._dp.token
        sb.pause()
        sb.resume()
        r = httpx.get(f"{url}/files", params={"path": "/etc/hostname"}, headers={"X-Access-Token": token})
        assert r.status_code == 401
        with pytest.raises(AuthenticationError):
            Sandbox.list(api_key="hutch_wrong")
    finally:
        sb.kill()


def test_paused_and_active_boxes_survive_a_server_kill(tmp_path: Path) -> None:
    server = make_server()
    server.start()
    try:
        kw = server.client_args()
        active = Sandbox.create(name="active", **kw)
        paused = Sandbox.create(name="paused", **kw)
        for sb in (active, paused):
            sb.commands.run(COUNTER)
            sb.files.write("/home/user/f", sb.name)
        before = counted(paused)
        paused.pause()
        server.stop(9)
        server.start()
        listed = {i.id: i.status for i in Sandbox.list(**kw)}
        assert listed == {active.id: "active", paused.id: "paused"}
        back = Sandbox.connect(paused.id, **kw)
        assert back.files.read_text("/home/user/f") == "paused" and counted(back) >= before
        assert Sandbox.connect(active.id, **kw).files.read_text("/home/user/f") == "active"
        server.cleanup_boxes(kw["api_key"])
        assert not any((server.data_dir / "checkpoints").iterdir())
    finally:
        server.stop()
        server.remove()


def test_pausing_while_a_command_streams_keeps_the_command(env: Env) -> None:
    """A pause cuts the live stream (its connection cannot be checkpointed) but not the command."""
    sb = Sandbox.create(name="pause-mid-stream")
    bg = in_background(lambda: sb.commands.run("for i in $(seq 1 40); do echo $i > /tmp/progress; echo $i; sleep 0.1; done"))
    try:
        def progress() -> str:
            return sb.commands.run("cat /tmp/progress 2>/dev/null || true").stdout.strip()

        wait_for(lambda: progress() not in ("", "1"), what="the command to run")
        Sandbox.connect(sb.id).pause()
        assert sb.get_info().status == "paused"
        bg.join(30)
        wait_for(lambda: progress() == "40", timeout=30,
                 what="the command to finish after the resume")
        assert len(bg.errors) <= 1  # the cut stream may end the call with a typed error
        assert all(isinstance(e, SandboxError) for e in bg.errors), bg.errors
    finally:
        sb.kill()


def test_quotas_count_running_boxes_and_hold_on_resume() -> None:
    from hutch import RateLimitError

    server = make_server("--warm-pool", "0", "--team-max-sandboxes", "1")
    server.start()
    try:
        kw = server.client_args()
        first = Sandbox.create(name="first", **kw)
        with pytest.raises(RateLimitError) as err:
            Sandbox.create(name="second", **kw)
        assert err.value.code == "too_many_sandboxes"
        first.pause()  # a paused box does not count
        second = Sandbox.create(name="second", **kw)
        with pytest.raises(RateLimitError):
            first.resume()  # and resuming it would go over
        assert first.get_info().status == "paused"
        other = Sandbox.create(name="other-team", api_key=server.new_team("other"), base_url=server.url)
        assert other.commands.run("echo mine").stdout == "mine\n", "the quota is per team"
        second.kill()
        first.resume()
        assert first.get_info().status == "active"
    finally:
        server.stop()
        server.remove()
