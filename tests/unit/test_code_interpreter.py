"""The code interpreter's pure parts: E2B's result shape from a kernel's MIME bundle, the bounded
NDJSON line, and which requests on envd's URL go to another port of the box."""

from __future__ import annotations

import json

import pytest

from hutch.e2b import ports
from hutch.guest import interpreter


def test_a_mime_bundle_becomes_e2bs_result() -> None:
    r = interpreter.result_of({"text/plain": "'a string'", "text/html": "<b>x</b>", "image/png": "iVBOR",
                               "application/vnd.custom": {"k": 1}}, main=True)
    assert r == {"type": "result", "is_main_result": True, "text": "a string", "html": "<b>x</b>", "png": "iVBOR",
                 "extra": {"application/vnd.custom": {"k": 1}}}
    assert interpreter.result_of({"text/plain": "42"}, main=False)["text"] == "42"


def test_a_line_is_bounded_by_dropping_the_largest_format_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter, "MAX_LINE", 1000)
    line = interpreter._line({"type": "result", "is_main_result": False, "text": "fig", "png": "A" * 5000,
                              "svg": "<svg/>"})
    assert len(line) <= 1000 and line.endswith(b"\n")
    assert json.loads(line) == {"type": "result", "is_main_result": False, "text": "fig", "svg": "<svg/>"}
    huge = json.loads(interpreter._line({"type": "stdout", "text": "x" * 5000}))
    assert len(huge["text"]) < 1000 and "truncated" in huge["text"]


def test_only_another_port_leaves_envd() -> None:
    def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
        return {"type": "http", "headers": list(headers)}

    assert ports.port_of(scope()) is None
    assert ports.port_of(scope((b"e2b-sandbox-port", b"49983"))) is None  # envd's own
    assert ports.port_of(scope((b"e2b-sandbox-port", b"49999"))) == 49999
    for never in (b"0", b"70000", b"-1", b"abc", b"\xd9\xa1"):
        assert ports.port_of(scope((b"e2b-sandbox-port", never))) == 0  # answered: not open


def test_a_language_goes_by_e2bs_names_and_only_where_its_kernel_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter, "AVAILABLE", ["python", "javascript", "typescript"])
    assert [interpreter.language_of(n) for n in (None, "", "py", " JS ", "ts")] == \
        ["python", "python", "python", "javascript", "typescript"]
    with pytest.raises(interpreter.BadRequest) as refused:
        interpreter.language_of("bash")  # a kernel this root does not have
    assert refused.value.status == 400 and "(it has: python, javascript, typescript)" in str(refused.value)


def test_bash_env_values_are_printable_ascii_words_and_unsafe_names_are_refused() -> None:
    """bash_kernel types a cell into a terminal: a value's control characters would be key presses."""
    cell = interpreter.set_env("bash", {"A": "x\x01y\t'$(id)'\x1b[A"})
    assert all(" " <= c <= "~" for c in cell), cell
    assert cell.endswith("export A=$'x\\x01y\\x09\\x27\\x24\\x28id\\x29\\x27\\x1b\\x5bA'")
    for name in ("PS1", "TMOUT", "_hutch_env", "A-B", "1A", ""):
        assert interpreter.env_refusal("bash", {name: "v"}) is not None, name
    assert interpreter.env_refusal("python", {"A=B": "v"}) is not None
    assert interpreter.env_refusal("python", {"A": "v\0"}) is not None
    assert interpreter.env_refusal("python", {"PS1": "fine in Python"}) is None
