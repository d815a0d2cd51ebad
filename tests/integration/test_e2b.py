"""The real, unmodified e2b SDK (2.45.1 and 2.63.0, sync and async) against hutch's E2B API.

Each SDK line lives in its own virtual environment (.cache/e2b-<version>, made by scripts/test):
the two cannot share one. tests/integration/e2b_clients/client.py runs there in a subprocess with only
E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (and PATH) set, and prints JSON for the asserts.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import socket
import ssl
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import RunStep, Sandbox, Secret, Template
from hutch.services import boxport
from tests.integration.internet import Internet
from tests.integration.support import Env, needs_installed, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "client.py"
LINES = ("2.45.1", "2.63.0")
MODES = ("sync", "async")
BOTH = [(line, mode) for line in LINES for mode in MODES]


def python_of(line: str) -> Path:
    python = ROOT / ".cache" / f"e2b-{line}" / "bin" / "python"
    needs_installed(f"e2b {line} in {python.parent.parent}", python.exists())
    return python


def run_client(env: Env, line: str, scenario: str, mode: str, arg: str = "", key: str | None = None,
               script: Path = CLIENT) -> dict[str, Any]:
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": key or env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd",
                 "E2B_VOLUME_API_URL": f"{env.url}/e2b"}  # as client.env sets them
    argv = [scenario, mode, arg] if script == CLIENT else [mode, arg]
    done = subprocess.run([str(python_of(line)), str(script), *argv], env=variables,
                          capture_output=True, text=True, timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"e2b {line} {scenario} {mode} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_commands_and_the_control_plane(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "commands", mode, f"{line}-{mode}")
    run = out["run"]
    assert (run["stdout"], run["stderr"], run["exit_code"]) == ("out\n1 2\n", "err\n", 0)
    assert "".join(s[2:] for s in run["seen"] if s.startswith("o:")) == "out\n1 2\n"  # streamed to callbacks
    assert [s for s in run["seen"] if s.startswith("e:")] == ["e:err\n"]
    assert out["whoami"] == "root\n/tmp\n" and out["default_user"] == "user\n/home/user\n"
    assert out["exit"] == {"exit_code": 3, "stdout": "failing\n", "error": "exit status 3"}  # CommandExitException
    assert out["background_wait"] == "late\n" and out["stdin"] == "got hello\n"
    assert out["listed"] is True and out["kill"] is True and out["kill_again"] is False
    assert out["killed_wait"] == "CommandExitException"  # killed: exit -1, "signal: killed"
    # Connect-Timeout-Ms: the client gives up, or the server kills the process and ends the stream
    # with deadline_exceeded, as envd: either way E2B's TimeoutException
    assert out["deadline"] == "TimeoutException"
    assert out["deadline_killed"] is True  # and the server killed it (sleep 30 would still run)
    assert out["info"]["state"] == "running" and out["info"]["metadata"]["suite"] == "e2b"
    assert out["listed_ids"] == [out["id"]] and out["list_other"] == 0
    assert out["running"] is True and out["metrics"] == "list"
    assert out["killed"] is True and out["killed_twice"] is False
    assert out["connect_gone"] == "SandboxNotFoundException"
    assert Sandbox.list(metadata={"mode": f"{line}-{mode}"}) == []  # killed for hutch too


@pytest.mark.parametrize("mode", MODES)
def test_e2b_volumes_are_hutch_volumes_in_e2b_shapes(env: Env, mode: str) -> None:
    """e2b 2.63's Volume (its control plane and its content API, with the volume's token) and
    Sandbox.create(volume_mounts=...), unmodified; what it made is a hutch volume."""
    tag = secrets.token_hex(4)
    out = run_client(env, "2.63.0", "volumes", mode, tag, script=CLIENT.parent / "volumes.py")
    assert out["created"] == {"id_set": True, "name": f"e2b-{tag}", "token_set": True}
    assert out["written"] == {"type": "file", "size": 12, "path": "/dir/a.txt"}
    assert out["made"] == "directory" and out["made_no_force"].startswith("VolumePathNotFoundException")
    assert out["listed"] == ["dir", "made"]
    assert out["listed_deep"] == ["/dir", "/dir/a.txt", "/made", "/made/deep"]
    assert out["info"] == {"type": "file"} and out["exists"] == [True, False]
    assert out["read"] == "hello volume" and out["read_bytes"] == 12 and out["chmod"] == 0o600
    assert out["missing"].startswith("VolumePathNotFoundException")
    assert out["box_read"] == "hello volume" and out["api_read"] == "from-box\n", "a box and the API share it"
    assert out["mounts"] == [{"name": f"e2b-{tag}", "path": "/mnt/vol"}]
    assert out["destroy_in_use"].startswith("VolumeException: 409")
    assert out["connected"] == f"e2b-{tag}" and out["in_list"] is True and out["removed"] is False
    assert out["destroyed"] == [True, False], "destroy answers False for a volume that is gone"
    assert out["after"].startswith("VolumeNotFoundException")


@pytest.mark.parametrize("line", LINES)
def test_metrics_are_sampled_from_the_boxs_cgroup(env: Env, line: str) -> None:
    out = run_client(env, line, "metrics", "sync")
    assert out["busy_seen"] is True, "a sample shows the busy CPU and the held memory"
    rec = env.server.store().get_sandbox(out["id"], include_deleted=True)  # killed by then
    assert rec is not None
    assert out["sample"]["cpu_count"] == rec.vcpu and out["sample"]["mem_total"] == rec.memory_mib << 20
    assert 0 <= out["sample"]["age"] < 60
    assert out["before_it_ran"] == 0 and out["after_now"] == 0


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_files(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "files", mode)
    assert out["write"] == "/home/user/notes/a.txt" and out["read"] == "hello"
    assert out["read_bytes"] is True and out["read_gzip"] == "zipped" and out["read_many"] == ["one", "two"]
    assert out["missing"] == "FileNotFoundException" and out["bad_user"] == "InvalidArgumentException"
    assert out["list"] == [["1.txt", "file"], ["2.txt", "file"]]
    assert out["info"] == {"name": "a.txt", "path": "/home/user/notes/a.txt", "size": 5, "type": "file",
                           "owner": "user", "permissions": "-rw-r--r--"}
    assert out["exists"] == [True, False] and out["make_dir"] == [True, False]
    assert out["rename"] == "/home/user/notes/b.txt" and out["removed"] is False
    assert ["new.txt", "create"] in out["events"]  # sync: CreateWatcher and polling; async: WatchDir stream


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_envd_parity(env: Env, line: str, mode: str) -> None:
    """What E2B's own SDK tests check of envd: file metadata, watch events of the real file with
    their entries, remove of a missing path, get_info through a link, and the errors of a command's
    timeout and of a box killed while a command runs."""
    out = run_client(env, line, "parity", mode)
    meta = {"author": "mish", "purpose": "upload"}
    entry = ["w.txt", "/home/user/wd/w.txt", "file", 5]
    assert out["meta_write"] == [meta] * len(out["meta_write"])
    # a write is the file's own: an overwrite is chmod then write, a new file create, chmod, write
    assert out["watch"] == [["w.txt", "chmod"], ["w.txt", "write"],
                            ["new.txt", "create"], ["new.txt", "chmod"], ["new.txt", "write"]]
    assert out["watch_entry"] == [entry, ["new.txt", "/home/user/wd/new.txt", "file", 5]]
    assert out["remove_missing"] == "none"
    assert out["link"] == ["file", "/home/user/t.txt" if mode == "async" else "/home/user/ln/t.txt", 0o644]
    timeout, killed = out["timeout"], out["killed"]
    assert timeout[0] == "TimeoutException" and "exceeding 'timeout'" in timeout[1]
    assert killed[0] == ("SandboxNotRunningException" if line == "2.63.0" else "TimeoutException")  # its subclass
    assert "sandbox was killed or reached its end of life" in killed[1]
    if mode == "async":
        return
    assert out["meta_none"] == [None, None] and out["meta_xattr"] == {"author": "mish"}
    assert out["meta_many"] == [[{"source": "suite"}] * 2] * 2 and out["meta_list"] == [{"tag": "listed"}]
    assert out["meta_rename"] == {"stage": "renamed"} and out["meta_overwrite"] == [None, None]
    assert out["meta_bad"] == ["InvalidArgumentException"] * 5 and out["meta_bad_made"] is False
    assert out["watch_recursive"] == [["nested/x.txt", "create", None], ["nested/x.txt", "chmod", None],
                                      ["nested/x.txt", "write", None]]
    assert out["dangling"] == [None, "/home/user/ln/dangling"]
    # a link is listed as what it leads to; one leading nowhere has no type, and the SDK skips it
    assert out["link_listed"] == [["link.txt", "file", "/home/user/ln/t.txt"], ["t.txt", "file", None]]
    assert out["timeout_iterating"][0] == "TimeoutException"


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_pause_then_connect_keeps_files_and_processes(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "pause", mode)
    assert out["paused"] is True and out["state"] == "paused"
    assert out["paused_again"] in (False, None)  # 409: already paused
    assert out["state_after"] == "running" and out["kept"] == "kept\n"
    assert out["counting"] is True and out["process_kept"] is True
    assert out["same_handle"] == ["one\n", "two\n"]  # the token survives resumes (E2B keeps it)


def test_get_host_names_the_ports_e2b_host_which_answers_over_tls(env: Env) -> None:
    out = run_client(env, "2.63.0", "host", "sync")
    try:
        assert out["host"] == f"8001-{out['id']}.{env.server.client_env('E2B_DOMAIN')}"
        ca = env.server.client_env("NODE_EXTRA_CA_CERTS")

        def answers() -> bool:  # a public box (E2B's default): no token, no publishing
            return httpx.get(f"https://{out['host']}/", verify=ssl.create_default_context(cafile=ca),
                             timeout=10).status_code == 200
        wait_for(answers, 30)
    finally:
        e2b_kill(env, out["id"])


def test_one_box_two_clients_and_the_audit_log(env: Env) -> None:
    out = run_client(env, "2.45.1", "create", "sync")
    box = Sandbox.connect(out["id"])
    assert box.metadata == {"from": "e2b"} and box.status == "active"
    assert box.commands.run("cat /tmp/shared").stdout == "from-e2b\n"
    box.commands.run("echo from-hutch > /tmp/from-hutch")
    ops = [(e.op, e.detail) for e in box.get_audit_log().entries]
    assert ("spawn", "/bin/bash -l -c 'echo from-e2b > /tmp/shared'") in ops  # E2B's Start, audited
    again = run_client(env, "2.63.0", "reconnect", "sync", out["id"])
    assert again == {**again, "shared": "from-hutch\n", "killed": True}
    assert Sandbox.list(metadata={"from": "e2b"}) == []


def test_templates_by_name(env: Env) -> None:
    name = f"e2b-tpl-{int(time.time())}"
    template = Template.create(name, steps=[RunStep("echo made-by-a-step > /marker")])
    template.wait_until_ready(timeout_seconds=600)
    try:
        out = run_client(env, "2.63.0", "create", "sync", name)
        assert out["marker"] == "made-by-a-step\n"
        Sandbox.kill_by_id(out["id"])
        assert run_client(env, "2.45.1", "bad_template", "sync")["error"] == "SandboxException"
    finally:
        Template.delete_by_name(name)


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_a_wrong_key_is_refused(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "wrong_key", mode, key="e2b_" + secrets.token_hex(20))
    assert out["error"] == "AuthenticationException"


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_terminals_input_streams_and_reattaching(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "pty", mode)
    assert out["pty"] == {"size": True, "echo": True, "exit": 0}  # Start with a pty, Update, SendInput
    if line != "2.45.1":
        assert out["stream_input"] == "ab\n"  # StreamInput (2.63), then CloseStdin
    assert out["connect"] == "connected\n"  # Connect to a process whose Start stream was dropped
    assert out["no_replay"] == "second\n"  # output a client was sent is not replayed on Connect


def test_lifecycle_at_the_timeout(env: Env) -> None:
    out = run_client(env, "2.63.0", "lifecycle", "sync")
    assert out["killed"] == "SandboxNotFoundException" and out["paused"] == "paused"
    assert out["auto_resumed"] == ["0\n", "1\n", "2\n"]


# --- raw HTTP: limits, abuse and refusals ---------------------------------------------------------

def e2b_box(env: Env, **body: Any) -> tuple[str, str]:
    r = httpx.post(f"{env.url}/e2b/sandboxes", headers={"X-API-KEY": env.server.e2b_key()},
                   json={"templateID": "base", "timeout": 120, **body}, timeout=120)
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"], r.json()["envdAccessToken"]


def e2b_kill(env: Env, sandbox_id: str) -> None:
    httpx.delete(f"{env.url}/e2b/sandboxes/{sandbox_id}", headers={"X-API-KEY": env.server.e2b_key()})


def envd(env: Env, sandbox_id: str, token: str | None) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, **({"X-Access-Token": token} if token else {})}


# Accepts every connection on 8080 and answers none of them until /tmp/answer exists; /tmp/held
# says how many it holds
HOLDING_SERVER = """
import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8080)); s.listen(512); s.settimeout(0.05)
held = []
while True:
    try:
        held.append(s.accept()[0])
        open("/tmp/held", "w").write(str(len(held)))
    except OSError:
        pass
    if os.path.exists("/tmp/answer"):
        for c in held:
            c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok"); c.close()
        held = []
"""


def test_a_port_that_never_answers_holds_a_bounded_share_of_the_forwarder(env: Env) -> None:
    box, token = e2b_box(env)
    other, other_token = e2b_box(env)
    url = f"{env.url}/e2b/envd/"
    headers = {**envd(env, box, token), "E2b-Sandbox-Port": "8080"}
    try:
        sb = Sandbox.connect(box, **env.server.client_args())
        sb.files.write("/tmp/hold.py", HOLDING_SERVER)
        sb.commands.spawn("python3 /tmp/hold.py")
        wait_for(lambda: ":8080" in sb.commands.run("cat /proc/net/tcp | awk '{print $2}' | "
                                                     "grep -i ':1F90' | sed 's/.*/:8080/'").stdout,
                 30, "the box's server")
        limits = httpx.Limits(max_connections=boxport.MAX_PER_BOX + 8)
        with httpx.Client(limits=limits, timeout=120, headers=headers) as client, \
                ThreadPoolExecutor(boxport.MAX_PER_BOX) as pool:
            held = [pool.submit(client.get, url) for _ in range(boxport.MAX_PER_BOX)]
            wait_for(lambda: sb.commands.run("cat /tmp/held 2>/dev/null").stdout == str(boxport.MAX_PER_BOX), 60,
                     "the box's server to hold every request")
            refused = client.get(url)  # once all of them are under way, the next is refused at once
            assert refused.status_code == 429 and "under way" in refused.text, refused.text
            # the same team's other box is not held back by this one's (nothing listens there: it says so)
            elsewhere = client.get(url, headers={**envd(env, other, other_token), "E2b-Sandbox-Port": "8080"})
            assert elsewhere.status_code == 502, elsewhere.text
            assert not any(f.done() for f in held)
            sb.files.write("/tmp/answer", "")
            assert [f.result().text for f in held] == ["ok"] * boxport.MAX_PER_BOX
            assert client.get(url).text == "ok"  # their ends gave their places back
    finally:
        for b in (box, other):
            e2b_kill(env, b)


def test_uploads_gzip_and_forms_are_bounded(env: Env) -> None:
    box, token = e2b_box(env)
    url, headers = f"{env.url}/e2b/envd/files", envd(env, box, token)
    try:
        started = time.monotonic()
        junk = gzip.compress(b"x") + secrets.token_bytes(2**20)  # trailing bytes after the member
        r = httpx.post(url, params={"path": "/tmp/z"}, content=junk, timeout=60,
                       headers={**headers, "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        assert r.status_code == 400 and time.monotonic() - started < 10
        two = gzip.compress(b"one ") + gzip.compress(b"two")  # multi-member: both kept
        r = httpx.post(url, params={"path": "/tmp/two"}, content=two, timeout=60,
                       headers={**headers, "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
        assert r.status_code == 200, r.text
        assert httpx.get(url, params={"path": "/tmp/two"}, headers=headers).content == b"one two"
        host, port = env.url.split("//", 1)[1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:  # declares 1 TiB, sends nothing
            sock.sendall((f"POST /e2b/envd/files HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {box}\r\n"
                          f"X-Access-Token: {token}\r\nContent-Type: multipart/form-data; boundary=x\r\n"
                          f"Content-Length: {2**40}\r\n\r\n").encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    finally:
        e2b_kill(env, box)


def test_envd_refuses_other_boxes_tokens_and_bad_signatures(env: Env) -> None:
    a, token_a = e2b_box(env)
    b, _token_b = e2b_box(env)
    try:
        rpc = "/e2b/envd/process.Process/List"
        ok = httpx.post(env.url + rpc, headers=envd(env, a, token_a), json={})
        assert ok.status_code == 200, ok.text
        for headers in (envd(env, b, token_a), envd(env, b, None), envd(env, b, "x" * 40)):
            r = httpx.post(env.url + rpc, headers=headers, json={})
            assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        files = f"{env.url}/e2b/envd/files"
        for params in ({"path": "/etc/hostname", "signature": "v1_bad"},
                       {"path": "/etc/hostname", "signature": "v1_bad", "signature_expiration": "\u00b2"}):
            r = httpx.get(files, params=params, headers=envd(env, a, None))
            assert r.status_code == 401, r.text
        r = httpx.get(files, params={"path": "/etc/hostname"}, headers=envd(env, b, token_a))
        assert r.status_code == 401
        r = httpx.post(env.url + rpc, headers={**envd(env, a, None), "E2b-Sandbox-Port": "8080"}, json={})
        assert r.status_code == 401  # no token: nothing said of the box's ports
        r = httpx.post(env.url + rpc, headers={**envd(env, a, token_a), "E2b-Sandbox-Port": "8080"}, json={})
        assert r.status_code == 502 and "port is not open" in r.json()["message"]
        latin = {**{k.encode(): v.encode() for k, v in envd(env, a, token_a).items()},
                 b"Authorization": "Basic \u00e9".encode("latin-1")}
        r = httpx.post(env.url + rpc, headers=latin, json={})
        assert r.status_code == 400
    finally:
        for box in (a, b):
            e2b_kill(env, box)


def test_control_plane_bad_input_is_a_typed_error(env: Env) -> None:
    api, key = f"{env.url}/e2b", {"X-API-KEY": env.server.e2b_key()}
    for token in ("%C2%B2", "9" * 5000, "-1", "5"):
        r = httpx.get(f"{api}/v2/sandboxes?nextToken={token}", headers=key)
        assert r.status_code == 400, (token, r.status_code)
    for limit in ("%C2%B2", "9" * 5000):
        assert httpx.get(f"{api}/v2/sandboxes?limit={limit}", headers=key).status_code == 400
    deep = b"[" * 100_000 + b"]" * 100_000
    r = httpx.post(f"{api}/sandboxes", headers={**key, "Content-Type": "application/json"}, content=deep)
    assert r.status_code == 400 and r.json()["code"] == 400
    bad_networks: tuple[object, ...] = ({"allowOut": 5}, {"rules": {"example.test": "x"}}, {"egressProxy": {"url": "x"}}, 5,
                                        {"denyOut": ["example.test"]},
                                        {"rules": {"example.test": [{"transform": {"headers": {"Host": "x"}}}]}},
                                        {"rules": {"bad domain": [{"transform": {"headers": {"A": "b"}}}]}})
    for network in bad_networks:
        r = httpx.post(f"{api}/sandboxes", headers=key, json={"templateID": "base", "network": network})
        assert r.status_code == 400, (network, r.text)
    r = httpx.post(f"{env.url}/e2b/envd/process.Process/List", content=deep,
                   headers={"E2b-Sandbox-Id": "x", "Content-Type": "application/json"})
    assert r.status_code == 401  # no token: refused before the body is read, whatever box it names


def test_no_internet_but_an_allow_list(env: Env, internet: Internet) -> None:
    box, _token = e2b_box(env, allow_internet_access=False, network={"allowOut": ["example.test"]})
    try:
        info = httpx.get(f"{env.url}/e2b/sandboxes/{box}", headers={"X-API-KEY": env.server.e2b_key()}).json()
        assert info["allowInternetAccess"] is False and info["network"]["allowOut"] == ["example.test"]
        hutch_box = Sandbox.connect(box)
        curl = "curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "
        assert hutch_box.commands.run(curl + "http://example.test/").stdout == "200"
        other = hutch_box.commands.run(curl + "http://other.test/")
        assert other.stdout != "200"
    finally:
        e2b_kill(env, box)


def test_update_network_denies_a_host_mid_session_and_clears_the_rules(env: Env, internet: Internet) -> None:
    out = run_client(env, "2.63.0", "network", "sync")
    assert out["before"] == "200"
    assert out["denied"] != "200" and out["info_denied"]["allow_out"] == ["other.test"]
    # deny rules are addresses, as E2B's: a typed 400 (the SDK's InvalidArgument or plain SandboxException), never a 500
    assert out["domain_deny"] in ("InvalidArgumentException", "SandboxException")
    assert out["cleared"] == "200", "what the update leaves out is cleared"
    assert out["proxy"] in ("InvalidArgumentException", "SandboxException"), "a BYO egress proxy is declined"
    assert out["gone"].startswith("SandboxNotFoundException")


def test_e2b_secrets_are_set_in_headers_by_the_egress_proxy_never_held_by_the_box(env: Env,
                                                                                  internet: Internet) -> None:
    tag = secrets.token_hex(4)
    out = run_client(env, "2.63.0", "secrets", "sync", tag)
    assert out["created"] == {"id_set": True, "name": f"key-{tag}", "version": 1, "metadata": {"tag": tag}}
    assert out["exists"] == [True, True, False] and out["duplicate"] != "none" and out["listed"] is True
    assert out["updated"] == {"version": 2, "metadata": {"tag": tag, "v": "2"}} and out["info"] == f"key-{tag}"
    rules = out["rules_info"]["rules"]["example.test"][0]["transform"]["headers"]
    assert rules == {"Authorization": f"Bearer ${{e2b.secrets.key-{tag}}}", "X-Plain": "literal"}
    assert out["env_has_value"] is False
    assert out["https"] == "200" and out["other_host"] == "200" and out["after_clear"] == "200"
    seen = {r["path"]: r["headers"] for r in internet.seen()}
    ruled = seen[f"/rule-{tag}"]
    assert ruled["authorization"] == "Bearer the-secret-value", "the proxy set the header, over the box's own"
    assert ruled["x-plain"] == "literal"
    assert seen[f"/clear-{tag}"].get("authorization") is None, "rules cleared by update_network"
    assert "authorization" not in seen[f"/other-{tag}"], "only the rule's domain gets the header"
    assert out["iam"] != "none", "IAM tokens are declined"
    assert out["destroyed"] == [True, False] and out["gone"] == "SecretNotFoundException"
    # a hutch secret with hosts of its own goes to those only, whatever a rule names
    Secret.create(f"hosted-{tag}", "hosted-value", allowed_hosts=["api.example.test"])
    try:
        api, key = f"{env.url}/e2b", {"X-API-KEY": env.server.e2b_key()}
        elsewhere = {"other.test": [{"transform": {"headers": {"X": f"${{e2b.secrets.hosted-{tag}}}"}}}]}
        r = httpx.post(f"{api}/sandboxes", headers=key, json={"templateID": "base", "network": {"rules": elsewhere}})
        assert r.status_code == 400 and "api.example.test" in r.json()["message"], r.text
    finally:
        Secret.delete_by_name(f"hosted-{tag}")
    store = env.server.store()
    team = store.team_for_api_key(env.server.e2b_key())
    assert team is not None
    audit = store.secret_audit(team, f"key-{tag}", 10)
    assert [(a.host, a.path) for a in audit] == [("example.test", f"/rule-{tag}")], "the use is audited"


def test_logs_refreshes_and_many_boxes_metrics(env: Env) -> None:
    api, key = f"{env.url}/e2b", {"X-API-KEY": env.server.e2b_key()}
    box, _token = e2b_box(env)
    try:
        hutch_box = Sandbox.connect(box)
        hutch_box.commands.run("echo logged")
        hutch_box.commands.run("exit 3")
        v2 = httpx.get(f"{api}/v2/sandboxes/{box}/logs", headers=key).json()["logs"]
        messages = [e["message"] for e in v2]
        assert any("echo logged" in m for m in messages) and any("exit 3" in m and "(exit 3)" in m for m in messages)
        assert all({"timestamp", "level", "message", "fields"} <= set(e) for e in v2)
        backward = httpx.get(f"{api}/v2/sandboxes/{box}/logs", params={"direction": "backward", "limit": 1},
                             headers=key).json()["logs"]
        assert len(backward) == 1 and "exit 3" in backward[0]["message"], "newest first, one entry"
        v1 = httpx.get(f"{api}/sandboxes/{box}/logs", headers=key).json()
        assert [e["line"] for e in v1["logs"]] == [e["message"] for e in v1["logEntries"]] == messages
        assert httpx.get(f"{api}/v2/sandboxes/{box}/logs", params={"level": "loud"}, headers=key).status_code == 400
        assert httpx.get(f"{api}/v2/sandboxes/nope/logs", headers=key).status_code == 404

        before = httpx.get(f"{api}/sandboxes/{box}", headers=key).json()["endAt"]
        assert httpx.post(f"{api}/sandboxes/{box}/refreshes", json={"duration": 3600}, headers=key).status_code == 204
        assert httpx.get(f"{api}/sandboxes/{box}", headers=key).json()["endAt"] > before, "kept alive longer"
        assert httpx.post(f"{api}/sandboxes/{box}/refreshes", json={"duration": 99999}, headers=key).status_code == 400

        def sampled() -> bool:
            got = httpx.get(f"{api}/sandboxes/metrics", params={"sandbox_ids": f"{box},nope"}, headers=key).json()
            return box in got["sandboxes"] and "nope" not in got["sandboxes"]

        wait_for(sampled, timeout=30, what="the box's first sample")
        assert httpx.get(f"{api}/sandboxes/metrics", headers=key).status_code == 400
    finally:
        e2b_kill(env, box)


def connect_frames(*messages: dict[str, Any]) -> bytes:
    return b"".join(struct.pack(">BI", 0, len(m)) + m for m in (json.dumps(x).encode() for x in messages))


def test_connect_streams_limits_and_keepalives(env: Env) -> None:
    box, token = e2b_box(env)
    stream = {**envd(env, box, token), "Content-Type": "application/connect+json"}
    try:
        proc = Sandbox.connect(box).commands.spawn("cat > /tmp/in")
        chunk = {"event": {"data": {"input": {"stdin": base64.b64encode(b"x" * 2**19).decode()}}}}
        body = connect_frames({"event": {"start": {"process": {"pid": proc.pid}}}}, *[chunk] * 4)
        r = httpx.post(f"{env.url}/e2b/envd/process.Process/StreamInput", headers=stream, content=body, timeout=60)
        assert r.status_code == 200, r.text[:300]  # 2.7 MiB: past hutch's 1 MiB JSON limit
        # a unary call past the limit: Connect's error, with a string code
        r = httpx.post(f"{env.url}/e2b/envd/process.Process/List", headers=envd(env, box, token),
                       content=b"{" + b" " * 2**21 + b"}", timeout=60)
        assert r.status_code in (413, 429) and r.json()["code"] == "resource_exhausted"
        for size in ({"rows": 0, "cols": 80}, {"rows": 10**9, "cols": 80}):  # checked as Start checks them
            r = httpx.post(f"{env.url}/e2b/envd/process.Process/Update", headers=envd(env, box, token),
                           json={"process": {"pid": proc.pid}, "pty": {"size": size}})
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
        two = connect_frames({"process": {"pid": proc.pid}}, {"process": {"pid": proc.pid}})
        r = httpx.post(f"{env.url}/e2b/envd/process.Process/Connect", headers=stream, content=two, timeout=60)
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
        one = connect_frames({"process": {"pid": proc.pid}})
        frames = 0
        with httpx.stream("POST", f"{env.url}/e2b/envd/process.Process/Connect", content=one, timeout=10,
                          headers={**stream, "Keepalive-Ping-Interval": "0.001"}) as resp:
            assert resp.status_code == 200
            begun = time.monotonic()
            for _ in resp.iter_raw():
                frames += 1
                if time.monotonic() - begun > 2.5:
                    break
        assert frames < 20  # held to one a second, not a thousand
    finally:
        e2b_kill(env, box)


def test_watchers_are_capped_per_box(env: Env) -> None:
    box, token = e2b_box(env)
    other, other_token = e2b_box(env)
    rpc = f"{env.url}/e2b/envd/filesystem.Filesystem/CreateWatcher"
    try:
        for _ in range(32):
            r = httpx.post(rpc, headers=envd(env, box, token), json={"path": "/tmp"}, timeout=30)
            assert r.status_code == 200, r.text
        r = httpx.post(rpc, headers=envd(env, box, token), json={"path": "/tmp"}, timeout=30)
        assert r.status_code == 429 and r.json()["code"] == "resource_exhausted"
        r = httpx.post(rpc, headers=envd(env, other, other_token), json={"path": "/tmp"}, timeout=30)
        assert r.status_code == 200  # another box is not blocked
    finally:
        for b in (box, other):
            e2b_kill(env, b)


def test_pages_follow_a_cursor(env: Env) -> None:
    api, key = f"{env.url}/e2b", {"X-API-KEY": env.server.e2b_key()}
    tag = secrets.token_hex(4)
    made = [e2b_box(env, metadata={"page": tag})[0] for _ in range(3)]
    try:
        query = f"{api}/v2/sandboxes?metadata=page%3D{tag}&limit=2"
        first = httpx.get(query, headers=key)
        token = first.headers["x-next-token"]
        made.append(e2b_box(env, metadata={"page": tag})[0])  # a newer box between the pages
        second = httpx.get(f"{query}&nextToken={token}", headers=key)
        assert "x-next-token" not in second.headers
        seen = [b["sandboxID"] for b in first.json() + second.json()]
        assert seen == made[2::-1]  # newest first, each once, the one made later not on page two
    finally:
        for box in made:
            httpx.delete(f"{api}/sandboxes/{box}", headers=key)
