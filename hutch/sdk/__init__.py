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
from hutch.sdk.ops import (
    AuditEntry,
    AuditPage,
    CommandResult,
    NetworkConfig,
    NetworkLogEntry,
    NetworkLogPage,
    PreviewPort,
    ProcessInfo,
    SandboxInfo,
    SecretAuditEntry,
    SecretAuditPage,
    SecretAuth,
    SecretBinding,
    SecretInfo,
)
from hutch.sdk.process import AsyncProcess, Process, PtySize
from hutch.sdk.sandbox import AsyncSandbox, Sandbox
from hutch.sdk.secrets import AsyncSecret, Provider, Secret

__all__ = [
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncSecret",
    "AuditEntry",
    "AuditPage",
    "AuthenticationError",
    "CommandResult",
    "ConflictError",
    "NetworkConfig",
    "NetworkLogEntry",
    "NetworkLogPage",
    "NotFoundError",
    "PreviewPort",
    "Process",
    "ProcessInfo",
    "Provider",
    "PtySize",
    "RateLimitError",
    "Sandbox",
    "SandboxError",
    "SandboxInfo",
    "SandboxTimeoutError",
    "Secret",
    "SecretAuditEntry",
    "SecretAuditPage",
    "SecretAuth",
    "SecretBinding",
    "SecretInfo",
    "ServerError",
    "ValidationError",
]
