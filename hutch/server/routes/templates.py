"""Templates and their builds (/v1/templates): queued at once, followed through their logs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.responses import StreamingResponse

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.models import BuildId, BuildInfo, CreateTemplate, Rebuild, TemplateInfo, TemplateRef

router = APIRouter()


@router.post("/v1/templates", status_code=202, response_model=TemplateInfo)
async def create_template(body: CreateTemplate, st: StateDep, team_id: TeamDep) -> TemplateInfo:
    """Queues the build and answers at once; follow it with the build's logs."""
    return st.templates.describe(st.templates.create(team_id, body))


@router.get("/v1/templates", response_model=list[TemplateInfo])
async def list_templates(st: StateDep, team_id: TeamDep) -> list[TemplateInfo]:
    return st.templates.all(team_id)


@router.get("/v1/templates/{ref}", response_model=TemplateInfo)
async def get_template(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> TemplateInfo:
    return st.templates.describe(st.templates.get(team_id, ref))


@router.delete("/v1/templates/{ref}", status_code=204)
async def delete_template(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> Response:
    await st.templates.delete(team_id, ref)
    return Response(status_code=204)


@router.post("/v1/templates/{ref}/builds", status_code=202, response_model=BuildInfo)
async def rebuild_template(ref: TemplateRef, st: StateDep, team_id: TeamDep,
                           body: Rebuild | None = None) -> BuildInfo:
    rec, build = st.templates.rebuild(team_id, ref, (body or Rebuild()).no_cache)
    return st.templates.build_info(build, rec)


@router.get("/v1/templates/{ref}/builds", response_model=list[BuildInfo])
async def list_builds(ref: TemplateRef, st: StateDep, team_id: TeamDep) -> list[BuildInfo]:
    return st.templates.list_builds(team_id, ref)


@router.get("/v1/templates/{ref}/builds/{build_id}", response_model=BuildInfo)
async def get_build(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep) -> BuildInfo:
    rec, build = st.templates.get_build(team_id, ref, build_id)
    return st.templates.build_info(build, rec)


@router.post("/v1/templates/{ref}/builds/{build_id}/cancel", response_model=BuildInfo)
async def cancel_build(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep) -> BuildInfo:
    build = await st.templates.cancel(team_id, ref, build_id)
    return st.templates.build_info(build, st.templates.get(team_id, ref))


@router.get("/v1/templates/{ref}/builds/{build_id}/logs", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}}}})
async def build_logs(ref: TemplateRef, build_id: BuildId, st: StateDep, team_id: TeamDep,
                     after: Annotated[int, Query(ge=0)] = 0, follow: bool = True) -> Any:
    """One JSON object a line; with `follow`, to the build's end, whose line says "done"."""
    lines = await st.templates.logs(team_id, ref, build_id, after, follow)
    return StreamingResponse(lines, media_type="application/x-ndjson")
