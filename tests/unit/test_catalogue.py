"""The SDK's copy of the error codes is the server's catalogue, name for name, and each code's status
raises the exception class the SDK's error tree promises for it."""

from __future__ import annotations

import json

import pytest

from hutch import errors
from hutch.sdk import codes
from hutch.sdk.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RateLimitError,
    SandboxError,
    SandboxTimeoutError,
    ServerError,
    ValidationError,
    error_from_response,
)

# The tree in hutch/sdk/errors.py's docstring, status by status.
CLASS_BY_STATUS: dict[int, type[SandboxError]] = {
    400: ValidationError, 401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError,
    405: SandboxError, 409: ConflictError, 413: ValidationError, 429: RateLimitError, 500: ServerError,
    501: ServerError, 502: ServerError, 503: ServerError, 504: SandboxTimeoutError, 507: ServerError,
}


def names(namespace: type) -> dict[str, str]:
    return {name: value for name, value in vars(namespace).items() if name.isupper()}


def test_the_sdk_mirrors_the_servers_codes_exactly() -> None:
    assert names(codes.ServerCode) == {code.name: code.value for code in errors.Code}


def test_the_sdk_mirrors_the_build_failures_exactly() -> None:
    assert names(codes.BuildFailure) == {failure.name: failure.value for failure in errors.BuildFailure}


def test_the_sdks_own_codes_are_not_the_servers() -> None:
    own = set(names(codes.SdkCode).values())
    assert own and not own & {code.value for code in errors.Code}


def test_every_status_the_server_answers_has_a_promised_class() -> None:
    assert {code.status for code in errors.Code} <= set(CLASS_BY_STATUS)


@pytest.mark.parametrize("code", list(errors.Code), ids=lambda code: code.value)
def test_each_code_raises_the_class_of_its_status(code: errors.Code) -> None:
    body = json.dumps({"error": {"code": code.value, "message": "m"}}).encode()
    err = error_from_response(code.status, body)
    assert type(err) is CLASS_BY_STATUS[code.status]
    assert err.code == code.value and err.status_code == code.status and err.message == "m"


def test_every_code_the_guest_agent_sends_is_in_the_catalogue() -> None:
    """The node passes the agent's codes on by the catalogue's name (AGENT_CODES); a code the
    agent gains without a member would silently become agent_error."""
    from hutch.errors import code_of
    from hutch.guest import protocol
    from hutch.node.agent import AGENT_CODES

    sent = {value for name, value in vars(protocol).items() if name.startswith("ERR_")}
    assert sent and all(code_of(value) is not None for value in sent), sent - {c.value for c in AGENT_CODES}
    assert {code_of(value) for value in sent} == set(AGENT_CODES)
