"""E2B's API on hutch: the control plane at /e2b and envd at /e2b/envd, so the unmodified e2b SDK
(and what is built on it) drives hutch boxes. Set E2B_API_URL=<hutch>/e2b,
E2B_SANDBOX_URL=<hutch>/e2b/envd and E2B_API_KEY to a team's `e2b_` key.

Both are FastAPI apps mounted in hutch's, each with E2B's error shapes; they call hutch's own
services (Sandboxes, DataPlane, the audit log), so a box is one box to both APIs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.routing import Route

from hutch.e2b import files, filesystem, ports, process, rest, wsports
from hutch.e2b.common import StateGetter
from hutch.e2b.connect import ConnectError
from hutch.e2b.control import control_routes
from hutch.e2b.envd import SandboxGone, basic_user, call_of, sandbox_of
from hutch.errors import ApiError, Code, for_http_status
from hutch.store import SandboxStatus

log = logging.getLogger("hutch.e2b")

API_PREFIX = "/e2b"
ENVD_PREFIX = "/e2b/envd"
# bodies bounded where they stream (the file limit; each Connect message), not by hutch's JSON limit
# the SDK's signed links (download_url/upload_url) drop E2B_SANDBOX_URL's path: envd's /files at the root
SIGNED_FILES = "/files"
# E2B's volume content API and a template's COPY uploads: their PUT bodies stream, bounded where they land
STREAMED_PUTS = (API_PREFIX + "/volumecontent/", API_PREFIX + "/template-uploads/")
STREAMED = frozenset({ENVD_PREFIX + "/files", SIGNED_FILES, ENVD_PREFIX + "/process.Process/StreamInput"})


def too_large(message: str) -> tuple[int, dict[str, Any]]:
    """hutch's body guard (BodyLimit) refusing on envd's paths: a Connect client reads
    resource_exhausted (429)."""
    error = ConnectError.of_code(Code.PAYLOAD_TOO_LARGE, message)
    return error.status, error.body()


def _rest_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(rest.error_body(status, message), status_code=status, headers=headers)


def _is_rpc(request: Request) -> bool:
    """A Connect call (envd's /<service>/<method>): its errors are Connect's, with a string code."""
    return request.url.path.rstrip("/").rsplit("/", 2)[-2:-1] in (["process.Process"], ["filesystem.Filesystem"])


def _rest_handlers(app: FastAPI, get_state: StateGetter) -> None:
    """E2B's REST error body, {"code": <status>, "message"} (Connect's on envd's RPC paths); a
    failed create is never retried. Errors are counted as hutch's own are."""

    def counted(code: str, status: int) -> None:
        with contextlib.suppress(Exception):  # before start-up has made the state
            get_state().metrics.errors.labels(code[:64], str(status)).inc()

    def answer(request: Request, code: Code, message: str) -> JSONResponse:
        status = code.status
        counted(code, status)
        if _is_rpc(request):
            return ConnectError.of_code(code, message).response()
        no_retry = {"Should-Retry": "false"} if request.method == "POST" and status >= 500 else None
        return _rest_error(status, message, no_retry)

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return answer(request, exc.code, exc.message)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        return answer(request, Code.INVALID_REQUEST, "the request is not valid")

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return answer(request, for_http_status(exc.status_code), str(exc.detail))

    async def connect_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ConnectError)
        counted(exc.code, exc.status)
        return exc.response()

    async def gone(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SandboxGone)
        counted("sandbox_not_found", exc.status)
        return JSONResponse(exc.body(), status_code=exc.status)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        """As hutch's: the store could not answer or write (a full disk is said so)."""
        full = "full" in str(exc).lower() or "no space" in str(exc).lower()
        code = Code.INSUFFICIENT_STORAGE if full else Code.STORE_UNAVAILABLE
        return answer(request, code, "the server's disk is full" if full else "the store is unavailable; try again")

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RecursionError):  # a body nested too deep for the JSON parser
            return answer(request, Code.INVALID_REQUEST, "the request is nested too deeply")
        log.exception("an E2B call failed", exc_info=exc)
        return answer(request, Code.SERVER_ERROR, "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(ConnectError, connect_error)
    app.add_exception_handler(SandboxGone, gone)
    app.add_exception_handler(sqlalchemy.exc.OperationalError, store_error)
    app.add_exception_handler(Exception, unexpected)


@dataclass
class EnvdServices:
    """What envd keeps between calls: made by the app with the facade, closed by its lifespan."""

    procs: process.Processes = field(default_factory=process.Processes)
    watchers: filesystem.Watchers = field(default_factory=filesystem.Watchers)

    async def close(self) -> None:
        self.procs.close()
        await self.watchers.close()


def envd_app(get_state: StateGetter, services: EnvdServices) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    _rest_handlers(app, get_state)

    @app.get("/health")
    async def health(request: Request) -> Response:
        _st, rec = sandbox_of(get_state, request)
        if rec.status != SandboxStatus.ACTIVE:  # a paused box's envd does not answer; no resume for a probe
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
                return await process.dispatch(services.procs, method, call, request)
            if service == "filesystem.Filesystem":
                return await filesystem.dispatch(services.watchers, method, call, request)
            raise ConnectError.unimplemented(f"{service}/{method}")
        except ApiError as e:
            raise ConnectError.of(e) from None

    return app


def port_app(get_state: StateGetter) -> FastAPI:
    """Every path and method of a box's other ports, with envd's error shapes."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    _rest_handlers(app, get_state)

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
    async def other_port(path: str, request: Request) -> Response:
        return await ports.forward(get_state, request)

    return app


def mount(app: FastAPI, get_state: StateGetter, services: EnvdServices) -> None:
    """envd first: the control plane's prefix holds it. On envd's URL, a request naming another
    port of the box goes to that port (ports.py). envd's `/files` is at the root too, where the
    SDK's signed links land (signing.py)."""
    envd = envd_app(get_state, services)
    app.mount(ENVD_PREFIX, ports.ByPort(envd, port_app(get_state), functools.partial(wsports.forward, get_state)))
    app.router.routes.append(Route(SIGNED_FILES, envd, include_in_schema=False))  # any method: envd answers
    control = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    _rest_handlers(control, get_state)
    control_routes(control, get_state)
    app.mount(API_PREFIX, control)
