"""`Template` and `AsyncTemplate`: images built once from a base and steps, that sandboxes boot from.

    template = Template.create("py-env", steps=[RunStep("pip install numpy")], vcpu=2)
    template.wait_until_ready(on_log=print)       # raises BuildError if the build fails
    Sandbox.create(name="run-1", from_template=template)

Creating (or rebuilding) only queues a build on the server. Every call is written once, on the
shared base (see `hutch.sdk.front`); what it sends lives in `hutch.sdk.ops.templates`, and the
build log is one flow, offered as an iterator and as a callback.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Generic, TypeVar

from hutch.sdk.codes import ServerCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import NotFoundError
from hutch.sdk.flow import Flow, mapped
from hutch.sdk.front import AsyncFront, Job, SyncFront, call, classcall, making, making_each
from hutch.sdk.ops import templates
from hutch.sdk.ops.templates import LogCallback
from hutch.sdk.session import Session, iterate_awaited, iterate_blocking
from hutch.sdk.types import BuildEnd, BuildInfo, BuildLogLine, Step, TemplateInfo

BASE_TEMPLATE = "hutch/base"
TemplateT = TypeVar("TemplateT", bound="_TemplateBase[Any]")


def template_name(ref: Any) -> Any:
    """What a call sends for a template given as an object: its name (anything else as it is)."""
    return ref.name if isinstance(ref, _TemplateBase) else ref


class _TemplateBase(Generic[TemplateT]):
    """Both fronts' calls, and a snapshot of the template, refreshed by the calls that read it
    again (`refresh`, `wait_until_ready`, `rebuild`). Holds no connection between calls."""

    def __init__(self, info: TemplateInfo, session: Session) -> None:
        self._info, self._session = info, session

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

    def _build_id(self, build_id: str | None) -> str:
        """The build named, or the latest this object has seen (`refresh()` to see others')."""
        if build_id is not None:
            return build_id
        if self._info.latest_build is None:
            raise NotFoundError(f"template {self.name!r} has no build", code=ServerCode.BUILD_NOT_FOUND)
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

    def _logs(self, build_id: str | None, follow: bool) -> Flow[BuildEnd | None]:
        return templates.build_logs(self._session.cfg, self.id, self._build_id(build_id), follow=follow)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, name={self.name!r}, status={self.status!r})"

    # --- the class's own calls --------------------------------------------------------------------

    @classcall
    def create(cls: type[TemplateT], name: str, *, from_: str | _TemplateBase[Any] = BASE_TEMPLATE,
               steps: Sequence[Step | dict[str, Any]] | None = None, start_cmd: str | None = None,
               ready_cmd: str | None = None, ready_timeout_seconds: int | None = None, vcpu: int | None = None,
               memory_mib: int | None = None, disk_mib: int | None = None, api_key: str | None = None,
               base_url: str | None = None) -> Job[TemplateT]:
        """Queue the build of a new template and return at once; `wait_until_ready()` waits for it.

        `from_`: "hutch/base", another template (object, name or id), "docker://ref" (if the server
        pulls from registries), or an image in a directory of the server's it reads them from
        ("oci-archive:/path.tar", "docker-archive:/path.tar", "oci:/layout[:tag]"). `steps` run in
        order; env, workdir and user also become its boxes' defaults. `start_cmd` is started in
        every box booted from it; `ready_cmd` is polled until it exits 0 before a box is handed out
        (up to `ready_timeout_seconds`). vcpu 1-4, memory_mib 256-4096, disk_mib 1024-8192: its
        boxes' shape. Unset, the server's defaults."""
        body = templates.template_body(name, template_name(from_), steps, start_cmd, ready_cmd, ready_timeout_seconds,
                                       vcpu, memory_mib, disk_mib)
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, templates.create_template(session.cfg, body), cls)

    @classcall
    def get(cls: type[TemplateT], name_or_id: str, *, api_key: str | None = None,
            base_url: str | None = None) -> Job[TemplateT]:
        """A template by name or id (a system one's name holds a "/": "hutch/base")."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, templates.get_template(session.cfg, name_or_id), cls)

    @classcall
    def list(cls: type[TemplateT], *, api_key: str | None = None,
             base_url: str | None = None) -> Job[builtins.list[TemplateT]]:
        """The team's templates and the system ones (hutch/base)."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making_each(session, templates.list_templates(session.cfg), cls)

    @classcall
    def delete_by_name(cls, name_or_id: str, *, api_key: str | None = None, base_url: str | None = None) -> Job[None]:
        """Cancels its running build. A template that boxes (active or paused) or other builds use
        is a ConflictError (template_in_use)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), templates.delete_template(cfg, name_or_id))

    # --- the template's ---------------------------------------------------------------------------

    @call
    def refresh(self) -> Flow[TemplateInfo]:
        """The server's current view of the template (and its latest build)."""
        self._info = yield from templates.get_template(self._session.cfg, self.id)
        return self._info

    @call
    def delete(self) -> Flow[None]:
        """As `delete_by_name`."""
        return templates.delete_template(self._session.cfg, self.id)

    @call
    def rebuild(self, no_cache: bool = False) -> Flow[BuildInfo]:
        """Queue a new build of the same spec (`no_cache`: run every step again); returns at once.
        A ready template stays usable, with its last good image, until the new build succeeds."""
        return mapped(templates.start_build(self._session.cfg, self.id, no_cache), self._started)

    @call
    def list_builds(self) -> Flow[builtins.list[BuildInfo]]:
        """Newest first."""
        return templates.list_builds(self._session.cfg, self.id)

    @call
    def get_build(self, build_id: str) -> Flow[BuildInfo]:
        return mapped(templates.get_build(self._session.cfg, self.id, build_id), self._took)

    @call
    def cancel_build(self, build_id: str | None = None) -> Flow[BuildInfo]:
        """Stop a build (default: the latest); one that had ended is a ConflictError (build_finished)."""
        return mapped(templates.cancel_build(self._session.cfg, self.id, self._build_id(build_id)), self._took)

    @call
    def wait_until_ready(self, timeout_seconds: float | None = None, on_log: LogCallback | None = None) -> Flow[None]:
        """Wait until the latest build ends, passing its log lines to `on_log` as they come (on the
        async SDK it may be a coroutine function).

        Raises BuildError if it failed or was cancelled, SandboxTimeoutError (wait_timeout) past
        `timeout_seconds` (the build goes on). Refreshes `status` and `latest_build`."""
        latest = None if self._info.latest_build is None else self._info.latest_build.id
        self._info, build = yield from templates.wait_for_build(self._session.cfg, self.id, latest, timeout_seconds,
                                                                on_log)
        templates.check_build(build)


class Template(_TemplateBase["Template"], SyncFront):
    """A template, used from blocking code."""

    def stream_build_logs(self, build_id: str | None = None, follow: bool = True) -> Iterator[BuildLogLine]:
        """A build's log lines (default: the latest build's), from the first. With `follow` the
        iterator goes on until the build ends; without, it stops at what was logged so far."""
        return iterate_blocking(self._session, self._logs(build_id, follow))


class AsyncTemplate(_TemplateBase["AsyncTemplate"], AsyncFront):
    """`Template`, for asyncio code: the same calls, awaited; `stream_build_logs` is an async iterator."""

    def stream_build_logs(self, build_id: str | None = None, follow: bool = True) -> AsyncIterator[BuildLogLine]:
        """As `Template.stream_build_logs`: `async for line in template.stream_build_logs(): ...`"""
        return iterate_awaited(self._session, self._logs(build_id, follow))
