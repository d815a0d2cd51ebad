"""Templates: images built from a base and steps, that sandboxes boot from, and their builds.

Creating a template (or rebuilding one) queues a build; its log is an NDJSON stream that a
reconnect resumes after the last line seen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import BuildFailure, SdkCode, ServerCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import BuildError, SandboxTimeoutError, ServerError, ValidationError, error_for
from hutch.sdk.flow import RETRIES, Call, Callback, Emit, Flow, NextLine, Sleep, backoff, send
from hutch.sdk.types import BuildEnd, BuildErrorInfo, BuildInfo, BuildLogLine, Step, TemplateInfo, step_body

# The server may send nothing while a step is silent: a read timeout then only means "ask again".
BUILD_LOG_TIMEOUT = httpx.Timeout(connect=10.0, read=60.0, write=60.0, pool=10.0)
VCPUS, MEMORY_MIB, DISK_MIB, READY_TIMEOUT_SECONDS = range(1, 5), range(256, 4097), range(1024, 8193), range(1, 3601)
LogCallback = Callable[[BuildLogLine], Any]  # on the async SDK it may also return an awaitable


def template_body(name: str, from_: str, steps: Sequence[Step | dict[str, Any]] | None, start_cmd: str | None,
                  ready_cmd: str | None, ready_timeout_seconds: int | None, vcpu: int | None, memory_mib: int | None,
                  disk_mib: int | None) -> dict[str, Any]:
    """The create request, checked for what is plain before any request (before the API key is
    looked for, too): types and ranges."""
    texts: list[tuple[str, object, bool]] = [("name", name, False), ("from_", from_, False),
                                             ("start_cmd", start_cmd, True), ("ready_cmd", ready_cmd, True)]
    for what, text, optional in texts:
        if not (optional and text is None) and (not isinstance(text, str) or not text):
            raise ValidationError(f"{what} is a non-empty str, not {text!r}", code=ServerCode.INVALID_SPEC)
    numbers: list[tuple[str, object, range]] = [
        ("ready_timeout_seconds", ready_timeout_seconds, READY_TIMEOUT_SECONDS), ("vcpu", vcpu, VCPUS),
        ("memory_mib", memory_mib, MEMORY_MIB), ("disk_mib", disk_mib, DISK_MIB)]
    for what, number, allowed in numbers:
        if number is not None and (type(number) is not int or number not in allowed):
            raise ValidationError(f"{what} is an int in {allowed.start}..{allowed.stop - 1}, not {number!r}",
                                  code=ServerCode.INVALID_SPEC)
    if steps is not None and (isinstance(steps, (str, bytes, dict)) or not isinstance(steps, Sequence)):
        raise ValidationError(f"steps is a list of steps, not {steps!r}", code=ServerCode.INVALID_SPEC)
    body = {"name": name, "from": from_, "steps": None if steps is None else [step_body(s) for s in steps],
            "start_cmd": start_cmd, "ready_cmd": ready_cmd, "ready_timeout_seconds": ready_timeout_seconds,
            "vcpu": vcpu, "memory_mib": memory_mib, "disk_mib": disk_mib}
    return {k: v for k, v in body.items() if v is not None}


def create_template(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[TemplateInfo]:
    """Answers at once: the build is queued, not run."""
    reply = yield from send(Call(*routes.CREATE_TEMPLATE.at(cfg.base_url), cfg.headers(), json=body))
    return TemplateInfo.from_json(json.loads(reply.body))


def list_templates(cfg: ConnectionConfig) -> Flow[list[TemplateInfo]]:
    reply = yield from send(Call(*routes.LIST_TEMPLATES.at(cfg.base_url), cfg.headers()))
    return [TemplateInfo.from_json(d) for d in json.loads(reply.body)]


def get_template(cfg: ConnectionConfig, name_or_id: str) -> Flow[TemplateInfo]:
    """A name holding "/" (a system template's, "hutch/base") is looked up in the list: a path
    segment cannot carry a slash through every router, escaped or not."""
    if "/" in name_or_id:
        for info in (yield from list_templates(cfg)):
            if name_or_id in (info.name, info.id):
                return info
        raise error_for(404, ServerCode.TEMPLATE_NOT_FOUND, f"template {name_or_id!r} does not exist")
    reply = yield from send(Call(*routes.GET_TEMPLATE.at(cfg.base_url, ref=name_or_id), cfg.headers()))
    return TemplateInfo.from_json(json.loads(reply.body))


def delete_template(cfg: ConnectionConfig, name_or_id: str) -> Flow[None]:
    """Cancels a running build. A template boxes or builds use is a ConflictError (template_in_use)."""
    ref = (yield from get_template(cfg, name_or_id)).id if "/" in name_or_id else name_or_id
    yield from send(Call(*routes.DELETE_TEMPLATE.at(cfg.base_url, ref=ref), cfg.headers()))


def start_build(cfg: ConnectionConfig, template_id: str, no_cache: bool) -> Flow[BuildInfo]:
    body = {"no_cache": True} if no_cache else {}
    reply = yield from send(Call(*routes.START_BUILD.at(cfg.base_url, ref=template_id), cfg.headers(), json=body))
    return BuildInfo.from_json(json.loads(reply.body))


def list_builds(cfg: ConnectionConfig, template_id: str) -> Flow[list[BuildInfo]]:
    """Newest first."""
    reply = yield from send(Call(*routes.LIST_BUILDS.at(cfg.base_url, ref=template_id), cfg.headers()))
    return [BuildInfo.from_json(d) for d in json.loads(reply.body)]


def get_build(cfg: ConnectionConfig, template_id: str, build_id: str) -> Flow[BuildInfo]:
    reply = yield from send(Call(*routes.GET_BUILD.at(cfg.base_url, ref=template_id, build_id=build_id), cfg.headers()))
    return BuildInfo.from_json(json.loads(reply.body))


def cancel_build(cfg: ConnectionConfig, template_id: str, build_id: str) -> Flow[BuildInfo]:
    """A build that had already ended is a ConflictError (build_finished)."""
    reply = yield from send(Call(*routes.CANCEL_BUILD.at(cfg.base_url, ref=template_id, build_id=build_id),
                                 cfg.headers()))
    return BuildInfo.from_json(json.loads(reply.body))


def build_logs(cfg: ConnectionConfig, template_id: str, build_id: str, *, follow: bool,
               deadline: float | None = None, on_line: LogCallback | None = None) -> Flow[BuildEnd | None]:
    """Each line of a build's log as a BuildLogLine, emitted (with `on_line`, passed to it instead);
    returns how the build ended (None: it had not, and `follow` is off). A stream that breaks is
    asked for again after the last line seen, so no line comes twice; past `deadline`
    (time.monotonic()) a SandboxTimeoutError."""
    after, failures = 0, 0
    while True:
        params = {"follow": "true" if follow else "false", **({"after": str(after)} if after else {})}
        yield from send(Call(*routes.BUILD_LOGS.at(cfg.base_url, ref=template_id, build_id=build_id), cfg.headers(),
                             params=params, stream=True, timeout=_log_timeout(deadline)))
        seen, broken, silent = False, False, False
        while True:
            try:
                line = yield NextLine()
            except httpx.ReadTimeout:
                line, silent = None, True
            except httpx.TransportError:
                line, broken = None, True
            if line is None:
                break
            if not line.strip():
                continue  # a keep-alive, if the server sends them
            try:
                d = json.loads(line)
            except ValueError:  # the tail of a line cut short by a broken connection
                broken = True
                break
            if d.get("done"):
                error = d.get("error")
                return BuildEnd(d["status"], None if error is None else BuildErrorInfo.from_json(error))
            if d["seq"] <= after:
                continue
            after, seen = d["seq"], True
            log_line = BuildLogLine.from_json(d)
            yield Emit(log_line) if on_line is None else Callback(on_line, log_line)
        if not (follow or broken or silent):
            return None  # the whole log so far, and the build goes on
        _check_deadline(deadline)
        if silent:
            continue  # the server answered, the build is quiet: ask again at once
        failures = 0 if seen else failures + 1
        if failures > RETRIES:
            raise ServerError("the build's log stream kept ending before the build did", code=SdkCode.STREAM_ENDED)
        yield Sleep(backoff(failures or 1))


def _log_timeout(deadline: float | None) -> httpx.Timeout:
    if deadline is None:
        return BUILD_LOG_TIMEOUT
    read = min(BUILD_LOG_TIMEOUT.read or 60.0, max(deadline - time.monotonic(), 0.1))
    return httpx.Timeout(connect=10.0, read=read, write=60.0, pool=10.0)


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise SandboxTimeoutError("the build did not end in time (it goes on: wait again, or cancel it)",
                                  code=SdkCode.WAIT_TIMEOUT)


def wait_for_build(cfg: ConnectionConfig, template_id: str, build_id: str | None, timeout_seconds: float | None,
                   on_log: LogCallback | None) -> Flow[tuple[TemplateInfo, BuildInfo | None]]:
    """Follow a build's log to its end (its lines to `on_log`), then read the build and the template.
    With no build named, the template's latest; None if it has none (a system template). Past
    `timeout_seconds` a SandboxTimeoutError (the build goes on)."""
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    if build_id is None:
        info = yield from get_template(cfg, template_id)
        if info.latest_build is None:
            return info, None
        build_id = info.latest_build.id
    end = yield from build_logs(cfg, template_id, build_id, follow=True, deadline=deadline, on_line=on_log)
    build = yield from get_build(cfg, template_id, build_id)
    if not build.ended and end is not None:  # the stream's last word came before the build's record
        build.status, build.error = end.status, end.error
    return (yield from get_template(cfg, template_id)), build


def check_build(build: BuildInfo | None) -> None:
    """Raise the BuildError of a build that ended without an image."""
    if build is None or build.status == "ready":
        return
    failure = BuildFailure.CANCELLED if build.status == "cancelled" else BuildFailure.BUILD_FAILED
    error = build.error or BuildErrorInfo(failure, f"the build ended {build.status}")
    raise BuildError(error.message, code=error.code, build_id=build.id, template_id=build.template_id,
                     step=error.step, exit_code=error.exit_code)
