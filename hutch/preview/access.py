"""Who may open a private preview port: signed links, cookies and header tokens, all derived.

Every credential is an HMAC under a key derived from the server's key, over what it is for (its
kind, the sandbox, the port, the port's generation and, for links and cookies, an expiry). None
is stored; rotating a port bumps its generation, which voids every link, cookie and token of that
port at once. A credential names one port of one sandbox and opens nothing else.

    link    ?hutch_preview=<expires>.<mac>                 short-lived, exchanged for a cookie
    cookie  __Host-hutch-preview-<port>=<expires>.<mac>    HttpOnly, SameSite=Lax, Path=/, no Domain,
            (hutch-preview-<port> over plain http)          Secure: that host only, over https only
    token   X-Hutch-Preview-Token: hpt_<mac>                for machine clients; until rotated

The `__Host-` prefix makes browsers keep the cookie only if the host itself set it, over https,
with Path=/ and no Domain: a sibling box's page (all preview hosts share a registrable domain)
cannot plant or overwrite one, nor can a plain-http answer. A prefixed cookie must be Secure, and
a site served over plain http cannot set Secure cookies (browsers drop them), so over http the
name has no prefix. What holds on both: the value is a MAC over this sandbox and port (a planted
value opens nothing), every cookie of that name is tried (a planted one cannot shadow the real
one), the box's answers cannot set a cookie with any of hutch's names (headers.py), and the box
never sees one. The old name, hutch_preview_<port>, opens nothing.
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


_COOKIE = "hutch-preview-"
_HOST_PREFIX = "__Host-"
# names hutch uses or used, as a browser may send them back (prefixes and case aside)
_OURS = (_COOKIE, "hutch_preview")
_PREFIXES = ("__host-", "__secure-")


def cookie_name(port: int, https: bool) -> str:
    """The name of a port's cookie: `__Host-` prefixed where the site is served over https."""
    return f"{_HOST_PREFIX if https else ''}{_COOKIE}{port}"


def is_ours(name: str) -> bool:
    """Whether a cookie name is one of hutch's, whatever its port, prefix or case: the box must
    neither see nor set those."""
    name = name.strip().lower()
    for prefix in _PREFIXES:
        name = name.removeprefix(prefix)
    return name.startswith(_OURS)


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
