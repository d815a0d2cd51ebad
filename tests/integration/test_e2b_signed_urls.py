"""E2B's signed file links: the real e2b SDK (2.45.1 and 2.63.0) makes a box's `download_url()` and
`upload_url()` links, with and without an expiry, and a plain HTTP client (httpx, with no hutch or
E2B header) uses them; a tampered link and an expired one are refused as envd refuses them.

The SDK makes these links at `<E2B_SANDBOX_URL's origin>/files`, with no sandbox header: hutch
finds the box whose token made the signature (hutch.e2b.envd.signed_sandbox_of).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from hutch import Sandbox
from tests.integration.support import Env
from tests.integration.test_e2b import LINES, run_client

CONTENT = b"signed bytes"
INVALID = {"code": 401, "message": "invalid signature"}
EXPIRED = {"code": 401, "message": "signature is already expired"}


def changed(url: str, **params: str | None) -> str:
    """The link with these query parameters set (None: taken out)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for key, value in params.items():
        if value is None:
            query.pop(key, None)
        else:
            query[key] = value
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def param(url: str, key: str) -> str:
    return dict(parse_qsl(urlsplit(url).query))[key]


@pytest.mark.parametrize("line", LINES)
def test_signed_links_download_and_upload_and_refuse_tampering(env: Env, line: str) -> None:
    out = run_client(env, line, "signed_urls", "sync")
    box = out["id"]
    try:
        link = out["download_expiring"]
        assert urlsplit(link).path == "/files" and box not in link  # the SDK's link names no box
        for key in ("download", "download_default_user", "download_expiring"):
            r = httpx.get(out[key])
            assert (r.status_code, r.content) == (200, CONTENT), (key, r.text)
        root = httpx.get(out["download_root"])
        assert root.status_code == 200 and root.text.strip()

        expired = httpx.get(out["download_expired"])
        assert (expired.status_code, expired.json()) == (401, EXPIRED)
        signature = param(link, "signature")
        flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
        later = str(int(param(link, "signature_expiration")) + 3600)
        for bad in (changed(link, signature=flipped), changed(link, path="signed/other.txt"),
                    changed(link, username="root"), changed(link, signature_expiration=later),
                    changed(link, signature_expiration=None), changed(link, signature="v1_" + "A" * 43)):
            r = httpx.get(bad)
            assert (r.status_code, r.json()) == (401, INVALID), bad

        upload = out["upload"]
        r = httpx.post(changed(upload, path="signed/a.txt"), files={"file": ("a.txt", b"overwritten")})
        assert (r.status_code, r.json()) == (401, INVALID)  # the signature holds for its own path only
        r = httpx.post(out["download"], files={"file": ("a.txt", b"overwritten")})
        assert (r.status_code, r.json()) == (401, INVALID)  # a read link does not write
        r = httpx.post(out["upload_expired"], files={"file": ("late.txt", b"late")})
        assert (r.status_code, r.json()) == (401, EXPIRED)
        uploaded = b"u" * (2 * 2**20)  # past hutch's JSON limit: bounded by the file limit, as envd's other uploads
        r = httpx.post(upload, files={"file": ("up.txt", uploaded)}, timeout=60)
        assert r.status_code == 200, r.text
        assert [(f["path"], f["type"]) for f in r.json()] == [("/home/user/signed/up.txt", "file")]

        hutch_box = Sandbox.connect(box)
        assert hutch_box.files.read("/home/user/signed/up.txt") == uploaded
        assert hutch_box.files.read("/home/user/signed/a.txt") == CONTENT  # refused writes changed nothing
        assert not hutch_box.files.exists("/home/user/signed/late.txt")
    finally:
        Sandbox.kill_by_id(box)
    gone = httpx.get(out["download"])
    assert (gone.status_code, gone.json()) == (401, INVALID)  # a killed box's links open nothing
