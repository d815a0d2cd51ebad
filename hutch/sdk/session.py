"""The HTTP client a front's calls run on: the one place the SDK makes httpx clients.

A `Session` is a front's configuration and, for a sandbox (`keep`), the client its calls share
until `close()`; templates and secrets make a client for each call. The functions below run a
flow on a session, with the blocking client or the asyncio one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig, tls_context
from hutch.sdk.errors import ValidationError
from hutch.sdk.flow import Flow, iter_async, iter_sync, run_async, run_sync

T = TypeVar("T")


@dataclass
class Session:
    cfg: ConnectionConfig
    keep: bool = False  # one client for every call (a sandbox's, shared by its commands and files)
    client: httpx.Client | httpx.AsyncClient | None = None  # the kept one, made by the first call


def sync_client(cfg: ConnectionConfig) -> httpx.Client:
    transport = cfg.transport
    if transport is not None and not isinstance(transport, httpx.BaseTransport):
        raise ValidationError("the blocking SDK needs an httpx.BaseTransport", code=SdkCode.INVALID_ARGUMENT)
    return httpx.Client(timeout=cfg.request_timeout, verify=tls_context(), transport=transport)


def async_client(cfg: ConnectionConfig) -> httpx.AsyncClient:
    transport = cfg.transport
    if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
        raise ValidationError("the async SDK needs an httpx.AsyncBaseTransport", code=SdkCode.INVALID_ARGUMENT)
    return httpx.AsyncClient(timeout=cfg.request_timeout, verify=tls_context(), transport=transport)


# --- blocking -------------------------------------------------------------------------------------

def _kept_sync(session: Session) -> httpx.Client:
    if not isinstance(session.client, httpx.Client) or session.client.is_closed:  # again after close(): the
        session.client = sync_client(session.cfg)  # server has the last word on whether the sandbox is there
    return session.client


def run_blocking(session: Session, flow: Flow[T]) -> T:
    if not session.keep:
        with sync_client(session.cfg) as client:
            return run_sync(client, flow)
    return run_sync(_kept_sync(session), flow)


def iterate_blocking(session: Session, flow: Flow[Any]) -> Generator[Any, None, Any]:
    """The items the flow emits; a session that keeps no client makes one when the first is asked for."""
    if session.keep:
        return iter_sync(_kept_sync(session), flow)
    return _iterate_once(session.cfg, flow)


def _iterate_once(cfg: ConnectionConfig, flow: Flow[Any]) -> Generator[Any, None, Any]:
    with sync_client(cfg) as client:
        return (yield from iter_sync(client, flow))


def close_blocking(session: Session) -> None:
    if isinstance(session.client, httpx.Client):
        session.client.close()


# --- asyncio --------------------------------------------------------------------------------------

def _kept_async(session: Session) -> httpx.AsyncClient:
    if not isinstance(session.client, httpx.AsyncClient) or session.client.is_closed:
        session.client = async_client(session.cfg)
    return session.client


async def run_awaited(session: Session, flow: Flow[T]) -> T:
    if not session.keep:
        async with async_client(session.cfg) as client:
            return await run_async(client, flow)
    return await run_async(_kept_async(session), flow)


def iterate_awaited(session: Session, flow: Flow[Any]) -> AsyncGenerator[Any, None]:
    if session.keep:
        return iter_async(_kept_async(session), flow)
    return _aiterate_once(session.cfg, flow)


async def _aiterate_once(cfg: ConnectionConfig, flow: Flow[Any]) -> AsyncGenerator[Any, None]:
    async with async_client(cfg) as client, contextlib.aclosing(iter_async(client, flow)) as items:
        async for item in items:
            yield item


async def close_awaited(session: Session) -> None:
    if isinstance(session.client, httpx.AsyncClient):
        await session.client.aclose()
