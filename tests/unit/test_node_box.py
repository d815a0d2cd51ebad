"""What hutch.node.box tells the layers above of every box. Its values are the guest protocol's own
objects (re-bound, so they cannot drift); what is worth checking is what they promise."""

from __future__ import annotations

from hutch.node import box


def test_the_box_user_is_unprivileged_and_at_home() -> None:
    assert box.USER.uid != 0 and box.USER.gid != 0 and box.USER.name != "root"
    assert box.USER.home == f"/home/{box.USER.name}"


def test_the_hosts_directories_are_under_the_guest_root() -> None:
    for path in (box.CHANNEL_DIR, box.AGENT_DIR, box.RUNTIME_DIR, box.AGENT_BIN_DIR, box.TRUST_DIR):
        assert path.startswith(box.GUEST_ROOT + "/")
    assert box.INTERPRETER_PORT != box.PROXY_PORT


def test_the_path_checks_refuse_what_could_leave_the_box() -> None:
    assert box.path_problem("/home/user/a") is None
    for bad in ("a/../b", "/home/../etc/passwd", "relative", "/a\x00b"):
        assert box.path_problem(bad), bad
    assert box.metadata_problem({"k": "v"}) is None and box.metadata_problem({"k": "\x00"})
