"""OpenTelemetry traces, when an OTLP endpoint is configured (`--otlp-endpoint`, or the standard
`OTEL_EXPORTER_OTLP_ENDPOINT`): a span for each API call (`TraceRequests`, which also takes a
caller's `traceparent`), one for each call it makes of the node runtime (`traced_runtime`), and one
for each call of a box's agent, with the sandbox id and the team as attributes. A fleet's API
server passes the trace on to its nodes in `traceparent` (`inject`), and the node's spans join it.

The opentelemetry SDK is an optional extra (`hutch[otel]`). Without an endpoint nothing here is
installed: no middleware, no wrapper; `annotate` is one global read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, TypeVar, cast

R = TypeVar("R")
ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
EXPORT_DELAY_MS = 1000  # spans leave in batches this often (the SDK's default, 5 s, hides a short run's)

_tracer: Any = None  # an opentelemetry Tracer once `setup` ran
_provider: Any = None
# what the request being served is about (its team, its sandbox): every span under it carries them
_about: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("hutch_trace_about", default=None)


class TracingUnavailable(RuntimeError):
    """An endpoint was configured but the opentelemetry SDK is not installed."""


def endpoint_from(flag: str | None) -> str | None:
    """The OTLP endpoint: the flag's, else the standard variable's, else none (tracing off)."""
    return flag or os.environ.get(ENDPOINT_VARIABLE) or None


def available() -> bool:
    """Whether the optional extra (hutch[otel]) is installed."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None
                   for m in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))
    except ModuleNotFoundError:
        return False


def setup(endpoint: str, service: str) -> None:
    """Export spans over OTLP/HTTP to `endpoint` (its /v1/traces), as `service`."""
    global _tracer, _provider
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise TracingUnavailable("traces need the opentelemetry SDK: pip install 'hutch[otel]'") from None
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    delay = int(os.environ.get("OTEL_BSP_SCHEDULE_DELAY", EXPORT_DELAY_MS))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces"),
                                                   schedule_delay_millis=delay))
    trace.set_tracer_provider(provider)
    _provider, _tracer = provider, provider.get_tracer("hutch")


def shutdown() -> None:
    """Send what is left and stop (at the server's end)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def enabled() -> bool:
    return _tracer is not None


def annotate(**attributes: str | None) -> None:
    """Say what the current request is about (team_id=..., sandbox_id=...): on its span, and on
    every span made under it from now on. Nothing when tracing is off."""
    if _tracer is None:
        return
    about = _about.get()
    given = {f"hutch.{k}": v for k, v in attributes.items() if v}
    if about is not None:
        about.update(given)
    from opentelemetry import trace

    trace.get_current_span().set_attributes(given)


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current trace in `headers` (`traceparent`), for a call to another hutch process."""
    if _tracer is not None:
        from opentelemetry.propagate import inject as put

        put(headers)


@contextlib.contextmanager
def joined(headers: Mapping[str, str], name: str, **attributes: str) -> Iterator[None]:
    """A server span for a call another hutch process made (its `traceparent` in `headers`)."""
    if _tracer is None:
        yield
        return
    from opentelemetry import context
    from opentelemetry.propagate import extract

    token = context.attach(extract(dict(headers)))
    try:
        with _span(name, "SERVER", {f"hutch.{k}": v for k, v in attributes.items()}):
            yield
    finally:
        context.detach(token)


def _span(name: str, kind: str, attributes: dict[str, Any]) -> Any:
    from opentelemetry.trace import SpanKind

    about = _about.get() or {}
    return _tracer.start_as_current_span(name, kind=getattr(SpanKind, kind), attributes={**about, **attributes})


class TraceRequests:
    """ASGI middleware: a server span per HTTP request, named by its route once routed, joined to
    the caller's trace if it sent a `traceparent`."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or _tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry import context, trace
        from opentelemetry.propagate import extract

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = context.attach(extract(carrier))
        about = _about.set({})
        status = 0

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            with _span(f"{scope['method']} {scope['path']}", "SERVER",
                       {"http.request.method": scope["method"], "url.path": scope["path"]}) as span:
                try:
                    await self.app(scope, receive, sending)
                finally:
                    route = scope.get("route")
                    template = getattr(route, "path", None)
                    # a path no route took keeps no name of its own (a scan makes no new span names)
                    span.update_name(f"{scope['method']} {template or '(unmatched)'}")
                    if template:
                        span.set_attribute("http.route", template)
                    sandbox = (scope.get("path_params") or {}).get("sandbox_id")
                    if sandbox:
                        span.set_attribute("hutch.sandbox_id", str(sandbox)[:64])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(trace.Status(trace.StatusCode.ERROR))
        finally:
            _about.reset(about)
            context.detach(token)


class _Traced:
    """Every coroutine method of `inner` in a span `<prefix>.<method>`; `agent(...)`'s answer
    wrapped too (a box's calls), when `agents`."""

    def __init__(self, inner: Any, prefix: str, kind: str, attributes: dict[str, str], agents: bool = False) -> None:
        self._inner, self._prefix, self._kind, self._attributes, self._agents = inner, prefix, kind, attributes, agents

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name.startswith("_") or not callable(value):
            return value
        if self._agents and name == "agent":
            @functools.wraps(value)
            def agent(runtime_id: str, *args: Any, **kwargs: Any) -> Any:
                found = value(runtime_id, *args, **kwargs)
                return None if found is None else _Traced(found, "box", "CLIENT", {"hutch.runtime_id": runtime_id})
            return agent
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        async def traced(*args: Any, **kwargs: Any) -> Any:
            attributes = dict(self._attributes)
            if args and isinstance(args[0], str) and self._prefix == "node":
                # a boot's and a restore's first argument is the box's key; the others' its runtime id
                attributes["hutch.box_key" if name in ("boot", "restore") else "hutch.runtime_id"] = args[0]
            with _span(f"{self._prefix}.{name}", self._kind, attributes):
                return await value(*args, **kwargs)
        return traced


def traced_runtime(runtime: R) -> R:
    """The node runtime, its calls and its boxes' agents' calls in spans (as it is when off)."""
    return runtime if _tracer is None else cast(R, _Traced(runtime, "node", "CLIENT", {}, agents=True))
