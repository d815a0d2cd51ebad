"""Where the SDK finds its server and key: argument, then environment, then default."""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass

import certifi

from hutch.sdk.errors import AuthenticationError

DEFAULT_BASE_URL = "http://127.0.0.1:7423"


@dataclass(frozen=True)
class ConnectionConfig:
    api_key: str
    base_url: str
    request_timeout: float = 120.0  # seconds for one control-plane request (create waits for boot)
    actor: str | None = None  # who this client is, in sandboxes' audit logs (HUTCH_ACTOR)

    @classmethod
    def resolve(cls, api_key: str | None = None, base_url: str | None = None) -> ConnectionConfig:
        """`api_key` from the argument or HUTCH_API_KEY; `base_url` from the argument, HUTCH_BASE_URL,
        or the local default."""
        key = api_key or os.environ.get("HUTCH_API_KEY")
        if not key:
            raise AuthenticationError("no API key: pass api_key= or set HUTCH_API_KEY", code="missing_api_key")
        url = base_url or os.environ.get("HUTCH_BASE_URL") or DEFAULT_BASE_URL
        return cls(api_key=key, base_url=url.rstrip("/"), actor=os.environ.get("HUTCH_ACTOR") or None)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~20 ms each time."""
    return ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or certifi.where())
