"""hutch: self-hosted gVisor sandboxes for AI agents. `from hutch import Sandbox, AsyncSandbox`."""

from hutch.sdk import (
    AsyncSandbox,
    AuthenticationError,
    CommandResult,
    ConflictError,
    NotFoundError,
    RateLimitError,
    Sandbox,
    SandboxError,
    SandboxInfo,
    SandboxTimeoutError,
    ServerError,
    ValidationError,
)

__version__ = "0.1.0"
__all__ = [
    "AsyncSandbox", "AuthenticationError", "CommandResult", "ConflictError", "NotFoundError", "RateLimitError",
    "Sandbox", "SandboxError", "SandboxInfo", "SandboxTimeoutError", "ServerError", "ValidationError",
]
