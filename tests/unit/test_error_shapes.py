"""Every error leaves through the catalogue (issue 37): no Connect code is written as a string where
a ConnectError is made, and no error body is written out by hand. Read from the source with `ast`.

An error body is a dict literal with a "code" and a "message" key; each shape has one builder,
and only the builders may write one."""

from __future__ import annotations

import ast
import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import hutch
from hutch import e2b
from hutch.server.middleware import BodyLimit

ROOT = Path(hutch.__file__).parent

# (file, function): the one builder of each error shape
BUILDERS = {
    ("server/errors.py", "error_fields"),  # hutch's {"error": {"code", "message"}} and its streams' error events
    ("e2b/connect.py", "body"),  # Connect's {"code": <connect code>, "message"} (ConnectError.body)
    ("e2b/rest.py", "error_body"),  # E2B's REST {"code": <http status>, "message"}
    ("errors.py", "build_error"),  # a failed build's record (BuildFailure)
}
# where hutch's shape is described, beside its builder: the OpenAPI document's schema of it
SCHEMAS = {("server/errors.py", "document_errors")}
# not the server's answers: the agent in the box speaks its own protocol to the node (and imports
# nothing of the server), and the SDK and the CLI echo what a server said
ELSEWHERE = ("guest/", "sdk/", "cli/")


@functools.cache
def sources() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(ROOT)), ast.parse(p.read_text(), str(p))) for p in sorted(ROOT.rglob("*.py"))]


def literal_connect_codes(tree: ast.Module) -> list[int]:
    """Lines of `ConnectError("<code>", ...)`: a Connect code as a string (or an f-string)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ConnectError"
            and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
            and (isinstance(node.args[0], ast.JoinedStr) or isinstance(node.args[0].value, str))]


def hand_written_bodies(path: str, tree: ast.Module) -> list[int]:
    """Lines of dict literals with "code" and "message" keys outside the builders."""
    lines: list[int] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Dict) and (path, function) not in BUILDERS | SCHEMAS:
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"code", "message"} <= keys:
                lines.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return lines


def test_the_checks_see_a_breach() -> None:
    bad = ast.parse('ConnectError("not_found", "m")\nConnectError(f"x{y}", "m")\nConnectError(C.NOT_FOUND, "m")\n'
                    'httpx.ConnectError("refused")\n'
                    'def f():\n    return {"code": "invalid_message", "message": "m"}\n'
                    'def body():\n    return {"code": c, "message": m, **extra}\n'
                    'x = {"code": "print(1)", "language": "python"}\n')
    assert literal_connect_codes(bad) == [1, 2]
    assert hand_written_bodies("e2b/process.py", bad) == [6, 8]
    assert hand_written_bodies("e2b/connect.py", bad) == [6]  # body() is Connect's builder there


def test_no_connect_code_is_written_as_a_string() -> None:
    found = [f"hutch/{path}:{line}" for path, tree in sources() for line in literal_connect_codes(tree)]
    assert not found, ("ConnectError made with a literal code: raise ApiError(Code.X, ...) (or "
                       "ConnectError.of_code), or a ConnectCode for Connect's own:\n  " + "\n  ".join(found))


def test_no_error_body_is_written_by_hand() -> None:
    found = [f"hutch/{path}:{line}" for path, tree in sources() if not path.startswith(ELSEWHERE)
             for line in hand_written_bodies(path, tree)]
    assert not found, ("error bodies written by hand: build them with errors.error_body/error_fields (hutch's), "
                       "ConnectError (Connect's) or e2b.rest.error_body (E2B's REST):\n  " + "\n  ".join(found))


def test_every_builder_is_there() -> None:
    """A renamed builder would leave its shape unguarded: each one named here exists."""
    defined = {(path, node.name) for path, tree in sources() for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert defined >= BUILDERS | SCHEMAS


def test_the_body_guard_refuses_in_each_fronts_shape() -> None:
    """hutch's 413 payload_too_large; on envd's paths (named by the composition root), Connect's
    resource_exhausted (429), which E2B's SDK reads."""

    async def refused(path: str) -> tuple[int, Any]:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("a refused body reaches no route")

        async def receive() -> Any:
            return {"type": "http.request", "body": b""}

        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        guard = BodyLimit(app, 10, refusals={e2b.ENVD_PREFIX: e2b.too_large})
        await guard({"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", b"11")]},
                    receive, send)
        return sent[0]["status"], json.loads(sent[1]["body"])

    message = "request bodies are limited to 10 bytes"
    assert asyncio.run(refused("/e2b/envd/process.Process/List")) == (
        429, {"code": "resource_exhausted", "message": message})
    for path in ("/sandboxes", "/e2b/sandboxes", "/e2b/envd"):
        assert asyncio.run(refused(path)) == (413, {"error": {"code": "payload_too_large", "message": message}}), path
