"""An upload's body as the server passes it on: a box's file, a volume's."""

from __future__ import annotations

from collections.abc import AsyncIterator

from hutch.errors import ApiError, Code

MAX_JSON_BODY = 1 * 2**20  # a body read whole (BodyLimit's, and a request to a box's port)


def capped_body(body: AsyncIterator[bytes], limit: int, length: int | None,
                what: str = "files") -> AsyncIterator[bytes]:
    """An upload's body, refused past `limit` bytes (at once if its declared `length` is past it)
    or when it differs from that length. `what` names it in the refusal."""
    if length is not None and length > limit:
        raise ApiError(Code.PAYLOAD_TOO_LARGE, f"{what} are limited to {limit} bytes")

    async def capped() -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in body:
            seen += len(chunk)
            if seen > limit:
                raise ApiError(Code.PAYLOAD_TOO_LARGE, f"{what} are limited to {limit} bytes")
            if length is not None and seen > length:
                raise ApiError(Code.INVALID_REQUEST, f"the body is longer than its Content-Length ({length})")
            yield chunk
        if length is not None and seen != length:
            raise ApiError(Code.INVALID_REQUEST, f"the body ended before its Content-Length ({length})")

    return capped()
