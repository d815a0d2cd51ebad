"""The API's one error type and its JSON shape: {"error": {"code": ..., "message": ...}}.

Every error the server returns goes through here, with a stable `code` a client can switch on.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.routing import Match


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} {ident!r} does not exist")


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def _counted(request: HTTPConnection, code: str, status: int) -> None:
    metrics = getattr(getattr(request.app.state, "hutch", None), "metrics", None)
    if metrics is not None:  # codes are ours: few and fixed, so the label set stays small
        metrics.errors.labels(code[:64], str(status)).inc()


async def api_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    _counted(request, exc.code, exc.status)
    return JSONResponse(error_body(exc.code, exc.message, **exc.extra), status_code=exc.status)


def denial(conn: HTTPConnection, exc: ApiError) -> JSONResponse:
    """The answer to a refused WebSocket handshake: the same shape and count as any error."""
    _counted(conn, exc.code, exc.status)
    return JSONResponse(error_body(exc.code, exc.message, **exc.extra), status_code=exc.status)


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        _counted(request, "invalid_json", 400)
        return JSONResponse(error_body("invalid_json", "the request body is not valid JSON"), status_code=400)
    _counted(request, "invalid_request", 400)
    details = [{"field": ".".join(str(p) for p in e.get("loc", ())[1:]), "problem": e.get("msg", "")}
               for e in errors]
    first = details[0] if details else {"field": "", "problem": "invalid request"}
    message = f"{first['field'] or 'request'}: {first['problem']}"
    return JSONResponse(error_body("invalid_request", message, details=details), status_code=400)


STATUS_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                405: "method_not_allowed", 409: "conflict", 413: "payload_too_large", 429: "rate_limited"}


async def http_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = STATUS_CODES.get(exc.status_code, "server_error" if exc.status_code >= 500 else "invalid_request")
    _counted(request, code, exc.status_code)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette names only the first route of the path; say all of them
        headers["Allow"] = ", ".join(sorted(_methods_of(request)))
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers)


def _methods_of(request: Request) -> set[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return methods


ERROR_STATUSES = {400: "invalid input", 401: "no or a wrong API key or access token", 404: "no such thing (or not yours)",
                  409: "the sandbox's state does not allow it", 413: "too large", 429: "a quota is reached",
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
    status, code = (507, "insufficient_storage") if full else (503, "store_unavailable")
    _counted(request, code, status)
    message = "the server's disk is full; nothing was changed" if full else "the store is unavailable; try again"
    return JSONResponse(error_body(code, message), status_code=status)


async def unexpected_error_handler(request: Request, _exc: Exception) -> JSONResponse:
    _counted(request, "server_error", 500)
    return JSONResponse(error_body("server_error", "internal error; the server log has details"), status_code=500)
