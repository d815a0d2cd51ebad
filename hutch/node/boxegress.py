"""Each box's own listener of the egress proxy, in its channel directory: which box a connection
comes from is known by where it arrives. Open while the box runs; closed, with every connection of
it, before a checkpoint (nothing of the host's may be open in a box gVisor saves) and at a stop."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from hutch.guest import protocol
from hutch.node.nodebox import Box


class Egress(Protocol):
    """The egress proxy's listeners, one per box (hutch.egress.proxy.EgressProxy)."""

    async def listen(self, key: str, path: Path) -> None: ...

    async def close(self, key: str) -> None: ...


class EgressListeners:
    """The listeners of the node's boxes; with no proxy (None), boxes have no way out."""

    def __init__(self, egress: Egress | None) -> None:
        self.egress = egress

    async def open(self, box: Box) -> None:
        if self.egress is not None:
            await self.egress.listen(box.dir.name, box.channel_dir / protocol.EGRESS_SOCKET)

    async def close(self, box: Box) -> None:
        if self.egress is not None:
            await self.egress.close(box.dir.name)
