"""The SDK's one error tree and the one table that maps an HTTP answer onto it.

    SandboxError                 status_code, code
    ├── AuthenticationError      401, 403
    ├── ValidationError          400, 413, 422 (and bad arguments caught before any request)
    ├── NotFoundError            404
    ├── ConflictError            409
    ├── SandboxTimeoutError      a request or a command ran out of time
    ├── RateLimitError           429
    ├── ServerError              5xx, or the server could not be reached
    └── BuildError               a template's build ended without an image (failed or cancelled):
                                 code, build_id, template_id, step, exit_code
"""

from __future__ import annotations

import json
from typing import Any

from hutch.sdk.codes import SdkCode


class SandboxError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None, code: str = SdkCode.ERROR,
                 details: Any = None) -> None:
        super().__init__(message)
        self.message, self.status_code, self.code, self.details = message, status_code, code, details

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status_code={self.status_code}, message={self.message!r})"


class AuthenticationError(SandboxError):
    pass


class ValidationError(SandboxError):
    pass


class NotFoundError(SandboxError):
    pass


class ConflictError(SandboxError):
    pass


class SandboxTimeoutError(SandboxError):
    """A request timed out, or a command hit its `timeout_seconds` (code SdkCode.COMMAND_TIMEOUT,
    "command_timeout"; what it printed until then is in `stdout` and `stderr`)."""

    stdout: str = ""
    stderr: str = ""


class RateLimitError(SandboxError):
    pass


class ServerError(SandboxError):
    pass


class BuildError(SandboxError):
    """Raised by `wait_until_ready` when the build failed or was cancelled; no HTTP status, the
    request itself went well. `code`: step_failed, image_not_found, image_pull_failed, ready_timeout,
    cancelled, build_failed, ...; `step` the index (from 0) into the template's steps of the one at
    fault (None: no step's), `exit_code` its command's. The build's log tells the rest."""

    def __init__(self, message: str, *, code: str, build_id: str, template_id: str, step: int | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(message, code=code)
        self.build_id, self.template_id, self.step, self.exit_code = build_id, template_id, step, exit_code

    def __repr__(self) -> str:
        return (f"BuildError(code={self.code!r}, build_id={self.build_id!r}, step={self.step}, "
                f"exit_code={self.exit_code}, message={self.message!r})")


_BY_STATUS: dict[int, type[SandboxError]] = {
    400: ValidationError, 401: AuthenticationError, 403: AuthenticationError, 404: NotFoundError,
    408: SandboxTimeoutError, 409: ConflictError, 413: ValidationError, 422: ValidationError,
    429: RateLimitError, 504: SandboxTimeoutError,
}


def error_from_response(status: int, body: bytes) -> SandboxError:
    """The error a failure answer stands for: its JSON's code and message, the class its status picks."""
    try:
        err = json.loads(body)["error"]
        code, message, details = str(err["code"]), str(err["message"]), err.get("details")
    except (ValueError, KeyError, TypeError):
        code, details = SdkCode.HTTP_STATUS.format(status=status), None
        message = body.decode(errors="replace")[:500] or f"HTTP {status}"
    return error_for(status, code, message, details)


def error_for(status: int, code: str, message: str, details: Any = None) -> SandboxError:
    """The one mapping: the exception class by HTTP status (`_BY_STATUS`, else ServerError for 5xx)."""
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else SandboxError)
    return cls(message, status_code=status, code=code, details=details)
