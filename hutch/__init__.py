"""hutch: self-hosted gVisor sandboxes for AI agents. `from hutch import Sandbox, AsyncSandbox`."""

from hutch.sdk import (
    AsyncProcess,
    AsyncSandbox,
    AuthenticationError,
    CommandResult,
    ConflictError,
    NetworkConfig,
    NetworkLogEntry,
    NetworkLogPage,
    NotFoundError,
    Process,
    ProcessInfo,
    PtySize,
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
    "AsyncProcess", "AsyncSandbox", "AuthenticationError", "CommandResult", "ConflictError", "NetworkConfig", "NetworkLogEntry",
    "NetworkLogPage", "NotFoundError",
    "Process", "ProcessInfo", "PtySize", "RateLimitError", "Sandbox", "SandboxError", "SandboxInfo",
    "SandboxTimeoutError", "ServerError", "ValidationError",
]
