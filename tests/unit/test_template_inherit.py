"""What a template built from another takes of its parent's start: E2B's rule, without a server."""

from __future__ import annotations

from typing import Any

from hutch.services.models import CreateTemplate
from hutch.services.templates import _inherited_start
from hutch.store import TemplateRecord

PARENT = TemplateRecord(id="p", team_id=None, name="code-interpreter-v1", rootfs="/r",
                        spec={"start_cmd": "serve", "ready_cmd": "probe", "ready_timeout_seconds": 120})


def child(**spec: Any) -> CreateTemplate:
    return CreateTemplate.model_validate({"name": "child", "from": "code-interpreter-v1", **spec})


def test_a_child_that_sets_neither_command_runs_its_parents() -> None:
    assert _inherited_start(child(), PARENT) == {"start_cmd": "serve", "ready_cmd": "probe", "ready_timeout_seconds": 120}
    assert _inherited_start(child(ready_timeout_seconds=30), PARENT) == {"start_cmd": "serve", "ready_cmd": "probe"}


def test_a_child_with_a_command_of_its_own_keeps_only_its_own() -> None:
    assert _inherited_start(child(start_cmd="mine"), PARENT) == {}
    assert _inherited_start(child(ready_cmd="my-probe"), PARENT) == {}  # a pair: not the parent's start


def test_nothing_comes_from_an_image_or_a_parent_without_commands() -> None:
    assert _inherited_start(child(), None) == {}
    bare = TemplateRecord(id="b", team_id=None, name="hutch/base", rootfs="/r", spec={"ready_timeout_seconds": 600})
    assert _inherited_start(child(ready_timeout_seconds=30), bare) == {}
