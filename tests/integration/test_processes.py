"""Spawned processes: stdin, signals, a terminal, detach and reattach, pause and resume."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from hutch import AsyncSandbox, ConflictError, NotFoundError, PtySize, Sandbox, ValidationError
from tests.integration.support import wait_for


def test_a_python_repl_driven_through_stdin(box: Any) -> None:
    proc = box.commands.spawn("python3")
    assert proc.pid > 1
    proc.stdin.write("print(2 + 2)\n")
    proc.stdin.write(b"import sys; print('err', file=sys.stderr)\n")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stdout == "4\n" and proc.stderr == "err\n"


def test_output_goes_to_the_callbacks_as_it_comes(box: Any) -> None:
    seen: list[tuple[str, str]] = []
    proc = box.commands.spawn("echo one; read x; echo two $x; echo three >&2",
                              on_stdout=lambda t: seen.append(("out", t)), on_stderr=lambda t: seen.append(("err", t)))
    wait_for(lambda: ("out", "one\n") in seen, what="the first line before any input")
    proc.stdin.write("x\n")
    assert proc.wait(timeout=60) == 0
    assert "".join(t for k, t in seen if k == "out") == "one\ntwo x\n"
    assert "".join(t for k, t in seen if k == "err") == "three\n"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGKILL, 137)])
def test_a_signal_ends_a_process_with_the_shells_code(box: Any, sig: int, code: int) -> None:
    proc = box.commands.spawn("exec sleep 300")
    assert proc.kill(sig) is True
    assert proc.wait(timeout=60) == code
    assert proc.kill() is False, "an ended process cannot be signalled"


def test_a_process_that_traps_the_signal_exits_its_own_way(box: Any) -> None:
    proc = box.commands.spawn("trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.1; done")
    wait_for(lambda: "ready" in proc.stdout, what="the trap to be set")
    proc.kill(signal.SIGTERM)
    assert proc.wait(timeout=60) == 7 and proc.stdout == "ready\nbye\n"


def test_a_process_outlives_its_client_and_replays_on_reattach(box: Any) -> None:
    proc = box.commands.spawn("echo before; read line; echo after:$line; sleep 0.5; echo late")
    wait_for(lambda: "before" in proc.stdout, what="the first output")
    pid = proc.pid
    proc.close()  # the client goes away
    assert pid in [p.pid for p in box.commands.list()]
    again = box.commands.connect(pid)
    wait_for(lambda: again.stdout == "before\n", what="the replay of what was printed while away")
    again.stdin.write("x\n")
    assert again.wait(timeout=60) == 0
    assert again.stdout == "before\nafter:x\nlate\n"
    assert pid not in [p.pid for p in box.commands.list()], "list shows running processes only"


def test_output_printed_while_detached_is_kept_even_past_the_exit(box: Any) -> None:
    proc = box.commands.spawn("sleep 1; echo while-away; exit 4")
    pid = proc.pid
    proc.close()
    wait_for(lambda: pid not in [p.pid for p in box.commands.list()], what="the process to exit while detached")
    again = box.commands.connect(pid)
    assert again.wait(timeout=60) == 4 and again.stdout == "while-away\n"


def test_the_buffer_is_bounded_and_says_what_it_dropped(box: Any) -> None:
    proc = box.commands.spawn("python3 -c \"import sys; [sys.stdout.write(f'{i:07d}\\n') for i in range(400000)]\"")
    pid = proc.pid
    proc.close()
    wait_for(lambda: pid not in [p.pid for p in box.commands.list()], timeout=60, what="the printer to finish")
    again = box.commands.connect(pid)
    assert again.wait(timeout=60) == 0
    total = 8 * 400000
    assert again.dropped_chars > 0 and again.dropped_chars + len(again.stdout) == total
    assert len(again.stdout) <= 1.25 * 2**20, "about 1 MiB is kept"
    assert again.stdout.endswith("0399998\n0399999\n"), "the newest output is what is kept"


def test_a_terminal_answers_tty_and_stty_size_after_resize(box: Any) -> None:
    proc = box.commands.spawn("/bin/bash --norc -i", pty=PtySize(rows=24, cols=80))
    proc.stdin.write("tty; stty size; python3 -c 'import sys; print(\"isatty\", sys.stdout.isatty())'\n")
    wait_for(lambda: "24 80" in proc.stdout and "isatty True" in proc.stdout, what="the terminal's answers")
    assert "/dev/pts/" in proc.stdout
    proc.resize(40, 120)
    proc.stdin.write("stty size\n")
    wait_for(lambda: "40 120" in proc.stdout, what="the new size")
    proc.stdin.write("sleep 100 &\njobs\n")
    wait_for(lambda: "Running" in proc.stdout, what="job control")
    proc.stdin.write("printf '\\033[31mred\\033[0m\\n'; exit 3\n")
    assert proc.wait(timeout=60) == 3
    assert "\x1b[31mred" in proc.stdout


def test_a_process_lives_on_across_pause_and_resume(box: Any) -> None:
    proc = box.commands.spawn("cat")
    proc.stdin.write("one\n")
    wait_for(lambda: proc.stdout == "one\n", what="the first echo")
    pid = proc.pid
    box.pause()
    with pytest.raises(ConflictError) as e:
        proc.wait(timeout=60)
    assert e.value.code == "sandbox_paused"
    box.resume()
    assert pid in [p.pid for p in box.commands.list()]
    again = box.commands.connect(pid)
    again.stdin.write("two\n")
    again.stdin.close()
    assert again.wait(timeout=60) == 0 and again.stdout == "one\ntwo\n"


def test_bad_calls_are_typed_errors(box: Any) -> None:
    with pytest.raises(NotFoundError) as nf:
        box.commands.connect(999999)
    assert nf.value.code == "process_not_found"
    with pytest.raises(ValidationError) as bad_cwd:
        box.commands.spawn("true", cwd="/no/such/dir")
    assert bad_cwd.value.code == "invalid_cwd"
    with pytest.raises(ValidationError):
        box.commands.spawn("true", pty=(0, 80))
    proc = box.commands.spawn("sleep 300")
    with pytest.raises(ValidationError) as not_tty:
        proc.resize(10, 10)
    assert not_tty.value.code == "not_a_terminal"
    proc.stdin.close()
    with pytest.raises(ConflictError) as closed:
        proc.stdin.write("late\n")
    assert closed.value.code == "stdin_closed"
    proc.kill()
    assert proc.wait(timeout=60) == 143
    with pytest.raises(ConflictError) as ended:
        proc.stdin.write("after the end\n")
    assert ended.value.code == "process_exited"
    with pytest.raises(NotFoundError):
        box.commands.kill(999999)


def test_kill_by_pid_without_attaching(box: Any) -> None:
    proc = box.commands.spawn("sleep 300")
    pid = proc.pid
    proc.close()
    assert box.commands.kill(pid) is True
    again = box.commands.connect(pid)
    assert again.wait(timeout=60) == 143


def test_the_sync_process_is_a_context_manager_that_kills_on_exit() -> None:
    sb = Sandbox.create(name="ctx")
    try:
        with sb.commands.spawn("sleep 300") as proc:
            pid = proc.pid
            assert pid in [p.pid for p in sb.commands.list()]
        wait_for(lambda: pid not in [p.pid for p in sb.commands.list()], what="the process to be killed")
    finally:
        sb.kill()


def test_the_async_process_is_a_context_manager_that_kills_on_exit() -> None:
    async def main() -> None:
        sb = await AsyncSandbox.create(name="ctx")
        try:
            async with await sb.commands.spawn("sleep 300") as proc:
                pid = proc.pid
                assert pid in [p.pid for p in await sb.commands.list()]
            for _ in range(100):
                if pid not in [p.pid for p in await sb.commands.list()]:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the process was not killed")
        finally:
            await sb.kill()

    asyncio.run(main())


def test_large_stdin_arrives_whole_and_a_process_that_never_reads_is_an_error_not_a_hang(box: Any) -> None:
    counter = box.commands.spawn("wc -c")
    counter.stdin.write(b"\x00\xff" * 1_500_000)  # 3 MB, more than one frame, not UTF-8
    counter.stdin.close()
    assert counter.wait(timeout=60) == 0 and counter.stdout.strip() == "3000000"
    sleeper = box.commands.spawn("sleep 300")
    with pytest.raises(ConflictError) as full:
        sleeper.stdin.write("x" * 2**20)
    assert full.value.code == "stdin_full"
    assert sleeper.kill() is True and sleeper.wait(timeout=60) == 143
