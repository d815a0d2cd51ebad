"""A build's log as its readers see it: whole lines only, bounded (a build box's commands write the
text), followed in the process that builds and, from a file that grows, in another (a fleet's API
server following a node's build), to the log's end or to the end its build's record tells."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hutch.templates import buildlog
from hutch.templates.buildlog import MAX_LINE_BYTES, BuildLog, Ended, LogReader, follow, follow_file


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildlog, "FILE_POLL_SECONDS", 0.01)
    monkeypatch.setattr(buildlog, "STATUS_POLL_SECONDS", 0.01)
    monkeypatch.setattr(buildlog, "DONE_GRACE", 0.2)


def entry(seq: int, text: str = "x", **fields: Any) -> bytes:
    return (json.dumps({"seq": seq, "time": "t", "step": None, "stream": "stdout", "text": text, **fields}) + "\n").encode()


def done(seq: int, status: str = "ready") -> bytes:
    return (json.dumps({"seq": seq, "time": "t", "done": True, "status": status, "error": None}) + "\n").encode()


async def collect(lines: AsyncIterator[bytes]) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in lines]


# --- the reader ----------------------------------------------------------------------------------


def test_a_reader_gives_whole_lines_and_a_torn_one_once_it_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    reader = LogReader(path)
    assert reader.read() == ([], False), "no file yet: a queued build"
    path.write_bytes(entry(1) + entry(2)[:10])
    assert reader.read() == ([entry(1)], False)
    with path.open("ab") as f:
        f.write(entry(2)[10:])
    assert reader.read() == ([entry(2)], False)
    assert reader.read() == ([], False)


def test_a_line_too_long_is_skipped_to_its_end_whole_or_written_in_pieces(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    reader = LogReader(path)
    huge = b"y" * (3 * MAX_LINE_BYTES)
    path.write_bytes(entry(1) + huge[:MAX_LINE_BYTES + 5])  # the start of a flood, no newline yet
    assert reader.read() == ([entry(1)], False)
    with path.open("ab") as f:
        f.write(huge[MAX_LINE_BYTES + 5:] + b"\n" + entry(2))
    assert reader.read() == ([entry(2)], False), "the long line is dropped, what follows it is read"
    path.write_bytes(path.read_bytes() + entry(3, "z" * 100))
    assert reader.read() == ([entry(3, "z" * 100)], False)


def test_a_read_takes_about_its_limit_and_says_more_is_there(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    lines = [entry(i, "a" * 1000) for i in range(1, 101)]
    path.write_bytes(b"".join(lines))
    reader = LogReader(path)
    got, more = reader.read(limit=10_000)
    assert more and 1 <= len(got) <= 11 and got == lines[:len(got)]
    rest: list[bytes] = []
    while more:
        part, more = reader.read(limit=10_000)
        rest += part
    assert got + rest == lines


def test_a_log_reopened_after_a_crash_goes_on_after_its_last_whole_entry(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    path.write_bytes(entry(1) + entry(2) + b'{"seq": 3, "te')
    log = BuildLog(path)
    log.system("again")
    log.finish("ready", None)
    seqs = [json.loads(line)["seq"] for line in path.read_bytes().splitlines()]
    assert seqs == [1, 2, 3, 4]


# --- following in the building process -----------------------------------------------------------


def test_a_live_log_is_followed_to_its_end(tmp_path: Path) -> None:
    async def main() -> list[dict[str, Any]]:
        log = BuildLog(tmp_path / "b.ndjson")
        log.system("queued")

        async def write() -> None:
            for i in range(3):
                await asyncio.sleep(0.02)
                log.output("stdout", f"line {i}\n", 0)
            log.finish("ready", None)

        writer = asyncio.get_running_loop().create_task(write())
        got = await collect(follow(log, log.path, 0, wait=True))
        await writer
        return got

    got = asyncio.run(main())
    assert [e.get("text") for e in got] == ["queued", "line 0", "line 1", "line 2", None]
    assert got[-1]["done"] and [e["seq"] for e in got] == [1, 2, 3, 4, 5]


# --- following from another process ------------------------------------------------------------


def test_a_file_another_process_writes_is_followed_as_it_grows_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"

    async def main() -> list[dict[str, Any]]:
        async def write() -> None:  # as a node would: the file appears once the build is claimed
            await asyncio.sleep(0.05)
            log = BuildLog(path, sync=True)
            for i in range(5):
                log.output("stdout", f"line {i}\n", 0)
                await asyncio.sleep(0.02)
            log.finish("ready", None)

        writer = asyncio.get_running_loop().create_task(write())
        got = await collect(follow_file(path, 2, True, lambda: None))  # the record says it goes on
        await writer
        return got

    got = asyncio.run(main())
    assert [e.get("text") for e in got] == ["line 2", "line 3", "line 4", None], "after seq 2 only"
    assert got[-1]["done"] and got[-1]["status"] == "ready"


def test_a_build_whose_record_ended_without_its_log_saying_so_ends_as_the_record_says(tmp_path: Path) -> None:
    """A running build cancelled by an API server, or a lost node's: its node may write its end a
    moment later, or never."""
    path = tmp_path / "b.ndjson"
    path.write_bytes(entry(1) + entry(2))
    end: Ended = ("failed", {"code": "build_failed", "message": "node n1 was lost"})
    got = asyncio.run(collect(follow_file(path, 0, True, lambda: end)))
    assert [e["seq"] for e in got] == [1, 2, 3]
    assert got[-1] | {"time": None} == {"seq": 3, "time": None, "done": True, "status": "failed", "error": end[1]}


def test_lines_its_node_writes_soon_after_the_record_ended_are_read_and_its_own_end(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    path.write_bytes(entry(1))
    cancelled: Ended = ("cancelled", {"code": "cancelled", "message": "the build was cancelled"})

    async def main() -> list[dict[str, Any]]:
        async def node_sees_it() -> None:
            await asyncio.sleep(0.05)  # within DONE_GRACE
            with path.open("ab") as f:
                f.write(entry(2, "cancelled", stream="system") + done(3, "cancelled"))

        writer = asyncio.get_running_loop().create_task(node_sees_it())
        got = await collect(follow_file(path, 0, True, lambda: cancelled))
        await writer
        return got

    got = asyncio.run(main())
    assert [e.get("text") for e in got] == ["x", "cancelled", None]
    assert got[-1]["seq"] == 3 and got[-1]["status"] == "cancelled"


def test_without_follow_the_file_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    path.write_bytes(entry(1) + entry(2))
    assert [e["seq"] for e in asyncio.run(collect(follow_file(path, 0, False, lambda: None)))] == [1, 2]
    ended = asyncio.run(collect(follow_file(path, 0, False, lambda: ("ready", None))))
    assert [e["seq"] for e in ended] == [1, 2, 3] and ended[-1]["done"], "an ended build's read ends with its end"
    assert asyncio.run(collect(follow_file(tmp_path / "none.ndjson", 0, False, lambda: None))) == []


def test_a_hostile_logs_overlong_and_malformed_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "b.ndjson"
    path.write_bytes(entry(1) + b"[" * (4 * MAX_LINE_BYTES) + b"\n" + b'"not an entry"\n' + b'{"seq": "2"}\n'
                     + entry(2) + done(3))
    got = asyncio.run(collect(follow_file(path, 0, True, lambda: None)))
    assert [e["seq"] for e in got] == [1, 2, 3]
