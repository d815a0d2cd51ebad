"""envd's file transfer: `GET /files` (download) and `POST /files` (upload, multipart or
octet-stream, gzip allowed), through hutch's DataPlane and audit log.

Auth is the `X-Access-Token` header, or an envd signature (`signature=v1_...`) made from the same
token (signing.py). The SDK's `download_url()`/`upload_url()` links drop E2B_SANDBOX_URL's path
and name no box, so this app also serves `/files` at hutch's root (hutch.e2b.mount).
`X-Metadata-<key>` headers are the uploaded files' metadata (`user.e2b.<key>` xattrs, keys
lowercased, checked as envd checks them before anything is written); a write replaces a file's set.
Errors are `{"code": <status>, "message"}`.
"""

from __future__ import annotations

import asyncio
import posixpath
import zlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Message

from hutch.e2b.common import StateGetter, box_path
from hutch.e2b.envd import Call, check_box, check_user, sandbox_of
from hutch.e2b.signing import SignedLink, signed_sandbox_of
from hutch.errors import ApiError, Code
from hutch.node.box import metadata_problem
from hutch.services import audit, boxops

MAX_PARTS = 1000
CHUNK = 64 * 1024
METADATA_HEADER = "x-metadata-"  # as Starlette gives header names: lowercased
FORM_OVERHEAD = 1 * 2**20  # a multipart body's boundaries, part headers and names, beyond the file bytes
# A signed link names no box, so finding its box tries every live box's token: at most this many
# searches at once (the rest wait on the event loop), so a flood of made-up links holds two
# threads' worth of CPU, not the server's thread pool
_searching = asyncio.Semaphore(2)


async def _call(get_state: StateGetter, request: Request, operation: str) -> tuple[Call, str]:
    q = request.query_params
    user = check_user(q.get("username"))
    path = q.get("path") or ""
    if q.get("signature") and not request.headers.get("x-access-token"):
        link = SignedLink(q["signature"], path, operation, user or "", q.get("signature_expiration"))
        async with _searching:
            st, rec = await run_in_threadpool(signed_sandbox_of, get_state, request, link)
        link.check_expiry()
    else:
        st, rec = sandbox_of(get_state, request)
    check_box(rec, request)
    return Call(st, rec, user, audit.actor(request)), path


async def download(get_state: StateGetter, request: Request) -> StreamingResponse:
    call, path = await _call(get_state, request, "read")
    if not path:
        raise ApiError(Code.INVALID_REQUEST, "path is required")
    size, body = await boxops.read_file(call.st, call.rec, call.who, box_path(path, call.user), call.user)
    headers = {"Content-Length": str(size)} if size is not None else None
    return StreamingResponse(body, media_type="application/octet-stream", headers=headers)


async def upload(get_state: StateGetter, request: Request) -> JSONResponse:
    call, query_path = await _call(get_state, request, "write")
    metadata = _metadata(request)
    kind = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    written = []
    limit = call.st.data.max_file_bytes
    if kind == "multipart/form-data":
        # the form is parsed (and spooled) before any part is written: its whole body is capped
        # as it arrives, so an over-large one is refused before it fills the server's disk
        form = await _capped(request, limit + FORM_OVERHEAD).form(max_files=MAX_PARTS, max_fields=MAX_PARTS)
        try:
            parts = [v for k, v in form.multi_items() if k == "file" and isinstance(v, UploadFile)]
            if not parts:
                raise ApiError(Code.INVALID_REQUEST, "no file part in the form")
            paths = [query_path if query_path and len(parts) == 1 else (p.filename or "") for p in parts]
            if "" in paths:
                raise ApiError(Code.INVALID_REQUEST, "each part needs a path (its filename)")
            paths = [box_path(p, call.user) for p in paths]
            if len(set(paths)) != len(paths):
                raise ApiError(Code.INVALID_REQUEST, "two parts have the same path")
            for part, path in zip(parts, paths, strict=True):
                written.append(await _write(call, path, _read_part(part), metadata))
        finally:
            await form.close()
    else:
        if not query_path:
            raise ApiError(Code.INVALID_REQUEST, "path is required for an octet-stream upload")
        body: AsyncIterator[bytes] = request.stream()
        if (request.headers.get("content-encoding") or "").lower() == "gzip":
            body = _gunzip(body, limit)
        written.append(await _write(call, box_path(query_path, call.user), body, metadata))
    return JSONResponse(written)


async def _write(call: Call, path: str, body: AsyncIterator[bytes], metadata: dict[str, str] | None) -> dict[str, Any]:
    await boxops.write_file(call.st, call.rec, call.who, path, body, call.user, metadata)
    # the agent stores the whole set or fails the write: what was given is what the file has
    return {"name": posixpath.basename(path), "type": "file", "path": path, **({"metadata": metadata} if metadata else {})}


def _metadata(request: Request) -> dict[str, str] | None:
    """envd's file metadata: each `X-Metadata-<key>` header, key lowercased, checked as envd
    checks it (before anything is written)."""
    found = {name[len(METADATA_HEADER):]: value for name, value in request.headers.items()
             if name.startswith(METADATA_HEADER) and len(name) > len(METADATA_HEADER)}
    problem = metadata_problem(found)
    if problem:
        raise ApiError(Code.INVALID_REQUEST, f"invalid metadata: {problem}")
    return found or None


async def _read_part(part: UploadFile) -> AsyncIterator[bytes]:
    while chunk := await part.read(CHUNK):
        yield chunk


def _too_large(limit: int) -> ApiError:
    return ApiError(Code.PAYLOAD_TOO_LARGE, f"uploads are limited to {limit} bytes")


def _capped(request: Request, limit: int) -> Request:
    """The request, its body refused (413) past `limit` bytes, declared or as it streams."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isascii() or not declared.isdigit() or int(declared) > limit):
        raise _too_large(limit)
    seen = 0

    async def receive() -> Message:
        nonlocal seen
        msg = await request.receive()
        seen += len(msg.get("body", b""))
        if seen > limit:
            raise _too_large(limit)
        return msg

    return Request(request.scope, receive)


async def _gunzip(body: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The body, gunzipped member after member, with bounded output per step (a small bomb
    cannot swell in memory) and the compressed input counted against the file limit too.
    Trailing bytes that are not a gzip member are refused."""
    d, started, seen = zlib.decompressobj(16 + zlib.MAX_WBITS), False, 0
    try:
        async for chunk in body:
            seen += len(chunk)
            if seen > limit:
                raise _too_large(limit)
            pending = chunk
            while pending:
                started = True
                data = d.decompress(pending, CHUNK)
                if data:
                    yield data
                if d.eof:  # the member ended: what follows must be another one
                    pending, started = d.unused_data, False
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                else:
                    pending = d.unconsumed_tail
        if started:
            raise ApiError(Code.INVALID_REQUEST, "the gzip body is truncated")
    except zlib.error:
        raise ApiError(Code.INVALID_REQUEST, "the body is not valid gzip") from None
