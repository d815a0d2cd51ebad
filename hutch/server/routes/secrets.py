"""Secrets (/v1/secrets): stored sealed, never returned; rotated, audited; the named providers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.models import CreateSecret, ProviderInfo, RotateSecret, SecretAuditPage, SecretInfo, SecretName
from hutch.services.secrets import providers

router = APIRouter()


@router.post("/v1/secrets", status_code=201, response_model=SecretInfo)
async def create_secret(body: CreateSecret, st: StateDep, team_id: TeamDep) -> SecretInfo:
    """Store a credential (sealed at rest; no call ever returns it)."""
    return st.secrets.info(st.secrets.create(team_id, body))


@router.get("/v1/secrets", response_model=list[SecretInfo])
async def list_secrets(st: StateDep, team_id: TeamDep) -> list[SecretInfo]:
    return [st.secrets.info(r) for r in st.store.list_secrets(team_id)]


@router.get("/v1/secrets/{name}", response_model=SecretInfo)
async def get_secret(name: SecretName, st: StateDep, team_id: TeamDep) -> SecretInfo:
    return st.secrets.info(st.secrets.get(team_id, name))


@router.delete("/v1/secrets/{name}", status_code=204)
async def delete_secret(name: SecretName, st: StateDep, team_id: TeamDep) -> Response:
    """Boxes bound to it keep their stand-in, which is never swapped again (revoked)."""
    st.secrets.delete(team_id, name)
    return Response(status_code=204)


@router.post("/v1/secrets/{name}/rotate", response_model=SecretInfo)
async def rotate_secret(name: SecretName, body: RotateSecret, st: StateDep, team_id: TeamDep) -> SecretInfo:
    """A new value, used from the next request out of any box."""
    return st.secrets.info(st.secrets.rotate(team_id, name, body.value))


@router.get("/v1/secrets/{name}/audit", response_model=SecretAuditPage)
async def secret_audit(name: SecretName, st: StateDep, team_id: TeamDep,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                       before: Annotated[int | None, Query(ge=1)] = None,
                       sandbox_id: Annotated[str | None, Query(max_length=64)] = None) -> SecretAuditPage:
    """Every request the secret was swapped into, newest first."""
    return st.secrets.audit(team_id, name, limit, before, sandbox_id)


@router.get("/v1/providers", response_model=list[ProviderInfo])
async def list_providers(team_id: TeamDep) -> list[ProviderInfo]:
    """Services whose auth scheme and hosts a secret can take by name."""
    return providers()
