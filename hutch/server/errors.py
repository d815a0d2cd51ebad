"""How the API answers an error: the JSON shape {"error": {"code": ..., "message": ...}}, the
handlers that turn every failure into it, and the OpenAPI document's account of them.

The codes and their statuses are the catalogue in `hutch.errors`; nothing here invents one.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.routing import Match

from hutch.errors import ApiError, Code, for_http_status


def error_fields(code: Code, message: str, **extra: Any) -> dict[str, Any]:
    """An error's code and message (and more): inside error_body, and an error event of a stream
    (SSE, NDJSON, a WebSocket's frame). The one builder of them: the code is the catalogue's."""
    return {"code": code, "message": message, **extra}


def error_body(code: Code, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": error_fields(code, message, **extra)}


def _counted(request: HTTPConnection, code: Code) -> None:
    metrics = getattr(getattr(request.app.state, "hutch", None), "metrics", None)
    if metrics is not None:  # codes are the catalogue's: few and fixed, so the label set stays small
        metrics.errors.labels(code, str(code.status)).inc()


def answer(request: HTTPConnection, code: Code, message: str, headers: dict[str, str] | None = None,
           **extra: Any) -> JSONResponse:
    """The error answer for a code, counted: every handler here ends in it."""
    _counted(request, code)
    return JSONResponse(error_body(code, message, **extra), status_code=code.status, headers=headers)


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return answer(request, exc.code, exc.message, **exc.extra)


def denial(conn: HTTPConnection, exc: ApiError) -> JSONResponse:
    """The answer to a refused WebSocket handshake: the same shape and count as any error."""
    return answer(conn, exc.code, exc.message, **exc.extra)


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return answer(request, Code.INVALID_JSON, "the request body is not valid JSON")
    details = [{"field": ".".join(str(p) for p in e.get("loc", ())[1:]), "problem": e.get("msg", "")}
               for e in errors]
    first = details[0] if details else {"field": "", "problem": "invalid request"}
    message = f"{first['field'] or 'request'}: {first['problem']}"
    return answer(request, Code.INVALID_REQUEST, message, details=details)


async def http_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = for_http_status(exc.status_code)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette names only the first route of the path; say all of them
        headers["Allow"] = ", ".join(sorted(_methods_of(request)))
    return answer(request, code, str(exc.detail), headers=headers)


def _methods_of(request: Request) -> set[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return methods


ERROR_STATUSES = {400: "invalid input", 401: "no or a wrong API key or access token", 404: "no such thing (or not yours)",
                  409: "the sandbox's state does not allow it", 413: "too large", 429: "a quota or a rate limit is reached",
                  502: "the sandbox's agent answered wrongly", 503: "the sandbox or node cannot do it now",
                  507: "the server's disk is full"}


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document as the API behaves: every operation may answer the error shape with
    these statuses, and validation failures are 400s in that shape (never FastAPI's 422)."""
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = {
        "type": "object", "required": ["error"],
        "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"type": "string"}, "message": {"type": "string"}}}},
    }
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, description in ERROR_STATUSES.items():
                responses.setdefault(str(status), {"description": description, **error})
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)
    return schema


async def store_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """The store could not write: a full disk is the likely one, and it is said so; nothing was
    changed (every change is one transaction)."""
    full = "full" in str(exc).lower() or "no space" in str(exc).lower()
    code = Code.INSUFFICIENT_STORAGE if full else Code.STORE_UNAVAILABLE
    message = "the server's disk is full; nothing was changed" if full else "the store is unavailable; try again"
    return answer(request, code, message)


async def unexpected_error_handler(request: Request, _exc: Exception) -> JSONResponse:
    return answer(request, Code.SERVER_ERROR, "internal error; the server log has details")
