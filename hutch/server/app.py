"""The ASGI app: hutch's routes (control plane /v1, data plane /data/v1), E2B's facade, the error
handlers and the request-size guard, put together around the server's state and its lifespan."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import sqlalchemy.exc
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount

from hutch import console, e2b, tracing
from hutch.e2b.hosts import HostListener
from hutch.e2b.webhooks import FLAVOR as E2B_WEBHOOKS
from hutch.e2b.webhooks import flavor as e2b_webhooks
from hutch.errors import ApiError
from hutch.server import errors
from hutch.server.middleware import MAX_JSON_BODY, BodyLimit
from hutch.server.routes import (
    code,
    commands,
    desktop,
    events,
    files,
    previews,
    sandboxes,
    secrets,
    snapshots,
    system,
    templates,
    volumes,
    webhooks,
)
from hutch.server.site_tls import site_tls
from hutch.server.state import RemoteNodes, State
from hutch.services.config import ServerConfig
from hutch.store import Store

log = logging.getLogger("hutch.server")

# In this order: FastAPI matches routes in the order they were added.
ROUTERS = (sandboxes.router, secrets.router, previews.router, system.router, templates.router, commands.router,
           files.router, code.router, desktop.router, snapshots.router, volumes.router, events.router, webhooks.router)


def _dump_tasks() -> None:
    tasks = asyncio.all_tasks()
    log.warning("%d tasks, each with where it waits:", len(tasks))
    for task in tasks:
        task.print_stack(limit=12, file=sys.stderr)


def _fleet_nodes(config: ServerConfig) -> Callable[[Store], RemoteNodes] | None:
    """A fleet's API server reaches its nodes through hutch.fleet (Ray: imported only then)."""
    fleet = config.fleet
    if fleet is None:
        return None
    from hutch.fleet.apiside import FleetNodes

    return lambda store: FleetNodes(fleet, store, config.data_dir)


async def warm_routes(app: FastAPI) -> None:
    """FastAPI builds a router's routes (each one's dependencies, read from its signature) when the
    first request reaches them: ~0.5-1 s of CPU here, which the first call after a start waited
    for, and every call queued behind it (a burst's creates). Paid at the start instead: a request
    to a path nothing serves goes past every route, at the root and under each mounted app."""
    prefixes = ["", *(route.path for route in app.routes if isinstance(route, Mount))]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hutch.internal") as client:
        for prefix in prefixes:
            await client.get(f"{prefix}/.hutch-warm-up")


def create_app(config: ServerConfig) -> FastAPI:
    envd = e2b.EnvdServices()  # E2B's envd: processes' timers and tags, file watchers

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = State(config, _fleet_nodes(config))
        app.state.hutch = st
        loop = asyncio.get_running_loop()
        tasks = []
        hosts_listener: HostListener | None = None
        if st.local is not None:
            st.node.start_reaping()
            await st.sandboxes.recovery.reconcile()  # before any lifetime acts on a box not yet taken back
            await st.templates.queue.reconcile()
            st.snapshots.reconcile()
        elif st.remote is not None:  # a fleet's nodes take back their own boxes; the API servers watch for lost nodes
            tasks.append(loop.create_task(st.remote.watch()))
        tasks.append(loop.create_task(st.sandboxes.lifetimes.run()))  # a fleet's: each API server's, one wins
        st.deliverer.flavors[E2B_WEBHOOKS] = e2b_webhooks(st.store)  # E2B's shape and signature
        tasks.append(loop.create_task(st.deliverer.run()))  # webhooks: likewise, a lease per endpoint
        loop.add_signal_handler(signal.SIGUSR2, _dump_tasks)  # `kill -USR2 <pid>`: what every task waits on
        # A closed terminal stops the server as SIGTERM does, with this shutdown (its default ends
        # the process at once, and the pool's boxes with no one to stop them but the guard)
        loop.add_signal_handler(signal.SIGHUP, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await warm_routes(app)
            if st.pool is not None:
                st.pool.start()
            await st.previews.proxy.start(config.host, config.preview_port)
            if config.e2b_port:
                tls = site_tls(config.e2b_tls_dir, config.e2b_domain, config.e2b_cert, config.e2b_key)
                hosts_listener = HostListener(app, config.e2b_domain, str(tls.certfile), str(tls.keyfile))
                await hosts_listener.start([config.host, "::1"] if config.host == "127.0.0.1" else [config.host],
                                           config.e2b_port)
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=60)  # the scheduler's steps end before what they use closes
            if st.pool is not None:  # first: nobody's boxes, and no later step's failure may skip them
                await st.pool.close()
            if hosts_listener is not None:  # first: no new request reaches the services below
                await hosts_listener.close()
            await envd.close()  # E2B's watchers and process timers
            await st.templates.queue.close()  # a build cut short is queued again for the next start
            await st.previews.proxy.close()
            if st.local is not None:
                await st.local.close()  # the sandboxes outlive the server; a restart takes them back
            else:
                await st.node.close()
            tracing.shutdown()  # the spans not yet sent

    app = FastAPI(title="hutch", version="0.1.0", lifespan=lifespan,
                  description="Self-hosted gVisor sandboxes for AI agents.")
    app.add_exception_handler(ApiError, errors.api_error_handler)
    app.add_exception_handler(RequestValidationError, errors.validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, errors.http_error_handler)
    app.add_exception_handler(sqlalchemy.exc.OperationalError, errors.store_error_handler)
    app.add_exception_handler(Exception, errors.unexpected_error_handler)
    app.add_middleware(BodyLimit, limit=MAX_JSON_BODY, streamed=e2b.STREAMED, streamed_puts=e2b.STREAMED_PUTS,
                       refusals={e2b.ENVD_PREFIX: e2b.too_large})
    endpoint = tracing.endpoint_from(config.otlp_endpoint)
    if endpoint:  # else no middleware and no wrapper: tracing off costs nothing
        tracing.setup(endpoint, "hutch")
        app.add_middleware(tracing.TraceRequests)  # outermost: the whole request is its span
    for router in ROUTERS:
        app.include_router(router)
    e2b.mount(app, lambda: app.state.hutch, envd)  # E2B's API, at /e2b (control plane) and /e2b/envd
    console.mount(app, lambda: app.state.hutch)  # the web console, at /console

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = errors.document_errors(get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
