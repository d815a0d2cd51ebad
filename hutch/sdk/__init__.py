"""The hutch Python SDK: sandboxes, their commands and files, sync and async.

Depends on nothing else of hutch, so it can be installed and used on any machine.
"""

from hutch.sdk.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RateLimitError,
    SandboxError,
    SandboxTimeoutError,
    ServerError,
    ValidationError,
)
from hutch.sdk.ops import CommandResult, SandboxInfo
from hutch.sdk.sandbox import AsyncSandbox, Sandbox

__all__ = [
    "AsyncSandbox", "AuthenticationError", "CommandResult", "ConflictError", "NotFoundError", "RateLimitError",
    "Sandbox", "SandboxError", "SandboxInfo", "SandboxTimeoutError", "ServerError", "ValidationError",
]
