"""A template build's log: NDJSON lines in a file (so it outlives the server), followed live.

Each line is {"seq", "time", "step", "stream", "text"}; a step's output is kept a few lines to an
entry (at most ENTRY_CHARS of text), so a command that prints a flood costs a few writes per chunk
the agent sends, not one per line. The last entry, once the build has ended, is {"seq", "time",
"done": true, "status", "error"}. `seq` rises by one an entry. Followers read the file from where
they are and wait for the log's next write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

ENTRY_CHARS = 8192  # text in one entry; a longer line is cut there
MAX_LOG_BYTES = 64 * 2**20  # beyond this a build's log keeps only a notice that it was cut
FOLLOW_POLL_SECONDS = 5.0  # a follower looks at the file at least this often


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _last_seq(path: Path) -> tuple[int, int]:
    """The last whole entry's seq, and the file's size (a torn last line is not counted)."""
    seq = size = 0
    with path.open("rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                seq = int(json.loads(line)["seq"])
            except (ValueError, KeyError, TypeError):
                break
            size += len(line)
    return seq, size


class BuildLog:
    def __init__(self, path: Path) -> None:
        self.path = path
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


async def follow(log: BuildLog | None, path: Path, after: int, wait: bool) -> AsyncIterator[bytes]:
    """The log's entries with a seq above `after`. With `wait` and a live log, keeps going until
    the build ends; a build that is not running (`log` None) gives what its file holds."""
    offset = 0
    seq = after
    while True:
        written = log.next_write() if log is not None else None  # taken before reading: no write is missed
        ended = False
        if path.exists():
            with path.open("rb") as f:
                f.seek(offset)
                while True:
                    line = f.readline()
                    if not line.endswith(b"\n"):
                        break  # a line being written: read it whole next time
                    offset = f.tell()
                    try:
                        entry = json.loads(line)
                    except ValueError:
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
