"""How each SDK call is written once for both sync and async: as a flow.

A flow is a generator that yields instructions (send a request, read the next line of a streamed
answer, call the user's callback, sleep before a retry, hand out an item) and gets their results
back. It does no I/O itself. `iter_sync` and `iter_async` carry the instructions out with httpx's
sync or async client, yielding what the flow emits; `run_sync` and `run_async` run a flow to its
end on top of them. They are the only code that differs between `Sandbox` and `AsyncSandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from hutch.sdk.errors import SandboxError, SandboxTimeoutError, ServerError, error_from_response

T = TypeVar("T")


@dataclass
class Call:
    """Send a request. With `stream`, only the status and headers are read; the body is read with
    NextLine. Answers a Reply."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] | None = None
    json: Any = None
    content: bytes | None = None
    stream: bool = False
    timeout: httpx.Timeout | None = None


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes = b""


@dataclass
class NextLine:
    """Answers the next line of the streamed reply, or None at its end."""


@dataclass
class Callback:
    """Call the user's function (awaited if it returns an awaitable). Answers None."""

    fn: Callable[[str], Any]
    arg: str


@dataclass
class Sleep:
    seconds: float


@dataclass
class Emit:
    """Hand an item out of the flow: the next item of `iter_sync`/`iter_async`, or the argument of
    `run_sync`/`run_async`'s `on_emit`. How a stream is offered both as an iterator and as a
    callback without writing it twice. Answers None."""

    item: Any


Instruction = Call | NextLine | Callback | Sleep | Emit
Flow = Generator[Instruction, Any, T]

RETRY_STATUSES = {429, 502, 503, 504}
RETRIES = 3


def send(call: Call) -> Flow[Reply]:
    """Send one request and raise the typed error for a failure answer. GET and DELETE are retried
    with backoff on transient failures; POST, PUT and PATCH never are (they may have taken effect)."""
    idempotent = call.method in ("GET", "DELETE")
    attempt = 0
    while True:
        attempt += 1
        try:
            reply: Reply = yield call
        except httpx.TimeoutException as e:
            if idempotent and attempt <= RETRIES:
                yield Sleep(backoff(attempt))
                continue
            raise SandboxTimeoutError(f"the request timed out: {e}", code="request_timeout") from e
        except httpx.TransportError as e:
            if idempotent and attempt <= RETRIES:
                yield Sleep(backoff(attempt))
                continue
            raise ServerError(f"could not reach the server: {e}", code="connection_error") from e
        if reply.status < 400:
            return reply
        if idempotent and reply.status in RETRY_STATUSES and attempt <= RETRIES and not call.stream:
            yield Sleep(backoff(attempt))
            continue
        raise error_from_response(reply.status, reply.body)


def backoff(attempt: int) -> float:
    """Seconds before retry number `attempt`: doubling from 0.2 up to 4, with jitter."""
    return min(4.0, 0.2 * 2.0 ** (attempt - 1)) * (0.5 + random.random() / 2)


class _Streamed:
    """The one streamed response a flow may hold open at a time."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None
        self.lines: Iterator[str] | None = None
        self.alines: AsyncIterator[str] | None = None


def iter_sync(client: httpx.Client, flow: Flow[T]) -> Generator[Any, None, T]:
    """Carry out a flow's instructions, yielding the items it emits; returns what the flow returns.
    Closing the generator early closes the flow and its stream."""
    streamed = _Streamed()
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                if isinstance(step, Call):
                    value = _send_sync(client, step, streamed)
                elif isinstance(step, NextLine):
                    assert streamed.lines is not None
                    value = next(streamed.lines, None)
                elif isinstance(step, Callback):
                    step.fn(step.arg)
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                elif isinstance(step, Emit):
                    yield step.item
            except httpx.TransportError as e:
                error = e
    finally:
        if streamed.response is not None:
            streamed.response.close()
        flow.close()


def run_sync(client: httpx.Client, flow: Flow[T], on_emit: Callable[[Any], Any] | None = None) -> T:
    """Run a flow to its end; the items it emits go to `on_emit` (or nowhere)."""
    items = iter_sync(client, flow)
    try:
        while True:
            try:
                item = next(items)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if on_emit is not None:
                on_emit(item)
    finally:
        items.close()


def _send_sync(client: httpx.Client, call: Call, streamed: _Streamed) -> Reply:
    if streamed.response is not None:  # a new request ends the stream the flow held
        streamed.response.close()
        streamed.response = streamed.lines = None
    request = client.build_request(call.method, call.url, headers=call.headers, params=call.params,
                                   json=call.json, content=call.content, timeout=_timeout(client, call))
    response = client.send(request, stream=call.stream)
    if call.stream:
        if response.status_code >= 400:
            body = response.read()
            response.close()
            return Reply(response.status_code, response.headers, body)
        streamed.response, streamed.lines = response, response.iter_lines()
    return Reply(response.status_code, response.headers, b"" if call.stream else response.content)


async def iter_async(client: httpx.AsyncClient, flow: Flow[Any]) -> AsyncGenerator[Any, None]:
    """`iter_sync` for asyncio. An async generator returns nothing: `run_async` keeps the flow's
    result."""
    streamed = _Streamed()
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration:
                return
            value, error = None, None
            try:
                if isinstance(step, Call):
                    value = await _send_async(client, step, streamed)
                elif isinstance(step, NextLine):
                    assert streamed.alines is not None
                    value = await anext(streamed.alines, None)
                elif isinstance(step, Callback):
                    await call_back(step.fn, step.arg)
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Emit):
                    yield step.item
            except httpx.TransportError as e:
                error = e
    finally:
        if streamed.response is not None:
            await streamed.response.aclose()
        flow.close()


async def run_async(client: httpx.AsyncClient, flow: Flow[T], on_emit: Callable[[Any], Any] | None = None) -> T:
    """Run a flow to its end; the items it emits go to `on_emit` (awaited if it returns an awaitable)."""
    result: list[T] = []
    async with contextlib.aclosing(iter_async(client, _keep(flow, result))) as items:
        async for item in items:
            if on_emit is not None:
                await call_back(on_emit, item)
    return result[0]


def _keep(flow: Flow[T], result: list[T]) -> Flow[None]:
    result.append((yield from flow))


async def _send_async(client: httpx.AsyncClient, call: Call, streamed: _Streamed) -> Reply:
    if streamed.response is not None:
        await streamed.response.aclose()
        streamed.response = streamed.alines = None
    request = client.build_request(call.method, call.url, headers=call.headers, params=call.params,
                                   json=call.json, content=call.content, timeout=_timeout(client, call))
    response = await client.send(request, stream=call.stream)
    if call.stream:
        if response.status_code >= 400:
            body = await response.aread()
            await response.aclose()
            return Reply(response.status_code, response.headers, body)
        streamed.response, streamed.alines = response, response.aiter_lines()
    return Reply(response.status_code, response.headers, b"" if call.stream else response.content)


async def call_back(fn: Callable[[T], Any], arg: T) -> None:
    """Call a user's callback, awaiting what it returns if it is awaitable (async SDK)."""
    result = fn(arg)
    if inspect.isawaitable(result):
        await result


def _timeout(client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Timeout:
    return call.timeout or client.timeout


__all__ = ["Call", "Callback", "Emit", "Flow", "NextLine", "Reply", "SandboxError", "Sleep", "iter_async", "iter_sync",
           "run_async", "run_sync", "send"]
