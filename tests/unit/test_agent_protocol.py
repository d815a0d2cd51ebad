"""The compiled agent (agent/, Go) names the channel protocol as hutch/guest/protocol.py, its single
source, does: each constant of agent/protocol.go equals the Python one of the same name, every code,
event and route of the protocol is there, and each code has the same one status."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hutch.guest import protocol

GO = (Path(__file__).parents[2] / "agent" / "protocol.go").read_text()
# the Go spelling's prefix -> the Python one's (RouteFsStat is FS_STAT, EvStart EVENT_START)
PREFIXES = {"ROUTE_": "", "EV_": "EVENT_"}
SPELLED = {"SudoSocket": "@hutch-sudo"}  # Go's spelling of the abstract name "\0hutch-sudo"


def go_constants() -> dict[str, Any]:
    block = GO.split("const (", 1)[1].split("\n)", 1)[0]
    found: dict[str, Any] = {}
    for name, expression in re.findall(r"^\s*(\w+)\s*=\s*(.+?)\s*(?://.*)?$", block, re.M):
        value: Any = ""
        for part in (p.strip() for p in expression.split("+")):  # a string, a number, or constants joined
            if part.startswith('"'):
                value += part.strip('"')
            elif part.isdigit():
                value = int(part)
            else:
                value += found[part]
        found[name] = value
    return found


def python_name(go_name: str) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", go_name).upper()
    for go_prefix, py_prefix in PREFIXES.items():
        if snake.startswith(go_prefix):
            return py_prefix + snake.removeprefix(go_prefix)
    return snake


def test_each_go_constant_is_the_protocols() -> None:
    constants = go_constants()
    assert len(constants) > 40
    for go_name, value in constants.items():
        expected = getattr(protocol, python_name(go_name))
        if go_name in SPELLED:
            assert (value, expected) == (SPELLED[go_name], "\0" + SPELLED[go_name][1:])
        else:
            assert value == expected, go_name


def test_every_code_event_and_route_of_the_protocol_is_in_the_go_agent() -> None:
    named = {python_name(n) for n in go_constants()}
    wanted = {n for n in vars(protocol) if n.startswith(("ERR_", "EVENT_", "FS_", "PROC_"))}
    wanted |= {"HEALTH", "EXEC", "FILES", "DIR_ZIP", "PROCS", "TUNNEL", "QUIESCE"}
    assert wanted - named == set()


def test_each_code_has_the_same_one_status() -> None:
    constants = go_constants()
    body = GO.split("var ErrorStatus = map[string]int{", 1)[1].split("\n}", 1)[0]
    statuses = {constants[name]: int(status) for name, status in re.findall(r"(\w+):\s*(\d+)", body)}
    assert statuses == protocol.ERROR_STATUS
