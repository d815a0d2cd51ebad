"""The server's own: Prometheus metrics, the health probe, and the nodes that run boxes."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Response

from hutch.errors import ApiError, Code
from hutch.server.auth import TeamDep
from hutch.server.state import State, StateDep
from hutch.services.models import NodeInfo
from hutch.store import SandboxStatus

router = APIRouter()
OPERATOR_TEAM = "default"  # the team `hutch serve` makes, whose key it writes to its client.env


def node_infos(st: State) -> list[NodeInfo]:
    """Each node with its active boxes' count and reservations (a single host: itself)."""
    boxes: Counter[str] = Counter()
    vcpu: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for rec in st.store.list_sandboxes(None, status=SandboxStatus.ACTIVE):
        where = rec.node or "local"
        boxes[where] += 1
        vcpu[where] += rec.vcpu
        memory[where] += rec.memory_mib
    if st.fleet is None:
        cap = st.node.capacity()
        return [NodeInfo(name="local", url=st.config.base_url, health="up", boxes=boxes["local"], vcpu=cap.cpus,
                         memory_mib=cap.memory_bytes // 2**20, vcpu_reserved=vcpu["local"],
                         memory_mib_reserved=memory["local"])]
    return [NodeInfo(name=n.id, url=n.url, health="up" if n.state == "up" else "down", boxes=boxes[n.id],
                     vcpu=n.vcpu, memory_mib=n.memory_mib, vcpu_reserved=vcpu[n.id], memory_mib_reserved=memory[n.id],
                     started_at=datetime.fromtimestamp(n.started_at, UTC))
            for n in st.store.list_nodes()]


@router.get("/metrics", response_class=Response)
async def metrics(st: StateDep) -> Response:
    """Prometheus metrics (text format)."""
    nodes = await asyncio.to_thread(node_infos, st)
    body = st.metrics.render(st.store.count_by_status, len(st.pool) if st.pool else 0, nodes)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/health")
async def health(st: StateDep) -> dict[str, Any]:
    # isolation: what a box is; `hutch mcp serve --ephemeral` refuses to run without "gvisor"
    return {"status": "ok", "warm_pool": len(st.pool) if st.pool else 0, "isolation": "gvisor"}


@router.get("/v1/nodes", response_model=list[NodeInfo], responses={403: {
    "description": "a key of another team than the operator's",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}})
async def list_nodes(st: StateDep, team_id: TeamDep) -> list[NodeInfo]:
    """The hosts that run boxes, with their room and health (`hutch nodes`): the operator's view
    (every team's use, the nodes' internal addresses), for the server's own team only."""
    if team_id != st.store.team_by_name(OPERATOR_TEAM):
        raise ApiError(Code.FORBIDDEN, f"the fleet's nodes are shown to the {OPERATOR_TEAM!r} team's keys only")
    return await asyncio.to_thread(node_infos, st)
