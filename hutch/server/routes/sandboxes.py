"""Sandboxes on the control plane (/v1/sandboxes): create, list, get, update, kill, connect,
pause and resume; their audit and network logs; the secrets bound to them."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, Query, Response

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.models import (
    AttachSecret,
    AuditPage,
    CreateSandbox,
    EnvName,
    NetworkLogPage,
    SandboxAccess,
    SandboxInfo,
    SecretBinding,
    UpdateSandbox,
)
from hutch.store import SandboxStatus

router = APIRouter()


@router.post("/v1/sandboxes", status_code=201, response_model=SandboxAccess)
async def create_sandbox(body: CreateSandbox, st: StateDep, team_id: TeamDep) -> SandboxAccess:
    if body.from_snapshot is not None:
        return st.sandboxes.access(await st.snapshots.boot_one(team_id, body.from_snapshot, body))
    return st.sandboxes.access(await st.sandboxes.create(team_id, body))


@router.get("/v1/sandboxes", response_model=list[SandboxInfo])
async def list_sandboxes(st: StateDep, team_id: TeamDep, status: SandboxStatus | None = None,
                         metadata: Annotated[str | None, Query(max_length=4096,  # encoded: under the 64 KiB request line
                                                               description="key=value&key=value")] = None,
                         ) -> list[SandboxInfo]:
    wanted = dict(parse_qsl(metadata, keep_blank_values=True)) if metadata else None
    return st.sandboxes.infos(st.store.list_sandboxes(team_id, status, wanted))


@router.get("/v1/sandboxes/{sandbox_id}", response_model=SandboxInfo)
async def get_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxInfo:
    return st.sandboxes.info(st.sandboxes.get(team_id, sandbox_id))


@router.patch("/v1/sandboxes/{sandbox_id}", response_model=SandboxInfo)
async def update_sandbox(sandbox_id: str, body: UpdateSandbox, st: StateDep, team_id: TeamDep) -> SandboxInfo:
    return st.sandboxes.info(await st.sandboxes.update(team_id, sandbox_id, body))


@router.delete("/v1/sandboxes/{sandbox_id}", status_code=204)
async def kill_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> Response:
    await st.sandboxes.kill(team_id, sandbox_id)
    return Response(status_code=204)


@router.post("/v1/sandboxes/{sandbox_id}/connect", response_model=SandboxAccess)
async def connect_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxAccess:
    """The sandbox and its data-plane token, resumed first if it is paused."""
    return st.sandboxes.access(await st.sandboxes.connect(team_id, sandbox_id))


@router.post("/v1/sandboxes/{sandbox_id}/pause", status_code=204)
async def pause_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep,
                        memory: Annotated[bool, Query(description="false: keep the files only; the resume "
                                                                  "boots the box afresh with them")] = True) -> Response:
    await st.sandboxes.pause(team_id, sandbox_id, memory=memory)
    return Response(status_code=204)


@router.post("/v1/sandboxes/{sandbox_id}/resume", response_model=SandboxAccess)
async def resume_sandbox(sandbox_id: str, st: StateDep, team_id: TeamDep) -> SandboxAccess:
    return st.sandboxes.access(await st.sandboxes.resume(team_id, sandbox_id))


@router.get("/v1/sandboxes/{sandbox_id}/audit", response_model=AuditPage)
async def get_audit_log(sandbox_id: str, st: StateDep, team_id: TeamDep,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                        before: Annotated[int | None, Query(ge=1)] = None) -> AuditPage:
    """Every command and file operation on the box, newest first: who, when, what, how it ended."""
    return st.audit.page(st.sandboxes.get(team_id, sandbox_id).id, limit, before)


@router.get("/v1/sandboxes/{sandbox_id}/network-log", response_model=NetworkLogPage)
async def get_network_log(sandbox_id: str, st: StateDep, team_id: TeamDep,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                          before: Annotated[int | None, Query(ge=1)] = None) -> NetworkLogPage:
    """Every connection the box tried, newest first: destination, address, verdict, the rule
    that decided, bytes each way."""
    return st.sandboxes.network_log(team_id, sandbox_id, limit, before)
@router.get("/v1/sandboxes/{sandbox_id}/secrets", response_model=list[SecretBinding])
async def sandbox_secrets(sandbox_id: str, st: StateDep, team_id: TeamDep) -> list[SecretBinding]:
    return st.secrets.bindings(st.sandboxes.get(team_id, sandbox_id).id)


@router.put("/v1/sandboxes/{sandbox_id}/secrets/{env}", response_model=list[SecretBinding])
async def attach_secret(sandbox_id: str, env: EnvName, body: AttachSecret, st: StateDep,
                        team_id: TeamDep) -> list[SecretBinding]:
    """Bind a secret to an env var; commands started from now on see its stand-in."""
    return await st.sandboxes.attach_secret(team_id, sandbox_id, env, body.secret)


@router.delete("/v1/sandboxes/{sandbox_id}/secrets/{env}", response_model=list[SecretBinding])
async def detach_secret(sandbox_id: str, env: EnvName, st: StateDep, team_id: TeamDep) -> list[SecretBinding]:
    """Unbind; commands started from now on do not have the variable."""
    return await st.sandboxes.detach_secret(team_id, sandbox_id, env)
