"""E2B's envd facade in pieces, without a server: upload bodies capped while they stream, gunzip,
the per-box process map, box paths, and signed links."""

from __future__ import annotations

import asyncio
import gzip
import secrets
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.requests import Request

from hutch.e2b import process
from hutch.e2b.common import box_path
from hutch.e2b.files import _capped, _gunzip, _metadata
from hutch.e2b.filesystem import entry
from hutch.e2b.signing import SignedLink
from hutch.errors import ApiError, Code
from hutch.services.models import FsEntry, LinkEnd


def test_a_multipart_body_is_capped_while_it_streams() -> None:
    sent = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        sent += 1
        body = (b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\n" if sent == 1
                else b"a" * 65536)
        return {"type": "http.request", "body": body, "more_body": sent < 10_000}

    scope = {"type": "http", "method": "POST", "path": "/files", "query_string": b"",
             "headers": [(b"content-type", b"multipart/form-data; boundary=x")]}

    async def parse() -> None:
        await _capped(Request(scope, receive), 2**20).form()

    with pytest.raises(ApiError) as e:
        asyncio.run(parse())
    assert e.value.status == 413 and sent < 40  # refused after ~1 MiB, not after 650 MiB


def test_gunzip_members_junk_truncation_and_input_cap() -> None:
    async def run(data: bytes, limit: int = 2**30) -> bytes:
        async def body() -> Any:
            for i in range(0, len(data), 1000):
                yield data[i:i + 1000]
        return b"".join([c async for c in _gunzip(body(), limit)])

    assert asyncio.run(run(gzip.compress(b"a" * 5000) + gzip.compress(b"b"))) == b"a" * 5000 + b"b"
    assert asyncio.run(run(b"")) == b""
    for bad, status in ((gzip.compress(b"a") + b"junk", 400), (gzip.compress(b"abc")[:-3], 400)):
        with pytest.raises(ApiError) as e:
            asyncio.run(run(bad))
        assert e.value.status == status
    with pytest.raises(ApiError) as e:  # the compressed bytes count too
        asyncio.run(run(gzip.compress(secrets.token_bytes(5000)), limit=4000))
    assert e.value.status == 413


def test_processes_are_remembered_per_box() -> None:
    store = SimpleNamespace(get_sandbox=lambda sandbox_id: None if sandbox_id == "gone" else object())
    st = SimpleNamespace(store=store)
    procs = process.Processes()

    async def fill() -> None:
        timer = asyncio.get_running_loop().create_task(asyncio.sleep(60))
        procs.remember(st, "gone", 1, process.Known({}, None, False, timer=timer))
        for pid in range(1, process.MAX_KNOWN + 1):  # one box filling its own map
            procs.remember(st, "busy", pid, process.Known({}, "t", False))
        procs.swept = 0.0
        procs.remember(st, "calm", 7, process.Known({}, "mine", False))  # the sweep forgets "gone"
        await asyncio.sleep(0)
        assert timer.cancelled()

    asyncio.run(fill())
    assert procs.known("calm", 7) is not None and procs.known("gone", 1) is None
    assert len(procs.boxes["busy"]) == process.MAX_KNOWN  # its oldest went, no other box's
    procs.forget("calm", 7)
    assert "calm" not in procs.boxes


def test_box_paths() -> None:
    assert box_path("//etc/passwd", None) == "/etc/passwd" and box_path("a/../b", "root") == "/root/b"
    assert box_path("", None) == "/home/user"



def _fs_entry(**kw: Any) -> FsEntry:
    base = {"name": "link.txt", "path": "/home/user/link.txt", "type": "symlink", "size": 5, "mode": 0o777,
            "permissions": "lrwxrwxrwx", "owner": "user", "group": "user", "modified_time": "2026-01-01T00:00:00Z",
            "symlink_target": "t.txt"}
    return FsEntry.model_validate({**base, **kw})


def test_a_link_is_described_as_envd_does_by_what_it_leads_to() -> None:
    followed = entry(_fs_entry(link=LinkEnd(path="/home/user/t.txt", type="file", mode=0o644)))
    assert (followed["type"], followed["mode"], followed["symlinkTarget"]) == ("FILE_TYPE_FILE", 0o644, "/home/user/t.txt")
    assert "isSymlink" not in followed  # the SDK would call it SYMLINK again; envd does not send it
    dangling = entry(_fs_entry())
    assert (dangling["type"], dangling["mode"], dangling["symlinkTarget"]) == ("FILE_TYPE_UNSPECIFIED", 0, "/home/user/link.txt")
    plain = entry(_fs_entry(type="file", mode=0o644, symlink_target=None, metadata={"a": "b"}))
    assert (plain["type"], plain["mode"], plain["metadata"]) == ("FILE_TYPE_FILE", 0o644, {"a": "b"})
    assert "symlinkTarget" not in plain and "metadata" not in entry(_fs_entry(type="file", symlink_target=None))


def _upload(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/files", "query_string": b"", "headers": headers})


def test_upload_metadata_comes_from_x_metadata_headers_checked_as_envd_checks_it() -> None:
    assert _metadata(_upload([(b"content-type", b"application/octet-stream")])) is None
    got = _metadata(_upload([(b"x-metadata-author", b"mish"), (b"x-metadata-purpose", b"up load")]))
    assert got == {"author": "mish", "purpose": "up load"}
    for bad in ((b"x-metadata-k", "caf\u00e9".encode()), (b"x-metadata-k", b"a\tb"),
                (b"x-metadata-" + b"k" * 250, b"v"), (b"x-metadata-k", b"v" * 5000)):
        with pytest.raises(ApiError) as e:
            _metadata(_upload([bad]))
        assert e.value.code == Code.INVALID_REQUEST


# made by the e2b SDK's own get_signature (2.63.0): ("notes/a.txt", "read", "user", TOKEN), and
# ("notes/a.txt", "write", None, TOKEN, 100 s) at time 1700000000
TOKEN = "hat_exampletoken"
READ = "v1_RrgV5mpGyvUjoIpAk4wAf11pvIRBy3bVuBQvLpu7ikA"
WRITE = "v1_YfVcrZhCBkur6u3ndTd6MaTDWCxVZKBxSFc6JPBUZag"


def test_a_signed_link_holds_for_what_the_sdk_signed_and_nothing_else() -> None:
    def read(signature: str = READ, path: str = "notes/a.txt", operation: str = "read", user: str = "user",
             expiration: str | None = None) -> SignedLink:
        return SignedLink(signature, path, operation, user, expiration)

    assert read().made_with(TOKEN)
    assert not read().made_with(TOKEN + "x")
    for other in (read(path="notes/b.txt"), read(operation="write"), read(user="root"), read(user=""),
                  read(expiration="1700000100"),
                  read(READ[:-1] + "B"),  # the same digest, spelt otherwise (the last character's spare bits)
                  read(READ + "="), read("v1_bad"), read("v1_" + "\u00e9" * 43)):
        assert not other.made_with(TOKEN), other
    write = SignedLink(WRITE, "notes/a.txt", "write", "", "1700000100")  # no user: the box's default
    assert write.made_with(TOKEN) and not SignedLink(WRITE, "notes/a.txt", "write", "", "1700000101").made_with(TOKEN)


def test_a_signed_links_expiry_is_checked_after_its_signature() -> None:
    SignedLink(READ, "p", "read", "", None).check_expiry()  # none: it never expires
    SignedLink(READ, "p", "read", "", "99999999999").check_expiry()
    for past in ("1700000100", "0", "\u00b2", "-5", "9" * 13):
        with pytest.raises(ApiError) as e:
            SignedLink(READ, "p", "read", "", past).check_expiry()
        assert (e.value.code, e.value.message) == (Code.SIGNATURE_EXPIRED, "signature is already expired")
