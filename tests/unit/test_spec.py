"""A box's OCI spec: a cgroup of its own whatever its vcpu, no link in a template's root followed on
the host to decide its mounts, and no privilege gained by exec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hutch.guest import protocol
from hutch.node import spec as spec_module
from hutch.node.roots import is_file_in
from hutch.node.spec import AGENT_CAPABILITIES, AgentRuntime, Limits, box_spec

BUNDLE = protocol.SYSTEM_BUNDLE.lstrip("/")


def spec_of(root: Path, tmp_path: Path, limits: Limits | None = None) -> dict[str, Any]:
    trust = tmp_path / "trust"
    trust.mkdir(exist_ok=True)
    runtime = AgentRuntime(tmp_path / "runtime", "/ld.so", "/lib", "/python3")
    return box_spec(rootfs=root, channel_dir=tmp_path / "chan", agent_dir=tmp_path / "agent", runtime=runtime,
                    hostname="sandbox", limits=limits or Limits(), trust_dir=trust, cgroup="hbox")


def mounted_at(spec: dict[str, Any]) -> set[str]:
    return {m["destination"] for m in spec["mounts"]}


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """A file of the host's, outside any root: what a planted link points at."""
    (tmp_path / "host" / "certs").mkdir(parents=True)
    target = tmp_path / "host" / "certs" / "ca-certificates.crt"
    target.write_text("the host's\n")
    return target


def test_a_root_with_the_system_bundle_gets_ours_over_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / BUNDLE).parent.mkdir(parents=True)
    (root / BUNDLE).write_text("the image's\n")
    assert protocol.SYSTEM_BUNDLE in mounted_at(spec_of(root, tmp_path))


@pytest.mark.parametrize("planted", ["the bundle", "a directory on its way"])
def test_a_link_in_the_root_is_never_followed_on_the_host(tmp_path: Path, host_file: Path, planted: str) -> None:
    root = tmp_path / "root"
    (root / BUNDLE).parent.parent.mkdir(parents=True)
    if planted == "the bundle":
        (root / BUNDLE).parent.mkdir()
        (root / BUNDLE).symlink_to(host_file)
    else:  # etc/ssl/certs -> the host's directory holding a regular ca-certificates.crt
        (root / BUNDLE).parent.symlink_to(host_file.parent)
    assert (root / BUNDLE).is_file(), "the host would see a file there if it followed the link"
    assert not is_file_in(root, protocol.SYSTEM_BUNDLE)
    assert protocol.SYSTEM_BUNDLE not in mounted_at(spec_of(root, tmp_path))


def test_nothing_above_the_root_is_reached(tmp_path: Path, host_file: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert not is_file_in(root, "/../host/certs/ca-certificates.crt")
    assert not is_file_in(root / "missing", protocol.SYSTEM_BUNDLE)


@pytest.mark.parametrize("vcpu", [0, 2])
def test_every_box_has_a_cgroup_and_only_a_vcpu_a_cpu_cap(tmp_path: Path, vcpu: int) -> None:
    root = tmp_path / "root"
    root.mkdir()
    linux = spec_of(root, tmp_path, Limits.of_shape(vcpu, 256, 128))["linux"]
    assert linux["cgroupsPath"] == "/hutch/hbox"
    assert linux["resources"]["memory"] == {"limit": 256 * 2**20}
    assert linux["resources"]["pids"] == {"limit": 128}
    assert ("quota" in linux["resources"]["cpu"]) == bool(vcpu)


def test_no_process_of_a_box_gains_privileges_by_exec_and_root_has_dockers_set_less_raw_sockets(tmp_path: Path) -> None:
    """The box user's way to root is the agent's sudo service (hutch/guest/sudod.py), which starts
    commands with the agent's own capabilities: no setuid program may be another way, and root's
    set is the one the escape battery tests."""
    root = tmp_path / "root"
    root.mkdir()
    process = spec_of(root, tmp_path)["process"]
    assert process["noNewPrivileges"] is True
    caps = process["capabilities"]
    assert caps["bounding"] == caps["effective"] == caps["permitted"] == AGENT_CAPABILITIES
    assert "inheritable" not in caps and "ambient" not in caps
    for dangerous in ("CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_SYS_PTRACE", "CAP_NET_ADMIN", "CAP_NET_RAW",
                      "CAP_SYS_RAWIO", "CAP_SYS_BOOT", "CAP_DAC_READ_SEARCH", "CAP_BPF", "CAP_PERFMON"):
        assert dangerous not in AGENT_CAPABILITIES


def test_the_compiled_agent_runs_from_its_read_only_directory_and_python_boxes_mount_it_too(tmp_path: Path) -> None:
    """HUTCH_AGENT=go: PID 1 is the static binary, with nothing of the Python runtime's environment.
    Its directory is mounted read-only whichever agent runs, so a box's checkpoint (which must be
    restored with the mounts it was taken with) stays restorable when the setting changes."""
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir()
    for compiled in (True, False):
        runtime = AgentRuntime(tmp_path / "runtime", "/ld.so", "/lib", "/python3", bin_dir, compiled)
        spec = box_spec(rootfs=tmp_path / "root", channel_dir=tmp_path / "chan", agent_dir=tmp_path / "agent",
                        runtime=runtime, hostname="sandbox", limits=Limits())
        (mount,) = [m for m in spec["mounts"] if m["destination"] == protocol.AGENT_BIN_DIR]
        assert (mount["source"], mount["options"]) == (str(bin_dir), ["rbind", "ro"])
        env = spec["process"]["env"]
        if compiled:
            assert spec["process"]["args"] == [f"{protocol.AGENT_BIN_DIR}/{protocol.AGENT_BINARY}"]
            assert not any(e.startswith("PYTHON") for e in env)
        else:
            assert spec["process"]["args"][-1] == f"{protocol.AGENT_DIR}/agent.py"
            assert f"PYTHONHOME={protocol.RUNTIME_DIR}/usr" in env


def test_the_agent_setting_is_go_or_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spec_module.AGENT_ENV, "rust")
    with pytest.raises(ValueError):
        spec_module.agent_kind()
    monkeypatch.setenv(spec_module.AGENT_ENV, "go")
    assert spec_module.agent_kind() == "go"
    monkeypatch.delenv(spec_module.AGENT_ENV)
    assert spec_module.agent_kind() == spec_module.DEFAULT_AGENT


def runtime_root(tmp_path: Path) -> Path:
    """What AgentRuntime.find looks for in a Debian root: a dynamic loader and a python3.x."""
    root = tmp_path / "runtime"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2").write_bytes(b"")
    (root / "usr/bin").mkdir()
    (root / "usr/bin/python3.11").write_bytes(b"")
    return root


def test_without_a_setting_boxes_run_the_compiled_agent_where_it_is_built_else_the_python_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = runtime_root(tmp_path)
    built, missing = tmp_path / "built", tmp_path / "missing"
    built.mkdir()
    (built / protocol.AGENT_BINARY).write_bytes(b"")
    monkeypatch.delenv(spec_module.AGENT_ENV, raising=False)
    assert AgentRuntime.find(root, built).compiled
    assert not AgentRuntime.find(root, missing).compiled, "an install without Go still serves boxes"
    monkeypatch.setenv(spec_module.AGENT_ENV, "go")
    with pytest.raises(FileNotFoundError):  # asked for by name: a missing build is an error, not a fallback
        AgentRuntime.find(root, missing)


def test_the_compiled_agent_is_pinned_by_its_content_and_a_checkpoints_own_is_mounted_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A box mounts a copy of the binary named by its content; an upgrade (a new binary in the
    install's place) pins another beside it, and a restore of a checkpoint taken before mounts the
    one it ran. A sum this host does not keep, or that is not a sum, gets the runtime's own."""
    root = runtime_root(tmp_path)
    install, pins = tmp_path / "agent", tmp_path / "data/agents"
    install.mkdir()
    (install / protocol.AGENT_BINARY).write_bytes(b"first build")
    monkeypatch.delenv(spec_module.AGENT_ENV, raising=False)
    old = AgentRuntime.find(root, install, pins)
    assert old.bin_sum is not None and old.bin_dir == pins / old.bin_sum
    assert os.listdir(old.bin_dir) == [protocol.AGENT_BINARY]  # it alone, as boxes mount it
    assert (old.bin_dir / protocol.AGENT_BINARY).read_bytes() == b"first build"
    assert AgentRuntime.find(root, install, pins).bin_dir == old.bin_dir, "the same binary: the same pin"
    (install / protocol.AGENT_BINARY).write_bytes(b"second build")
    new = AgentRuntime.find(root, install, pins)
    assert new.bin_sum not in (None, old.bin_sum)
    assert new.pinned(old.bin_sum) == (old.bin_sum, old.bin_dir)
    for unknown in (None, "0" * 16, "../agent", old.bin_sum + "/.."):
        assert new.pinned(unknown) == (new.bin_sum, new.bin_dir)
    spec = box_spec(rootfs=tmp_path / "root", channel_dir=tmp_path / "chan", agent_dir=tmp_path / "guest",
                    runtime=new, hostname="sandbox", limits=Limits(), bin_dir=old.bin_dir)
    (mount,) = [m for m in spec["mounts"] if m["destination"] == protocol.AGENT_BIN_DIR]
    assert mount["source"] == str(old.bin_dir)
