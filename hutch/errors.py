"""The catalogue of API errors: every code the server can answer, each with its one HTTP status.

`ApiError(Code.X, message)` is the only way to raise an API error; the status comes from the code,
so one code never travels with two statuses. The SDK mirrors these names (`hutch.sdk.codes`), and
a test keeps the two lists equal. The guest agent's codes (`hutch.guest.protocol.ERR_*`, each with its
one status on the channel) each become one member here (`hutch.node.agent.AGENT_CODES`), mostly
their namesakes below, answered under the status this table gives them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Code(StrEnum):
    status: int

    def __new__(cls, value: str, status: int) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        return member

    # the request itself
    INVALID_REQUEST = "invalid_request", 400
    # a webhook URL the host may not send to: a private, loopback, link-local or metadata address
    # (unless the operator's --webhook-allow names it), or one that does not resolve
    WEBHOOK_URL_REFUSED = "webhook_url_refused", 400
    INVALID_JSON = "invalid_json", 400
    INVALID_PATH = "invalid_path", 400
    INVALID_SPEC = "invalid_spec", 400
    INVALID_MESSAGE = "invalid_message", 400  # a frame on a WebSocket or a Connect stream
    UNKNOWN_PROVIDER = "unknown_provider", 400
    METHOD_NOT_ALLOWED = "method_not_allowed", 405
    PAYLOAD_TOO_LARGE = "payload_too_large", 413
    OUTPUT_TOO_LARGE = "output_too_large", 413

    # who is asking
    UNAUTHORIZED = "unauthorized", 401
    INVALID_API_KEY = "invalid_api_key", 401
    INVALID_ACCESS_TOKEN = "invalid_access_token", 401
    INVALID_SIGNATURE = "invalid_signature", 401
    SIGNATURE_EXPIRED = "signature_expired", 401
    FORBIDDEN = "forbidden", 403

    # what is asked for
    NOT_FOUND = "not_found", 404
    TEMPLATE_NOT_FOUND = "template_not_found", 404
    BUILD_NOT_FOUND = "build_not_found", 404
    PORT_NOT_PUBLISHED = "port_not_published", 404
    CONTEXT_NOT_FOUND = "context_not_found", 404  # a code-interpreter context
    SNAPSHOT_NOT_FOUND = "snapshot_not_found", 404
    VOLUME_NOT_FOUND = "volume_not_found", 404
    WEBHOOK_NOT_FOUND = "webhook_not_found", 404

    # the state of things
    CONFLICT = "conflict", 409
    SANDBOX_PAUSED = "sandbox_paused", 409
    SANDBOX_FAILED = "sandbox_failed", 409
    SANDBOX_NOT_RUNNING = "sandbox_not_running", 409
    ALREADY_PAUSED = "already_paused", 409
    INVALID_STATE = "invalid_state", 409  # the sandbox is between states (pausing, resuming)
    TEMPLATE_EXISTS = "template_exists", 409
    TEMPLATE_IN_USE = "template_in_use", 409
    TEMPLATE_NOT_READY = "template_not_ready", 409
    TEMPLATE_ROOT_GONE = "template_root_gone", 409
    SYSTEM_TEMPLATE = "system_template", 409
    BUILD_FINISHED = "build_finished", 409
    SECRET_EXISTS = "secret_exists", 409
    INTERPRETER_UNAVAILABLE = "interpreter_unavailable", 409  # no code interpreter answers in the box
    DESKTOP_UNAVAILABLE = "desktop_unavailable", 409  # not a desktop box, or its desktop did not take the call
    SNAPSHOT_EXISTS = "snapshot_exists", 409  # a team's snapshot names are unique
    SNAPSHOT_IN_USE = "snapshot_in_use", 409  # boxes are booting from it: delete it once they run
    VOLUME_EXISTS = "volume_exists", 409  # a team's volume names are unique
    VOLUME_IN_USE = "volume_in_use", 409  # a live box (running or paused) mounts it
    VOLUMES_UNAVAILABLE = "volumes_unavailable", 409  # this server keeps no volumes

    # quotas
    RATE_LIMITED = "rate_limited", 429
    TOO_MANY_SANDBOXES = "too_many_sandboxes", 429
    TOO_MANY_TEMPLATES = "too_many_templates", 429
    TOO_MANY_BUILDS = "too_many_builds", 429
    NO_CAPACITY = "no_capacity", 429  # a fleet with no node that has room, within the placement wait
    # a pause past a budget of checkpoints (the team's paused boxes or bytes, the node's bytes): the box runs on
    CHECKPOINT_BUDGET = "checkpoint_budget", 429
    TOO_MANY_SNAPSHOTS = "too_many_snapshots", 429  # a team's snapshots, by count or by bytes
    TOO_MANY_VOLUMES = "too_many_volumes", 429  # a team's volumes, by count or by size; or the node's disk budget
    TOO_MANY_WEBHOOKS = "too_many_webhooks", 429
    TOO_MANY_WATCHERS = "too_many_watchers", 429  # a box's or team's open file watchers (E2B's envd)

    # the server, the node and the box
    SERVER_ERROR = "server_error", 500
    AGENT_ERROR = "agent_error", 502
    BOOT_FAILED = "boot_failed", 503
    LIMITS_UNAVAILABLE = "limits_unavailable", 503  # the host cannot hold a box to its memory and pid limits
    PAUSE_FAILED = "pause_failed", 503
    SNAPSHOT_FAILED = "snapshot_failed", 503  # the box could not be checkpointed: it runs on
    RESUME_FAILED = "resume_failed", 503
    SANDBOX_UNREACHABLE = "sandbox_unreachable", 503
    COMMAND_START_FAILED = "command_start_failed", 503
    TEMPLATE_START_FAILED = "template_start_failed", 503
    STORE_UNAVAILABLE = "store_unavailable", 503
    NODE_UNREACHABLE = "node_unreachable", 503  # a fleet's node did not answer its API server
    READY_TIMEOUT = "ready_timeout", 504
    INSUFFICIENT_STORAGE = "insufficient_storage", 507

    # the guest agent's own (hutch.guest.protocol), passed on by the node (the rest of its codes are above)
    FILE_NOT_FOUND = "file_not_found", 404
    PROCESS_NOT_FOUND = "process_not_found", 404
    IS_A_DIRECTORY = "is_a_directory", 400
    NOT_A_DIRECTORY = "not_a_directory", 400
    NOT_A_REGULAR_FILE = "not_a_regular_file", 400
    UNSAFE_PATH = "unsafe_path", 400
    INVALID_CWD = "invalid_cwd", 400
    IO_ERROR = "io_error", 400
    NOT_A_TERMINAL = "not_a_terminal", 400
    TOO_MANY_ENTRIES = "too_many_entries", 400
    PERMISSION_DENIED = "permission_denied", 403
    ALREADY_EXISTS = "already_exists", 409
    STDIN_CLOSED = "stdin_closed", 409
    STDIN_FULL = "stdin_full", 409
    TOO_MANY_PROCESSES = "too_many_processes", 429
    PORT_NOT_LISTENING = "port_not_listening", 502


class BuildFailure(StrEnum):
    """Why a template build failed: the `error.code` of a failed build (not an HTTP answer)."""

    STEP_FAILED = "step_failed"
    IMAGE_NOT_FOUND = "image_not_found"  # no such file, layout, tag or repository; not an image archive
    IMAGE_PULL_FAILED = "image_pull_failed"  # the registry could not be reached or would not serve it
    INVALID_IMAGE = "invalid_image"  # another platform, or layers that would not unpack
    INVALID_SPEC = "invalid_spec"
    READY_TIMEOUT = "ready_timeout"
    START_FAILED = "start_failed"
    CANCELLED = "cancelled"
    BUILD_FAILED = "build_failed"


def build_error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """A failed build's `error` (kept with the build, not an HTTP answer): the one builder of it.
    `code` is a BuildFailure; the image importer and the start probe hand theirs on as text."""
    return {"code": code, "message": message, **extra}


# A plain HTTP status from the framework (a route that does not exist, a method it lacks) as a code.
BY_HTTP_STATUS = {400: Code.INVALID_REQUEST, 401: Code.UNAUTHORIZED, 403: Code.FORBIDDEN, 404: Code.NOT_FOUND,
                  405: Code.METHOD_NOT_ALLOWED, 409: Code.CONFLICT, 413: Code.PAYLOAD_TOO_LARGE,
                  429: Code.RATE_LIMITED}


_BY_VALUE = {c.value: c for c in Code}


def code_of(value: str) -> Code | None:
    """The catalogue's code spelled `value`, if there is one (a code read off the wire)."""
    return _BY_VALUE.get(value)


def for_http_status(status: int) -> Code:
    return BY_HTTP_STATUS.get(status) or (Code.SERVER_ERROR if status >= 500 else Code.INVALID_REQUEST)


class ApiError(Exception):
    """An error answered to the client as {"error": {"code", "message", ...extra}} with the code's status."""

    def __init__(self, code: Code, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra

    @property
    def status(self) -> int:
        return self.code.status


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(Code.NOT_FOUND, f"{what} {ident!r} does not exist")
