"""E2B's snapshots and fork on hutch's E2B API, driven by the real, unmodified e2b SDK (2.45.1 and
2.63.0, each in its own .cache/e2b-<version>, made by scripts/test) and by the OpenAI Agents SDK's
E2B sandbox with `workspace_persistence="snapshot"` (.cache/e2b-openai-agents, e2b 2.31.0), offline
with hutch's scripted model. The clients are tests/integration/e2b_clients/snapshots.py and
openai_agent_snapshot.py, run in subprocesses with only the E2B variables (and the model's) set.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch.integrations.scripted_model import Script, ScriptedModel, answer, call
from tests.integration.support import Env, make_server, needs_installed, retire

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).resolve().parent / "e2b_clients"
LINES = ("2.45.1", "2.63.0")
MAGIC = b"E2B_SANDBOX_SNAPSHOT_V1\n"  # the Agents SDK's mark of a native snapshot's id (not a tar)


def python_of(venv: str) -> Path:
    python = ROOT / ".cache" / venv / "bin" / "python"
    needs_installed(f"{venv} in {python.parent.parent}", python.exists())
    return python


def run(env: Env, venv: str, script: str, *args: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd", **(extra or {})}
    done = subprocess.run([str(python_of(venv)), str(CLIENTS / script), *args], env=variables,
                          capture_output=True, text=True, timeout=600)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"{venv} {script} {args} failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def e2b(env: Env) -> httpx.Client:
    return httpx.Client(base_url=f"{env.url}/e2b", headers={"X-API-KEY": env.server.e2b_key()}, timeout=120)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("line", LINES)
def test_snapshot_boot_list_delete_and_fork(env: Env, line: str) -> None:
    tag = secrets.token_hex(4)
    out = run(env, f"e2b-{line}", "snapshots.py", "snapshots", tag)
    snap, named = out["snapshot"], out["named"]

    def status(code: int) -> int | None:
        return code if line == "2.63.0" else None  # 2.45.1's SandboxException carries no status

    assert snap["names"] == [] and named["names"] == [f"snap-{tag}"]
    assert out["source_runs_on"] is True  # the box snapshotted runs on
    # each box from the snapshot: the counter goes on from the saved value, in the same process,
    # and the file is there; each its own box, with its own token
    for boot in (*out["boots"], *out["forks"]):
        assert isinstance(boot, dict), boot
        assert (boot["from_saved"], boot["counting"], boot["same_process"]) == (True, True, True), boot
        assert boot["file"] == "saved before\n"
    ids = [out["source"], *out["ids"], *out["fork_ids"]]
    assert len(set(ids)) == 5
    tokens = [b["token"] for b in (*out["boots"], *out["forks"])]
    assert len(set(tokens)) == 4 and all(tokens)
    # a write in one is seen in no other
    assert (out["b_sees_a"], out["source_sees_a"], out["two_sees_one"]) == (False, False, False)
    assert out["info_a"] == {"state": "running", "metadata": {"suite": "e2b-snapshots", "tag": tag, "box": "a"}}
    # a fork is its box again: its metadata; its snapshot is not kept
    assert out["fork_metadata"] == {"suite": "e2b-snapshots", "tag": tag}
    assert out["by_name_file"] == "saved before\n"
    assert out["same_name"] == ["SandboxException", status(409)]  # snapshot_exists: a name is the team's once
    # listed: newest first, by the box it was taken of, by name, a page at a time
    mine = [named["id"], snap["id"]]
    assert [s for s in out["listed"] if s in mine] == mine
    assert out["listed_by_box"] == mine and out["listed_by_name"] == [named["id"]]
    assert all(len(p) == 1 for p in out["pages"]) and [s for p in out["pages"] for s in p] == out["listed"]
    # deleted: True, then False (not found); a box of it is refused; no snapshot of ours is left
    assert (out["deleted"], out["deleted_again"], out["deleted_named"]) == (True, False, True)
    assert out["boot_deleted"] == ["SandboxException", status(404)]
    assert not set(mine) & set(out["left"]) and not set(mine) & set(out["left_after_fork"])
    assert out["source_still_runs"] is True
    recs = [env.server.store().get_sandbox(i, include_deleted=True) for i in ids]
    assert [r.status if r else None for r in recs] == ["deleted"] * 5  # each killed by the client
    with e2b(env) as api:
        assert [s for s in api.get("/snapshots").json() if s["snapshotID"] in mine] == []


def test_bad_ids_and_requests_are_the_sdks_errors(env: Env) -> None:
    out = run(env, "e2b-2.63.0", "snapshots.py", "errors", "")
    assert out["snapshot_missing_box"] == ["SandboxNotFoundException", None]
    assert out["fork_missing_box"] == ["SandboxNotFoundException", None]
    assert out["boot_missing"] == ["SandboxException", 404]
    assert out["delete_missing"] is False


def test_a_filesystem_only_pause_keeps_the_files_and_its_connect_boots_afresh(env: Env) -> None:
    out = run(env, "e2b-2.63.0", "snapshots.py", "filesystem_pause", "")
    assert out["paused"] is True and out["same_box"] is True
    assert out["file"] == "kept\n"
    assert (out["counting"], out["process"]) == (False, False), "no process of before runs"
    assert out["lifecycle_running"] is True, "a create whose timeout pauses the files only"


def test_a_filesystem_only_snapshot_boots_afresh_with_the_files(env: Env) -> None:
    out = run(env, "e2b-2.63.0", "snapshots.py", "filesystem", "")
    assert out["file"] == "files only\n" and out["count_kept"] is True
    assert (out["counting"], out["process"]) == (False, False)  # no process came with it
    assert out["tmp_kept"] is False  # nor /tmp (a tmpfs, as after a reboot)
    assert out["source_counting"] is True and out["deleted"] is True


def test_fork_and_snapshot_bad_input_is_a_typed_error(env: Env) -> None:
    with e2b(env) as api:
        box = api.post("/sandboxes", json={"templateID": "base", "timeout": 120}).json()["sandboxID"]
        before = api.get("/snapshots").json()
        try:
            for body in ({"count": 0}, {"count": 21}, {"count": "2"}, {"count": True}, {"timeout": 0},
                         {"timeout": -5}, {"timeout": "x"}):
                r = api.post(f"/sandboxes/{box}/fork", json=body)
                assert (r.status_code, r.json()["code"]) == (400, 400), (body, r.text)
            for body in ({"name": 5}, {"name": "team/x"}, {"name": "x:v2"}, {"name": "a\nb"}, {"name": "x" * 129},
                         {"memory": "no"}):
                r = api.post(f"/sandboxes/{box}/snapshots", json=body)
                assert (r.status_code, r.json()["code"]) == (400, 400), (body, r.text)
            assert api.post(f"/sandboxes/{box}/snapshots", content=b"[").status_code == 400
            for q in ("limit=%C2%B2", "nextToken=5", "limit=" + "9" * 50):
                assert api.get(f"/snapshots?{q}").status_code == 400, q
            assert api.get("/snapshots", headers={"X-API-KEY": "e2b_" + "0" * 40}).status_code == 401
            r = api.post(f"/sandboxes/{box}/snapshots", json={"name": f"mine-{secrets.token_hex(3)}"})
            assert r.status_code == 201, r.text
            snap = r.json()
            default_tag = snap["names"][0] + ":default"  # E2B's default tag is taken as no tag
            listed = api.get("/snapshots", params={"name": default_tag}).json()
            assert [s["snapshotID"] for s in listed] == [snap["snapshotID"]]
            # another team sees none of it: not listed, not booted, not deleted, the box not forked
            other = {"X-API-KEY": env.key_b}
            assert snap not in api.get("/snapshots", headers=other).json()
            for ref in (snap["snapshotID"], snap["names"][0]):
                r = api.post("/sandboxes", headers=other, json={"templateID": ref})
                assert (r.status_code, r.json()["code"]) == (404, 404), r.text
                assert api.delete(f"/templates/{ref}", headers=other).status_code == 404
            assert api.post(f"/sandboxes/{box}/fork", headers=other, json={}).status_code == 404
            assert api.post(f"/sandboxes/{box}/snapshots", headers=other, json={}).status_code == 404
            assert api.delete(f"/templates/{snap['snapshotID']}").status_code == 204
            assert api.delete(f"/templates/{snap['snapshotID']}").status_code == 404
            assert api.get("/snapshots").json() == before
            # a paused box is snapshotted and forked from its checkpoint (E2B refuses both with 409),
            # and stays paused
            assert api.post(f"/sandboxes/{box}/pause").status_code == 204
            r = api.post(f"/sandboxes/{box}/snapshots", json={})
            assert r.status_code == 201, r.text
            assert api.delete(f"/templates/{r.json()['snapshotID']}").status_code == 204
            r = api.post(f"/sandboxes/{box}/fork", json={"timeout": 30})
            assert r.status_code == 201 and [sorted(f) for f in r.json()] == [["sandbox"]], r.text
            assert api.delete(f"/sandboxes/{r.json()[0]['sandbox']['sandboxID']}").status_code == 204
            assert api.get(f"/sandboxes/{box}").json()["state"] == "paused"
            assert api.get("/snapshots").json() == before  # the fork's own snapshot is not kept
        finally:
            api.delete(f"/sandboxes/{box}")


def test_quotas_refuse_a_snapshot_and_each_fork_past_them() -> None:
    server = make_server("--warm-pool", "0", "--team-max-sandboxes", "2", "--team-max-snapshots", "1")
    server.start()
    try:
        out = run(Env(server, server.admin_key(), server.admin_key()), "e2b-2.63.0", "snapshots.py", "quotas", "")
    finally:
        retire(server)
    # too_many_snapshots is E2B's 429 (2.63 retries a 429 three times: each is refused before the box is touched)
    assert out["second_snapshot"] == ["RateLimitException", 429]
    assert out["fork_past_snapshots"] == ["RateLimitException", 429]
    # each fork is its own result: the one past the team's boxes is its error, the other runs
    assert out["forks"] == ["RateLimitException", "Sandbox"]
    assert "runs at most 2 sandboxes" in out["refused"][0], out["refused"]
    assert out["left"] == []  # neither the refused snapshot nor the fork's own is kept


def test_the_async_sdk_boots_and_forks(env: Env) -> None:
    out = run(env, "e2b-2.63.0", "snapshots.py", "fork_async", "")
    assert out["booted"] == "async\n" and out["forks"] == ["async\n", "async\n"]
    assert out["deleted"] is True


@pytest.mark.timeout(900)
def test_openai_agents_sdk_e2b_sandbox_with_snapshot_persistence(env: Env, tmp_path: Path) -> None:
    tag = secrets.token_hex(4)
    script: Script = [
        call("exec_command", cmd="echo noted > notes.txt; echo outside > /tmp/outside.txt; cat greeting.txt"),
        answer("noted"),
        call("exec_command", cmd="cat notes.txt /tmp/outside.txt greeting.txt"),
        answer("restored")]
    with ScriptedModel(script) as model:
        out = run(env, "e2b-openai-agents", "openai_agent_snapshot.py", tag, str(tmp_path),
                  extra={"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "offline",
                         "OPENAI_AGENTS_DISABLE_TRACING": "1"})
    assert (out["first"], out["second"]) == ("noted", "restored")
    results = model.tool_results()
    assert len(results) == 2 and all("Process exited with code 0" in r for r in results), results
    # the second run's box has the workspace and the file outside it: the whole box came back from
    # E2B's snapshot (a tar of the workspace would not carry /tmp)
    assert "Output:\nnoted\noutside\nhello from the manifest\n" in results[1], results[1]
    [kept] = list(tmp_path.glob("*.tar"))
    raw = kept.read_bytes()
    assert raw.startswith(MAGIC), raw[:64]
    snapshot_id = json.loads(raw[len(MAGIC):])["snapshot_id"]
    with e2b(env) as api:
        taken = [s["snapshotID"] for s in api.get("/snapshots", params={"sandboxID": out["first_box"]}).json()]
        assert len(taken) == 1  # the first run's end took one of its box
        assert snapshot_id in [s["snapshotID"] for s in api.get("/snapshots").json()]  # the second run's end
        boxes = [b for b in api.get("/v2/sandboxes", params={"metadata": f"tag={tag}"}).json()]
        assert boxes == []  # every box of the two runs was killed at its end
        for s in {*taken, snapshot_id}:
            assert api.delete(f"/templates/{s}").status_code == 204
