"""E2B's API on hutch: the control plane at /e2b and envd at /e2b/envd, so the unmodified e2b SDK
(and what is built on it) drives hutch boxes. Set E2B_API_URL=<hutch>/e2b,
E2B_SANDBOX_URL=<hutch>/e2b/envd and E2B_API_KEY to a team's `e2b_` key.

Both are FastAPI apps mounted in hutch's, each with E2B's error shapes; they call hutch's own
services (Sandboxes, DataPlane, the audit log), so a box is one box to both APIs.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from hutch.e2b import files, filesystem, process
from hutch.e2b.common import StateGetter
from hutch.e2b.connect import ConnectError
from hutch.e2b.control import control_routes
from hutch.e2b.envd import SandboxGone, basic_user, call_of, sandbox_of
from hutch.server.errors import ApiError

log = logging.getLogger("hutch.e2b")

API_PREFIX = "/e2b"
ENVD_PREFIX = "/e2b/envd"


def _rest_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


def _rest_handlers(app: FastAPI) -> None:
    """E2B's REST error body, {"code": <status>, "message"}; a failed create is never retried."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        no_retry = {"Should-Retry": "false"} if request.method == "POST" and exc.status >= 500 else None
        return _rest_error(exc.status, exc.message, no_retry)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        return _rest_error(400, "the request is not valid")

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return _rest_error(exc.status_code, str(exc.detail))

    async def connect_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ConnectError)
        return exc.response()

    async def gone(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SandboxGone)
        return JSONResponse(exc.body(), status_code=502)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("an E2B call failed", exc_info=exc)
        return _rest_error(500, "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(ConnectError, connect_error)
    app.add_exception_handler(SandboxGone, gone)
    app.add_exception_handler(Exception, unexpected)


def envd_app(get_state: StateGetter) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    _rest_handlers(app)
    procs = process.Processes()
    watchers = filesystem.Watchers()

    @app.get("/health")
    async def health(request: Request) -> Response:
        _st, rec = sandbox_of(get_state, request)
        if rec.status != "active":  # a paused box's envd does not answer; no resume for a probe
            raise SandboxGone(rec.id)
        return Response(status_code=204)

    @app.get("/files")
    async def download(request: Request) -> Any:
        return await files.download(get_state, request)

    @app.post("/files")
    async def upload(request: Request) -> Any:
        return await files.upload(get_state, request)

    @app.post("/{service}/{method}")
    async def rpc(service: str, method: str, request: Request) -> Response:
        try:
            call = call_of(get_state, request, basic_user(request))
            if service == "process.Process":
                return await process.dispatch(procs, method, call, request)
            if service == "filesystem.Filesystem":
                return await filesystem.dispatch(watchers, method, call, request)
            raise ConnectError("unimplemented", f"{service}/{method} is not implemented")
        except ApiError as e:
            raise ConnectError.of(e) from None

    return app


def mount(app: FastAPI, get_state: StateGetter) -> None:
    """envd first: the control plane's prefix holds it."""
    app.mount(ENVD_PREFIX, envd_app(get_state))
    control = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    _rest_handlers(control)
    control_routes(control, get_state)
    app.mount(API_PREFIX, control)
