"""E2B's secrets over hutch's (hutch.services.secrets): /secrets (create, list by pages, get, update
with a new value, destroy), by id or name. A value goes in and never comes out. E2B's secrets
have no hosts of their own: a box's network rules (hutch.services.header_rules) name the domains
and headers a secret's `${e2b.secrets.NAME}` is set in, by the egress proxy, audited as hutch's.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import TypeAdapter, ValidationError
from starlette.responses import JSONResponse

from hutch.e2b.common import Ctx, iso, validation_message
from hutch.errors import ApiError, Code
from hutch.services.header_rules import SECRET_NAME
from hutch.services.models import MAX_METADATA_KEYS, SecretValue
from hutch.store import SecretRecord

VALUE: TypeAdapter[str] = TypeAdapter(SecretValue)



def shown(rec: SecretRecord) -> dict[str, Any]:
    return {"secretID": rec.id, "name": rec.name, "currentVersion": rec.version, "metadata": rec.metadata or {},
            "createdAt": iso(rec.created_at), "updatedAt": iso(rec.updated_at)}


def _value(body: dict[str, Any]) -> str:
    """A value as hutch's secrets take one: it travels in an HTTP header."""
    try:
        return VALUE.validate_python(body.get("value"))
    except ValidationError as e:
        raise ApiError(Code.INVALID_REQUEST, "value: " + validation_message(e)) from None


def _metadata(body: dict[str, Any]) -> dict[str, str] | None:
    metadata = body.get("metadata")
    if metadata is None:
        return None
    if (not isinstance(metadata, dict) or len(metadata) > MAX_METADATA_KEYS
            or not all(isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= 128 and len(v) <= 1024
                       for k, v in metadata.items())):
        raise ApiError(Code.INVALID_REQUEST, f"metadata maps at most {MAX_METADATA_KEYS} names to strings")
    return metadata


def secret_routes(app: FastAPI, ctx: Any, body_of: Any, page: Any) -> None:
    """On E2B's control app: `ctx(request)` is its API-key check, `body_of(request)` its JSON body,
    `page(items, query, key)` its pagination by cursor."""

    @app.post("/secrets", status_code=201)
    async def create(request: Request) -> Any:
        c: Ctx = await ctx(request)
        body = await body_of(request)
        name = body.get("name")
        if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
            raise ApiError(Code.INVALID_REQUEST, "name must be letters, digits, '.', '_' or '-' (at most 128), "
                                                 "starting with a letter or digit")
        rec = c.st.secrets.create_unbound(c.team_id, name, _value(body), _metadata(body))
        return JSONResponse(shown(rec), status_code=201)

    @app.get("/secrets")
    async def list_secrets(request: Request) -> Any:
        c: Ctx = await ctx(request)
        items, headers = page(c.st.store.list_secrets(c.team_id), request.query_params,
                              lambda r: (r.created_at, r.id))
        return JSONResponse([shown(r) for r in items], headers=headers)

    @app.get("/secrets/{ref}")
    async def get_secret(ref: str, request: Request) -> Any:
        c: Ctx = await ctx(request)
        return shown(c.st.secrets.find(c.team_id, ref))

    @app.post("/secrets/{ref}")
    async def update(ref: str, request: Request) -> Any:
        c: Ctx = await ctx(request)
        body = await body_of(request)
        rec = c.st.secrets.find(c.team_id, ref)
        return shown(c.st.secrets.rotate(c.team_id, rec.name, _value(body), _metadata(body)))

    @app.delete("/secrets/{ref}", status_code=204)
    async def destroy(ref: str, request: Request) -> Response:
        c: Ctx = await ctx(request)
        c.st.secrets.delete(c.team_id, c.st.secrets.find(c.team_id, ref).name)
        return Response(status_code=204)
