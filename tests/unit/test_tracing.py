"""Tracing off (no endpoint): nothing is wrapped and nothing is sent; the endpoint's precedence."""

from __future__ import annotations

import pytest

from hutch import tracing


def test_without_an_endpoint_nothing_is_wrapped_or_sent() -> None:
    assert not tracing.enabled()
    runtime = object()
    assert tracing.traced_runtime(runtime) is runtime
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}
    tracing.annotate(team_id="t", sandbox_id="s")  # no span, no error
    with tracing.joined({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "node.call.x"):
        pass


def test_the_flag_comes_before_the_standard_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracing.ENDPOINT_VARIABLE, raising=False)
    assert tracing.endpoint_from(None) is None
    monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, "http://collector:4318")
    assert tracing.endpoint_from(None) == "http://collector:4318"
    assert tracing.endpoint_from("http://flag:4318") == "http://flag:4318"


def test_the_extra_is_found_when_installed() -> None:
    assert tracing.available()  # the dev extra brings hutch[otel]
