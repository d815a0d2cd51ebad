"""A server that stops stops its warm pool's boxes, however it is stopped; its recorded sandboxes
run on (a restart adopts them)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from hutch import Sandbox
from tests.integration.support import Server, make_server, pooled, retire, runsc_cli, wait_for


def _running(server: Server) -> set[str]:
    """runsc's containers on the server's root (by id: a status is asked of each sandbox, and a
    waiting pool box is frozen, so it would not answer)."""
    return set(runsc_cli(server, "list", "--quiet").split())


def _status(server: Server, runtime_id: str) -> str:
    return str(json.loads(runsc_cli(server, "state", runtime_id))["status"])


@pytest.fixture
def server() -> Server:
    s = make_server("--warm-pool", "2")
    s.start()
    return s


# SIGHUP: a closed terminal. Ctrl-C twice: uvicorn skips its shutdown, and the lifespan's end runs
# as asyncio cancels every task (the reaper's too, once: the pool's deletes then waited a minute
# each on their zombies). SIGTERM then SIGINT: the process ends at once. SIGKILL: likewise.
@pytest.mark.parametrize("signals", [("SIGTERM",), ("SIGHUP",), ("SIGINT", "SIGINT"), ("SIGTERM", "SIGINT"),
                                     ("SIGKILL",)], ids=lambda s: "+".join(s))
def test_a_stopped_server_leaves_no_pool_box(server: Server, signals: tuple[str, ...]) -> None:
    try:
        sb = Sandbox.create(name="outlives", **server.client_args())
        recorded = server.record(sb.id).runtime_id
        wait_for(lambda: pooled(server.url) == 2, timeout=60, what="a full pool")
        waiting = _running(server) - {recorded}
        assert len(waiting) == 2
        assert server.proc is not None
        for name in signals:
            server.proc.send_signal(getattr(signal, name))
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not exit within 30 s of {'+'.join(signals)}")
        # A server that shut down stopped them itself; one that could not (killed, or a second signal
        # that ends it at once) leaves them to its guard, which stops them once it is gone
        wait_for(lambda: not waiting & _running(server), timeout=60, what="the pool's boxes to be stopped")
        assert _running(server) == {recorded}, "no pool box is left"
        assert recorded is not None and _status(server, recorded) == "running", "the recorded sandbox runs on"
    finally:
        retire(server)


GROWN = 50


def test_a_grown_pool_is_gone_soon_after_sigterm() -> None:
    """A pool of 50 waiting (frozen) boxes, stopped several at a time: gone within a service
    manager's stop timeout (systemd's default is 90 s; hutch promises 10 s) of SIGTERM."""
    server = make_server("--warm-pool-max", str(GROWN))
    server.start()
    try:
        wait_for(lambda: pooled(server.url) == GROWN, timeout=300, what=f"a pool of {GROWN}")
        assert len(_running(server)) == GROWN
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        # the promise is a deadline: waited on as state, failing only past it
        wait_for(lambda: server.proc is not None and server.proc.poll() is not None and not _running(server),
                 timeout=10, what=f"the server gone with its {GROWN} pool boxes")
    finally:
        retire(server)


def _zombies(pid: int) -> list[int]:
    """The server's children that ended and were not reaped."""
    kids = [int(k) for task in Path(f"/proc/{pid}/task").iterdir()
            for k in (task / "children").read_text().split()]
    found = []
    for kid in kids:
        try:
            if Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                found.append(kid)
        except OSError:
            continue
    return found


def test_the_boxes_the_server_adopted_are_reaped_when_they_end(server: Server) -> None:
    """A box's sandbox and gofer are re-parented to the server (a subreaper): each kill leaves no zombie."""
    try:
        made = [Sandbox.create(name=f"reaped-{i}", **server.client_args()) for i in range(3)]
        for sb in made:
            sb.kill()
        proc = server.proc
        assert proc is not None
        wait_for(lambda: not _zombies(proc.pid), timeout=30, what="every ended box reaped")
    finally:
        retire(server)
