"""What the CLI's command groups share, with no server: KEY=VALUE arguments, tables, JSON, client.env and exit codes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from hutch.cli.shared import client_env, exit_status, info_json, mounts, pairs, run_handler, split_remote, table
from hutch.sdk import (
    EnvStep,
    NotFoundError,
    RunStep,
    SandboxError,
    SandboxInfo,
    SandboxTimeoutError,
    TemplateInfo,
    VolumeInfo,
)
from hutch.sdk.codes import SdkCode


def test_pairs() -> None:
    assert pairs(None, "--env") == {}
    assert pairs(["A=1", "B=x=y", "C="], "--env") == {"A": "1", "B": "x=y", "C": ""}
    for bad in ("novalue", "=1"):
        with pytest.raises(SystemExit, match=f"hutch: --metadata must be KEY=VALUE, not '{bad}'"):
            pairs([bad], "--metadata")


def test_volume_mounts() -> None:
    assert mounts(None) == {}
    assert mounts(["/mnt/data=repo", "/srv/cache=cache:ro", "/w=vol_abc:rw", "/a=b=c"]) == {
        "/mnt/data": "repo", "/srv/cache": {"volume": "cache", "read_only": True}, "/w": "vol_abc", "/a": "b=c"}
    for bad in ("novolume", "/mnt=", "mnt=repo", "=repo", "/mnt=repo:rx", "/mnt=:ro"):
        with pytest.raises(SystemExit, match=f"hutch: --volume must be PATH=VOLUME or PATH=VOLUME:ro .*not '{bad}'"):
            mounts([bad])
    with pytest.raises(SystemExit, match="hutch: --volume mounts two volumes at /mnt"):
        mounts(["/mnt=a", "/mnt=b:ro"])


@pytest.mark.parametrize(("spec", "split"), [("sb:/tmp/x", ("sb", "/tmp/x")), ("repo:/", ("repo", "/")),
                                             ("./out.bin", (None, "./out.bin")), ("-", (None, "-")),
                                             ("a:b", (None, "a:b")), (":/x", (None, ":/x")),
                                             ("/abs/path", (None, "/abs/path"))])
def test_split_remote(spec: str, split: tuple[str | None, str]) -> None:
    assert split_remote(spec) == split


def test_table_pads_columns_and_strips_line_ends() -> None:
    assert table([["a", "long value", ""], ["bbb", "x", "z"]], ["ID", "V", "W"]) == (
        "ID   V           W\n"
        "a    long value\n"
        "bbb  x           z")


def test_a_templates_json_spells_its_steps_as_the_http_api() -> None:
    info = TemplateInfo.from_json({"id": "t1", "name": "web", "system": False, "status": "ready", "from": "hutch/base",
                                   "steps": [{"run": "make"}, {"env": {"key": "K", "value": "V"}}], "ready_timeout_seconds": 60,
                                   "vcpu": 1, "memory_mib": 512, "disk_mib": 1024, "env": {},
                                   "created_at": "2026-01-02T03:04:05+00:00"})
    assert info.steps == [RunStep("make"), EnvStep("K", "V")]
    data = info_json(info)
    assert data["from"] == "hutch/base" and "from_" not in data
    assert data["steps"] == [{"run": "make"}, {"env": {"key": "K", "value": "V"}}]
    assert data["created_at"] == "2026-01-02 03:04:05+00:00"
    json.dumps(data)


def test_a_volumes_json_and_a_sandboxs_mounts() -> None:
    info = VolumeInfo.from_json({"id": "vol_1", "name": "repo", "size_mib": 64, "used_bytes": None,
                                 "metadata": {"k": "v"}, "created_at": "2026-01-02T03:04:05+00:00",
                                 "mounted_by": ["sb1"]})
    assert info_json(info) == {"id": "vol_1", "name": "repo", "size_mib": 64, "used_bytes": None, "metadata": {"k": "v"},
                               "created_at": "2026-01-02 03:04:05+00:00", "mounted_by": ["sb1"]}
    when = "2026-01-02T03:04:05+00:00"
    box = SandboxInfo.from_json({"id": "sb1", "name": "n", "status": "active", "template": "hutch/base", "metadata": {},
                                 "vcpu_count": 1, "memory_mib": 512, "created_at": when, "updated_at": when,
                                 "volumes": [{"volume_id": "vol_1", "name": "repo", "path": "/mnt", "read_only": True}]})
    assert json.loads(json.dumps(info_json(box)))["volumes"] == [{"volume_id": "vol_1", "name": "repo", "path": "/mnt",
                                                                  "read_only": True}]


@pytest.mark.parametrize(("code", "status"), [(0, 0), (5, 5), (255, 255), (-9, 1), (256, 1)])
def test_exit_status(code: int, status: int) -> None:
    assert exit_status(code) == status


def _raising(error: BaseException) -> argparse.Namespace:
    def fn(args: argparse.Namespace) -> int:
        raise error

    return argparse.Namespace(fn=fn, json=False)


def test_run_handler_turns_errors_into_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_handler(argparse.Namespace(fn=lambda args: 7, json=False)) == 7
    assert run_handler(_raising(NotFoundError("no such sandbox", status_code=404, code="not_found"))) == 1
    assert capsys.readouterr().err == "hutch: no such sandbox (not_found)\n"
    assert run_handler(_raising(SandboxTimeoutError("too slow", code=SdkCode.COMMAND_TIMEOUT))) == 124  # as timeout(1)
    assert capsys.readouterr().err == "hutch: too slow (command_timeout)\n"
    assert run_handler(_raising(KeyboardInterrupt())) == 130

    as_json = _raising(SandboxError("down", status_code=503, code="unavailable"))
    as_json.json = True
    assert run_handler(as_json) == 1
    assert json.loads(capsys.readouterr().err) == {"error": {"code": "unavailable", "message": "down",
                                                             "status_code": 503}}


@pytest.fixture
def no_client_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUTCH_API_KEY", raising=False)
    monkeypatch.delenv("HUTCH_BASE_URL", raising=False)


@pytest.mark.usefixtures("no_client_env")
def test_client_env_fills_what_is_unset_from_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "client.env").write_text("HUTCH_BASE_URL=http://h:1\nHUTCH_API_KEY=k\nE2B_API_KEY=e\n")
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    client_env(tmp_path)
    assert (os.environ["HUTCH_API_KEY"], os.environ["HUTCH_BASE_URL"]) == ("k", "http://h:1")
    assert "E2B_API_KEY" not in os.environ


@pytest.mark.usefixtures("no_client_env")
def test_a_key_in_the_environment_wins_over_client_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "client.env").write_text("HUTCH_BASE_URL=http://h:1\nHUTCH_API_KEY=k\n")
    monkeypatch.setenv("HUTCH_API_KEY", "mine")
    client_env(tmp_path)
    assert os.environ["HUTCH_API_KEY"] == "mine" and "HUTCH_BASE_URL" not in os.environ


@pytest.mark.usefixtures("no_client_env")
def test_no_client_env_is_no_change(tmp_path: Path) -> None:
    client_env(tmp_path)
    assert "HUTCH_API_KEY" not in os.environ
