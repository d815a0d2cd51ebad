"""A sandbox's files (read, write, a directory as a zip) and filesystem (stat, list, mkdir, move, remove, watch)."""

from __future__ import annotations

import json

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode
from hutch.sdk.deadline import within
from hutch.sdk.errors import NotFoundError, SandboxTimeoutError, ServerError, ValidationError
from hutch.sdk.flow import Call, Emit, Flow, NextLine
from hutch.sdk.ops.sandboxes import STREAM_TIMEOUT, DataPlane, send_data
from hutch.sdk.types import EntryInfo, FilesystemEvent

FILE_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=300.0, pool=10.0)
WATCH_OPENED = object()  # emitted once by watch_dir when the watch is in place, before any event


def _user(user: str | None) -> dict[str, str]:
    return {"user": user} if user else {}


def as_bytes(content: str | bytes) -> bytes:
    if isinstance(content, str):
        return content.encode()
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    raise ValidationError(f"file content must be str or bytes, not {type(content).__name__}",
                          code=SdkCode.INVALID_ARGUMENT)


def write_file(dp: DataPlane, path: str, content: str | bytes, user: str | None, timeout: float | None) -> Flow[None]:
    data, params = as_bytes(content), {"path": path, **_user(user)}
    yield from within(timeout, send_data(dp, lambda: Call(*routes.WRITE_FILE.at(dp.url), dp.headers(), params=params,
                                                          content=data, timeout=FILE_TIMEOUT)))


def read_file(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[bytes]:
    params = {"path": path, **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.READ_FILE.at(dp.url), dp.headers(),
                                                                  params=params, timeout=FILE_TIMEOUT)))
    return reply.body


def download_dir(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[bytes]:
    params = {"path": path, **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.DOWNLOAD_DIR.at(dp.url), dp.headers(),
                                                                  params=params, timeout=FILE_TIMEOUT)))
    return reply.body


def get_entry(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[EntryInfo]:
    params = {"path": path, **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.STAT_FILE.at(dp.url), dp.headers(),
                                                                  params=params)))
    return EntryInfo.from_json(json.loads(reply.body))


def exists(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[bool]:
    try:
        yield from get_entry(dp, path, user, timeout)
    except NotFoundError:
        return False
    return True


def list_dir(dp: DataPlane, path: str, depth: int, user: str | None, timeout: float | None) -> Flow[list[EntryInfo]]:
    if type(depth) is not int or not 1 <= depth <= 16:
        raise ValidationError(f"depth is an int in 1..16, not {depth!r}", code=SdkCode.INVALID_ARGUMENT)
    params = {"path": path, "depth": str(depth), **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.LIST_DIR.at(dp.url), dp.headers(),
                                                                  params=params, timeout=FILE_TIMEOUT)))
    return [EntryInfo.from_json(d) for d in json.loads(reply.body)["entries"]]


def make_dir(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[bool]:
    body = {"path": path, **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.MAKE_DIR.at(dp.url), dp.headers(),
                                                                  json=body)))
    return bool(json.loads(reply.body)["created"])


def rename(dp: DataPlane, source: str, destination: str, user: str | None,
           timeout: float | None) -> Flow[EntryInfo]:
    body = {"source": source, "destination": destination, **_user(user)}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.MOVE_FILE.at(dp.url), dp.headers(),
                                                                  json=body)))
    return EntryInfo.from_json(json.loads(reply.body))


def remove(dp: DataPlane, path: str, user: str | None, timeout: float | None) -> Flow[None]:
    params = {"path": path, **_user(user)}
    yield from within(timeout, send_data(dp, lambda: Call(*routes.REMOVE_FILE.at(dp.url), dp.headers(), params=params,
                                                          timeout=FILE_TIMEOUT)))


def watch_dir(dp: DataPlane, path: str, recursive: bool) -> Flow[None]:
    """Emit WATCH_OPENED once the watch is in place, then a FilesystemEvent per change, until the
    directory goes or the caller stops reading."""
    params = {"path": path, "recursive": "true" if recursive else "false"}
    yield from send_data(dp, lambda: Call(*routes.WATCH_DIR.at(dp.url), dp.headers(), params=params, stream=True,
                                          timeout=STREAM_TIMEOUT))
    yield Emit(WATCH_OPENED)
    data: list[str] = []
    while True:
        try:
            line = yield NextLine()
        except httpx.TimeoutException as e:
            raise SandboxTimeoutError("the watch's stream went silent", code=SdkCode.STREAM_TIMEOUT) from e
        except httpx.TransportError as e:
            raise ServerError("the watch's stream broke", code=SdkCode.STREAM_ENDED) from e
        if line is None:
            return  # the directory went (or the sandbox was paused): the watch is over
        if line.startswith(":"):
            continue  # keep-alive
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            d = json.loads("\n".join(data))
            data = []
            yield Emit(FilesystemEvent(d["name"], d["type"]))


def check_watch_opened(first: object) -> None:
    """What a watch handle checks of the flow's first item: the watch is in place."""
    if first is not WATCH_OPENED:
        raise ServerError("the watch did not start", code=SdkCode.STREAM_ENDED)
