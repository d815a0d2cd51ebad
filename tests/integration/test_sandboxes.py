"""Lifecycle through the SDK, sync and async: create, connect, list, info, update, kill, teams."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hutch import AuthenticationError, NotFoundError, Sandbox, SandboxError, ValidationError
from tests.integration.support import ClientArgs, Env, in_background, wait_for


def test_create_returns_a_ready_box(sdk: Any, env: Env) -> None:
    sb = sdk.create(name="ready", metadata={"owner": "alice"}, env_vars={"GREETING": "hi"})
    try:
        assert sb.name == "ready" and sb.status == "active" and sb.metadata == {"owner": "alice"}
        uuid.UUID(sb.id)
        result = sb.commands.run("echo $GREETING from $(cat /etc/debian_version | cut -d. -f1)")
        assert result.exit_code == 0 and result.stdout == "hi from 12\n"
        info = sb.get_info()
        assert info.status == "active" and info.template == "hutch/base" and info.memory_mib == 1024
    finally:
        sb.kill()


def test_connect_by_id_from_a_new_client(sdk: Any, box: Any) -> None:
    box.files.write("/home/user/note.txt", "kept")
    again = sdk.connect(box.id)
    assert again.id == box.id and again.name == box.name
    assert again.commands.run("cat /home/user/note.txt").stdout == "kept"
    again.close()


def test_list_filters_by_metadata_with_and_and_by_status(sdk: Any, make_box: Any) -> None:
    tag = uuid.uuid4().hex
    a = make_box(metadata={"run": tag, "role": "web"})
    b = make_box(metadata={"run": tag, "role": "db"})
    make_box(metadata={"run": "elsewhere", "role": "web"})
    assert {i.id for i in sdk.list(metadata={"run": tag})} == {a.id, b.id}
    assert [i.id for i in sdk.list(metadata={"run": tag, "role": "web"})] == [a.id]
    assert sdk.list(metadata={"run": tag, "role": "cache"}) == []
    assert {a.id, b.id} <= {i.id for i in sdk.list(status="active")}
    assert not {a.id, b.id} & {i.id for i in sdk.list(status="paused")}


def test_update_replaces_metadata_and_sets_or_clears_lifetimes(box: Any) -> None:
    info = box.update(metadata={"stage": "two"}, timeout_seconds=600, auto_delete_seconds=60)
    assert info.metadata == {"stage": "two"} and info.timeout_seconds == 600 and info.auto_delete_seconds == 60
    assert box.metadata == {"stage": "two"}  # the object takes the answer of its own update
    info = box.update(timeout_seconds=None)
    assert info.timeout_seconds is None and info.auto_delete_seconds == 60 and info.metadata == {"stage": "two"}
    fresh = box.get_info()
    assert fresh.metadata == {"stage": "two"} and fresh.timeout_seconds is None and fresh.auto_delete_seconds == 60


def test_update_with_bad_values_changes_nothing(box: Any) -> None:
    with pytest.raises(ValidationError):
        box.update(metadata={"k" * 500: "v"})
    with pytest.raises(ValidationError):
        box.update(timeout_seconds=-5)
    assert box.get_info().metadata == {"suite": "tests"}


def test_kill_is_idempotent_and_the_box_is_gone(sdk: Any) -> None:
    sb = sdk.create(name="short-lived")
    sandbox_id = sb.id
    sb.kill()
    sb.kill()
    sdk.kill_by_id(sandbox_id)
    with pytest.raises(NotFoundError) as err:
        sdk.connect(sandbox_id)
    assert err.value.status_code == 404 and err.value.code == "not_found"
    assert sandbox_id not in {i.id for i in sdk.list()}


def test_kill_by_id_stops_the_box(sdk: Any) -> None:
    sb = sdk.create(name="by-id")
    sdk.kill_by_id(sb.id)
    with pytest.raises(NotFoundError):
        sb.get_info()


def test_one_team_never_sees_another_teams_boxes(box: Any, env: Env) -> None:
    other = ClientArgs(api_key=env.key_b, base_url=env.url)
    assert box.id not in {i.id for i in Sandbox.list(**other)}
    with pytest.raises(NotFoundError):
        Sandbox.connect(box.id, **other)
    Sandbox.kill_by_id(box.id, **other)  # quiet, and it must not touch team A's box
    assert box.commands.run("echo alive").stdout == "alive\n"
    mine = Sandbox.create(name="b-box", **other)
    try:
        assert mine.id not in {i.id for i in Sandbox.list()}
        assert mine.commands.run("echo b").stdout == "b\n"
    finally:
        mine.kill()


def test_a_bad_api_key_is_an_authentication_error(sdk: Any, env: Env) -> None:
    with pytest.raises(AuthenticationError) as err:
        sdk.list(api_key="hutch_not-a-key")
    assert err.value.status_code == 401 and err.value.code == "invalid_api_key"


def test_bad_create_arguments_make_nothing(sdk: Any) -> None:
    before = len(sdk.list())
    for kwargs in ({"name": "x" * 200}, {"name": ""}, {"name": "ok", "metadata": {f"k{i}": "v" for i in range(100)}},
                   {"name": "ok", "env_vars": {"1BAD": "x"}}, {"name": "ok", "timeout_seconds": 0}):
        with pytest.raises(ValidationError) as err:
            sdk.create(**kwargs)
        assert err.value.status_code == 400 and err.value.code == "invalid_request"
    with pytest.raises(NotFoundError) as nf:
        sdk.create(name="ok", from_template="no/such-template")
    assert nf.value.code == "template_not_found"
    assert len(sdk.list()) == before


def test_killing_a_box_while_a_command_streams_ends_the_call_cleanly(sdk: Any) -> None:
    sb = sdk.create(name="killed-mid-stream")
    streamed: list[str] = []
    bg = in_background(lambda: sb.commands.run("echo started; sleep 60", on_stdout=streamed.append))
    wait_for(lambda: "started" in "".join(streamed), what="the command to stream")
    sdk.kill_by_id(sb.id)
    bg.join(60)
    assert len(bg.errors) == 1 and isinstance(bg.errors[0], SandboxError), bg.errors
    assert sb.id not in {i.id for i in sdk.list()}, "a killed box must not come back as failed"
