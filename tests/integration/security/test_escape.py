"""The escape battery: what a hostile program in a box tries, each attempt an assertion that it
fails. Run as root in the box wherever that is the stronger attacker (root in a box is still
confined by gVisor). Resource attacks end with the box fine or cleanly failed, never the host,
the server or another box harmed. See SECURITY.md for the threat model."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import Sandbox, SandboxError
from tests.integration.support import Env, ok_or_failed


@pytest.fixture(scope="module")
def pair(env: Env) -> Iterator[tuple[Sandbox, Sandbox]]:
    a = Sandbox.create(name="attacker", api_key=env.key_a, base_url=env.url)
    b = Sandbox.create(name="victim", env_vars={"VICTIM_SECRET": "b-only"}, api_key=env.key_a, base_url=env.url)
    try:
        yield a, b
    finally:
        a.kill()
        b.kill()


def root(box: Sandbox, command: str) -> Any:
    return box.commands.run(command, user="root", timeout_seconds=60)


def py(box: Sandbox, code: str, user: str = "root") -> Any:
    name = f"/tmp/attempt-{secrets.token_hex(4)}.py"
    box.files.write(name, code)
    return box.commands.run(f"python3 {name}", user=user, timeout_seconds=60)


def test_host_files_the_data_dir_and_other_boxes_are_out_of_sight(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    a, b = pair
    marker = Path("/root") / f"hutch-escape-{secrets.token_hex(6)}"
    marker.write_text("host only")
    try:
        host_shadow = Path("/etc/shadow").read_text()
        for path in (marker, env.server.data_dir / "hutch.db", env.server.data_dir / "server.key", env.server.box_dir(b.id)):
            r = root(a, f"cat {path} || ls {path}")
            assert r.exit_code != 0 and "host only" not in r.stdout, path
        assert root(a, "cat /etc/shadow").stdout != host_shadow, "the box's /etc/shadow is the template's"
    finally:
        marker.unlink()


def test_another_boxs_channel_and_egress_sockets_cannot_be_dialled(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    a, b = pair
    b_chan = env.server.box_dir(b.id) / "chan"
    for sock in ("agent.sock", "egress.sock"):
        r = py(a, "import socket\ns = socket.socket(socket.AF_UNIX)\n"
                  f"try:\n    s.connect({str(b_chan / sock)!r}); print('connected')\n"
                  "except OSError as e:\n    print('refused', e.errno)\n")
        assert r.stdout.startswith("refused"), (sock, r.stdout)
    # a link in A's channel to B's egress socket leads nowhere either: links resolve inside the box
    r = root(a, f"ln -sf {b_chan}/egress.sock /tmp/b-egress && python3 -c \"import socket; s=socket.socket(socket.AF_UNIX);"
                " s.connect('/tmp/b-egress')\"")
    assert r.exit_code != 0


def test_no_card_no_raw_sockets_no_ping_no_link_local(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    a, _ = pair
    r = py(a, "import socket\nfor fam, kind, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),\n"
              "    (socket.AF_PACKET, socket.SOCK_RAW, 0), (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)]:\n"
              "    try:\n        socket.socket(fam, kind, proto); print('opened')\n"
              "    except OSError as e:\n        print('refused')\n"
              "ping = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n"
              "try:\n    ping.sendto(b'\\x08\\0\\0\\0\\0\\0\\0\\0', ('198.51.100.2', 0)); print('pinged')\n"
              "except OSError:\n    print('unreachable')\n"
              "for addr in [('169.254.169.254', 80), ('10.0.0.1', 80), ('198.51.100.2', 80)]:\n"
              "    s = socket.socket(); s.settimeout(5)\n"
              "    try:\n        s.connect(addr); print('reached')\n"
              "    except OSError:\n        print('unreachable')\n")
    assert r.stdout.split() == ["refused"] * 3 + ["unreachable"] * 4, r.stdout + r.stderr
    r = root(a, "ping -c1 -W2 198.51.100.2")  # the box's own loopback answers ping; nothing else can
    assert r.exit_code != 0 and "1 received" not in r.stdout


def test_no_mount_no_modules_no_kcore_no_sys_writes(pair: tuple[Sandbox, Sandbox]) -> None:
    a, _ = pair
    assert root(a, "mount -t tmpfs none /mnt").exit_code != 0
    assert root(a, "mount --bind / /mnt").exit_code != 0
    r = py(a, "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "print(libc.syscall(175, None, 0, b''), ctypes.get_errno())\n"  # init_module
              "print(libc.syscall(313, -1, b'', 0), ctypes.get_errno())\n")  # finit_module
    assert all(line.split()[0] == "-1" for line in r.stdout.splitlines()), r.stdout
    assert root(a, "head -c 16 /proc/kcore 2>/dev/null | wc -c").stdout.strip() == "0", "no kernel memory to read"
    assert root(a, "echo 1 > /proc/sysrq-trigger").exit_code != 0
    for knob in ("/sys/kernel/mm/ksm/run", "/sys/kernel/uevent_helper", "/sys/fs/cgroup/cgroup.procs"):
        assert root(a, f"echo 1 > {knob}").exit_code != 0, knob
    assert root(a, "ls /sys/module 2>/dev/null | wc -l").stdout.strip() == "0"


def test_no_ptrace_or_signal_reaches_a_process_outside(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    a, b = pair
    assert env.server.proc is not None
    server_pid = env.server.proc.pid
    r = py(a, "import ctypes, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              f"print(libc.ptrace(16, {server_pid}, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
              f"try:\n    os.kill({server_pid}, 0); print('seen')\nexcept ProcessLookupError:\n    print('unseen')\n")
    attach, seen = r.stdout.splitlines()
    assert attach.split()[0] == "-1" and seen == "unseen"
    b_marker = b.commands.run("sleep 314159 >/dev/null 2>&1 & echo $!").stdout.strip()
    r = py(a, "import glob\nseen = 0\nfor f in glob.glob('/proc/[0-9]*/cmdline'):\n"
              "    try:\n        seen += open(f, 'rb').read() == b'sleep\\x00314159\\x00'\n"
              "    except OSError:\n        pass\nprint(seen)\n")
    assert r.stdout.strip() == "0", "A sees only its own processes"
    assert b.commands.run(f"kill -0 {b_marker} && echo alive").stdout == "alive\n"


def test_no_process_in_a_box_can_write_into_a_host_file_through_its_stdio(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    """The box's PID 1 was started with the host's runsc.err as its stderr: root writing into
    /proc/1/fd/2 filled the host's disk (issue 20). Every agent process lets go of it once it serves."""
    a, _ = pair
    err = env.server.box_dir(a.id) / "runsc.err"
    before = err.stat().st_size
    r = py(a, "import glob, os\nwritten = 0\nchunk = b'x' * 2**20\n"
              "for fd in glob.glob('/proc/[0-9]*/fd/[012]'):\n"  # not the commands' own pipes
              "    try:\n        if os.readlink(fd).startswith('pipe:'):\n            continue\n"
              "        with open(fd, 'wb', buffering=0) as f:\n"
              "            for _ in range(16):\n                written += f.write(chunk)\n"
              "    except OSError:\n        pass\nprint(written)\n")
    assert r.exit_code == 0 and int(r.stdout) > 0, "the attempt wrote: into the box's own /dev/null"
    assert err.stat().st_size == before, "nothing reached the host's file"

def test_setuid_grants_nothing_and_sudo_is_the_apis_root(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    """A setuid-root program run by the box user runs as the user (gVisor grants nothing by exec;
    the spec's noNewPrivileges keeps it so on a runsc that could), and `su` fails. The box user's
    one way to root is `sudo`, the agent's service: it has the capability sets of a command the API
    runs as root, so every root attempt of this battery is one of sudo's root too; a few are made
    through sudo as well."""
    a, b = pair
    root(a, "cp /usr/bin/python3.11 /home/user/rootpy && chmod 4755 /home/user/rootpy")  # /tmp is nosuid anyway
    r = a.commands.run("/home/user/rootpy -c 'import os; print(os.geteuid(), os.getuid())'")
    assert r.stdout.split() == ["1000", "1000"], "a setuid binary runs as its caller"
    assert a.commands.run("echo | su -c id root").exit_code != 0
    assert a.commands.run("sudo id -u").stdout == "0\n"
    assert a.commands.run("sudo grep ^Cap /proc/self/status").stdout == root(a, "grep ^Cap /proc/self/status").stdout
    assert a.commands.run("sudo mount --bind / /mnt").exit_code != 0
    marker = Path("/root") / f"hutch-escape-{secrets.token_hex(6)}"
    marker.write_text("host only")
    try:
        r = a.commands.run(f"sudo cat {marker} {env.server.data_dir / 'server.key'}")
        assert r.exit_code != 0 and "host only" not in r.stdout
    finally:
        marker.unlink()
    b_chan = env.server.box_dir(b.id) / "chan"
    name = f"/tmp/attempt-{secrets.token_hex(4)}.py"
    a.files.write(name, "import socket\ns = socket.socket(socket.AF_UNIX)\n"
                        f"try:\n    s.connect({str(b_chan / 'agent.sock')!r}); print('connected')\n"
                        "except OSError as e:\n    print('refused', e.errno)\n")
    assert a.commands.run(f"sudo python3 {name}").stdout.startswith("refused")


def test_one_boxs_token_opens_nothing_of_another(env: Env, pair: tuple[Sandbox, Sandbox]) -> None:
    a, b = pair
    assert "b-only" not in a.commands.run("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", user="root").stdout
    headers = {"X-Access-Token": a._dp.token}
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/files", {"params": {"path": "/etc/hostname"}}), ("GET", "/files/zip", {"params": {"path": "/tmp"}}),
        ("PUT", "/files", {"params": {"path": "/tmp/x"}, "content": b"x"}),
        ("POST", "/commands/run", {"json": {"command": "env"}}), ("POST", "/commands/spawn", {"json": {"command": "env"}}),
        ("GET", "/commands", {})]
    for method, route, kwargs in calls:
        r = httpx.request(method, f"{b._dp.url}{route}", headers=headers, **kwargs)
        assert r.status_code == 401, (method, route, r.text)
    r = httpx.get(f"{env.url}/v1/sandboxes/{b.id}", headers={"Authorization": f"Bearer {a._dp.token}"})
    assert r.status_code == 401, "an access token is no API key"


RESOURCE_ATTACKS = {
    "disk fill": "head -c 3G /dev/zero > /home/user/fill; echo exit=$?",  # the overlay lives in the box's memory
    "million files": "mkdir -p /tmp/m && cd /tmp/m && python3 -c \"import os\nfor i in range(1000000): "
                     "os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY))\"",
    "output flood": "head -c 1G /dev/zero | tr '\\0' x",  # 1 GB to a JSON answer (capped at 64 MB)
}


@pytest.mark.parametrize("attack", RESOURCE_ATTACKS)
def test_a_resource_attack_ends_fine_or_failed_and_harms_nobody_else(env: Env, pair: tuple[Sandbox, Sandbox],
                                                                      attack: str) -> None:
    _, bystander = pair
    attacker = Sandbox.create(name=attack, api_key=env.key_a, base_url=env.url)
    server_rss = env.server.memory_kib()
    try:
        if attack == "output flood":
            r = httpx.post(f"{attacker._dp.url}/commands/run", json={"command": RESOURCE_ATTACKS[attack]},
                           headers={"X-Access-Token": attacker._dp.token}, timeout=300)
            assert r.status_code == 413 and r.json()["error"]["code"] == "output_too_large"
        else:
            try:
                attacker.commands.run(RESOURCE_ATTACKS[attack], timeout_seconds=120)
            except SandboxError:
                pass  # timed out, or the box died under it: both are endings
        assert ok_or_failed(attacker, timeout_seconds=60) in ("ok", "failed")
        assert bystander.commands.run("echo fine").stdout == "fine\n"
        assert httpx.get(f"{env.url}/health").status_code == 200
        assert env.server.memory_kib() - server_rss < 300 * 1024, "the server held the flood in memory"
    finally:
        attacker.kill()
