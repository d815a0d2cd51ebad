"""Per-sandbox data-plane access tokens, derived rather than stored.

A token is an HMAC of the sandbox id and a generation number under the server's key: connect can
hand it out again without the store keeping it, and bumping the generation revokes it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

PREFIX = "hat_"


def load_or_create_key(path: Path) -> bytes:
    if path.exists():
        return path.read_bytes()
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


class TokenSigner:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def token(self, sandbox_id: str, generation: int) -> str:
        mac = hmac.new(self._key, f"sandbox:{sandbox_id}:{generation}".encode(), hashlib.sha256).digest()
        return PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def verify(self, token: str, sandbox_id: str, generation: int) -> bool:
        return hmac.compare_digest(token.encode(), self.token(sandbox_id, generation).encode())
