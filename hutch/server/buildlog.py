"""A template build's log: NDJSON lines in a file (so it outlives the server), followed live.

Each line is {"seq", "time", "step", "stream", "text"}; the last, once the build has ended, is
{"seq", "time", "done": true, "status", "error"}. Followers read the file from where they are and
wait on the log's condition for more.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MAX_LINE_CHARS = 8192  # a longer line of a step's output is cut (what is kept says so)
MAX_LOG_BYTES = 64 * 2**20  # beyond this a build's log keeps only a notice that it was cut


def _now() -> str:
    return datetime.now(UTC).isoformat()


class BuildLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._seq = 0
        self._size = 0
        self._cut = False
        self._done = False
        self._changed = asyncio.Condition()
        self._partial: dict[tuple[int | None, str], str] = {}  # output up to its next newline, per stream
        if path.exists():  # a build queued again after a restart: its log goes on where it was
            lines = path.read_bytes().splitlines()
            self._size = sum(len(line) + 1 for line in lines)
            self._seq = json.loads(lines[-1])["seq"] if lines else 0

    def _append(self, entry: dict[str, Any]) -> None:
        self._seq += 1
        line = json.dumps({"seq": self._seq, "time": _now(), **entry}) + "\n"
        if self._size + len(line) > MAX_LOG_BYTES and "done" not in entry:
            if self._cut:
                return
            self._cut = True
            line = json.dumps({"seq": self._seq, "time": _now(), "step": entry.get("step"), "stream": "system",
                               "text": "the log is too long: the rest of the output is not kept"}) + "\n"
        with self.path.open("a") as f:
            f.write(line)
        self._size += len(line)
        self._notify()

    def _notify(self) -> None:
        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()
        asyncio.get_running_loop().create_task(wake())

    def system(self, text: str, step: int | None = None) -> None:
        self._append({"step": step, "stream": "system", "text": text[:MAX_LINE_CHARS]})

    def output(self, stream: str, data: str, step: int | None) -> None:
        """A command's output as it comes: kept a line at a time."""
        key = (step, stream)
        text = self._partial.pop(key, "") + data
        *lines, rest = text.split("\n")
        for line in lines:
            self._append({"step": step, "stream": stream, "text": line[:MAX_LINE_CHARS]})
        if len(rest) > MAX_LINE_CHARS:  # a very long line without a newline: flush what there is
            self._append({"step": step, "stream": stream, "text": rest[:MAX_LINE_CHARS]})
            rest = ""
        if rest:
            self._partial[key] = rest

    def flush(self) -> None:
        for (step, stream), rest in list(self._partial.items()):
            self._append({"step": step, "stream": stream, "text": rest})
        self._partial.clear()

    def finish(self, status: str, error: dict[str, Any] | None) -> None:
        self.flush()
        self._append({"done": True, "status": status, "error": error})
        self._done = True


async def follow(log: BuildLog | None, path: Path, after: int, wait: bool) -> AsyncIterator[bytes]:
    """The log's lines with a seq above `after`. With `wait` and a live log, keeps going until
    the build ends; a build that is not running (`log` None) gives what its file holds."""
    offset = 0
    seq = after
    while True:
        ended = False
        if path.exists():
            with path.open("rb") as f:
                f.seek(offset)
                while True:
                    line = f.readline()
                    if not line.endswith(b"\n"):
                        break  # a line being written: read it whole next time
                    offset = f.tell()
                    entry = json.loads(line)
                    ended = ended or bool(entry.get("done"))
                    if entry["seq"] > seq:
                        seq = entry["seq"]
                        yield line
        if ended or log is None or not wait:
            return
        async with log._changed:
            if log._seq == seq and not log._done:
                try:
                    await asyncio.wait_for(log._changed.wait(), 5.0)
                except TimeoutError:
                    pass
        await asyncio.sleep(0)
