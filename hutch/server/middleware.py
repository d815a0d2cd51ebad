"""The request-size guard in front of every route: JSON bodies over the limit are refused (413)
before anything parses them; uploads and E2B's input streams are exempt here and capped where they
stream."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hutch.errors import Code
from hutch.server import errors
from hutch.services.uploads import MAX_JSON_BODY

__all__ = ["MAX_JSON_BODY", "BodyLimit", "TooLargeAnswer"]

# a refused body's message -> the status and error body to answer, in one front's error shape
TooLargeAnswer = Callable[[str], tuple[int, dict[str, Any]]]


def hutch_refusal(message: str) -> tuple[int, dict[str, Any]]:
    """hutch's own: 413 payload_too_large in hutch's error shape."""
    return Code.PAYLOAD_TOO_LARGE.status, errors.error_body(Code.PAYLOAD_TOO_LARGE, message)


class BodyLimit:
    """Refuses over-large JSON bodies (413) before anything parses them; file uploads are exempt
    here and capped where they stream."""

    def __init__(self, app: ASGIApp, limit: int, *, streamed: frozenset[str] = frozenset(),
                 streamed_puts: tuple[str, ...] = (), refusals: Mapping[str, TooLargeAnswer] | None = None) -> None:
        # the composition root names E2B's streamed paths, and the path prefixes that answer in
        # another front's shape with that front's refusal (E2B's envd: Connect's), so this module
        # knows no front but hutch's own
        self.app, self.limit = app, limit
        self.streamed, self.streamed_puts, self.refusals = streamed, streamed_puts, dict(refusals or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT" and scope["path"].endswith("/files")) or (
                scope["method"] == "POST" and scope["path"] in self.streamed) or (  # E2B's upload and input stream
                scope["method"] == "PUT" and self.streamed_puts and scope["path"].startswith(self.streamed_puts)):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _refuse(send, self._refusal(scope["path"]), f"request bodies are limited to {self.limit} bytes")
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:  # an HTTPException, which the body parser passes on unchanged
                raise StarletteHTTPException(413, f"request bodies are limited to {self.limit} bytes")
            return msg

        await self.app(scope, counted, send)

    def _refusal(self, path: str) -> TooLargeAnswer:
        return next((r for prefix, r in self.refusals.items() if path.startswith(prefix + "/")), hutch_refusal)


async def _refuse(send: Send, refuse: TooLargeAnswer, message: str) -> None:
    status, error = refuse(message)
    body = json.dumps(error).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
