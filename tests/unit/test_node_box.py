"""What hutch.node.box tells the layers above of every box is what the agent's protocol says: the
node re-exposes the guest protocol's values, and nothing above the node reads the protocol itself."""

from __future__ import annotations

import pytest

from hutch.guest import protocol
from hutch.node import box


def test_the_box_user_is_the_protocols() -> None:
    assert (box.USER.name, box.USER.uid, box.USER.gid, box.USER.home) == \
        (protocol.BOX_USER, protocol.BOX_UID, protocol.BOX_GID, protocol.BOX_HOME)


@pytest.mark.parametrize("name", ["GUEST_ROOT", "CHANNEL_DIR", "AGENT_DIR", "RUNTIME_DIR", "TRUST_DIR", "SYSTEM_BUNDLE",
                                  "INTERPRETER_PORT", "PROXY_PORT"])
def test_each_path_and_port_is_the_protocols(name: str) -> None:
    assert getattr(box, name) == getattr(protocol, name)


def test_the_path_checks_are_the_agents_own() -> None:
    assert box.path_problem is protocol.path_problem and box.metadata_problem is protocol.metadata_problem
    assert box.path_problem("/home/user/a") is None and box.path_problem("a/../b")
    assert box.metadata_problem({"k": "v"}) is None and box.metadata_problem({"k": "\x00"})


def test_every_name_it_shares_with_the_protocol_is_the_protocols() -> None:
    shared = {name for name in vars(box) if not name.startswith("_") and hasattr(protocol, name)}
    assert len(shared) == 10  # the eight above and the two checks: a new one is checked here too
    assert {name for name in shared if getattr(box, name) != getattr(protocol, name)} == set()
