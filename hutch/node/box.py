"""What the node promises of every box, for the layers above it: the user commands run as, the
paths hutch keeps for itself in a box, the ports its agent serves, and the checks on a path or a
file's metadata before either is handed to the agent.

The values are the guest protocol's (hutch.guest.protocol, which the agent reads from inside the
box): the node is the one side that speaks to the agent, so the layers above learn them here and
never import the agent's code. Each is the protocol's own object, re-bound, so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hutch.guest import protocol


@dataclass(frozen=True)
class BoxUser:
    """The unprivileged user commands run as unless the caller asks for root."""

    name: str
    uid: int
    gid: int
    home: str


USER: Final = BoxUser(protocol.BOX_USER, protocol.BOX_UID, protocol.BOX_GID, protocol.BOX_HOME)

# Paths hutch keeps in every box: the host's directories appear under GUEST_ROOT (the node mounts
# each of the four below there), and the node replaces Debian's CA bundle at SYSTEM_BUNDLE.
GUEST_ROOT: Final = protocol.GUEST_ROOT
CHANNEL_DIR: Final = protocol.CHANNEL_DIR  # the agent's socket
AGENT_DIR: Final = protocol.AGENT_DIR  # the agent and the code interpreter's server, read-only
RUNTIME_DIR: Final = protocol.RUNTIME_DIR  # the agent's Python, read-only
AGENT_BIN_DIR: Final = protocol.AGENT_BIN_DIR  # the compiled agent, read-only
TRUST_DIR: Final = protocol.TRUST_DIR  # what TLS clients in the box trust, read-only
SYSTEM_BUNDLE: Final = protocol.SYSTEM_BUNDLE

# Ports on the box's loopback that the agent's side serves.
INTERPRETER_PORT: Final = protocol.INTERPRETER_PORT  # the code interpreter's server (a hutch/code-interpreter box)
PROXY_PORT: Final = protocol.PROXY_PORT  # the agent's relay to the egress proxy: never a published port

# The agent refuses what these refuse: checked above, a caller's mistake is a 400 before any box is
# found (or resumed) for it.
path_problem: Final = protocol.path_problem  # why a box path is unacceptable, or None
metadata_problem: Final = protocol.metadata_problem  # why a file's E2B metadata cannot be stored, or None
