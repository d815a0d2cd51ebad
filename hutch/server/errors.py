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
    return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


async def unexpected_error_handler(request: Request, _exc: Exception) -> JSONResponse:
    _counted(request, "server_error", 500)
    return JSONResponse(error_body("server_error", "internal error; the server log has details"), status_code=500)
