"""The Connect protocol as E2B's envd speaks it (hutch.e2b.connect): envelopes read by offset, their
flags and end-stream frames, the size cap, frames cut short, lenient JSON and base64."""

from __future__ import annotations

import asyncio
import gc
import json
import struct
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from hutch.e2b import connect
from hutch.e2b.connect import END_STREAM, MAX_MESSAGE, ConnectCode, ConnectError, Envelopes
from hutch.errors import ApiError, Code


def frame(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def message(msg: Any, flags: int = 0) -> bytes:
    return frame(json.dumps(msg).encode(), flags)


def read_request(*chunks: bytes) -> dict[str, Any]:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return asyncio.run(connect.read_stream_request(body()))


@contextmanager
def refused(code: str) -> Iterator[None]:
    """The block raises a ConnectError with that Connect code."""
    with pytest.raises(ConnectError) as raised:
        yield
    assert raised.value.code == code, raised.value.body()


# --- envelopes ------------------------------------------------------------------------------------

def test_an_envelope_is_flags_a_big_endian_length_and_compact_json() -> None:
    assert connect.envelope({"a": 1}) == b"\x00\x00\x00\x00\x07" + b'{"a":1}'
    assert connect.envelope({}, flags=END_STREAM)[:1] == b"\x02"


def test_the_end_of_a_stream_holds_nothing_or_the_error() -> None:
    assert connect.end_stream() == frame(b"{}", END_STREAM)
    ended = connect.end_stream(ConnectError.of_code(Code.PROCESS_NOT_FOUND, "no such process"))
    assert ended[0] == END_STREAM
    assert json.loads(ended[5:]) == {"error": {"code": "not_found", "message": "no such process"}}


def test_messages_are_read_by_offset_in_one_chunk_or_byte_by_byte() -> None:
    body = message({"n": 1}) + message({"n": 2}, flags=0x80) + message({"n": 3})
    assert Envelopes().feed(body) == [(0, {"n": 1}), (0x80, {"n": 2}), (0, {"n": 3})]
    reader, got = Envelopes(), []
    for i in range(len(body)):
        got += reader.feed(body[i:i + 1])
    assert got == [(0, {"n": 1}), (0x80, {"n": 2}), (0, {"n": 3})]


def test_many_empty_messages_take_linear_time() -> None:
    def fastest(n: int) -> float:  # of five runs: the machine's noise is never in the ratio
        times = []
        gc.disable()  # a collection's pass over the messages made so far is the collector's cost, not the reader's
        try:
            for _ in range(5):
                started = time.perf_counter()
                assert len(Envelopes().feed(b"\0\0\0\0\0" * n)) == n
                times.append(time.perf_counter() - started)
        finally:
            gc.enable()
        return min(times)

    # ten times the messages: about ten times the work if linear, a hundred if quadratic
    assert fastest(200_000) < 35 * fastest(20_000)


def test_a_truncated_frame_waits_for_the_rest() -> None:
    whole = message({"event": "start"})
    reader = Envelopes()
    assert reader.feed(whole[:3]) == []  # not even the header yet
    assert reader.feed(whole[3:-1]) == []  # the header, and all but the last byte
    assert reader.feed(whole[-1:] + whole[:2]) == [(0, {"event": "start"})]  # the next frame begins
    assert reader.feed(whole[2:]) == [(0, {"event": "start"})]


def test_end_stream_frames_are_not_messages() -> None:
    body = message({"n": 1}) + connect.end_stream() + message({"n": 2})
    assert Envelopes().feed(body) == [(0, {"n": 1}), (0, {"n": 2})]


def test_compressed_messages_are_refused() -> None:
    with refused("internal"):
        Envelopes().feed(message({"n": 1}, flags=0x01))


def test_a_message_over_the_cap_is_refused_from_its_header_alone() -> None:
    assert len(Envelopes().feed(frame(b" " * MAX_MESSAGE))) == 1  # at the cap: taken
    with refused("resource_exhausted"):
        Envelopes().feed(struct.pack(">BI", 0, MAX_MESSAGE + 1))  # no body sent: none is waited for


def test_a_server_stream_call_takes_one_message() -> None:
    one = message({"process": {"pid": 7}})
    assert read_request(one[:4], one[4:]) == {"process": {"pid": 7}}
    assert read_request() == {}
    with refused("invalid_argument"):
        read_request(one + one)


# --- lenient JSON ---------------------------------------------------------------------------------

def test_a_message_is_a_json_object_or_nothing() -> None:
    assert connect.parse_json(b"") == {} and connect.parse_json(b" \n") == {}
    assert connect.parse_json(b'{"a": [1]}') == {"a": [1]}
    for bad in (b"{not json", b"[1, 2]", b'"text"', b"[" * 100_000 + b"]" * 100_000, b"\xff"):
        with refused("invalid_argument"):
            connect.parse_json(bad)


def test_fields_by_json_name_or_proto_name() -> None:
    msg = {"processId": "12", "tag_name": "x", "stdin": True, "n": 3}
    assert connect.get(msg, "processId", "process_id") == "12"
    assert connect.get({"process_id": 12}, "processId", "process_id") == 12
    assert connect.get(msg, "missing") is None and connect.get(["not", "an", "object"], "n") is None
    assert connect.text(msg, "tagName", "tag_name") == "x" and connect.text(msg, "missing", default="d") == "d"
    assert connect.integer(msg, "processId") == 12 and connect.integer(msg, "n") == 3  # int64 as text or number
    assert connect.integer(msg, "missing", default=5) == 5
    assert connect.flag(msg, "stdin") is True and connect.flag(msg, "missing") is None
    for bad in (lambda: connect.text(msg, "n"), lambda: connect.integer(msg, "stdin"),
                lambda: connect.integer({"n": "1.5"}, "n"), lambda: connect.integer({"n": [1]}, "n"),
                lambda: connect.flag(msg, "n")):
        with refused("invalid_argument"):
            bad()


def test_enums_by_name_or_number() -> None:
    names = {"SIGNAL_UNSPECIFIED": 0, "SIGNAL_SIGTERM": 15}
    assert connect.enum({"signal": "SIGNAL_SIGTERM"}, "signal", names) == 15
    assert connect.enum({"signal": 9}, "signal", names) == 9
    assert connect.enum({}, "signal", names) == 0
    for bad in ("SIGTERM", True, 1.5):
        with refused("invalid_argument"):
            connect.enum({"signal": bad}, "signal", names)


# --- base64 ---------------------------------------------------------------------------------------

def test_base64_padded_or_not_standard_or_url_safe() -> None:
    data = bytes([0xFB, 0xFF, 0xBF, 0x00])
    assert connect.b64encode(data) == "+/+/AA=="
    for text in ("+/+/AA==", "+/+/AA", "-_-_AA==", "-_-_AA"):
        assert connect.b64decode(text) == data, text
    assert connect.b64decode("") == b""
    for bad in ("not base64!", "A", 5, None):
        with refused("invalid_argument"):
            connect.b64decode(bad)


# --- errors and times -----------------------------------------------------------------------------

def test_hutch_codes_become_connect_codes_with_their_http_status() -> None:
    assert ConnectError.of_code(Code.FILE_NOT_FOUND, "m").code == "not_found"
    assert ConnectError.of_code(Code.SANDBOX_PAUSED, "m").code == "unavailable"
    assert ConnectError.of(ApiError(Code.PAYLOAD_TOO_LARGE, "big")).body() == {"code": "resource_exhausted",
                                                                               "message": "big"}
    assert ConnectError.of_code(Code.INVALID_API_KEY, "m").code == "unauthenticated"  # by its status, 401
    assert connect.invalid("bad").response().status_code == 400
    assert ConnectError.unimplemented("a.A/B").body() == {"code": "unimplemented", "message": "a.A/B is not implemented"}
    assert ConnectError.unimplemented("a.A/B").response().status_code == 501


def test_each_connect_code_answers_with_its_http_status() -> None:
    assert {c.value: c.status for c in ConnectCode} == {
        "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504, "not_found": 404,
        "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429, "failed_precondition": 400,
        "aborted": 409, "out_of_range": 400, "unimplemented": 501, "internal": 500, "unavailable": 503,
        "data_loss": 500, "unauthenticated": 401}


def test_timestamps_are_utc_with_microseconds() -> None:
    assert connect.timestamp(0) == "1970-01-01T00:00:00.000000Z"
    assert connect.timestamp(datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "2025-01-02T03:04:05.000006Z"
