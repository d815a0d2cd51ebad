"""E2B's REST error body, `{"code": <http status>, "message"}`: the one builder of it, for the
control plane, envd's REST paths (/files, /health), its proxy's answers and E2B's host form.
Connect's body (envd's RPC paths) is `ConnectError.body` in connect.py."""

from __future__ import annotations

from typing import Any


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    # E2B's code is the HTTP status (a catalogue code's `.status`), not a name
    return {"code": status, "message": message, **extra}
