"""What the blocking SDK runs async underneath (a spawned process' WebSocket): one event loop on a
daemon thread, and `blocking`, which offers an async method of the implementation as a blocking one.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import types
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from hutch.sdk.codes import SdkCode
from hutch.sdk.errors import SandboxError

T = TypeVar("T")
P = ParamSpec("P")


class _Loop:
    """The one loop, started by the first call, shared by every blocking Process."""

    lock = threading.Lock()
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the portal's loop and wait for its result."""
    with _Loop.lock:
        if _Loop.loop is None:
            loop = asyncio.new_event_loop()
            _Loop.thread = threading.Thread(target=loop.run_forever, name="hutch-sdk-portal", daemon=True)
            _Loop.thread.start()
            _Loop.loop = loop
    if threading.current_thread() is _Loop.thread:  # an output callback calling back in: it would wait for itself
        coro.close()
        raise SandboxError("a blocking Process call from an output callback would wait for itself; "
                           "use AsyncSandbox there", code=SdkCode.INVALID_CALL)
    future = asyncio.run_coroutine_threadsafe(coro, _Loop.loop)
    try:
        return future.result()
    except BaseException:  # e.g. ^C while waiting: do not leave the call running behind us
        future.cancel()
        raise


class blocking(Generic[P, T]):
    """A blocking object's method that runs the async `fn` of the object it wraps (`_inner`) on the
    portal's loop: written once on the async class, its signature and docstring serve both."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]) -> None:
        @functools.wraps(fn)
        def method(wrapper: Any, *args: Any, **kwargs: Any) -> Any:
            return run_coroutine(fn(wrapper._inner, *args, **kwargs))

        self._method = method

    def __set_name__(self, owner: type, name: str) -> None:
        self._method.__qualname__ = f"{owner.__qualname__}.{name}"

    @overload
    def __get__(self, instance: None, owner: type) -> Callable[..., T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Callable[P, T]: ...

    def __get__(self, instance: object, owner: type | None = None) -> Callable[..., T]:
        return self._method if instance is None else types.MethodType(self._method, instance)
