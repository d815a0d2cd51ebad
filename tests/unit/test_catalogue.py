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


def guest_codes() -> dict[str, str]:
    from hutch.guest import protocol

    return {name: value for name, value in vars(protocol).items() if name.startswith("ERR_")}


def test_each_code_the_guest_agent_sends_has_one_status() -> None:
    """protocol.ERROR_STATUS is the agent's catalogue: every code in it once, so its call sites name
    codes and never statuses, and no two names spell one code."""
    from hutch.guest import protocol

    sent = guest_codes()
    assert sent and len(set(sent.values())) == len(sent)
    assert set(protocol.ERROR_STATUS) == set(sent.values())
    assert all(type(status) is int and 400 <= status < 600 for status in protocol.ERROR_STATUS.values())
    assert all(protocol.Refusal(code, "m").status == status for code, status in protocol.ERROR_STATUS.items())


def test_every_code_the_guest_agent_sends_becomes_one_of_the_catalogues() -> None:
    """The node passes each of the agent's codes on as a catalogue code (AGENT_CODES); a code the
    agent gains without an entry would silently become agent_error."""
    from hutch.errors import code_of
    from hutch.guest import protocol
    from hutch.node.agent import AGENT_CODES

    sent = set(guest_codes().values())
    assert sent and set(AGENT_CODES) == sent, sent ^ set(AGENT_CODES)
    assert all(isinstance(code, errors.Code) for code in AGENT_CODES.values())
    # a code the catalogue has too is passed on as itself
    assert all(AGENT_CODES[value] is code_of(value) for value in sent if code_of(value) is not None)
    # the agent's own two answer clients as the agent's invalid_request did before they were split from it
    assert {value: AGENT_CODES[value] for value in sent if code_of(value) is None} == {
        protocol.ERR_NO_ROUTE: errors.Code.INVALID_REQUEST, protocol.ERR_BODY_TOO_LARGE: errors.Code.INVALID_REQUEST}


def test_a_code_the_guest_agent_passes_on_as_itself_keeps_its_status() -> None:
    """What the agent answers on the channel is what the client sees, but for the agent's own failure
    (a 500 of the agent's is the server's 502)."""
    from hutch.guest import protocol
    from hutch.node.agent import AGENT_CODES

    differ = {value: (status, AGENT_CODES[value].status) for value, status in protocol.ERROR_STATUS.items()
              if AGENT_CODES[value].value == value and AGENT_CODES[value].status != status}
    assert differ == {protocol.ERR_AGENT: (500, 502)}
