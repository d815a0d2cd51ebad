"""envd's signed file links: `GET|POST /files?path=&username=&signature=v1_...&signature_expiration=`,
as E2B's SDKs make them (`download_url()`/`upload_url()`, e2b.sandbox.signature.get_signature) from
the box's envd access token, and checked as envd checks them (the signature first, then the expiry,
each a 401 with envd's own message).

The SDKs' links name no box: they drop E2B_SANDBOX_URL's path (`urljoin(base, "/files")`, so they
land at hutch's root) and send no `E2b-Sandbox-Id`. The box is then the live one whose token made
the signature: hutch derives tokens rather than storing them, so each live box's is derived and
tried, one HMAC and a SHA-256 for each form of its token a box (~3.5 µs, more for the older form:
35 ms for 10,000 live boxes; the store is read off the event loop).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from hutch.e2b.common import StateGetter
from hutch.e2b.envd import SandboxGone
from hutch.errors import ApiError, Code
from hutch.store import SandboxRecord, SandboxStatus

if TYPE_CHECKING:
    from hutch.server.state import State

V1 = "v1_"
SIGNATURE_CHARS = len(V1) + 43  # an unpadded base64 SHA-256 digest
EXPIRATION = re.compile(r"[0-9]{1,12}")  # Unix seconds


@dataclass(frozen=True)
class SignedLink:
    """What a link's signature covers: `{path}:{operation}:{user}:{token}[:{expiration}]`, the user
    "" for the box's default user, the expiration as the link gives it."""

    signature: str
    path: str
    operation: str  # "read" (download) or "write" (upload)
    user: str
    expiration: str | None

    @property
    def well_formed(self) -> bool:
        return len(self.signature) == SIGNATURE_CHARS and self.signature.startswith(V1)

    def made_with(self, token: str) -> bool:
        if not self.well_formed:
            return False
        raw = f"{self.path}:{self.operation}:{self.user}:{token}" + (f":{self.expiration}" if self.expiration else "")
        want = V1 + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
        # as envd compares the text: another spelling of the same digest is not the signature
        return hmac.compare_digest(want.encode(), self.signature.encode("utf-8", "replace"))

    def check_expiry(self) -> None:
        """After the signature holds: an expiry past (or one no client could have made) is refused."""
        if self.expiration and (not EXPIRATION.fullmatch(self.expiration) or int(self.expiration) < time.time()):
            raise ApiError(Code.SIGNATURE_EXPIRED, "signature is already expired")


def _invalid() -> ApiError:
    return ApiError(Code.INVALID_SIGNATURE, "invalid signature")


def signed_sandbox_of(get_state: StateGetter, request: Request, link: SignedLink) -> tuple[State, SandboxRecord]:
    """The sandbox whose token made the link's signature: the one the `E2b-Sandbox-Id` header names
    if a client sent it (a made-up token when there is no such box, so the answer is the same 401),
    else the live box it was made for. Blocking (the store): run it off the event loop."""
    st = get_state()
    named = request.headers.get("e2b-sandbox-id")
    if named:
        rec = st.store.get_sandbox(named, include_deleted=True)
        if not any([link.made_with(t) for t in st.signer.forms(named, rec.token_generation if rec else 0)]):
            raise _invalid()
        if rec is None or rec.status == SandboxStatus.DELETED:
            raise SandboxGone(named[:64])
        return st, rec
    if link.well_formed:  # else no box made it
        for sandbox_id, generation in st.store.token_generations():
            if any(link.made_with(t) for t in st.signer.forms(sandbox_id, generation)):
                found = st.store.get_sandbox(sandbox_id)
                if found is not None:
                    return st, found
                break  # killed since
    raise _invalid()
