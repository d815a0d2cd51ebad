"""`Template` and `AsyncTemplate`: images built once from a base and steps, that sandboxes boot from.

    template = Template.create("py-env", steps=[RunStep("pip install numpy")], vcpu=2)
    template.wait_until_ready(on_log=print)       # raises BuildError if the build fails
    Sandbox.create(name="run-1", from_template=template)

Creating (or rebuilding) only queues a build on the server. What each call sends lives once, in
`ops`; the build log is one flow, offered as an iterator and as a callback.
"""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from hutch.sdk import ops
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import NotFoundError
from hutch.sdk.flow import Flow, iter_async, iter_sync, run_async, run_sync
from hutch.sdk.ops import (
    BuildInfo,
    BuildLogLine,
    EnvStep,
    RunStep,
    Step,
    TemplateInfo,
    UserStep,
    WorkdirStep,
)
from hutch.sdk.sandbox import _async_client, _once_async, _once_sync, _sync_client

BASE_TEMPLATE = "hutch/base"
LogCallback = Callable[[BuildLogLine], Any]  # on the async SDK it may also return an awaitable


class _TemplateBase:
    """State shared by both fronts: a snapshot of the template, refreshed by the calls that read
    it again (`refresh`, `wait_until_ready`, `rebuild`)."""

    def __init__(self, info: TemplateInfo, cfg: ConnectionConfig) -> None:
        self._info, self._cfg = info, cfg

    @property
    def id(self) -> str:
        return self._info.id

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def status(self) -> str:
        """building, ready or failed: "ready" once any build succeeded (a rebuild keeps it so)."""
        return self._info.status

    @property
    def info(self) -> TemplateInfo:
        return self._info

    @property
    def latest_build(self) -> BuildInfo | None:
        return self._info.latest_build

    def _latest_id(self) -> str | None:
        return None if self._info.latest_build is None else self._info.latest_build.id

    def _build_id(self, build_id: str | None) -> str:
        """The build named, or the latest this object has seen (`refresh()` to see others')."""
        if build_id is not None:
            return build_id
        if self._info.latest_build is None:
            raise NotFoundError(f"template {self.name!r} has no build", code="build_not_found")
        return self._info.latest_build.id

    def _started(self, build: BuildInfo) -> BuildInfo:
        self._info.latest_build = build
        if self._info.status != "ready":  # a rebuild keeps a ready template ready
            self._info.status = "building"
        return build

    def _took(self, build: BuildInfo) -> BuildInfo:
        if self._info.latest_build is not None and self._info.latest_build.id == build.id:
            self._info.latest_build = build
        return build

    def _waited(self, answer: tuple[TemplateInfo, BuildInfo | None]) -> None:
        self._info, build = answer
        ops.check_build(build)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, status={self.status!r})"


def _create_body(name: str, from_: str | _TemplateBase, steps: Sequence[Step | dict[str, Any]] | None,
                 start_cmd: str | None, ready_cmd: str | None, ready_timeout_seconds: int | None, vcpu: int | None,
                 memory_mib: int | None, disk_mib: int | None) -> dict[str, Any]:
    source = from_.name if isinstance(from_, _TemplateBase) else from_
    return ops.template_body(name, source, steps, start_cmd, ready_cmd, ready_timeout_seconds, vcpu, memory_mib,
                             disk_mib)


def _deadline(timeout_seconds: float | None) -> float | None:
    return None if timeout_seconds is None else time.monotonic() + timeout_seconds


# --- sync -----------------------------------------------------------------------------------------

def _iter_once_sync(cfg: ConnectionConfig, flow: Flow[Any]) -> Iterator[Any]:
    with _sync_client(cfg) as client:
        yield from iter_sync(client, flow)


class Template(_TemplateBase):
    """A template, used from blocking code. Holds no connection between calls."""

    @classmethod
    def create(cls, name: str, *, from_: str | _TemplateBase = BASE_TEMPLATE,
               steps: Sequence[Step | dict[str, Any]] | None = None, start_cmd: str | None = None,
               ready_cmd: str | None = None, ready_timeout_seconds: int | None = None, vcpu: int | None = None,
               memory_mib: int | None = None, disk_mib: int | None = None, api_key: str | None = None,
               base_url: str | None = None) -> Template:
        """Queue the build of a new template and return at once; `wait_until_ready()` waits for it.

        `from_`: "hutch/base", another template (object, name or id), "docker://ref" (if the server
        pulls from registries), or an image in a directory of the server's it reads them from
        ("oci-archive:/path.tar", "docker-archive:/path.tar", "oci:/layout[:tag]"). `steps` run in
        order; env, workdir and user also become its boxes' defaults. `start_cmd` is started in
        every box booted from it; `ready_cmd` is polled until it exits 0 before a box is handed out
        (up to `ready_timeout_seconds`). vcpu 1-4, memory_mib 256-4096, disk_mib 1024-8192: its
        boxes' shape. Unset, the server's defaults."""
        body = _create_body(name, from_, steps, start_cmd, ready_cmd, ready_timeout_seconds, vcpu, memory_mib,
                            disk_mib)
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(_once_sync(cfg, ops.create_template(cfg, body)), cfg)

    @classmethod
    def get(cls, name_or_id: str, *, api_key: str | None = None, base_url: str | None = None) -> Template:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(_once_sync(cfg, ops.get_template(cfg, name_or_id)), cfg)

    @classmethod
    def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[Template]:
        """The team's templates and the system ones (hutch/base)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(info, cfg) for info in _once_sync(cfg, ops.list_templates(cfg))]

    @classmethod
    def delete_by_name(cls, name_or_id: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        """Cancels its running build. A template that boxes (active or paused) or other builds use
        is a ConflictError (template_in_use)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        _once_sync(cfg, ops.delete_template(cfg, name_or_id))

    def refresh(self) -> TemplateInfo:
        self._info = _once_sync(self._cfg, ops.get_template(self._cfg, self.id))
        return self._info

    def delete(self) -> None:
        _once_sync(self._cfg, ops.delete_template(self._cfg, self.id))

    def rebuild(self, no_cache: bool = False) -> BuildInfo:
        """Queue a new build of the same spec (`no_cache`: run every step again); returns at once.
        A ready template stays usable, with its last good image, until the new build succeeds."""
        return self._started(_once_sync(self._cfg, ops.start_build(self._cfg, self.id, no_cache)))

    def list_builds(self) -> builtins.list[BuildInfo]:
        """Newest first."""
        builds: builtins.list[BuildInfo] = _once_sync(self._cfg, ops.list_builds(self._cfg, self.id))
        return builds

    def get_build(self, build_id: str) -> BuildInfo:
        return self._took(_once_sync(self._cfg, ops.get_build(self._cfg, self.id, build_id)))

    def cancel_build(self, build_id: str | None = None) -> BuildInfo:
        """Stop a build (default: the latest); one that had ended is a ConflictError (build_finished)."""
        return self._took(_once_sync(self._cfg, ops.cancel_build(self._cfg, self.id, self._build_id(build_id))))

    def stream_build_logs(self, build_id: str | None = None, follow: bool = True) -> Iterator[BuildLogLine]:
        """A build's log lines (default: the latest build's), from the first. With `follow` the
        iterator goes on until the build ends; without, it stops at what was logged so far."""
        return _iter_once_sync(self._cfg, ops.build_logs(self._cfg, self.id, self._build_id(build_id), follow=follow))

    def wait_until_ready(self, timeout_seconds: float | None = None, on_log: LogCallback | None = None) -> None:
        """Block until the latest build ends, passing its log lines to `on_log` as they come.

        Raises BuildError if it failed or was cancelled, SandboxTimeoutError (wait_timeout) past
        `timeout_seconds` (the build goes on). Refreshes `status` and `latest_build`."""
        flow = ops.wait_for_build(self._cfg, self.id, self._latest_id(),
                                  _deadline(timeout_seconds))
        with _sync_client(self._cfg) as client:
            self._waited(run_sync(client, flow, on_log))


# --- async ----------------------------------------------------------------------------------------

async def _iter_once_async(cfg: ConnectionConfig, flow: Flow[Any]) -> AsyncIterator[Any]:
    async with _async_client(cfg) as client, contextlib.aclosing(iter_async(client, flow)) as items:
        async for item in items:
            yield item


class AsyncTemplate(_TemplateBase):
    """`Template`, for asyncio code: the same calls, awaited; `stream_build_logs` is an async iterator."""

    @classmethod
    async def create(cls, name: str, *, from_: str | _TemplateBase = BASE_TEMPLATE,
                     steps: Sequence[Step | dict[str, Any]] | None = None, start_cmd: str | None = None,
                     ready_cmd: str | None = None, ready_timeout_seconds: int | None = None, vcpu: int | None = None,
                     memory_mib: int | None = None, disk_mib: int | None = None, api_key: str | None = None,
                     base_url: str | None = None) -> AsyncTemplate:
        body = _create_body(name, from_, steps, start_cmd, ready_cmd, ready_timeout_seconds, vcpu, memory_mib,
                            disk_mib)
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(await _once_async(cfg, ops.create_template(cfg, body)), cfg)

    @classmethod
    async def get(cls, name_or_id: str, *, api_key: str | None = None, base_url: str | None = None) -> AsyncTemplate:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(await _once_async(cfg, ops.get_template(cfg, name_or_id)), cfg)

    @classmethod
    async def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[AsyncTemplate]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(info, cfg) for info in await _once_async(cfg, ops.list_templates(cfg))]

    @classmethod
    async def delete_by_name(cls, name_or_id: str, *, api_key: str | None = None,
                             base_url: str | None = None) -> None:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        await _once_async(cfg, ops.delete_template(cfg, name_or_id))

    async def refresh(self) -> TemplateInfo:
        self._info = await _once_async(self._cfg, ops.get_template(self._cfg, self.id))
        return self._info

    async def delete(self) -> None:
        await _once_async(self._cfg, ops.delete_template(self._cfg, self.id))

    async def rebuild(self, no_cache: bool = False) -> BuildInfo:
        return self._started(await _once_async(self._cfg, ops.start_build(self._cfg, self.id, no_cache)))

    async def list_builds(self) -> builtins.list[BuildInfo]:
        builds: builtins.list[BuildInfo] = await _once_async(self._cfg, ops.list_builds(self._cfg, self.id))
        return builds

    async def get_build(self, build_id: str) -> BuildInfo:
        return self._took(await _once_async(self._cfg, ops.get_build(self._cfg, self.id, build_id)))

    async def cancel_build(self, build_id: str | None = None) -> BuildInfo:
        flow = ops.cancel_build(self._cfg, self.id, self._build_id(build_id))
        return self._took(await _once_async(self._cfg, flow))

    def stream_build_logs(self, build_id: str | None = None, follow: bool = True) -> AsyncIterator[BuildLogLine]:
        """`async for line in template.stream_build_logs(): ...`"""
        return _iter_once_async(self._cfg, ops.build_logs(self._cfg, self.id, self._build_id(build_id),
                                                          follow=follow))

    async def wait_until_ready(self, timeout_seconds: float | None = None,
                               on_log: LogCallback | None = None) -> None:
        """As `Template.wait_until_ready`; `on_log` may be a coroutine function."""
        flow = ops.wait_for_build(self._cfg, self.id, self._latest_id(),
                                  _deadline(timeout_seconds))
        async with _async_client(self._cfg) as client:
            self._waited(await run_async(client, flow, on_log))


__all__ = ["AsyncTemplate", "BuildInfo", "BuildLogLine", "EnvStep", "RunStep", "Step", "Template", "TemplateInfo",
           "UserStep", "WorkdirStep"]
