"""Volumes from a terminal and from an agent: `hutch volume create/ls/info/cp/rm` and `hutch create
--volume` as a person uses them, and the MCP server's volume tools; a real server, one real box each."""

from __future__ import annotations

import asyncio
import json
import secrets as random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hutch import NotFoundError, Sandbox, Volume
from tests.integration.support import Env
from tests.integration.test_cli import hutch


def _name(prefix: str) -> str:
    return f"{prefix}-{random.token_hex(4)}"


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Volume names the test makes, deleted after it (a box that mounts one is the test's to kill)."""
    made: list[str] = []
    yield made
    for name in made:
        try:
            Volume.delete_by_id(name)
        except NotFoundError:
            pass


def test_the_volume_commands_round_trip(env: Env, tmp_path: Path, names: list[str]) -> None:
    name = _name("cli-vol")
    names.append(name)
    made = hutch(env, "volume", "create", name, "--size", "64", "-m", "via=cli")
    assert made.returncode == 0, made.stderr
    vol_id = made.stdout.decode().strip()
    again = hutch(env, "volume", "create", name)
    assert again.returncode == 1 and b"(volume_exists)" in again.stderr

    table = hutch(env, "volume", "ls", "-m", "via=cli").stdout.decode()
    assert table.splitlines()[0].split()[:4] == ["ID", "NAME", "SIZE", "USED"] and vol_id in table and name in table
    listed = json.loads(hutch(env, "--json", "volume", "ls", "--metadata", "via=cli").stdout)
    assert [(v["id"], v["name"], v["size_mib"], v["metadata"]) for v in listed] == [(vol_id, name, 64, {"via": "cli"})]
    assert json.loads(hutch(env, "--json", "volume", "ls", "-m", "via=nobody").stdout) == []

    # up and down, by name and by id, with stdio, and with a directory on either side
    local = tmp_path / "in.bin"
    local.write_bytes(bytes(range(256)) * 64)
    assert hutch(env, "volume", "cp", str(local), f"{name}:/dir/in.bin").returncode == 0
    out = tmp_path / "out.bin"
    down = hutch(env, "volume", "cp", f"{vol_id}:/dir/in.bin", str(out))
    assert down.returncode == 0, down.stderr
    assert out.read_bytes() == local.read_bytes()
    assert hutch(env, "volume", "cp", "-", f"{name}:/piped.txt", stdin=b"piped").returncode == 0
    assert hutch(env, "volume", "cp", f"{name}:/piped.txt", "-").stdout == b"piped"
    assert hutch(env, "volume", "cp", str(local), f"{name}:/up/").returncode == 0
    (tmp_path / "dl").mkdir()
    assert hutch(env, "volume", "cp", f"{name}:/up/in.bin", str(tmp_path / "dl")).returncode == 0
    assert (tmp_path / "dl" / "in.bin").read_bytes() == local.read_bytes()
    assert Volume.get(name).files.read("/piped.txt") == b"piped", "what the CLI wrote, the SDK reads"

    info = json.loads(hutch(env, "--json", "volume", "info", name).stdout)
    assert (info["id"], info["name"], info["size_mib"], info["mounted_by"]) == (vol_id, name, 64, [])
    assert info["used_bytes"] >= 2 * len(local.read_bytes())
    text = hutch(env, "volume", "info", vol_id).stdout.decode()
    assert name in text and "64 MiB" in text and "via=cli" in text

    # boxes mount it by name, read-write at one path and read-only at another
    made = hutch(env, "create", "--name", "vol-box", "--volume", f"/mnt/data={name}", "-v", f"/srv/ro={vol_id}:ro")
    assert made.returncode == 0, made.stderr
    box = made.stdout.decode().strip()
    try:
        mounted = json.loads(hutch(env, "--json", "info", box).stdout)["volumes"]
        assert sorted((m["path"], m["volume_id"], m["name"], m["read_only"]) for m in mounted) == [
            ("/mnt/data", vol_id, name, False), ("/srv/ro", vol_id, name, True)]
        run = hutch(env, "exec", box, "--", "cat /srv/ro/piped.txt; echo from-box > /mnt/data/box.txt")
        assert (run.returncode, run.stdout) == (0, b"piped"), run.stderr
        assert hutch(env, "volume", "cp", f"{name}:/box.txt", "-").stdout == b"from-box\n"
        run = hutch(env, "exec", box, "--", "echo no > /srv/ro/nope.txt")
        assert run.returncode != 0 and b"Read-only file system" in run.stderr
        assert json.loads(hutch(env, "--json", "volume", "info", name).stdout)["mounted_by"] == [box]
        busy = hutch(env, "volume", "rm", name)
        assert busy.returncode == 1 and b"(volume_in_use)" in busy.stderr
    finally:
        assert hutch(env, "kill", box).returncode == 0

    gone = hutch(env, "volume", "rm", name)
    assert (gone.returncode, gone.stdout) == (0, f"deleted {name}\n".encode())
    missing = hutch(env, "volume", "info", name)
    assert missing.returncode == 1 and b"volume_not_found" in missing.stderr
    missing = hutch(env, "--json", "volume", "cp", f"{name}:/piped.txt", "-")
    assert json.loads(missing.stderr)["error"]["code"] == "volume_not_found"


def test_volume_usage_errors_are_clear(env: Env, tmp_path: Path, names: list[str]) -> None:
    r = hutch(env, "volume", "cp", "a", "b")
    assert r.returncode != 0 and b"one side must be VOLUME:/path" in r.stderr
    r = hutch(env, "volume", "create", "v", "--size", "1.5K")
    assert r.returncode == 2 and b"not a whole number of MiB" in r.stderr
    r = hutch(env, "create", "--volume", "relative=v")
    assert r.returncode != 0 and b"--volume must be PATH=VOLUME" in r.stderr
    r = hutch(env, "create", "--volume", "/mnt=no-such-volume")
    assert r.returncode == 1 and b"volume_not_found" in r.stderr

    name = _name("cli-err")
    names.append(name)
    assert hutch(env, "volume", "create", name, "--size", "16M").returncode == 0
    assert Volume.get(name).size_mib == 16
    r = hutch(env, "volume", "cp", str(tmp_path / "absent"), f"{name}:/x")
    assert r.returncode == 1 and b"No such file or directory" in r.stderr and b"Traceback" not in r.stderr
    r = hutch(env, "volume", "cp", "-", f"{name}:/dir/", stdin=b"x")
    assert r.returncode != 0 and b"needs a file name" in r.stderr
    r = hutch(env, "volume", "cp", f"{name}:/absent", str(tmp_path / "out"))
    assert r.returncode == 1 and b"file_not_found" in r.stderr and not (tmp_path / "out").exists()


# --- the MCP server's volume tools ----------------------------------------------------------------

def _text(result: Any) -> str:
    return str(result.content[0].text)


def test_the_mcp_volume_tools(names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp import Client

    from hutch.integrations.mcp_server import build

    monkeypatch.setenv("HUTCH_ACTOR", "hutch-mcp")
    name = _name("mcp-vol")
    names.append(name)

    async def go() -> dict[str, str]:
        out: dict[str, str] = {}
        async with Client(build()) as client:
            async def call(tool: str, **args: Any) -> str:
                return _text(await client.call_tool(tool, args))

            out["create"] = await call("volume_create", name=name, size_mib=32, metadata={"via": "mcp"})
            out["write"] = await call("volume_files_write", volume=name, path="/notes/a.txt", content="hello")
            out["ls"] = await call("volume_files_list", volume=name, path="/", depth=2)
            out["read"] = await call("volume_files_read", volume=name, path="/notes/a.txt")
            out["list"] = await call("volume_list", metadata={"via": "mcp"})
            out["bad_mount"] = await call("sandbox_create", name="mcp-vol", volumes={"/mnt/v": f"{name}:rx"})
            out["box"] = await call("sandbox_create", name="mcp-vol", volumes={"/mnt/v": name, "/srv/v": f"{name}:ro"})
            box = json.loads(out["box"])["id"]
            try:
                out["exec"] = await call("sandbox_exec", sandbox_id=box,
                                         command="cat /srv/v/notes/a.txt; echo box > /mnt/v/b.txt; "
                                                 "echo no > /srv/v/c.txt")
                out["from_box"] = await call("volume_files_read", volume=name, path="/b.txt")
            finally:
                out["kill"] = await call("sandbox_kill", sandbox_id=box)
            out["missing"] = await call("volume_files_read", volume=_name("absent"), path="/x")
            out["absent_file"] = await call("volume_files_read", volume=name, path="/nothing")
            out["again"] = await call("volume_create", name=name)
        return out

    out = asyncio.run(go())
    made = json.loads(out["create"])
    assert (made["name"], made["size_mib"], made["metadata"], made["mounted_by"]) == (name, 32, {"via": "mcp"}, [])
    assert out["write"] == f"wrote 5 bytes to {name}:/notes/a.txt"
    listed = json.loads(out["ls"])
    assert [(e["path"], e["type"]) for e in listed] == [("/notes", "dir"), ("/notes/a.txt", "file")]
    assert listed[1]["size"] == 5
    assert out["read"] == "hello"
    assert [v["id"] for v in json.loads(out["list"])] == [made["id"]]
    assert out["bad_mount"].startswith("error: invalid_argument: volumes['/mnt/v']")
    mounted = json.loads(out["box"])["volumes"]
    assert sorted((m["path"], m["volume"], m["volume_id"], m["read_only"]) for m in mounted) == [
        ("/mnt/v", name, made["id"], False), ("/srv/v", name, made["id"], True)]
    assert out["exec"] == ("exit code: 2\nstdout:\nhello\nstderr:\n"
                           "/bin/sh: 1: cannot create /srv/v/c.txt: Read-only file system\n")
    assert out["from_box"] == "box\n"
    assert out["kill"].startswith("killed ")
    assert out["missing"].startswith("error: volume_not_found")
    assert out["absent_file"].startswith("error: file_not_found")
    assert out["again"].startswith("error: volume_exists")
    assert [b for b in Sandbox.list() if b.name == "mcp-vol"] == [], "a refused mount made no box"
