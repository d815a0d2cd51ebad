"""The desktop's input actions as the API takes them (hutch.services.desktop): what is refused
before anything reaches the box, the command each becomes (nothing unquoted reaches its shell), and
what the audit log keeps of it."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from hutch.services.desktop import TYPE_SECONDS, Action, TypeText, audited, command_of

ACTION: TypeAdapter[Any] = TypeAdapter(Action)


@pytest.mark.parametrize("body", [
    {"action": "type", "text": "a\x00b"},  # no command carries a NUL
    {"action": "type", "text": "x" * 10_000, "delay_ms": 1000},  # hours to type
    {"action": "click", "x": 5},  # one coordinate: both or neither
    {"action": "scroll", "y": 5},
    {"action": "key", "combo": "ctrl+s; reboot"},
    {"action": "key", "combo": "Return\n"},
    {"action": "move", "x": -1, "y": 0},
    {"action": "click", "x": "5", "y": "6"},  # strict: numbers are numbers
])
def test_a_bad_action_is_refused_before_it_reaches_the_box(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ACTION.validate_python(body)


def test_typed_text_reaches_xdotool_as_one_quoted_word_and_the_log_keeps_only_its_length() -> None:
    text = "pa$$word'; rm -rf / #\n"
    action = ACTION.validate_python({"action": "type", "text": text})
    assert shlex.split(command_of(action)) == ["xdotool", "type", "--delay", "12", "--", text]
    assert text not in audited(action) and audited(action) == f"xdotool type ({len(text)} characters)"
    key = ACTION.validate_python({"action": "key", "combo": "ctrl+shift+t"})
    assert audited(key) == command_of(key) == "xdotool key -- ctrl+shift+t"


def test_a_long_text_gets_the_time_it_takes_to_type() -> None:
    longest = TypeText(action="type", text="x" * (TYPE_SECONDS * 10), delay_ms=100)  # at the limit: taken
    assert longest.seconds >= TYPE_SECONDS
    assert ACTION.validate_python({"action": "scroll", "x": 1, "y": 2}).x == 1
