"""Who may open a private preview port: signed links, cookies and header tokens, all derived.

Every credential is an HMAC under a key derived from the server's key, over what it is for (its
kind, the sandbox, the port, the port's generation and, for links and cookies, an expiry). None
is stored; rotating a port bumps its generation, which voids every link, cookie and token of that
port at once. A credential names one port of one sandbox and opens nothing else.

    link    ?hutch_preview=<expires>.<mac>        short-lived, exchanged for a cookie
    cookie  hutch_preview_<port>=<expires>.<mac>  HttpOnly, SameSite=Lax, on that host only
    token   X-Hutch-Preview-Token: hpt_<mac>       for machine clients; until rotated
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

LINK_PARAM = "hutch_preview"
TOKEN_HEADER = "x-hutch-preview-token"
TOKEN_PREFIX = "hpt_"
COOKIE_SECONDS = 24 * 3600


def cookie_name(port: int) -> str:
    return f"hutch_preview_{port}"


class PreviewKeys:
    def __init__(self, server_key: bytes) -> None:
        self._key = hmac.new(server_key, b"hutch preview", hashlib.sha256).digest()

    def _mac(self, kind: str, sandbox_id: str, port: int, generation: int, expires: int = 0) -> str:
        msg = f"{kind}:{sandbox_id}:{port}:{generation}:{expires}".encode()
        return base64.urlsafe_b64encode(hmac.new(self._key, msg, hashlib.sha256).digest()).rstrip(b"=").decode()

    def token(self, sandbox_id: str, port: int, generation: int) -> str:
        return TOKEN_PREFIX + self._mac("token", sandbox_id, port, generation)

    def expiring(self, kind: str, sandbox_id: str, port: int, generation: int, expires: int) -> str:
        """A link ("link") or cookie ("cookie") value good until `expires` (unix seconds)."""
        return f"{expires}.{self._mac(kind, sandbox_id, port, generation, expires)}"

    def check_token(self, value: str, sandbox_id: str, port: int, generation: int) -> bool:
        return hmac.compare_digest(value.encode(), self.token(sandbox_id, port, generation).encode())

    def check_expiring(self, kind: str, value: str, sandbox_id: str, port: int, generation: int) -> bool:
        expires_text, _, _mac = value.partition(".")
        if not (expires_text.isascii() and expires_text.isdigit() and len(expires_text) <= 12):
            return False
        expires = int(expires_text)
        good = self.expiring(kind, sandbox_id, port, generation, expires)
        return hmac.compare_digest(value.encode(), good.encode()) and expires > time.time()
