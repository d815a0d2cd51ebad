"""Each public call written once, and offered by both fronts.

A call is a method of a front's shared base that returns its flow (`call`), or for a class's own
calls (`Sandbox.create`) a `Job`: the flow and the session it runs on (`classcall`). Read off a
`SyncFront` (`Sandbox`) the descriptor gives a method that runs the flow to its end; off an
`AsyncFront` (`AsyncSandbox`), a coroutine function. So a call's signature and docstring exist
once, `help()` shows them on both fronts, and mypy sees `T` on one and `Awaitable[T]` on the other.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, Generic, NamedTuple, ParamSpec, TypeVar, overload

from hutch.sdk.flow import Flow, mapped
from hutch.sdk.session import Session, close_awaited, close_blocking, run_awaited, run_blocking

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")


class SyncFront:
    """A front for blocking code: its calls return once done."""

    _session: Session


class AsyncFront:
    """A front for asyncio code: its calls are awaited."""

    _session: Session


class Job(NamedTuple, Generic[T]):
    """What a class's own call does, without I/O: the flow, and the session it runs on."""

    session: Session
    flow: Flow[T]


def making(session: Session, flow: Flow[A], make: Callable[[A, Session], T]) -> Job[T]:
    """A class's call that makes one of its objects (`make(answer, session)`) from what the flow answers."""
    return Job(session, mapped(flow, lambda answer: make(answer, session)))


def making_each(session: Session, flow: Flow[list[A]], make: Callable[[A, Session], T]) -> Job[list[T]]:
    """As `making`, an object for each item of a listing."""
    return Job(session, mapped(flow, lambda answers: [make(answer, session) for answer in answers]))


class call(Generic[P, T]):
    """A front's method, written once as a function of the front that returns the call's flow.
    With `closes`, the front's client is closed after it, however it ended (`kill`)."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Flow[T]], closes: bool = False) -> None:
        self._fn, self._closes = fn, closes
        self._methods: dict[type, Callable[..., Any]] = {}

    @overload
    def __get__(self, instance: SyncFront, owner: type | None = None) -> Callable[P, T]: ...

    @overload
    def __get__(self, instance: AsyncFront, owner: type | None = None) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __get__(self, instance: None, owner: type) -> Callable[..., Any]: ...

    def __get__(self, instance: object, owner: type | None = None) -> Callable[..., Any]:
        cls = owner or type(instance)
        if cls not in self._methods:
            self._methods[cls] = _shown(self._async() if issubclass(cls, AsyncFront) else self._sync(), self._fn, cls)
        method = self._methods[cls]
        return method if instance is None else types.MethodType(method, instance)

    def _sync(self) -> Callable[..., Any]:
        fn, closes = self._fn, self._closes

        def method(front: SyncFront, *args: Any, **kwargs: Any) -> Any:
            try:
                return run_blocking(front._session, fn(front, *args, **kwargs))
            finally:
                if closes:
                    close_blocking(front._session)

        return method

    def _async(self) -> Callable[..., Any]:
        fn, closes = self._fn, self._closes

        async def method(front: AsyncFront, *args: Any, **kwargs: Any) -> Any:
            try:
                return await run_awaited(front._session, fn(front, *args, **kwargs))
            finally:
                if closes:
                    await close_awaited(front._session)

        return method


def closing(fn: Callable[Concatenate[Any, P], Flow[T]]) -> call[P, T]:
    """A `call` after which the front's client is closed."""
    return call(fn, closes=True)


class classcall(Generic[P, T]):
    """A class's own call (as a classmethod), written once as a function of the class that returns
    its Job. When the call fails, the session's client is closed: nothing was made to hold it."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Job[T]]) -> None:
        self._fn = fn
        self._methods: dict[type, Callable[..., Any]] = {}

    @overload
    def __get__(self, instance: object, owner: type[SyncFront]) -> Callable[P, T]: ...

    @overload
    def __get__(self, instance: object, owner: type[AsyncFront]) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, instance: object, owner: type) -> Callable[..., Any]:
        if owner not in self._methods:
            self._methods[owner] = _shown(self._async() if issubclass(owner, AsyncFront) else self._sync(), self._fn,
                                          owner)
        return types.MethodType(self._methods[owner], owner)

    def _sync(self) -> Callable[..., Any]:
        fn = self._fn

        def method(cls: type, *args: Any, **kwargs: Any) -> Any:
            job = fn(cls, *args, **kwargs)
            try:
                return run_blocking(job.session, job.flow)
            except BaseException:
                close_blocking(job.session)
                raise

        return method

    def _async(self) -> Callable[..., Any]:
        fn = self._fn

        async def method(cls: type, *args: Any, **kwargs: Any) -> Any:
            job = fn(cls, *args, **kwargs)
            try:
                return await run_awaited(job.session, job.flow)
            except BaseException:
                await close_awaited(job.session)
                raise

        return method


def _shown(method: Callable[..., Any], fn: Callable[..., Any], owner: type) -> Callable[..., Any]:
    """`method` as `help()` and `inspect` should show it on `owner`: `fn`'s name, docstring and
    parameters, returning what the call gives (not its flow), in the front's own types."""
    functools.update_wrapper(method, fn)
    method.__qualname__ = f"{owner.__qualname__}.{fn.__name__}"
    signature = inspect.signature(fn)
    shown = signature.return_annotation
    if isinstance(shown, str):  # "Flow[X]" or "Job[X]", X perhaps naming the base's type parameters
        shown = re.sub(r"^(Flow|Job)\[(.*)\]$", r"\2", shown)
        for name, value in _type_arguments(owner).items():
            shown = re.sub(rf"\b{name}\b", value, shown)
    method.__signature__ = signature.replace(return_annotation=shown)  # type: ignore[attr-defined]
    return method


def _type_arguments(owner: type) -> dict[str, str]:
    """What a front gives its generic bases' type parameters: {"SandboxT": "Sandbox"} for
    `class Sandbox(_SandboxBase["Sandbox"], SyncFront)`."""
    arguments: dict[str, str] = {}
    for klass in owner.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            for parameter, argument in zip(getattr(origin, "__parameters__", ()), typing.get_args(base), strict=False):
                if isinstance(argument, typing.ForwardRef):
                    arguments.setdefault(parameter.__name__, argument.__forward_arg__)
                elif isinstance(argument, type):
                    arguments.setdefault(parameter.__name__, argument.__name__)
    return arguments
