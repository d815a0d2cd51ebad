"""The Connect protocol, the small part envd speaks: JSON codec, no compression, HTTP/1.1.

Unary calls are a bare JSON body each way; an error is a non-200 answer `{"code": "<connect code>",
"message"}`. Streams are 5-byte envelopes (flags, big-endian length) of JSON messages, ended by a
frame with flag 0x02 holding `{}` or `{"error": {...}}`. Parsing is lenient: proto names or JSON
names, enums by name or number, int64 as string or number, base64 padded or not.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse

from hutch.errors import ApiError, Code

STREAM_TYPE = "application/connect+json"  # exactly: the client compares it without parameters
END_STREAM = 0x02
MAX_MESSAGE = 4 * 2**20

HTTP_STATUS = {"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
               "not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
               "failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
               "internal": 500, "unavailable": 503, "data_loss": 500, "unauthenticated": 401}

# hutch's error codes, then HTTP statuses, as Connect codes (the first match wins)
_BY_HUTCH_CODE = {Code.FILE_NOT_FOUND: "not_found", Code.PROCESS_NOT_FOUND: "not_found", Code.NOT_FOUND: "not_found",
                  Code.ALREADY_EXISTS: "already_exists", Code.PERMISSION_DENIED: "permission_denied",
                  Code.SANDBOX_PAUSED: "unavailable", Code.SANDBOX_FAILED: "unavailable",
                  Code.SANDBOX_UNREACHABLE: "unavailable", Code.SANDBOX_NOT_RUNNING: "unavailable",
                  Code.STDIN_CLOSED: "failed_precondition", Code.NOT_A_TERMINAL: "failed_precondition",
                  Code.TOO_MANY_PROCESSES: "resource_exhausted", Code.OUTPUT_TOO_LARGE: "resource_exhausted",
                  Code.PAYLOAD_TOO_LARGE: "resource_exhausted"}
_BY_STATUS = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
              409: "failed_precondition", 413: "resource_exhausted", 429: "resource_exhausted",
              501: "unimplemented", 503: "unavailable", 504: "deadline_exceeded", 507: "resource_exhausted"}


class ConnectError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    @classmethod
    def of(cls, e: ApiError) -> ConnectError:
        return cls.of_code(e.code, e.message)

    @classmethod
    def of_code(cls, hutch_code: Code, message: str) -> ConnectError:
        status = hutch_code.status
        code = _BY_HUTCH_CODE.get(hutch_code) or _BY_STATUS.get(status) or ("internal" if status >= 500
                                                                            else "invalid_argument")
        return cls(code, message)

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=HTTP_STATUS.get(self.code, 500))


def invalid(message: str) -> ConnectError:
    return ConnectError("invalid_argument", message)


# --- envelopes ------------------------------------------------------------------------------------

def envelope(msg: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def end_stream(error: ConnectError | None = None) -> bytes:
    return envelope({"error": error.body()} if error else {}, END_STREAM)


class Envelopes:
    """Splits a request body into messages as its chunks arrive (by offset: each byte is looked
    at once, whatever the number of messages)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, dict[str, Any]]]:
        self._buf += chunk
        out, at = [], 0
        while len(self._buf) - at >= 5:
            flags, n = struct.unpack_from(">BI", self._buf, at)
            if n > MAX_MESSAGE:
                raise ConnectError("resource_exhausted", f"messages are limited to {MAX_MESSAGE} bytes")
            if len(self._buf) - at < 5 + n:
                break
            data = bytes(self._buf[at + 5:at + 5 + n])
            at += 5 + n
            if flags & 0x01:
                raise ConnectError("internal", "compressed messages are not supported")
            if not flags & END_STREAM:
                out.append((flags, parse_json(data)))
        del self._buf[:at]
        return out


async def read_stream_request(body: AsyncIterator[bytes]) -> dict[str, Any]:
    """The one message of a server-stream call (the body may come chunked); a second is refused."""
    env, got = Envelopes(), None
    async for chunk in body:
        for _flags, msg in env.feed(chunk):
            if got is not None:
                raise invalid("a server-stream call takes one message")
            got = msg
    return got or {}


def parse_json(data: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(data) if data.strip() else {}
    except (ValueError, RecursionError):
        raise invalid("the message is not valid JSON") from None
    if not isinstance(msg, dict):
        raise invalid("the message is not a JSON object")
    return msg


def stream_response(messages: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(messages, media_type=STREAM_TYPE, headers={"Cache-Control": "no-cache"})


# --- protojson ------------------------------------------------------------------------------------

def get(msg: Any, json_name: str, proto_name: str | None = None) -> Any:
    """A field by its JSON name or its proto name; None when absent or not in an object."""
    if not isinstance(msg, dict):
        return None
    value = msg.get(json_name)
    return msg.get(proto_name) if value is None and proto_name else value


def text(msg: Any, json_name: str, proto_name: str | None = None, default: str = "") -> str:
    value = get(msg, json_name, proto_name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise invalid(f"{json_name} must be a string")
    return value


def integer(msg: Any, json_name: str, proto_name: str | None = None, default: int = 0) -> int:
    value = get(msg, json_name, proto_name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise invalid(f"{json_name} must be a number")
    try:
        return int(value)
    except ValueError:
        raise invalid(f"{json_name} must be a number") from None


def flag(msg: Any, json_name: str, proto_name: str | None = None) -> bool | None:
    value = get(msg, json_name, proto_name)
    if value is None or isinstance(value, bool):
        return value
    raise invalid(f"{json_name} must be true or false")


def enum(msg: Any, json_name: str, names: dict[str, int]) -> int:
    value = get(msg, json_name)
    if value is None:
        return 0
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise invalid(f"{json_name}: unknown value {str(value)[:40]!r}")


def b64decode(value: Any) -> bytes:
    if not isinstance(value, str):
        raise invalid("bytes must be base64 text")
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("bytes must be base64 text") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def timestamp(value: datetime | float) -> str:
    when = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
