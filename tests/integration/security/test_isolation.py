"""What a box cannot do: see the host's files, reach the host's network, be root other than the
API's root (the box user's sudo included), or take down the host or other boxes with a fork bomb
or a memory hog."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hutch import Sandbox, SandboxError
from hutch.guest import protocol
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Env, ok_or_failed


def test_host_files_are_not_visible(env: Env) -> None:
    marker = f"hutch-marker-{secrets.token_hex(8)}"
    host_files = [Path("/root") / marker, env.server.data_dir / marker, Path("/var/tmp") / marker]
    for f in host_files:
        f.write_text("host secret")
    sb = Sandbox.create(name="iso-files")
    try:
        for f in host_files:
            r = sb.commands.run(f"cat {f}", user="root")
            assert r.exit_code != 0 and "host secret" not in r.stdout
        r = sb.commands.run("grep -rl 'host secret' /root /var /home /tmp /etc 2>/dev/null; ls / /root", user="root")
        assert marker not in r.stdout and "host secret" not in r.stdout
        assert sb.commands.run(f"ls {env.server.data_dir}").exit_code != 0
        # the agent runs from its read-only mounts (its Python's runtime, or the compiled agent's directory)
        cmdline = sb.commands.run("cat /proc/1/cmdline | tr '\\0' ' '").stdout
        assert cmdline.startswith((f"{protocol.RUNTIME_DIR}/", f"{protocol.AGENT_BIN_DIR}/"))
    finally:
        sb.kill()
        for f in host_files:
            f.unlink()


def test_the_runtime_and_agent_mounts_are_read_only_and_the_channel_is_root_only() -> None:
    sb = Sandbox.create(name="iso-mounts")
    try:
        r = sb.commands.run("touch /.hutch/rt/usr/bin/evil; touch /.hutch/agent/evil; echo done", user="root")
        assert "Read-only file system" in r.stderr and r.stderr.count("touch:") == 2
        # root-only, so the box user's commands do not talk to the agent unless they use sudo (which
        # gives what user="root" gives: see test_the_user_is_root_only_through_sudo_and_that_root_is_the_apis)
        assert sb.commands.run("ls /.hutch/chan").exit_code != 0
        r = sb.commands.run("head -c 4194304 /dev/zero > /.hutch/chan/fill", user="root")
        assert r.exit_code != 0 and "No space left" in r.stderr, "root in the box cannot fill the host's disk"
        r = sb.commands.run("rm -f /.hutch/chan/fill; for i in $(seq 200); do touch /.hutch/chan/f$i || exit 1; done",
                            user="root")
        assert r.exit_code != 0 and "No space left" in r.stderr, "nor its inodes"
    finally:
        sb.kill()


def test_no_network_but_loopback_and_no_way_to_the_hosts_services(env: Env) -> None:
    sb = Sandbox.create(name="iso-net")
    try:
        r = sb.commands.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
        assert r.stdout.split() == ["lo"]
        port = env.server.port
        probe = ("import socket,sys\n"
                 f"s=socket.socket(); s.settimeout(3)\n"
                 f"try:\n    s.connect(('127.0.0.1', {port})); print('reached')\n"
                 "except OSError as e:\n    print('refused', e.errno)\n")
        sb.files.write("/tmp/probe.py", probe)
        assert sb.commands.run("python3 /tmp/probe.py").stdout.startswith("refused")
        assert httpx.get(f"{env.url}/health").status_code == 200  # the server is there, on the host's loopback
    finally:
        sb.kill()


def test_the_user_is_root_only_through_sudo_and_that_root_is_the_apis(env: Env) -> None:
    """The box user is not root, and no setuid program makes it root: gVisor grants nothing by exec
    (and the spec's noNewPrivileges keeps it so on a runsc that could). Its one way to root is
    `sudo`, the agent's service, which gives what the API's user="root" gives: so the root-only
    channel directory is no boundary against the box user (with sudo it lists it), and what must
    hold is the host's: that root still cannot mount, load a module, write the runtime's mounts, fill
    the host's disk through the channel or reach the host's services."""
    sb = Sandbox.create(name="iso-user")
    try:
        assert sb.commands.run("id -u").stdout == "1000\n"
        assert sb.commands.run("cat /etc/shadow").exit_code != 0
        assert "rws" in sb.commands.run("ls -l /bin/su").stdout  # setuid root, and still nothing
        r = sb.commands.run("echo | su -c 'id -u' root")
        assert r.exit_code != 0 and "0" not in r.stdout.split()
        assert sb.commands.run("sudo id -u").stdout == "0\n"
        assert sb.commands.run("sudo cat /etc/shadow").exit_code == 0
        assert sb.commands.run("sudo ls /.hutch/chan").stdout.split() == ["agent.sock", "egress.sock"]
        r = sb.commands.run("sudo mount -t tmpfs none /mnt; sudo mount --bind / /mnt")
        assert r.exit_code != 0 and sb.commands.run("grep -c ' /mnt ' /proc/mounts").stdout == "0\n"
        sb.files.write("/tmp/modules.py", "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                                          "print(libc.syscall(175, None, 0, b''), libc.syscall(313, -1, b'', 0))\n")
        assert sb.commands.run("sudo python3 /tmp/modules.py").stdout.split() == ["-1", "-1"]  # (f)init_module
        r = sb.commands.run("sudo touch /.hutch/rt/usr/bin/evil /.hutch/agent/evil")
        assert r.stderr.count("Read-only file system") == 2
        r = sb.commands.run("sudo sh -c 'head -c 4194304 /dev/zero > /.hutch/chan/fill'; sudo rm -f /.hutch/chan/fill")
        assert "No space left" in r.stderr, "root by sudo cannot fill the host's disk either"
        sb.files.write("/tmp/probe.py", "import socket\ns = socket.socket(); s.settimeout(3)\n"
                                        f"try:\n    s.connect(('127.0.0.1', {env.server.port})); print('reached')\n"
                                        "except OSError as e:\n    print('refused', e.errno)\n")
        assert sb.commands.run("sudo python3 /tmp/probe.py").stdout.startswith("refused")
    finally:
        sb.kill()


ATTACKS = {
    "fork bomb": "bomb() { bomb | bomb & }; bomb",
    "memory hog": "python3 -c \"x = bytearray(3 * 2**30); print('allocated', len(x))\"",  # 3 GiB, limit 1 GiB
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_on_resources_harms_only_its_own_box(env: Env, attack: str) -> None:
    bystander = Sandbox.create(name="bystander")
    attacker = Sandbox.create(name=attack)
    try:
        try:
            r = attacker.commands.run(ATTACKS[attack], timeout_seconds=60)
            assert "allocated" not in r.stdout, "more memory than the limit must not be handed out"
        except SandboxError:
            pass  # the box died under it, or the command timed out: both are fine endings
        assert ok_or_failed(attacker, timeout_seconds=30) in ("ok", "failed")
        assert bystander.commands.run("echo fine").stdout == "fine\n"
        assert httpx.get(f"{env.url}/health").status_code == 200
    finally:
        attacker.kill()
        bystander.kill()


def test_files_written_in_one_box_are_not_in_another() -> None:
    a = Sandbox.create(name="a")
    b = Sandbox.create(name="b")
    try:
        a.files.write("/home/user/only-a.txt", "a")
        a.commands.run("echo a > /tmp/a-tmp && echo a > /etc/a-etc", user="root")
        r = b.commands.run("ls /home/user/only-a.txt /tmp/a-tmp /etc/a-etc")
        assert r.exit_code != 0 and "only-a" not in r.stdout
    finally:
        a.kill()
        b.kill()


def test_writes_never_reach_the_template(env: Env) -> None:
    template_root = base_image.base_root_path(DEFAULT_CACHE_DIR)
    before = (template_root / "etc/debian_version").read_text()
    sb = Sandbox.create(name="tmpl")
    try:
        sb.commands.run("echo changed > /etc/debian_version && rm -f /bin/ls", user="root")
        assert sb.commands.run("cat /etc/debian_version").stdout == "changed\n"
        assert (template_root / "etc/debian_version").read_text() == before
        assert (template_root / "bin/ls").exists()
    finally:
        sb.kill()
    fresh = Sandbox.create(name="fresh")
    try:
        assert fresh.commands.run("cat /etc/debian_version").stdout.startswith("12.")
        assert fresh.commands.run("ls /").exit_code == 0
    finally:
        fresh.kill()


def test_a_link_planted_in_the_channel_cannot_redirect_the_host(env: Env) -> None:
    """Root in box A replaces its agent socket with a link to box B's socket on the host: the
    host must keep talking to A's own agent, never follow the link into B."""
    a = Sandbox.create(name="a")
    b = Sandbox.create(name="b")
    try:
        a.files.write("/tmp/who", "a")
        b.files.write("/tmp/who", "b")
        b_socket = env.server.box_dir(b.id) / "chan/agent.sock"  # by box key: where B's agent really listens
        assert b_socket.is_socket(), f"B's channel socket is not at {b_socket}: the link would dangle, proving nothing"
        r = a.commands.run(f"rm -f /.hutch/chan/agent.sock && ln -s {b_socket} /.hutch/chan/agent.sock && echo planted",
                           user="root")
        assert r.stdout == "planted\n"
        planted = env.server.box_dir(a.id) / "chan/agent.sock"  # as the host sees A's channel now
        assert planted.is_symlink() and planted.readlink() == b_socket and planted.resolve().is_socket()
        # several at once, so the server opens new connections rather than reuse a pooled one
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: a.commands.run("sleep 0.5; cat /tmp/who").stdout, range(4)))
        assert answers == ["a"] * 4
        assert a.files.read_text("/tmp/who") == "a"
    finally:
        a.kill()
        b.kill()
