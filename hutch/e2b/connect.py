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
from enum import StrEnum
from typing import Any

from starlette.responses import JSONResponse, StreamingResponse

from hutch.errors import ApiError, Code

STREAM_TYPE = "application/connect+json"  # exactly: the client compares it without parameters
END_STREAM = 0x02
MAX_MESSAGE = 4 * 2**20


class ConnectCode(StrEnum):
    """Connect's error codes, each with the HTTP status it answers with: the one table of them."""

    status: int

    def __new__(cls, value: str, status: int) -> ConnectCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        return member

    CANCELED = "canceled", 499
    UNKNOWN = "unknown", 500
    INVALID_ARGUMENT = "invalid_argument", 400
    DEADLINE_EXCEEDED = "deadline_exceeded", 504
    NOT_FOUND = "not_found", 404
    ALREADY_EXISTS = "already_exists", 409
    PERMISSION_DENIED = "permission_denied", 403
    RESOURCE_EXHAUSTED = "resource_exhausted", 429
    FAILED_PRECONDITION = "failed_precondition", 400
    ABORTED = "aborted", 409
    OUT_OF_RANGE = "out_of_range", 400
    UNIMPLEMENTED = "unimplemented", 501
    INTERNAL = "internal", 500
    UNAVAILABLE = "unavailable", 503
    DATA_LOSS = "data_loss", 500
    UNAUTHENTICATED = "unauthenticated", 401


_C = ConnectCode
# hutch's error codes, then HTTP statuses, as Connect codes (the first match wins): the one place a
# catalogue code becomes a Connect code
_BY_HUTCH_CODE = {Code.FILE_NOT_FOUND: _C.NOT_FOUND, Code.PROCESS_NOT_FOUND: _C.NOT_FOUND, Code.NOT_FOUND: _C.NOT_FOUND,
                  Code.ALREADY_EXISTS: _C.ALREADY_EXISTS, Code.PERMISSION_DENIED: _C.PERMISSION_DENIED,
                  Code.SANDBOX_PAUSED: _C.UNAVAILABLE, Code.SANDBOX_FAILED: _C.UNAVAILABLE,
                  Code.SANDBOX_UNREACHABLE: _C.UNAVAILABLE, Code.SANDBOX_NOT_RUNNING: _C.UNAVAILABLE,
                  Code.STDIN_CLOSED: _C.FAILED_PRECONDITION, Code.NOT_A_TERMINAL: _C.FAILED_PRECONDITION,
                  Code.TOO_MANY_PROCESSES: _C.RESOURCE_EXHAUSTED, Code.OUTPUT_TOO_LARGE: _C.RESOURCE_EXHAUSTED,
                  Code.PAYLOAD_TOO_LARGE: _C.RESOURCE_EXHAUSTED}
_BY_STATUS = {400: _C.INVALID_ARGUMENT, 401: _C.UNAUTHENTICATED, 403: _C.PERMISSION_DENIED, 404: _C.NOT_FOUND,
              409: _C.FAILED_PRECONDITION, 413: _C.RESOURCE_EXHAUSTED, 429: _C.RESOURCE_EXHAUSTED,
              501: _C.UNIMPLEMENTED, 503: _C.UNAVAILABLE, 504: _C.DEADLINE_EXCEEDED, 507: _C.RESOURCE_EXHAUSTED}


class ConnectError(Exception):
    """An error in Connect's shape. Made from the catalogue (`of`, `of_code`) wherever hutch has a
    code for the condition; a ConnectCode directly only for Connect's own (an unknown method, a
    compressed message, a stream's deadline)."""

    def __init__(self, code: ConnectCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    @classmethod
    def of(cls, e: ApiError) -> ConnectError:
        return cls.of_code(e.code, e.message)

    @classmethod
    def of_code(cls, hutch_code: Code, message: str) -> ConnectError:
        status = hutch_code.status
        code = _BY_HUTCH_CODE.get(hutch_code) or _BY_STATUS.get(status) or (_C.INTERNAL if status >= 500
                                                                            else _C.INVALID_ARGUMENT)
        return cls(code, message)

    # Connect's own conditions, which hutch's API has no word for
    @classmethod
    def unimplemented(cls, method: str) -> ConnectError:
        """A call this envd does not serve (`<service>/<method>`)."""
        return cls(ConnectCode.UNIMPLEMENTED, f"{method} is not implemented")

    @classmethod
    def deadline_exceeded(cls) -> ConnectError:
        """The end of a stream whose process its Connect-Timeout-Ms ended, in envd's words."""
        return cls(ConnectCode.DEADLINE_EXCEEDED, "context deadline exceeded")

    @property
    def status(self) -> int:
        return self.code.status

    def body(self) -> dict[str, str]:
        """Connect's error body: the one builder of it (a unary answer; a stream's end frame)."""
        return {"code": self.code, "message": self.message}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid(message: str) -> ConnectError:
    """A message the call cannot take (not JSON, a field of the wrong type): invalid_argument."""
    return ConnectError.of_code(Code.INVALID_MESSAGE, message)


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
                raise ConnectError.of_code(Code.PAYLOAD_TOO_LARGE, f"messages are limited to {MAX_MESSAGE} bytes")
            if len(self._buf) - at < 5 + n:
                break
            data = bytes(self._buf[at + 5:at + 5 + n])
            at += 5 + n
            if flags & 0x01:
                raise ConnectError(ConnectCode.INTERNAL, "compressed messages are not supported")  # Connect's own
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
