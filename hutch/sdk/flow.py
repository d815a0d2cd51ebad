"""How each SDK call is written once for both sync and async: as a flow.

A flow is a generator that yields instructions (send a request, read the next line of a streamed
answer, call the user's callback, sleep before a retry, await what is async underneath, hand out
an item) and gets their results back. It does no I/O itself. `iter_sync` and `iter_async` carry
the instructions out with httpx's sync or async client, yielding what the flow emits; `run_sync`
and `run_async` run a flow to its end on top of them. They, the session's runners (which client)
and the fronts' descriptors (which runner), are the only code that differs between `Sandbox` and
`AsyncSandbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from hutch.sdk.codes import SdkCode
from hutch.sdk.errors import SandboxTimeoutError, ServerError, error_from_response
from hutch.sdk.portal import run_coroutine

T = TypeVar("T")
A = TypeVar("A")


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

    fn: Callable[[Any], Any]
    arg: Any


@dataclass
class Sleep:
    seconds: float


@dataclass
class Await:
    """Run a coroutine (what is async underneath, a process' WebSocket): awaited by `iter_async`,
    on the portal's loop by `iter_sync`. Answers its result; what it raises is thrown into the flow."""

    make: Callable[[], Coroutine[Any, Any, Any]]


@dataclass
class Emit:
    """Hand an item out of the flow: the next item of `iter_sync`/`iter_async`. How a stream is
    offered as an iterator on both fronts without writing it twice. Answers None."""

    item: Any


Instruction = Call | NextLine | Callback | Sleep | Await | Emit
Flow = Generator[Instruction, Any, T]

RETRY_STATUSES = {429, 502, 503, 504}
RETRIES = 3
SEND_PIECE = 2**20  # how a large body is handed to the sync transport (see _request)


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
            raise SandboxTimeoutError(f"the request timed out: {e}", code=SdkCode.REQUEST_TIMEOUT) from e
        except httpx.TransportError as e:
            if idempotent and attempt <= RETRIES:
                yield Sleep(backoff(attempt))
                continue
            raise ServerError(f"could not reach the server: {e}", code=SdkCode.CONNECTION_ERROR) from e
        if reply.status < 400:
            return reply
        if idempotent and reply.status in RETRY_STATUSES and attempt <= RETRIES and not call.stream:
            yield Sleep(backoff(attempt))
            continue
        raise error_from_response(reply.status, reply.body)


def backoff(attempt: int) -> float:
    """Seconds before retry number `attempt`: doubling from 0.2 up to 4, with jitter."""
    return min(4.0, 0.2 * 2.0 ** (attempt - 1)) * (0.5 + random.random() / 2)


def mapped(flow: Flow[A], fn: Callable[[A], T]) -> Flow[T]:
    """The flow, what it returns passed through `fn`."""
    return fn((yield from flow))


class _Driver:
    """A flow being carried out: iterated, its instructions; fed, what each answered or raised.
    Holds the one streamed response the flow may have open, closed with the flow on exit."""

    def __init__(self, flow: Flow[Any]) -> None:
        self.flow = flow
        self.answer: Any = None
        self.error: BaseException | None = None
        self.result: Any = None  # what the flow returned
        self.response: httpx.Response | None = None
        self.lines: Iterator[str] | None = None
        self.alines: AsyncIterator[str] | None = None

    def __iter__(self) -> Iterator[Instruction]:
        while True:
            try:
                step = self.flow.throw(self.error) if self.error is not None else self.flow.send(self.answer)
            except StopIteration as stop:
                self.result = stop.value
                return
            self.answer, self.error = None, None
            yield step

    @contextlib.contextmanager
    def answering(self, step: Instruction) -> Iterator[None]:
        """Around carrying out `step`: what the flow handles itself is thrown into it, a broken
        connection (to retry, or to say what broke) or anything an Await raised. Anything else
        ends the run."""
        try:
            yield
        except BaseException as e:
            if not isinstance(e, httpx.TransportError) and not isinstance(step, Await):
                raise
            self.error = e

    def streaming(self, response: httpx.Response) -> Reply:
        self.response = response
        return Reply(response.status_code, response.headers)

    def __enter__(self) -> _Driver:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.response is not None:
            self.response.close()
        self.flow.close()

    async def __aenter__(self) -> _Driver:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self.response is not None:
            await self.response.aclose()
        self.flow.close()


def _request(client: httpx.Client | httpx.AsyncClient, call: Call, pieced: bool = False) -> httpx.Request:
    """The call as httpx's request. `pieced` (the sync front): a large body is handed over in
    pieces, as httpcore's sync write slices off what each send took and keeps the rest, a copy of
    the rest every time (a 100 MB upload cost its client 0.7 s of CPU). The length still goes as
    Content-Length, so nothing is chunked."""
    data, headers = call.content, call.headers
    content: bytes | Iterator[bytes] | None = data
    if pieced and data is not None and len(data) > SEND_PIECE:
        content = (data[i:i + SEND_PIECE] for i in range(0, len(data), SEND_PIECE))
        headers = {**headers, "Content-Length": str(len(data))}
    return client.build_request(call.method, call.url, headers=headers, params=call.params, json=call.json,
                                content=content, timeout=call.timeout or client.timeout)


def iter_sync(client: httpx.Client, flow: Flow[T]) -> Generator[Any, None, T]:
    """Carry out a flow's instructions, yielding the items it emits; returns what the flow returns.
    Closing the generator early closes the flow and its stream."""
    with _Driver(flow) as driver:
        for step in driver:
            if isinstance(step, Emit):
                yield step.item
            with driver.answering(step):
                driver.answer = _carry_out_sync(client, driver, step)
        return driver.result  # type: ignore[no-any-return]


def _carry_out_sync(client: httpx.Client, driver: _Driver, step: Instruction) -> Any:
    if isinstance(step, Call):
        return _send_sync(client, driver, step)
    if isinstance(step, NextLine):
        assert driver.lines is not None
        return next(driver.lines, None)
    if isinstance(step, Await):
        return run_coroutine(step.make())
    if isinstance(step, Callback):
        step.fn(step.arg)
    elif isinstance(step, Sleep):
        time.sleep(step.seconds)
    return None


def _send_sync(client: httpx.Client, driver: _Driver, call: Call) -> Reply:
    if driver.response is not None:  # a new request ends the stream the flow held
        driver.response.close()
        driver.response = driver.lines = None
    response = client.send(_request(client, call, pieced=True), stream=True)
    if not call.stream:
        whole = io.BytesIO()  # not httpx's read: see _send_async
        try:
            for piece in response.iter_bytes():
                whole.write(piece)
        finally:
            response.close()
        return Reply(response.status_code, response.headers, whole.getvalue())
    if response.status_code >= 400:
        body = response.read()
        response.close()
        return Reply(response.status_code, response.headers, body)
    driver.lines = response.iter_lines()
    return driver.streaming(response)


def run_sync(client: httpx.Client, flow: Flow[T]) -> T:
    """Run a flow to its end; the items it emits go nowhere."""
    items = iter_sync(client, flow)
    try:
        while True:
            next(items)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        items.close()


async def iter_async(client: httpx.AsyncClient, flow: Flow[Any]) -> AsyncGenerator[Any, None]:
    """`iter_sync` for asyncio. An async generator returns nothing: `run_async` keeps the flow's
    result."""
    async with _Driver(flow) as driver:
        for step in driver:
            if isinstance(step, Emit):
                yield step.item
            with driver.answering(step):
                driver.answer = await _carry_out_async(client, driver, step)


async def _carry_out_async(client: httpx.AsyncClient, driver: _Driver, step: Instruction) -> Any:
    if isinstance(step, Call):
        return await _send_async(client, driver, step)
    if isinstance(step, NextLine):
        assert driver.alines is not None
        return await anext(driver.alines, None)
    if isinstance(step, Await):
        return await step.make()
    if isinstance(step, Callback):
        await call_back(step.fn, step.arg)
    elif isinstance(step, Sleep):
        await asyncio.sleep(step.seconds)
    return None


async def _send_async(client: httpx.AsyncClient, driver: _Driver, call: Call) -> Reply:
    if driver.response is not None:
        await driver.response.aclose()
        driver.response = driver.alines = None
    response = await client.send(_request(client, call), stream=True)
    if not call.stream:
        # A whole body, gathered as it comes. httpx's own read keeps every piece (~1,600 for 100 MB)
        # and then joins them: twice the body in fresh memory, ~0.5 s of a 100 MB read's CPU on this
        # host. A BytesIO grows in place and hands its buffer over without a copy: ~0.15 s.
        whole = io.BytesIO()
        try:
            async for piece in response.aiter_bytes():
                whole.write(piece)
        finally:
            await response.aclose()
        return Reply(response.status_code, response.headers, whole.getvalue())
    if response.status_code >= 400:
        body = await response.aread()
        await response.aclose()
        return Reply(response.status_code, response.headers, body)
    driver.alines = response.aiter_lines()
    return driver.streaming(response)


async def run_async(client: httpx.AsyncClient, flow: Flow[T]) -> T:
    """Run a flow to its end; the items it emits go nowhere."""
    result: list[T] = []
    async with contextlib.aclosing(iter_async(client, _keep(flow, result))) as items:
        async for _item in items:
            pass
    return result[0]


def _keep(flow: Flow[T], result: list[T]) -> Flow[None]:
    result.append((yield from flow))


async def call_back(fn: Callable[[T], Any], arg: T) -> None:
    """Call a user's callback, awaiting what it returns if it is awaitable (async SDK)."""
    result = fn(arg)
    if inspect.isawaitable(result):
        await result

