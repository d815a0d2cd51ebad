"""Where the SDK finds its server and key: argument, then environment, then default."""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass

import certifi
import httpx

from hutch.sdk.codes import SdkCode
from hutch.sdk.errors import AuthenticationError

DEFAULT_BASE_URL = "http://127.0.0.1:7423"


@dataclass(frozen=True)
class ConnectionConfig:
    api_key: str
    base_url: str
    request_timeout: float = 120.0  # seconds for one control-plane request (create waits for boot)
    actor: str | None = None  # who this client is, in sandboxes' audit logs (HUTCH_ACTOR)
    # what carries the requests instead of the network, as httpx's own `transport=` (httpx.MockTransport
    # in tests); the blocking SDK needs an httpx.BaseTransport, the async one an httpx.AsyncBaseTransport
    transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None

    @classmethod
    def resolve(cls, api_key: str | None = None, base_url: str | None = None) -> ConnectionConfig:
        """`api_key` from the argument or HUTCH_API_KEY; `base_url` from the argument, HUTCH_BASE_URL,
        or the local default."""
        key = api_key or os.environ.get("HUTCH_API_KEY")
        if not key:
            raise AuthenticationError("no API key: pass api_key= or set HUTCH_API_KEY", code=SdkCode.MISSING_API_KEY)
        url = base_url or os.environ.get("HUTCH_BASE_URL") or DEFAULT_BASE_URL
        return cls(api_key=key, base_url=url.rstrip("/"), actor=os.environ.get("HUTCH_ACTOR") or None)

    def headers(self) -> dict[str, str]:
        """A control-plane request's: the API key, and who is asking."""
        return {"Authorization": f"Bearer {self.api_key}", **self.actor_headers()}

    def actor_headers(self) -> dict[str, str]:
        return {"X-Hutch-Actor": self.actor} if self.actor else {}


_tls: list[ssl.SSLContext] = []
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle costs ~20 ms each time. Made under a
    lock: 50 threads each making their first sandbox at once made 50 (functools.cache does not
    hold the others back), a second of CPU that the burst waited for."""
    with _tls_lock:
        if not _tls:
            _tls.append(ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or certifi.where()))
        return _tls[0]
