"""Fixtures: a real `hutch serve` on loopback with real gVisor boxes, two teams, and the SDK in both
its sync and async forms behind one blocking face, so every SDK test runs against both. The helpers
that are not fixtures are in support.py."""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from hutch import AsyncSandbox, Sandbox
from hutch.sdk.desktop import AsyncDesktop
from hutch.sdk.process import AsyncProcess, AsyncProcessStdin
from hutch.sdk.sandbox import AsyncCommands, AsyncFiles
from tests.integration.internet import Internet, stand_in_internet
from tests.integration.support import Env, Server, make_server, retire


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server of the test's own, without a warm pool (these tests count runsc's containers)."""
    server = make_server("--warm-pool", "0")
    server.start()
    try:
        yield server
    finally:
        retire(server)


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    # its pool stays at its size: the tests' creates would grow it, and boot the boxes beside later tests
    server = make_server("--warm-pool-max", "2")
    server.start()
    e = Env(server, server.admin_key(), server.new_team("other"))
    try:
        yield e
    finally:
        try:
            server.cleanup_boxes(e.key_a, e.key_b)
        finally:
            server.stop()
            server.remove()


@pytest.fixture(autouse=True)
def _client_config(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_API_KEY", env.key_a)
    monkeypatch.setenv("HUTCH_BASE_URL", env.url)


# --- one blocking face over the sync and the async SDK ---------------------------------------------

class _Loop:
    """An event loop on its own thread, for driving the async SDK from a blocking test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, awaitable: Any) -> Any:
        async def wait() -> Any:
            return await awaitable
        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


class Blocking:
    """Runs every call of an async SDK object to completion, so one test body serves both SDKs."""

    WRAP = (AsyncSandbox, AsyncCommands, AsyncFiles, AsyncDesktop, AsyncProcess, AsyncProcessStdin)

    def __init__(self, target: Any, loop: _Loop) -> None:
        self._target, self._loop = target, loop

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, self.WRAP):
            return Blocking(value, self._loop)
        if isinstance(value, list) and any(isinstance(v, self.WRAP) for v in value):  # fork's boxes
            return [self._wrap(v) for v in value]
        return value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return self._wrap(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            if inspect.isawaitable(result):
                result = self._loop.run(result)
            return self._wrap(result)

        return call

    def __repr__(self) -> str:
        return f"Blocking({self._target!r})"


@pytest.fixture(params=["sync", "async"])
def sdk(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`Sandbox`, or `AsyncSandbox` driven to completion call by call."""
    if request.param == "sync":
        yield Sandbox
        return
    loop = _Loop()
    try:
        yield Blocking(AsyncSandbox, loop)
    finally:
        loop.close()


@pytest.fixture
def box(sdk: Any) -> Iterator[Any]:
    sb = sdk.create(name="test", metadata={"suite": "tests"})
    try:
        yield sb
    finally:
        sb.kill()


@pytest.fixture
def make_box(sdk: Any) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("name", "test")
        sb = sdk.create(**kwargs)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.kill()


# --- a stand-in for the internet, in a network namespace -------------------------------------------

@pytest.fixture(scope="session")
def internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    with stand_in_internet(tmp_path_factory.mktemp("internet")) as net:
        yield net


# --- parallel workers (scripts/test runs this half under pytest-xdist) ------------------------------

def _names_internet(node: ast.AST) -> bool:
    """Whether `node` names the stand-in internet by string (`usefixtures("internet")`,
    `getfixturevalue("internet")`)."""
    return any(isinstance(n, ast.Constant) and n.value == "internet" for n in ast.walk(node))


@functools.cache
def _internet_tests(path: Path) -> frozenset[str] | None:
    """The names of a file's test functions that use the stand-in internet: as an argument, by
    name, or through a fixture of the file that does. None when the file as a whole does (a
    module-wide mark, a use outside any function) or cannot be read this way: then every test
    of it counts."""
    if not path.is_file():
        return frozenset()
    tree = ast.parse(path.read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    inside = {id(n) for f in functions for n in ast.walk(f)}
    if any(_names_internet(n) for n in ast.iter_child_nodes(tree) if id(n) not in inside):
        return None  # pytestmark = usefixtures("internet"), say

    def direct(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        return any(a.arg == "internet" for a in f.args.args + f.args.kwonlyargs) or _names_internet(f)

    args = {f.name: {a.arg for a in f.args.args + f.args.kwonlyargs} for f in functions}
    needs = {f.name for f in functions if direct(f)}
    while grown := {name for name, used in args.items() if name not in needs and used & needs}:
        needs |= grown  # a fixture of the file that takes one that needs it
    return frozenset(name for name in needs if name.startswith("test"))


def uses_internet(path: Path, test: str | None = None) -> bool:
    """Whether a test (a file's, by function name; or any of the file's, if None) uses the
    stand-in internet."""
    tests = _internet_tests(path)
    if tests is None:
        return True
    return bool(tests) if test is None else test in tests


class ByFile(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """A file's tests stay together on one worker (its module fixtures, its order), and every test
    that uses the stand-in internet goes to one worker: its namespace owns fixed addresses
    (198.51.100.0/24), which two workers' namespaces could not both hold. Only those tests: the
    rest of their files go on their own, or that one worker has most of the suite's work."""

    def _split_scope(self, nodeid: str) -> str:
        path, _, rest = nodeid.partition("::")
        test = rest.rpartition("::")[2].partition("[")[0]
        return "internet" if uses_internet(self.config.rootpath / path, test) else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ByFile:
    return ByFile(config, log)
