"""Traces: a server given an OTLP endpoint (a collector of the test's own on loopback) sends one
trace per API call that spans the API server's request, its node call and its box call, with the
sandbox id and the team as attributes. A server without one sends nothing (and installs nothing)."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from hutch import Sandbox
from tests.integration.support import Server, make_server, retire, wait_for


@dataclass
class Span:
    trace: str
    id: str
    parent: str
    name: str
    service: str
    attributes: dict[str, Any]


@dataclass
class Collector:
    spans: list[Span] = field(default_factory=list)
    url: str = ""


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    c = Collector()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                service = next((a.value.string_value for a in resource.resource.attributes
                                if a.key == "service.name"), "")
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        attributes = {a.key: a.value.string_value or a.value.int_value for a in s.attributes}
                        c.spans.append(Span(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name,
                                            service, attributes))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    c.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()  # a quick shutdown
    try:
        yield c
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def traced(collector: Collector) -> Iterator[Server]:
    server = make_server("--warm-pool", "0", "--otlp-endpoint", collector.url)
    server.start()
    try:
        yield server
    finally:
        retire(server)


def test_a_command_is_one_trace_through_the_api_server_the_node_and_the_box(traced: Server,
                                                                           collector: Collector) -> None:
    sb = Sandbox.create(name="traced", **traced.client_args())
    try:
        assert sb.commands.run("echo traced").stdout == "traced\n"

        def command_span() -> Span | None:
            return next((s for s in collector.spans if s.name == "POST /data/v1/sandboxes/{sandbox_id}/commands/run"
                         and s.attributes.get("hutch.sandbox_id") == sb.id), None)

        wait_for(lambda: command_span() is not None, 30,
                 f"the command's request span (got {sorted({(s.name, s.service) for s in collector.spans})})")
        request = command_span()
        assert request is not None and request.parent == "" and request.service == "hutch"
        assert request.attributes["http.response.status_code"] == 200
        team = traced.record(sb.id).team_id
        assert request.attributes["hutch.team_id"] == team
        wait_for(lambda: any(s.trace == request.trace and s.name == "box.exec" for s in collector.spans), 30,
                 "the box call's span in the same trace")
        in_trace = {s.id: s for s in collector.spans if s.trace == request.trace}
        box = next(s for s in in_trace.values() if s.name == "box.exec")
        assert box.attributes["hutch.sandbox_id"] == sb.id and box.attributes["hutch.team_id"] == team
        chain = [box.name]
        at = box
        while at.parent:
            at = in_trace[at.parent]
            chain.append(at.name)
        assert chain[-1] == request.name, chain
        # a lifecycle call goes through the node runtime itself
        sb.pause()
        wait_for(lambda: any(s.name == "node.pause" for s in collector.spans), 30, "the node's pause span")
        pause = next(s for s in collector.spans if s.name == "node.pause")
        parent = next(s for s in collector.spans if s.id == pause.parent)
        assert parent.name == "POST /v1/sandboxes/{sandbox_id}/pause" and parent.trace == pause.trace
        assert pause.attributes["hutch.sandbox_id"] == sb.id
    finally:
        sb.kill()


def test_a_callers_traceparent_is_joined(traced: Server, collector: Collector) -> None:
    import httpx

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    r = httpx.get(f"{traced.url}/v1/sandboxes", headers={"Authorization": f"Bearer {traced.admin_key()}",
                                                          "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert r.status_code == 200
    wait_for(lambda: any(s.trace == trace_id for s in collector.spans), 30, "the joined span")
    joined = next(s for s in collector.spans if s.trace == trace_id)
    assert joined.name == "GET /v1/sandboxes" and joined.parent == "00f067aa0ba902b7"
