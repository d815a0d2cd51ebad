"""Durability: the server can die and come back without losing a sandbox, and a box whose
runtime dies is reported failed instead of hanging calls."""

from __future__ import annotations

import signal

import pytest

from hutch import ConflictError, Sandbox
from tests.integration.support import Server, runsc_cli, wait_for


def test_a_killed_server_comes_back_with_its_boxes_running(own_server: Server) -> None:
    kw = own_server.client_args()
    sb = Sandbox.create(name="durable", metadata={"keep": "yes"}, **kw)
    sb.files.write("/home/user/state.txt", "before the crash")
    sb.commands.run("nohup sh -c 'echo $$ > /tmp/loop.pid; while true; do sleep 1; done' >/dev/null 2>&1 &")
    pid = sb.commands.run("until [ -s /tmp/loop.pid ]; do sleep 0.05; done; cat /tmp/loop.pid").stdout.strip()
    own_server.stop(signal.SIGKILL)
    own_server.start()
    again = Sandbox.connect(sb.id, **kw)
    assert again.get_info().status == "active" and again.metadata == {"keep": "yes"}
    assert again.files.read_text("/home/user/state.txt") == "before the crash"
    assert again.commands.run(f"kill -0 {pid} && echo running").stdout == "running\n"
    assert [i.id for i in Sandbox.list(**kw)] == [sb.id]
    again.kill()


def test_a_box_that_died_while_the_server_was_down_is_marked_failed(own_server: Server) -> None:
    kw = own_server.client_args()
    alive = Sandbox.create(name="alive", **kw)
    dead = Sandbox.create(name="dead", **kw)
    own_server.stop()
    assert len(runsc_cli(own_server, "list", "--quiet").split()) == 2, "the boxes outlive the server"
    record = own_server.record(dead.id)
    assert record.runtime_id
    runsc_cli(own_server, "delete", "--force", record.runtime_id)
    own_server.start()
    assert Sandbox.connect(alive.id, **kw).commands.run("echo up").stdout == "up\n"
    info = Sandbox.connect(dead.id, **kw).get_info()
    assert info.status == "failed" and info.failure
    with pytest.raises(ConflictError) as err:
        Sandbox.connect(dead.id, **kw).commands.run("echo hi")
    assert err.value.code == "sandbox_failed"
    assert {i.id: i.status for i in Sandbox.list(**kw)} == {alive.id: "active", dead.id: "failed"}
    Sandbox.kill_by_id(dead.id, **kw)  # a failed box can still be deleted
    assert [i.id for i in Sandbox.list(**kw)] == [alive.id]


def test_a_box_whose_runtime_dies_is_reported_failed_at_once(own_server: Server) -> None:
    kw = own_server.client_args()
    sb = Sandbox.create(name="doomed", **kw)
    (rid,) = runsc_cli(own_server, "list", "--quiet").split()
    runsc_cli(own_server, "kill", rid, "KILL")
    wait_for(lambda: sb.get_info().status == "failed", timeout=15, what="the box to be reported failed")
    with pytest.raises(ConflictError):
        sb.commands.run("echo hi")
    sb.kill()
    assert Sandbox.list(**kw) == []
