"""Templates end to end: builds in real gVisor build boxes (packages fetched through the egress
proxy from the stand-in internet), the layer cache, OCI images made by the test, start commands
with readiness probes, the VM shape, and every refusal."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hutch import (
    AsyncTemplate,
    BuildError,
    ConflictError,
    EnvStep,
    NotFoundError,
    RunStep,
    Sandbox,
    SandboxError,
    Template,
    UserStep,
    ValidationError,
    WorkdirStep,
)
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.internet import Internet
from tests.integration.oci_image import FIFO, IMAGE_ENV, IMAGE_WORKDIR, REMOVED, make_busybox_image, needs_image_tools
from tests.integration.support import HUTCH, Env, Server

# Long (each run step is a gVisor build box): only `scripts/test --full` runs them, as it does the fleet
pytestmark = pytest.mark.slow

_seq = iter(range(10**6))


def unique(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_seq)}"


def make_deb(dest: Path) -> str:
    """A real Debian package (dpkg-deb) holding /usr/bin/hutch-hello; its file name."""
    root = dest / "deb"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "DEBIAN/control").write_text("Package: hutch-hello\nVersion: 1.0\nArchitecture: all\n"
                                          "Maintainer: hutch tests <tests@example.test>\nDescription: a test package\n")
    tool = root / "usr/bin/hutch-hello"
    tool.write_text("#!/bin/sh\necho hello from a deb\n")
    tool.chmod(0o755)
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(dest / "hutch-hello.deb")],
                   check=True, capture_output=True)
    return "hutch-hello.deb"


def make_wheel(dest: Path) -> str:
    """A pure-Python wheel, written by hand (no build tools, no index): its file name."""
    name = "hutchdemo-1.0-py3-none-any.whl"
    files = {
        "hutchdemo/__init__.py": b'GREETING = "hello from a wheel"\n',
        "hutchdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: hutchdemo\nVersion: 1.0\n",
        "hutchdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hutch-tests\nRoot-Is-Purelib: true\n"
                                         b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("hutchdemo-1.0.dist-info/RECORD,,")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr("hutchdemo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    (dest / name).write_bytes(buf.getvalue())
    return name


def build(template: Template) -> list[str]:
    """Wait for the template's build and return its log's texts; a failure raises BuildError."""
    lines: list[str] = []
    template.wait_until_ready(timeout_seconds=600, on_log=lambda line: lines.append(line.text or ""))
    return lines


def test_packages_through_egress_defaults_and_the_cache(env: Env, internet: Internet) -> None:
    deb, wheel = make_deb(internet.files), make_wheel(internet.files)
    steps: list[Any] = [
        RunStep(run=f"curl -fsS -o /tmp/p.deb http://example.test/files/{deb} && dpkg -i /tmp/p.deb && rm /etc/motd"),
        RunStep(run=f"pip install --no-index --break-system-packages http://example.test/files/{wheel}"),
        EnvStep(key="APP_MODE", value="from-template"),
        WorkdirStep(workdir="/app"),
        UserStep(name="user"),
        RunStep(run="echo \"$APP_MODE by $(id -un) in $(pwd)\" > made-by.txt"),
    ]
    name = unique("pkgs")
    template = Template.create(name, steps=steps)
    assert template.status == "building"  # create answers before the build ends
    log = build(template)
    assert any("Setting up hutch-hello" in line for line in log), log
    assert not any("(cached" in line for line in log)
    info = Template.get(name).info
    assert info.status == "ready" and info.env == {"APP_MODE": "from-template"}
    assert (info.workdir, info.user) == ("/app", "user")
    # the packages came through the egress proxy, from the stand-in internet
    fetched = {entry["path"] for entry in internet.seen()}
    assert f"/files/{deb}" in fetched and f"/files/{wheel}" in fetched

    sb = Sandbox.create("from-template", from_template=template)
    try:
        r = sb.commands.run("hutch-hello; python3 -c 'import hutchdemo; print(hutchdemo.GREETING)'; "
                            "id -un; pwd; echo $APP_MODE; cat made-by.txt; test -e /etc/motd || echo motd-gone")
        assert r.stdout.split("\n")[:7] == ["hello from a deb", "hello from a wheel", "user", "/app",
                                            "from-template", "from-template by user in /app", "motd-gone"]
        # the caller's own env and cwd win over the template's
        r = sb.commands.run("echo $APP_MODE; pwd", env={"APP_MODE": "mine"}, cwd="/tmp")
        assert r.stdout == "mine\n/tmp\n"
        assert sb.commands.run("id -un", user="root").stdout == "root\n"
    finally:
        sb.kill()

    # a rebuild runs nothing again; the same steps with a new last one run only that one
    build_info = template.rebuild()
    log = build(template)
    assert template.get_build(build_info.id).steps_cached == 4  # 4 run steps (the workdir is one)
    assert sum("(cached" in line for line in log) == 4
    changed = Template.create(unique("pkgs2"), steps=[*steps[:-1], RunStep(run="echo changed > changed.txt")])
    log = build(changed)
    assert sum("(cached" in line for line in log) == 3, log
    assert changed.latest_build is not None and changed.latest_build.steps_cached == 3
    sb = Sandbox.create("changed", from_template=changed.name)
    try:
        assert sb.commands.run("cat changed.txt; hutch-hello; test -e made-by.txt || echo no-old-step").stdout == \
            "changed\nhello from a deb\nno-old-step\n"
    finally:
        sb.kill()
    for t in (template, changed):
        t.delete()
    with pytest.raises(NotFoundError):
        Template.get(name)


def test_a_no_cache_rebuild_refreshes_the_cache(env: Env) -> None:
    template = Template.create(unique("stamp"), steps=[RunStep(run="date +%s%N > /stamp")])
    build(template)

    def stamp() -> str:
        sb = Sandbox.create("stamp", from_template=template.name)
        try:
            return str(sb.commands.run("cat /stamp").stdout)
        finally:
            sb.kill()

    first = stamp()
    template.rebuild()
    build(template)
    assert stamp() == first  # from the cache
    template.rebuild(no_cache=True)
    log = build(template)
    assert not any("(cached" in line for line in log)
    fresh = stamp()
    assert fresh != first
    template.rebuild()
    build(template)
    assert stamp() == fresh  # the no-cache build's layer is the cache's now
    template.delete()


def test_a_failing_step_names_itself(env: Env) -> None:
    template = Template.create(unique("fails"), steps=[RunStep(run="echo first"),
                                                       RunStep(run="echo going wrong >&2; exit 3"),
                                                       RunStep(run="echo never")])
    with pytest.raises(BuildError) as caught:
        build(template)
    err = caught.value
    assert (err.code, err.step, err.exit_code) == ("step_failed", 1, 3)
    lines = list(template.stream_build_logs(follow=False))
    assert any(line.stream == "stderr" and line.text == "going wrong" and line.step == 1 for line in lines)
    assert not any(line.text == "never" for line in lines)
    assert Template.get(template.id).status == "failed"
    with pytest.raises(ConflictError) as not_ready:
        Sandbox.create("x", from_template=template.name)
    assert not_ready.value.code == "template_not_ready"
    template.delete()


@pytest.mark.parametrize("fmt", ["docker-archive", "oci-archive", "oci"])
def test_an_oci_image_made_here(env: Env, fmt: Any) -> None:
    needs_image_tools()
    source = make_busybox_image(env.server.image_dir / unique(fmt), fmt)
    template = Template.create(unique("img"), from_=source,
                               steps=[RunStep(run="echo built-on-busybox > /built && rm /etc/hello.d 2>/dev/null; true")])
    log = build(template)
    assert any("unpacking" in line or "(cached)" in line for line in log), log
    info = Template.get(template.name).info
    assert info.env == IMAGE_ENV and info.workdir == IMAGE_WORKDIR
    sb = Sandbox.create("img", from_template=template)
    try:
        r = sb.commands.run(f"cat /built /etc/hello; test -e {REMOVED} && echo whiteout-ignored; echo $FOO; pwd")
        assert r.stdout.startswith("built-on-busybox\n"), r
        assert "whiteout-ignored" not in r.stdout
        assert r.stdout.endswith(f"{IMAGE_ENV['FOO']}\n{IMAGE_WORKDIR}\n")
        assert sb.commands.run("busybox | head -1").stdout.startswith("BusyBox")
    finally:
        sb.kill()
    template.delete()


def special_files(root: Path) -> list[str]:
    """Every socket, FIFO and device node under `root` but overlayfs whiteouts, links not followed."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISSOCK(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISBLK(st.st_mode) or \
                    (stat.S_ISCHR(st.st_mode) and st.st_rdev != 0):
                found.append(os.path.join(dirpath, name))
    return found


def test_a_step_that_binds_a_socket_or_makes_a_fifo_leaves_neither_in_the_root_or_its_layer(env: Env) -> None:
    """With runsc's --host-uds a socket a build box binds in its root is a real host socket; the
    layer and the root hold none. gVisor refuses the device node outright, and keeps the FIFO in
    the box (runsc makes no host FIFO without --host-fifo): none reaches the host either way."""
    marker = unique("specials")
    template = Template.create(unique("specials"), steps=[RunStep(run=(
        f": {marker}; mkdir -p /srv/run && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/srv/run/app.sock')\""
        " && mkfifo /srv/run/pipe && echo kept > /srv/run/file && (mknod /srv/run/null c 1 3 || echo no-mknod)"
        " && test -S /srv/run/app.sock && test -p /srv/run/pipe && echo made-both"))])
    log = build(template)
    assert "made-both" in log and "no-mknod" in log, log
    record = env.server.store().get_template(template.id)
    assert record is not None and record.rootfs is not None
    root = Path(record.rootfs)
    assert (root / "srv/run/file").read_text() == "kept\n"
    assert special_files(root) == []
    assert any("dropped socket /srv/run/app.sock" in line for line in log), log
    # the layer in the cache: the rebuild takes it from there and names it
    template.rebuild()
    found = re.search(r"\(cached: layer ([0-9a-f]{12})\)", "\n".join(build(template)))
    assert found is not None
    [layer] = [d for d in (DEFAULT_CACHE_DIR / "layers").glob(f"{found.group(1)}*") if "." not in d.name]
    assert (layer / "srv/run/file").exists() and special_files(layer) == []
    sb = Sandbox.create("specials", from_template=template)
    try:
        assert sb.commands.run("ls -A /srv/run").stdout == "file\n"
    finally:
        sb.kill()
    template.delete()


def test_an_image_with_device_nodes_and_a_fifo_builds_a_root_without_them(env: Env) -> None:
    needs_image_tools()
    source = make_busybox_image(env.server.image_dir / unique("specials"), "oci-archive", specials=True)
    template = Template.create(unique("img-specials"), from_=source)
    log = build(template)
    assert any("creating empty file in place of device 1:3" in line for line in log), log
    assert any(f"dropped FIFO {FIFO}" in line for line in log), log
    record = env.server.store().get_template(template.id)
    assert record is not None and record.rootfs is not None
    assert special_files(Path(record.rootfs)) == [] and (Path(record.rootfs) / "etc/hello").exists()
    template.delete()


def test_image_sources_that_are_not_there_or_not_allowed(env: Env, tmp_path: Path) -> None:
    needs_image_tools()
    gone = Template.create(unique("gone"), from_=f"docker-archive:{env.server.image_dir}/nothing-here.tar")
    with pytest.raises(BuildError) as caught:
        build(gone)
    assert caught.value.code == "image_not_found"
    gone.delete()
    # outside the server's image directories: refused before anything is stored
    source = make_busybox_image(tmp_path / "img", "oci-archive")
    before = {t.name for t in Template.list()}
    for bad in (source, "oci-archive:relative/path.tar", "docker://registry.example.test/busybox:latest"):
        with pytest.raises(ValidationError) as refused:
            Template.create(unique("outside"), from_=bad)
        assert refused.value.code == "invalid_spec"
    assert {t.name for t in Template.list()} == before


def test_start_command_and_readiness(env: Env) -> None:
    template = Template.create(
        unique("web"),
        steps=[RunStep(run="mkdir -p /srv/www && echo served > /srv/www/index.html")],
        # slow to come up: the probe must wait for it, and create must not answer before it passes
        start_cmd="sleep 1 && cd /srv/www && exec python3 -m http.server 8080",
        ready_cmd="curl -sf http://127.0.0.1:8080/",
        ready_timeout_seconds=60,
    )
    log = build(template)
    assert any(line.startswith("ready (probe passed") for line in log), log
    sb = Sandbox.create("web", from_template=template)
    try:
        assert sb.commands.run("curl -s http://127.0.0.1:8080/index.html").stdout == "served\n"
        procs = sb.commands.list()
        assert any("http.server" in p.command for p in procs)
        sb.pause()
        sb.resume()
        assert sb.commands.run("curl -s http://127.0.0.1:8080/index.html").stdout == "served\n"
    finally:
        sb.kill()
    template.delete()

    never = Template.create(unique("never"), ready_cmd="test -e /never", ready_timeout_seconds=2)
    with pytest.raises(BuildError) as caught:
        build(never)
    assert caught.value.code == "ready_timeout"
    dies = Template.create(unique("dies"), start_cmd="exit 7", ready_cmd="false", ready_timeout_seconds=30)
    with pytest.raises(BuildError) as died:
        build(dies)
    assert died.value.code == "start_failed" and "code 7" in died.value.message
    never.delete()
    dies.delete()


FILL = """python3 -c "
import errno, sys
n = 0
try:
    with open(sys.argv[1], 'wb') as f:
        while True:
            f.write(b'x' * 2**20); f.flush(); n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno])
" """


def test_disk_is_the_templates_in_boxes_and_builds(env: Env) -> None:
    template = Template.create(unique("disk"), disk_mib=1024)
    build(template)
    sb = Sandbox.create("disk", from_template=template)
    try:
        mib, why = sb.commands.run(FILL + "/big", user="root", timeout_seconds=300).stdout.split()
        assert why == "ENOSPC" and 900 <= int(mib) <= 1024, (mib, why)
        assert sb.commands.run("echo still here").stdout == "still here\n"  # the box runs on
        # programs the box writes to its disk run
        assert sb.commands.run("rm /big && cp /bin/echo /usr/local/bin/e && /usr/local/bin/e ran", user="root").stdout \
            == "ran\n"
        sb.commands.run("head -c 50000000 /dev/urandom > /keep && sha256sum /keep > /keep.sum", user="root")
        sb.pause()
        sb.resume()
        assert sb.commands.run("sha256sum -c /keep.sum").stdout == "/keep: OK\n"  # kept across the pause
        mib, why = sb.commands.run(FILL + "/big", user="root", timeout_seconds=300).stdout.split()
        assert why == "ENOSPC" and int(mib) <= 1024 - 47, (mib, why)  # and still capped, the kept file counted
    finally:
        sb.kill()
    # a build step that writes past the template's disk fails, and leaves nothing on the host
    greedy = Template.create(unique("greedy"), disk_mib=1024, steps=[RunStep(run=FILL + "/big && exit 1")])
    with pytest.raises(BuildError) as caught:
        build(greedy)
    assert caught.value.code == "step_failed"
    assert any("ENOSPC" in line.text for line in greedy.stream_build_logs(follow=False))
    assert not (env.server.data_dir / "disks" / f"{sb.id}.img").exists()  # the killed box's disk is gone
    assert not list((DEFAULT_CACHE_DIR / "layers").glob("*.partial-*"))  # and the step's
    attached = subprocess.run(["losetup", "--list", "--noheadings", "--output", "BACK-FILE"], capture_output=True,
                              text=True).stdout
    assert sb.id not in attached and ".partial-" not in attached
    template.delete()
    greedy.delete()


def test_shape_is_the_templates(env: Env) -> None:
    template = Template.create(unique("shape"), vcpu=2, memory_mib=512, disk_mib=2048)
    build(template)
    info = Template.get(template.name).info
    assert (info.vcpu, info.memory_mib, info.disk_mib) == (2, 512, 2048)
    sb = Sandbox.create("shaped", from_template=template)
    try:
        box = sb.get_info()
        assert (box.vcpu_count, box.memory_mib) == (2, 512)
        total_kib = int(sb.commands.run("awk '/MemTotal/ {print $2}' /proc/meminfo").stdout)
        assert total_kib <= 512 * 1024
        # more memory than the template allows is not handed out: the command or the box dies
        try:
            r = sb.commands.run("python3 -c 'x = bytearray(900 * 2**20); print(\"allocated\")'", timeout_seconds=60)
            assert "allocated" not in r.stdout
        except SandboxError:
            assert sb.get_info().status == "failed"
    finally:
        sb.kill()
    template.delete()
    for field, value in (("vcpu", 5), ("vcpu", 0), ("memory_mib", 128), ("memory_mib", 8192), ("disk_mib", 512),
                         ("disk_mib", 9000)):
        shape: dict[str, Any] = {field: value}
        with pytest.raises(ValidationError):  # the SDK refuses before sending
            Template.create(unique("bad"), **shape)
        with env.api() as c:  # and so does the server
            refused = c.post("/v1/templates", json={"name": unique("bad"), **shape})
            assert refused.status_code == 400, refused.text


def test_bad_specs_change_nothing(env: Env) -> None:
    failed = Template.create(unique("broken"), steps=[RunStep(run="exit 1")])
    with pytest.raises(BuildError):
        build(failed)
    bad_bodies: list[dict[str, Any]] = [
        {"name": "two/slashes"},
        {"name": "hutch"},  # fine name, but:
        {"name": "x", "steps": [{"run": "true", "workdir": "/x"}]},  # a step with two keys
        {"name": "x", "steps": [{"workdir": "relative"}]},
        {"name": "x", "steps": [{"workdir": "/a/../b"}]},
        {"name": "x", "steps": [{"user": {"name": "nobody"}}]},
        {"name": "x", "steps": [{"env": {"key": "1BAD", "value": "v"}}]},
        {"name": "x", "steps": [{"run": "a\x00b"}]},
        {"name": "x", "steps": [{"run": f"echo {i}"} for i in range(61)]},
        {"name": "x", "from": "no-such-template"},
        {"name": "x", "from": failed.name},
        {"name": "x", "ready_timeout_seconds": 0},
        {"name": "x", "unknown": 1},
    ]
    with env.api() as c:
        before = c.get("/v1/templates").json()
        for body in bad_bodies[2:]:
            r = c.post("/v1/templates", json=body)
            assert 400 <= r.status_code < 500, (body, r.text)
            assert r.json()["error"]["code"], r.text
        assert c.post("/v1/templates", json=bad_bodies[0]).status_code == 400
        assert c.get("/v1/templates").json() == before
        assert c.post("/v1/templates", json={"name": "x", "from": "no-such-template"}).json()["error"]["code"] == \
            "template_not_found"
        assert c.post("/v1/templates", json={"name": "x", "from": failed.name}).json()["error"]["code"] == \
            "template_not_ready"
    failed.delete()


def test_delete_build_history_cancel_and_other_teams(env: Env) -> None:
    template = Template.create(unique("life"))
    build(template)
    with pytest.raises(ConflictError) as taken:
        Template.create(template.name)
    assert taken.value.code == "template_exists"
    sb = Sandbox.create("user-of-template", from_template=template.id)  # by id
    try:
        with pytest.raises(ConflictError) as in_use:
            template.delete()
        assert in_use.value.code == "template_in_use"
        sb.pause()  # a paused box still needs its template's root
        with pytest.raises(ConflictError):
            template.delete()
    finally:
        sb.kill()
    # another team sees nothing of it
    with pytest.raises(NotFoundError):
        Template.get(template.name, api_key=env.key_b)
    assert template.name not in {t.name for t in Template.list(api_key=env.key_b)}
    with pytest.raises(NotFoundError):
        Sandbox.create("theirs", from_template=template.name, api_key=env.key_b)
    # the system template is everyone's, and nobody's to delete
    base = next(t for t in Template.list() if t.name == "hutch/base")
    assert base.info.system and base.status == "ready"
    with pytest.raises(ConflictError) as system:
        Template.delete_by_name(base.id)
    assert system.value.code == "system_template"

    # a long step, cancelled: the build says so, and no build box is left
    slow = template.rebuild()
    assert slow.status in ("queued", "running")
    sleeper = Template.create(unique("sleeper"), steps=[RunStep(run="echo started; sleep 300")])
    for line in sleeper.stream_build_logs():
        if line.text == "started":
            break
    cancelled = sleeper.cancel_build()
    assert cancelled.status == "cancelled"
    with pytest.raises(BuildError) as caught:
        sleeper.wait_until_ready()
    assert caught.value.code == "cancelled"
    boxes_dir = env.server.config.run_dir / "boxes"  # where the node keeps boxes
    assert boxes_dir.is_dir() and not list(boxes_dir.glob("build-*"))
    with pytest.raises(ConflictError):
        sleeper.cancel_build(cancelled.id)  # it has ended
    build(template)
    assert [b.status for b in template.list_builds()] == ["ready", "ready"]
    template.delete()
    sleeper.delete()
    with pytest.raises(NotFoundError):
        Sandbox.create("gone", from_template=template.name)


def test_a_build_box_reaches_only_the_internet(env: Env, internet: Internet) -> None:
    """Private ranges, metadata and the host are refused to a build box as to any box; the build
    log tells each connection."""
    template = Template.create(unique("net"), steps=[RunStep(
        run="for u in http://private.example.test/ http://metadata.example.test/ http://198.51.100.1/ "
            "http://example.test/ok; do curl -s -o /dev/null -w '%{http_code}\\n' --max-time 10 $u; done")])
    log = build(template)
    outputs = [line for line in log if line.isdigit()]
    assert outputs[-1] == "200" and all(code != "200" for code in outputs[:3]), log
    assert any(line.startswith("egress denied: private.example.test") for line in log), log
    assert any(line.startswith("egress allowed: example.test") for line in log), log
    template.delete()


def test_async_template(env: Env) -> None:
    import asyncio

    async def main() -> tuple[list[str], str]:
        t = await AsyncTemplate.create(unique("async"), steps=[RunStep(run="echo from async")])
        texts = [line.text async for line in t.stream_build_logs() if line.text]
        await t.wait_until_ready()
        info = await AsyncTemplate.get(t.name)
        await t.delete()
        return texts, info.status

    texts, status = asyncio.run(main())
    assert "from async" in texts and status == "ready"


def test_cli_builds_with_live_logs(env: Env) -> None:
    name = unique("cli")
    out = subprocess.run([*HUTCH, "template", "create", name, "--run", "echo cli step", "--env", "K=V",
                          "--workdir", "/w", "--user", "root"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "cli step" in out.stderr
    listed = subprocess.run([*HUTCH, "--json", "template", "ls"], capture_output=True, text=True, check=True)
    mine = next(t for t in json.loads(listed.stdout) if t["name"] == name)
    assert (mine["env"], mine["workdir"], mine["user"]) == ({"K": "V"}, "/w", "root")
    bad = subprocess.run([*HUTCH, "template", "create", unique("clibad"), "--run", "exit 4"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1 and "exit code 4" in bad.stderr
    subprocess.run([*HUTCH, "template", "rm", name], check=True, capture_output=True)


def test_queued_builds_survive_a_restart(own_server: Server) -> None:
    key = own_server.admin_key()
    t = Template.create(unique("restart"), steps=[RunStep(run="sleep 3 && echo slept")], api_key=key,
                        base_url=own_server.url)
    for line in t.stream_build_logs():
        if line.text.startswith("step 1/1"):
            break
    own_server.stop()
    own_server.start()
    t.wait_until_ready(timeout_seconds=300)
    assert Template.get(t.name, api_key=key, base_url=own_server.url).status == "ready"
    seqs = [line.seq for line in t.stream_build_logs(follow=False)]
    assert seqs == sorted(set(seqs))  # the log went on where it was


def test_errors_are_typed(env: Env) -> None:
    with pytest.raises(NotFoundError) as caught:
        Template.get("no-such-template")
    assert caught.value.code == "template_not_found"
    with pytest.raises(SandboxError):
        Sandbox.create("x", from_template="no-such-template")
