"""What a box of the base template (`hutch/base`) has without asking, as E2B's base has it: Node.js
LTS with npm, build tools (gcc, g++, make, libc headers), and `sudo` for the box user, which gives
the root that the API's user="root" gives (the same capabilities, inside gVisor) and nothing more.
What root in a box still cannot do is the escape battery's (tests/integration/security)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hutch import Sandbox, SandboxTimeoutError
from tests.integration.support import Env


@pytest.fixture(scope="module")
def sb(env: Env) -> Iterator[Sandbox]:
    box = Sandbox.create(name="base-box", api_key=env.key_a, base_url=env.url)
    try:
        yield box
    finally:
        box.kill()


def run(box: Sandbox, command: str, **kw: Any) -> Any:
    r = box.commands.run(command, timeout_seconds=120, **kw)
    assert r.exit_code == 0, f"{command}: {r.exit_code}\n{r.stdout}\n{r.stderr}"
    return r


def caps(status: str) -> dict[str, str]:
    return {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Cap")}


def test_the_box_user_becomes_root_with_sudo(sb: Sandbox) -> None:
    assert run(sb, "id -u; whoami").stdout.split() == ["1000", "user"]
    assert run(sb, "sudo -n true; echo $?").stdout == "0\n"
    assert run(sb, "sudo whoami").stdout == "root\n"
    assert run(sb, "sudo id -u; sudo -n id -g").stdout.split() == ["0", "0"]
    assert run(sb, "echo from-sudo | sudo tee /etc/made-with-sudo >/dev/null && cat /etc/made-with-sudo").stdout \
        == "from-sudo\n"
    assert run(sb, "stat -c %U /etc/made-with-sudo").stdout == "root\n"
    assert run(sb, "sudo -u user id -u").stdout == "1000\n"
    assert run(sb, "sudo -i pwd").stdout == "/root\n"


def test_sudo_gives_the_root_the_api_gives_no_more(sb: Sandbox) -> None:
    """The same capability sets as a command the API runs as root: Docker's default set less raw
    sockets, so the escape battery's root (mount, modules, raw sockets, ...) is sudo's root."""
    api_root = caps(run(sb, "cat /proc/self/status", user="root").stdout)
    sudo_root = caps(run(sb, "sudo cat /proc/self/status").stdout)
    assert sudo_root == api_root and int(sudo_root["CapEff"], 16) != 0
    assert caps(run(sb, "cat /proc/self/status").stdout)["CapEff"] == "0000000000000000", "the user has none"
    r = sb.commands.run("sudo mount -t tmpfs none /mnt")
    assert r.exit_code != 0, "no CAP_SYS_ADMIN: no mount"


def test_sudo_keeps_the_way_out_and_resets_the_rest(sb: Sandbox) -> None:
    env = dict(line.split("=", 1) for line in
               run(sb, "sudo env", env={"MY_SECRET_TOKEN": "x"}).stdout.splitlines() if "=" in line)
    assert (env["USER"], env["HOME"], env["SUDO_USER"], env["SUDO_UID"]) == ("root", "/root", "user", "1000")
    assert env["HTTPS_PROXY"] == "http://127.0.0.1:3128", "root's commands reach out through the box's relay too"
    assert "MY_SECRET_TOKEN" not in env
    assert "MY_SECRET_TOKEN=x" in run(sb, "sudo -E env", env={"MY_SECRET_TOKEN": "x"}).stdout


def test_a_sudo_command_ends_with_its_caller(sb: Sandbox) -> None:
    """The agent starts the command (gVisor has no setuid), in a session of its own: killed at the
    caller's deadline with the caller's process group, it is killed too."""
    with pytest.raises(SandboxTimeoutError):
        sb.commands.run("sudo sleep 1000", timeout_seconds=2)
    assert run(sb, "ps -eo args | grep -c '^sleep 1000' || true", user="root").stdout == "0\n"
    r = sb.commands.run("timeout 2 sudo sleep 1000; echo code=$?")
    assert r.stdout.endswith("code=124\n")
    assert run(sb, "sudo sh -c 'exit 7'; echo $?").stdout == "7\n"
    r = sb.commands.run("sudo no-such-program")
    assert r.exit_code == 1 and "no-such-program: command not found" in r.stderr


def test_node_npm_and_the_build_tools_are_there(sb: Sandbox) -> None:
    versions = run(sb, "node --version; npm --version; npx --version; gcc --version; g++ --version; "
                       "make --version").stdout.splitlines()
    assert versions[0].startswith("v24."), "Node.js 24, the LTS line"
    assert versions[1].startswith("11.") and versions[2].startswith("11.")
    assert any(line.startswith("gcc ") for line in versions) and any(line.startswith("g++ ") for line in versions)
    assert any(line.startswith("GNU Make ") for line in versions)
    assert run(sb, "node -e 'console.log(process.release.lts, 6 * 7)'").stdout == "Krypton 42\n"


def test_a_c_program_compiles_and_runs(sb: Sandbox) -> None:
    sb.files.write("/home/user/c/hello.c", '#include <stdio.h>\n#include <math.h>\n'
                                           'int main(void) { printf("hello %.0f\\n", sqrt(1764.0)); return 0; }\n')
    sb.files.write("/home/user/c/Makefile", "hello: hello.c\n\tgcc -O2 -o hello hello.c -lm\n")
    assert run(sb, "make && ./hello", cwd="/home/user/c").stdout.endswith("hello 42\n")
    sb.files.write("/home/user/c/hi.cc", '#include <iostream>\nint main() { std::cout << "hi from c++" << std::endl; }\n')
    assert run(sb, "g++ -o hi hi.cc && ./hi", cwd="/home/user/c").stdout == "hi from c++\n"


def test_npm_runs_a_projects_build_script(sb: Sandbox) -> None:
    """The README's quickstart runs `npm run build`: it used to exit 127 in a hutch box."""
    r = run(sb, "mkdir -p ~/app && cd ~/app && npm init -y >/dev/null && npm pkg set scripts.build='echo built it' "
                "&& npm run build")
    assert "built it" in r.stdout and "npm warn" not in r.stderr


def test_a_native_add_on_builds_against_the_images_headers_with_no_download(sb: Sandbox) -> None:
    """node-gyp (npm's) finds this Node's headers in the image, so an add-on builds without
    reaching nodejs.org (this box reaches nothing of the internet)."""
    sb.files.write("/home/user/addon/binding.gyp", '{"targets": [{"target_name": "hello", "sources": ["hello.c"]}]}\n')
    sb.files.write("/home/user/addon/hello.c", """#include <node_api.h>
static napi_value Hello(napi_env env, napi_callback_info info) {
  napi_value s; napi_create_string_utf8(env, "native hello", NAPI_AUTO_LENGTH, &s); return s; }
NAPI_MODULE_INIT() {
  napi_value f; napi_create_function(env, "hello", NAPI_AUTO_LENGTH, Hello, NULL, &f); return f; }
""")
    sb.files.write("/home/user/addon/package.json", '{"name": "addon", "version": "1.0.0", "gypfile": true}\n')
    r = run(sb, "npm install --no-audit --no-fund --loglevel=verbose 2>&1", cwd="/home/user/addon")
    assert "version is good" in r.stdout and "gyp info ok" in r.stdout
    assert run(sb, "node -p 'require(\"./build/Release/hello.node\")()'", cwd="/home/user/addon").stdout \
        == "native hello\n"
