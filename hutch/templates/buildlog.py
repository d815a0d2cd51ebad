"""A template build's log: NDJSON lines in a file (so it outlives the server), followed live.

Each line is {"seq", "time", "step", "stream", "text"}; a step's output is kept a few lines to an
entry (at most ENTRY_CHARS of text), so a command that prints a flood costs a few writes per chunk
the agent sends, not one per line. The last entry, once the build has ended, is {"seq", "time",
"done": true, "status", "error"}. `seq` rises by one an entry. Followers read the file from where
they are: in the process that builds (`follow`), waiting for the log's next write; in another (a
fleet's API server following a node's build in the shared directory, `follow_file`), looking at
the file as it grows and at the build's record. Either reads at most MAX_LINE_BYTES a line and
READ_BYTES at a time: the text is what a build box's commands printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

ENTRY_CHARS = 8192  # text in one entry; a longer line is cut there
MAX_LOG_BYTES = 64 * 2**20  # beyond this a build's log keeps only a notice that it was cut
FOLLOW_POLL_SECONDS = 5.0  # a follower looks at the file at least this often
MAX_LINE_BYTES = 128 * 1024  # an entry's line at most (its text JSON-escaped at worst); a longer one is skipped
READ_BYTES = 2**20  # what a follower reads at a time
FILE_POLL_SECONDS = 0.2  # a follower of a build in another process looks at the file this often
STATUS_POLL_SECONDS = 1.0  # and at the build's record this often
DONE_GRACE = 3.0  # once the record says the build ended, how long its last lines may take to come

Ended = tuple[str, dict[str, Any] | None]  # how a build ended, by its record: status and error


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _last_seq(path: Path) -> tuple[int, int]:
    """The last whole entry's seq, and the file's size (a torn last line is not counted)."""
    seq = size = 0
    with path.open("rb") as f:
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line.endswith(b"\n"):
                break
            try:
                seq = int(json.loads(line)["seq"])
            except (ValueError, KeyError, TypeError):
                break
            size += len(line)
    return seq, size


class BuildLog:
    """The one writer of a build's log. With `sync`, each write reaches the disk before the next
    (a fleet's log is on a network disk, read from other hosts)."""

    def __init__(self, path: Path, sync: bool = False) -> None:
        self.path, self.sync = path, sync
        self._seq = 0
        self._size = 0
        self._cut = False
        self._done = False
        self._written = asyncio.Event()  # set at each write; a new one waits for the next
        self._partial: dict[tuple[int | None, str], str] = {}  # output up to its next newline, per stream
        if path.exists():  # a build queued again after a restart: its log goes on where it was
            self._seq, self._size = _last_seq(path)
            with path.open("r+b") as f:
                f.truncate(self._size)  # drop a line torn by a crash
        self._file: IO[str] = path.open("a")

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def done(self) -> bool:
        return self._done

    def next_write(self) -> asyncio.Event:
        return self._written

    def _append(self, entries: list[dict[str, Any]]) -> None:
        lines = []
        for entry in entries:
            final = "done" in entry
            if self._cut and not final:
                continue
            line = json.dumps({"seq": self._seq + 1, "time": _now(), **entry}) + "\n"
            if not final and self._size + len(line) > MAX_LOG_BYTES:
                self._cut = True
                line = json.dumps({"seq": self._seq + 1, "time": _now(), "step": entry.get("step"),
                                   "stream": "system", "text": "the log is too long: the rest of the output "
                                                               "is not kept"}) + "\n"
            self._seq += 1
            self._size += len(line)
            lines.append(line)
        if lines:
            self._file.write("".join(lines))
            self._file.flush()
            if self.sync:
                os.fsync(self._file.fileno())
            self._written.set()
            self._written = asyncio.Event()

    def system(self, text: str, step: int | None = None) -> None:
        self._append([{"step": step, "stream": "system", "text": text[:ENTRY_CHARS]}])

    def output(self, stream: str, data: str, step: int | None) -> None:
        """A command's output as it comes: whole lines, a few to an entry."""
        if self._cut:
            return
        key = (step, stream)
        text = self._partial.pop(key, "") + data
        head, newline, rest = text.rpartition("\n")
        if len(rest) > ENTRY_CHARS:  # a very long line without a newline: keep its start, drop the rest
            rest = rest[:ENTRY_CHARS]
        if rest:
            self._partial[key] = rest
        if newline:
            self._append([{"step": step, "stream": stream, "text": chunk} for chunk in _chunks(head)])

    def flush(self) -> None:
        entries = [{"step": step, "stream": stream, "text": rest} for (step, stream), rest in self._partial.items()]
        self._partial.clear()
        self._append(entries)

    def finish(self, status: str, error: dict[str, Any] | None) -> None:
        self.flush()
        self._append([{"done": True, "status": status, "error": error}])
        self._done = True
        self._file.close()

    def close(self) -> None:
        """Stop writing without an end (the build is queued again: its next run goes on here)."""
        self.flush()
        self._file.close()


def _chunks(text: str) -> list[str]:
    """Lines grouped into entries of at most ENTRY_CHARS (a longer line cut there)."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.split("\n"):
        line = line[:ENTRY_CHARS]
        if current and size + len(line) + 1 > ENTRY_CHARS:
            out.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        out.append("\n".join(current))
    return out


class LogReader:
    """Whole lines of a log file, from where the last read stopped. A line longer than
    MAX_LINE_BYTES is skipped to its end; a torn last line (being written) is read whole next
    time. The file is opened anew at each read, so one on a network disk shows what other hosts
    wrote since."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._skipping = False  # in a line too long to keep

    def read(self, limit: int = READ_BYTES) -> tuple[list[bytes], bool]:
        """The whole lines since the last read, about `limit` bytes of them at most; and whether
        there may be more already (the read stopped at `limit`, not at the file's end)."""
        lines: list[bytes] = []
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return lines, False
        with f:
            f.seek(self.offset)
            taken = 0
            while taken < limit:
                line = f.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return lines, False
                if not line.endswith(b"\n") and not self._skipping and len(line) <= MAX_LINE_BYTES:
                    return lines, False  # being written: read it whole next time
                self.offset += len(line)
                taken += len(line)
                if self._skipping or not line.endswith(b"\n"):
                    self._skipping = not line.endswith(b"\n")
                    continue
                lines.append(line)
        return lines, True


def _entry(line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or type(entry.get("seq")) is not int:
        return None
    return entry


async def follow(log: BuildLog | None, path: Path, after: int, wait: bool) -> AsyncIterator[bytes]:
    """The log's entries with a seq above `after`. With `wait` and a live log, keeps going until
    the build ends; a build that is not running (`log` None) gives what its file holds."""
    reader = LogReader(path)
    seq = after
    while True:
        written = log.next_write() if log is not None else None  # taken before reading: no write is missed
        ended = False
        more = True
        while more:
            lines, more = await asyncio.to_thread(reader.read)
            for line in lines:
                entry = _entry(line)
                if entry is None:
                    continue
                ended = ended or bool(entry.get("done"))
                if entry["seq"] > seq:
                    seq = entry["seq"]
                    yield line
        if ended or log is None or written is None or not wait:
            return
        try:
            await asyncio.wait_for(written.wait(), FOLLOW_POLL_SECONDS)
        except TimeoutError:
            pass


async def follow_file(path: Path, after: int, wait: bool, ended: Callable[[], Ended | None]) -> AsyncIterator[bytes]:
    """The entries above `after` of a log another process writes (a fleet node's build, read by
    an API server in the shared directory), looking at the file as it grows. `ended` reads the
    build's record (None: it has not ended). The stream stops at the log's last entry; or, once
    the record says the build ended and the file's end is reached, with an end told from the
    record (a build cancelled by an API server, a lost node's: its node may write its last lines
    a moment later, or never), after DONE_GRACE while following."""
    reader = LogReader(path)
    seq = after
    end: Ended | None = None
    ended_at = checked = -float("inf")
    while True:
        now = time.monotonic()
        if end is None and now - checked >= STATUS_POLL_SECONDS:  # the record before the file: what was
            checked = now                                          # written before it ended is read now
            end = await asyncio.to_thread(ended)
            ended_at = now
        more = True
        while more:
            lines, more = await asyncio.to_thread(reader.read)
            for line in lines:
                entry = _entry(line)
                if entry is None:
                    continue
                if entry["seq"] > seq:
                    seq = entry["seq"]
                    yield line
                if entry.get("done"):
                    return
        if end is not None and (not wait or time.monotonic() - ended_at >= DONE_GRACE):
            status, error = end
            yield (json.dumps({"seq": seq + 1, "time": _now(), "done": True, "status": status, "error": error})
                   + "\n").encode()
            return
        if not wait:
            return
        await asyncio.sleep(FILE_POLL_SECONDS)
