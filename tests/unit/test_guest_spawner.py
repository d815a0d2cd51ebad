"""The agent's spawner on this host, as root like the agent: a helper forked once that runs the box
user's commands and answers each one's pid and exit on a socket of that command's own, which the
pump waits on with the output."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hutch.guest import launch as L
from hutch.guest import protocol as p
from hutch.guest.spawner import _ANSWER, _EXIT, _PID, Spawner, _recv

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the helper drops to the box user: needs root")


class Events:
    """A pump's sink: what it sent, by kind."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)

    def text(self, kind: str) -> str:
        return "".join(e["d"] for e in self.sent if e["t"] == kind)


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    s = Spawner(p.BOX_UID, p.BOX_GID)
    yield s
    with contextlib.suppress(ProcessLookupError):
        os.kill(s.pid, signal.SIGKILL)


def run(spawner: Spawner, cmd: str, timeout: float | None = None) -> tuple[int, bool, Events]:
    env, _home = L.command_env(False, None)
    launched = L.launch(spawner, ["/bin/sh", "-c", cmd], "/", env, as_root=False)
    events = Events()
    code, timed_out = L.pump(launched, events, timeout)
    return code, timed_out, events


def test_a_command_runs_as_the_box_user_and_reports_its_output_and_exit(spawner: Spawner) -> None:
    code, timed_out, events = run(spawner, "id -u; echo oops >&2; exit 3")
    assert (code, timed_out) == (3, False)
    assert events.text("stdout") == f"{p.BOX_UID}\n" and events.text("stderr") == "oops\n"


def test_concurrent_commands_each_get_their_own_exit(spawner: Spawner) -> None:
    codes: dict[int, int] = {}

    def one(n: int) -> None:
        codes[n] = run(spawner, f"exit {n}")[0]

    threads = [threading.Thread(target=one, args=(n,)) for n in range(1, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == {n: n for n in range(1, 13)}


def test_a_command_that_closes_its_output_is_still_waited_for(spawner: Spawner) -> None:
    """Its output ends long before it does: the call ends with its exit, not with its output."""
    code, timed_out, events = run(spawner, "echo bye; exec >&- 2>&-; sleep 0.5; exit 4")
    assert (code, timed_out, events.text("stdout")) == (4, False, "bye\n")


def test_what_a_command_leaves_running_does_not_hold_its_call(spawner: Spawner) -> None:
    env, _home = L.command_env(False, None)
    launched = L.launch(spawner, ["/bin/sh", "-c", "sleep 60 & echo started"], "/", env, as_root=False)
    try:
        events = Events()
        assert L.pump(launched, events, None) == (0, False)
        assert events.text("stdout") == "started\n"
    finally:
        L.kill_group(launched.pid)


def test_a_timeout_kills_the_command(spawner: Spawner) -> None:
    code, timed_out, _events = run(spawner, "sleep 60", timeout=0.3)
    assert timed_out and code == 128 + signal.SIGKILL


def test_a_command_that_cannot_start_is_an_error_and_the_helper_goes_on(spawner: Spawner) -> None:
    env, _home = L.command_env(False, None)
    with pytest.raises(FileNotFoundError):
        L.launch(spawner, ["/bin/sh", "-c", "true"], "/no/such/dir", env, as_root=False)
    assert run(spawner, "echo fine")[2].text("stdout") == "fine\n"


def test_commands_of_a_helper_that_died_report_255_and_the_next_spawn_starts_a_new_one(spawner: Spawner) -> None:
    env, _home = L.command_env(False, None)
    launched = L.launch(spawner, ["/bin/sh", "-c", "sleep 60"], "/", env, as_root=False)
    first = spawner.pid
    try:
        assert launched.poll() is None
        os.kill(first, signal.SIGKILL)  # as the box user may: it owns the helper
        assert launched.wait() == 255
    finally:
        L.kill_group(launched.pid)
        for fd in launched.outputs:
            os.close(fd)
    code, _timed_out, events = run(spawner, "echo alive")
    assert (code, events.text("stdout")) == (0, "alive\n") and spawner.pid != first


def test_output_just_after_an_exit_that_follows_a_silence_is_relayed(spawner: Spawner,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What a command left behind may still write for a moment after it exits (EXIT_GRACE), counted
    from the exit, not from when the pump last woke: here the silence before the exit is longer
    than the grace, and the late line comes well within it."""
    monkeypatch.setattr(L, "EXIT_GRACE", 1.0)
    code, _timed_out, events = run(spawner, "sleep 1.5; (sleep 0.3; echo late) & exit 0")
    assert (code, events.text("stdout")) == (0, "late\n")


class FakeHelper:
    """Stands in for the helper, which runs as the box user and so may be that user's own program:
    it takes each request, lets go of the command's stdio, and answers on the command's socket
    whatever `answer` writes."""

    def __init__(self, spawner: Spawner, answer: Callable[[socket.socket], None]) -> None:
        ours, self.theirs = socket.socketpair()
        spawner.sock = ours
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                _req, fds = _recv(self.theirs, with_fds=4)
            except (EOFError, OSError):
                return
            for fd in fds[:3]:
                os.close(fd)
            self.answer(socket.socket(fileno=fds[3]))


@pytest.fixture
def decoy() -> Iterator[int]:
    """A process of our own, in a session of its own, for a fake helper to name: what the agent
    does to the pid it is told (a kill at a deadline) lands on nothing else of this host."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)
    yield pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # a test that waited for it itself
        os.waitpid(pid, 0)


def launch_true(spawner: Spawner) -> L.Launched:
    env, _home = L.command_env(False, None)
    return L.launch(spawner, ["/bin/sh", "-c", "true"], "/", env, as_root=False)


def test_a_helper_that_does_not_answer_fails_the_spawn_by_its_deadline_and_is_replaced(spawner: Spawner) -> None:
    """An answer trickled a byte at a time, each in less than the deadline: the deadline is the
    whole answer's. The helper that gave it is killed, and the next spawn has a new one."""
    spawner.REPLY_TIMEOUT = 0.5
    stand_in = os.fork()  # the fake helper's process, for the spawner to kill
    if stand_in == 0:
        time.sleep(60)
        os._exit(0)
    spawner.pid = stand_in

    def trickle(to: socket.socket) -> None:
        def go() -> None:
            with contextlib.suppress(OSError):
                for byte in _ANSWER.pack(_PID, 4242):
                    to.sendall(bytes([byte]))
                    time.sleep(0.2)
        threading.Thread(target=go, daemon=True).start()

    FakeHelper(spawner, trickle)
    with pytest.raises(OSError, match="does not answer"):
        launch_true(spawner)
    assert os.waitpid(stand_in, 0)[1] == signal.SIGKILL
    assert run(spawner, "echo replaced")[2].text("stdout") == "replaced\n"


def test_a_command_the_spawner_cannot_start_is_an_error_and_the_helper_lives(spawner: Spawner) -> None:
    helper = spawner.pid
    env, _home = L.command_env(False, None)
    with pytest.raises(OSError) as refused:
        L.launch(spawner, ["/bin/sh", "-c", "echo \0"], "/", env, as_root=False)
    assert refused.value.errno == errno.EINVAL
    assert run(spawner, "echo fine")[2].text("stdout") == "fine\n" and spawner.pid == helper


def test_a_command_killed_at_its_deadline_whose_exit_never_comes_still_ends_its_call(spawner: Spawner,
                                                                                      decoy: int) -> None:
    kept: list[socket.socket] = []

    def pid_only(to: socket.socket) -> None:
        kept.append(to)
        to.sendall(_ANSWER.pack(_PID, decoy))

    FakeHelper(spawner, pid_only)
    assert L.pump(launch_true(spawner), Events(), 0.2) == (255, True)
    assert os.waitpid(decoy, 0)[1] == signal.SIGKILL  # the kill at the deadline went to the named group


def test_a_helper_that_names_pid_1_or_garbage_fails_the_spawn(spawner: Spawner) -> None:
    for answer in (_ANSWER.pack(_PID, 1), _ANSWER.pack(9, 1234), _ANSWER.pack(_PID, -5)):
        def say(to: socket.socket, answer: bytes = answer) -> None:
            to.sendall(answer)
            to.close()

        FakeHelper(spawner, say)
        with pytest.raises(OSError, match="nonsense"):
            launch_true(spawner)


def test_a_lying_or_stalling_exit_report_is_255(spawner: Spawner, decoy: int) -> None:
    """Past its pid, a helper that reports an impossible exit, or a part of one and then nothing,
    ends the command's call with 255 rather than an error or a pump stuck for ever."""
    kept: list[socket.socket] = []
    for tail in (_ANSWER.pack(_EXIT, 10**12), _ANSWER.pack(_EXIT, -1), b"\x03\x00"):
        def pid_then(to: socket.socket, tail: bytes = tail) -> None:
            kept.append(to)  # held open: a part of an answer is all it gets
            to.sendall(_ANSWER.pack(_PID, decoy) + tail)

        FakeHelper(spawner, pid_then)
        assert L.pump(launch_true(spawner), Events(), None) == (255, False)
