"""Durability: the server can die and come back without losing a sandbox, and a box whose
runtime dies is reported failed instead of hanging calls."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from hutch import ConflictError, Sandbox
from hutch.guest import protocol
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Server, make_server, retire, runsc_cli, wait_for


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


def test_a_box_paused_before_an_agent_upgrade_resumes_with_the_agent_it_ran(tmp_path: Path) -> None:
    """scripts/install puts a new agent binary in the old one's place when agent/ changed. A box
    paused before resumes on the restarted server with its files and processes (runsc restores a
    process only from the very file its memory maps: the binary it ran is kept, by its content, in
    the data dir), and a new box runs the new binary."""
    built = base_image.agent_dir(DEFAULT_CACHE_DIR) / protocol.AGENT_BINARY
    if not built.is_file():
        pytest.fail("the compiled agent is not built (scripts/install builds it)")
    install = tmp_path / "agent"
    install.mkdir()
    binary = install / protocol.AGENT_BINARY
    shutil.copyfile(built, binary)
    os.chmod(binary, 0o755)
    size = binary.stat().st_size
    server = make_server("--warm-pool", "0")
    server.env["HUTCH_AGENT_DIR"] = str(install)
    server.start()
    try:
        kw = server.client_args()
        sb = Sandbox.create(name="before", **kw)
        sb.files.write("/home/user/kept.txt", "kept")
        sleeper = sb.commands.spawn("sleep 1000")
        sb.pause()
        upgrade = install / ".hutch-agent.new"  # as scripts/install writes it: a new file renamed over the old
        upgrade.write_bytes(binary.read_bytes() + b"\0another build")
        os.chmod(upgrade, 0o755)
        upgrade.replace(binary)
        server.stop()
        server.start()
        again = Sandbox.connect(sb.id, **kw)
        assert again.files.read_text("/home/user/kept.txt") == "kept"
        assert sleeper.pid in [p.pid for p in again.commands.list()]
        assert again.commands.run(f"wc -c < {protocol.AGENT_BIN_DIR}/{protocol.AGENT_BINARY}").stdout.strip() == str(size)
        fresh = Sandbox.create(name="after", **kw)
        assert fresh.commands.run(f"wc -c < {protocol.AGENT_BIN_DIR}/{protocol.AGENT_BINARY}").stdout.strip() == \
            str(size + len(b"\0another build"))
    finally:
        retire(server)
