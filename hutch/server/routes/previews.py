"""Preview ports (/v1/sandboxes/{id}/preview-ports): publish a port of a box at its preview URL,
and the links, tokens and rotations that grant a browser or a client access to it."""

from __future__ import annotations

from fastapi import APIRouter, Response

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.models import (
    PreviewPort,
    PreviewPortNumber,
    PreviewToken,
    PublishPreviewPort,
    SignedPreviewUrl,
    SignPreviewUrl,
)

router = APIRouter()


@router.post("/v1/sandboxes/{sandbox_id}/preview-ports", response_model=PreviewPort)
async def publish_preview_port(sandbox_id: str, body: PublishPreviewPort, st: StateDep,
                               team_id: TeamDep) -> PreviewPort:
    """Publish a port of the box at its preview URL (or change a published port's access)."""
    return st.previews.publish(st.sandboxes.get(team_id, sandbox_id), body.port, body.access)


@router.get("/v1/sandboxes/{sandbox_id}/preview-ports", response_model=list[PreviewPort])
async def list_preview_ports(sandbox_id: str, st: StateDep, team_id: TeamDep) -> list[PreviewPort]:
    return st.previews.list(st.sandboxes.get(team_id, sandbox_id))


@router.delete("/v1/sandboxes/{sandbox_id}/preview-ports/{port}", status_code=204)
async def unpublish_preview_port(sandbox_id: str, port: PreviewPortNumber, st: StateDep,
                                 team_id: TeamDep) -> Response:
    """The preview proxy refuses the port again, and its open connections are cut."""
    st.previews.unpublish(st.sandboxes.get(team_id, sandbox_id), port)
    return Response(status_code=204)


@router.post("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/signed-url", response_model=SignedPreviewUrl)
async def sign_preview_url(sandbox_id: str, port: PreviewPortNumber, body: SignPreviewUrl, st: StateDep,
                           team_id: TeamDep) -> SignedPreviewUrl:
    """A link to the port that a browser exchanges for a cookie for that port alone."""
    return st.previews.signed_url(st.sandboxes.get(team_id, sandbox_id), port, body.expires_in_seconds)


@router.get("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/token", response_model=PreviewToken)
async def preview_token(sandbox_id: str, port: PreviewPortNumber, st: StateDep, team_id: TeamDep) -> PreviewToken:
    """A header credential for the port, for machine clients; valid until rotated."""
    return st.previews.token(st.sandboxes.get(team_id, sandbox_id), port)


@router.post("/v1/sandboxes/{sandbox_id}/preview-ports/{port}/rotate", response_model=PreviewPort)
async def rotate_preview_port(sandbox_id: str, port: PreviewPortNumber, st: StateDep,
                              team_id: TeamDep) -> PreviewPort:
    """Void every link, cookie and token of the port, and cut its open connections."""
    return st.previews.rotate(st.sandboxes.get(team_id, sandbox_id), port)
