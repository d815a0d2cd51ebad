"""A box as the node holds it: one run of it (its runtime id), its host directory (named by its key,
the same for its whole life) and the pinned client of its agent.

The agent's socket is pinned once (hutch.node.agent.pin): the channel directory is writable from
inside the box, so a link planted in the socket's place cannot send the host's requests elsewhere.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from hutch.guest import protocol
from hutch.node import agent
from hutch.node.agent import AgentClient, Channel
from hutch.node.api import BoxRef, ChannelError

RUNTIME_ID_PATTERN = r"h[0-9a-f]{24}"  # what new_runtime_id makes (the fleet checks ids it is sent against it)
ROOT_OVERLAY = "root"  # in a box's directory: the overlay its root is, when it mounts volumes (hutch.node.bundle)
MEDIUM_FILE = "hutch-medium"  # in a checkpoint's directory: "disk" or "memory", what it was made with
AGENT_FILE = "hutch-agent-sum"  # in a box's and a checkpoint's directory: the compiled agent it runs (spec.pin_agent)


def new_runtime_id() -> str:
    # Fixed length and random: runsc ids must never be prefixes of one another.
    return "h" + secrets.token_hex(12)


def write_medium(image_dir: Path, on_disk: bool) -> None:
    """Say in a checkpoint what its box's writes were on: runsc restores it on no other kind."""
    (image_dir / MEDIUM_FILE).write_text("disk" if on_disk else "memory")


def saved_on_disk(image_dir: Path) -> bool:
    """Whether a checkpoint was made of a box on its own disk (one made before boxes had disks says
    nothing: memory)."""
    return (image_dir / MEDIUM_FILE).exists() and (image_dir / MEDIUM_FILE).read_text() == "disk"


def write_agent_sum(directory: Path, bin_sum: str | None) -> None:
    """Say in a box's directory, or its checkpoint's, which compiled agent it runs (a restore mounts
    that one)."""
    if bin_sum:
        (directory / AGENT_FILE).write_text(bin_sum)


def saved_agent_sum(directory: Path) -> str | None:
    """The compiled agent a box or checkpoint says it runs, None if it says nothing (one made
    before agents were pinned) or nothing sensible (spec.AgentRuntime.pinned checks it)."""
    try:
        return (directory / AGENT_FILE).read_text()[:64]
    except OSError:
        return None


@dataclass
class Box:
    runtime_id: str
    dir: Path
    on_disk: bool = False  # its writes go to its own disk (hutch.node.disks), not its memory
    _agent: AgentClient | None = None

    @property
    def agent(self) -> AgentClient:
        if self._agent is None:
            raise ChannelError(f"box {self.runtime_id} has no pinned channel")
        return self._agent

    @property
    def pinned(self) -> bool:
        return self._agent is not None

    @property
    def ref(self) -> BoxRef:
        return BoxRef(self.runtime_id, self.dir.name)

    def pin_socket(self, channel: Channel | None = None) -> bool:
        """Pin the agent's socket (never a link) and talk through it from now on. False while
        the agent has not made it yet."""
        client = agent.pin(self.socket, channel)
        if client is None:
            return False
        self._agent = client
        return True

    async def release(self) -> None:
        if self._agent is not None:
            client, self._agent = self._agent, None
            await client.aclose()

    @property
    def channel_dir(self) -> Path:
        return self.dir / "chan"

    @property
    def disk_dir(self) -> Path:
        return self.dir / "disk"

    @property
    def socket(self) -> Path:
        return self.channel_dir / protocol.SOCKET_NAME

    @property
    def pid_file(self) -> Path:
        """Where the driver writes the pid of the box's sandbox process."""
        return self.dir / "sandbox.pid"

    @property
    def err_file(self) -> Path:
        """What the driver's calls on this run of the box printed (a failed start's reason)."""
        return self.dir / "runsc.err"
