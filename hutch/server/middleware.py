"""The request-size guard in front of every route: JSON bodies over the limit are refused (413)
before anything parses them; uploads and E2B's input streams are exempt here and capped where they
stream."""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hutch.errors import Code
from hutch.server import errors
from hutch.services.uploads import MAX_JSON_BODY

__all__ = ["MAX_JSON_BODY", "BodyLimit"]


class BodyLimit:
    """Refuses over-large JSON bodies (413) before anything parses them; file uploads are exempt
    here and capped where they stream."""

    def __init__(self, app: ASGIApp, limit: int, *, streamed: frozenset[str] = frozenset(),
                 streamed_puts: tuple[str, ...] = (), connect_prefix: str | None = None) -> None:
        # the composition root names E2B's streamed paths and its Connect prefix (hutch.e2b)
        self.app, self.limit = app, limit
        self.streamed, self.streamed_puts, self.connect_prefix = streamed, streamed_puts, connect_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT" and scope["path"].endswith("/files")) or (
                scope["method"] == "POST" and scope["path"] in self.streamed) or (  # E2B's upload and input stream
                scope["method"] == "PUT" and self.streamed_puts and scope["path"].startswith(self.streamed_puts)):
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _refuse(send, self.limit, connect=self._connect(scope["path"]))
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            seen += len(msg.get("body", b""))
            if seen > self.limit:  # an HTTPException, which the body parser passes on unchanged
                raise StarletteHTTPException(413, f"request bodies are limited to {self.limit} bytes")
            return msg

        await self.app(scope, counted, send)

    def _connect(self, path: str) -> bool:
        return self.connect_prefix is not None and path.startswith(self.connect_prefix + "/")


async def _refuse(send: Send, limit: int, connect: bool = False) -> None:
    """413 in hutch's error shape, or (E2B's envd, a Connect client) Connect's resource_exhausted."""
    message = f"request bodies are limited to {limit} bytes"
    error = {"code": "resource_exhausted", "message": message} if connect else errors.error_body(Code.PAYLOAD_TOO_LARGE,
                                                                                                     message)
    body = json.dumps(error).encode()
    await send({"type": "http.response.start", "status": 429 if connect else 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
