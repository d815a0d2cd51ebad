"""The server's own: Prometheus metrics and the health probe."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from hutch.server.state import StateDep

router = APIRouter()


@router.get("/metrics", response_class=Response)
async def metrics(st: StateDep) -> Response:
    """Prometheus metrics (text format)."""
    body = st.metrics.render(st.store.count_by_status, len(st.pool))
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/health")
async def health(st: StateDep) -> dict[str, Any]:
    # isolation: what a box is; `hutch mcp serve --ephemeral` refuses to run without "gvisor"
    return {"status": "ok", "warm_pool": len(st.pool), "isolation": "gvisor"}
