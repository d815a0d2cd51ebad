"""Per-sandbox data-plane access tokens, derived rather than stored.

A token is an HMAC of the sandbox id and a generation number under the server's key: connect can
hand it out again without the store keeping it, and bumping the generation revokes it. The token
names its sandbox in the clear (`hat_<id>.<mac>`; the id is no secret: it is in every URL), so a
call that carries the token but not the id (E2B's SDKs before 2.25.1, after `connect`) finds its box
with no lookup and no oracle: the MAC is checked against the named box, in constant time, as any
other token is. Tokens of the older form (`hat_<mac>`) are still accepted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path

PREFIX = "hat_"
MAX_ID = 64  # the longest sandbox id a token may name


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

    def _mac(self, sandbox_id: str, generation: int) -> str:
        mac = hmac.new(self._key, f"sandbox:{sandbox_id}:{generation}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def token(self, sandbox_id: str, generation: int) -> str:
        """A box's access token, as it is handed out."""
        return f"{PREFIX}{sandbox_id}.{self._mac(sandbox_id, generation)}"

    def forms(self, sandbox_id: str, generation: int) -> tuple[str, str]:
        """Each form a box's token may come in: the current one, then the older (`hat_<mac>`),
        which clients given it before the id was named in it still hold."""
        mac = self._mac(sandbox_id, generation)
        return f"{PREFIX}{sandbox_id}.{mac}", f"{PREFIX}{mac}"

    def keyed(self, name: str, n: int) -> str:
        """A secret keyed to a name and a number that is no box's (a volume's token, a link's
        signature): `hat_<mac>`, the form every such secret has always had."""
        return PREFIX + self._mac(name, n)

    def verify(self, token: str, sandbox_id: str, generation: int) -> bool:
        # every form compared, always: how long it takes says nothing of which matched
        return bool(sum(hmac.compare_digest(token.encode(), form.encode()) for form in self.forms(sandbox_id, generation)))


def sandbox_named(token: str | None) -> str | None:
    """The sandbox id a token names (unchecked: `verify` decides), or None for a token that names
    none (the older form, or not a token)."""
    if not token or not token.startswith(PREFIX):
        return None
    named, dot, _ = token[len(PREFIX):].rpartition(".")
    return named if dot and 0 < len(named) <= MAX_ID and named.isascii() else None
