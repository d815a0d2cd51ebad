"""The Python SDK against the server's OpenAPI document, as sdk-ts/test/openapi.test.ts checks the
TypeScript SDK: every route the SDK calls is in it with its method, and every wire type of
hutch/sdk/types.py has its schema's fields, required where the schema requires them, of its types.
The document is the app's own (`app.openapi()`), built in-process: no server, no network."""

from __future__ import annotations

import ast
import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import Match

from hutch.sdk import routes
from hutch.sdk import types as wire_types
from hutch.sdk.codes import BuildFailure
from hutch.sdk.wire import Wire, admits_none, hints, wire_name
from hutch.server.app import create_app
from hutch.services.config import ServerConfig

SDK = Path(routes.__file__).parent
Doc = dict[str, Any]

# An SDK type's schema is the one of its own name, but for these
SCHEMA_OF: dict[type, str] = {wire_types.EntryInfo: "FsEntry", wire_types.Event: "EventInfo",
                              wire_types.WebhookDelivery: "DeliveryInfo"}
# Types the SDK only sends (never reads off an answer): the template steps
SENT = (wire_types.RunStep, wire_types.EnvStep, wire_types.WorkdirStep, wire_types.UserStep, wire_types.CopyStep)
# A template step is sent as an object of one key, which holds the step's fields (step_body)
STEP_KEY: dict[type, str] = {wire_types.EnvStep: "env", wire_types.UserStep: "user", wire_types.CopyStep: "copy"}
# The dataclasses of types.py that are no schema of the document, and why
NOT_IN_DOCUMENT = {
    wire_types.CommandResult: "put together from the events of a command's stream",
    wire_types.FilesystemEvent: "a watch's server-sent event",
    wire_types.BuildLogLine: "a line of a build's NDJSON log",
    wire_types.BuildEnd: "the last line of a build's NDJSON log",
    wire_types.Result: "a line of run_code's NDJSON stream, E2B's shape",
    wire_types.Logs: "run_code's output, gathered",
    wire_types.ExecutionError: "a line of run_code's NDJSON stream",
    wire_types.Execution: "run_code's lines, gathered",
}
# Enumerations the SDK spells itself, and the document's schema of the same values
ENUMS: list[tuple[str, set[str], str, bool]] = [  # (what, its values, schema, all of the schema's)
    ("hutch.sdk.codes.BuildFailure", {v for k, v in vars(BuildFailure).items() if k.isupper()}, "BuildFailure", True),
    ("hutch.sdk.types.BUILD_ENDED", set(wire_types.BUILD_ENDED), "BuildStatus", False),
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return create_app(ServerConfig(data_dir=tmp_path_factory.mktemp("data")))  # its lifespan is not run


@pytest.fixture(scope="module")
def doc(app: FastAPI) -> Doc:
    return app.openapi()


def _serves_websocket(app: FastAPI, path: str) -> bool:
    """A WebSocket route is no part of an OpenAPI document: ask the app's routes whether one takes
    the path (its parameters given a value)."""
    scope = {"type": "websocket", "path": re.sub(r"\{\w+\}", "1", path), "root_path": ""}
    return any(r.matches(scope)[0] == Match.FULL for r in app.routes)


# --- routes ---------------------------------------------------------------------------------------

def _paths(route: routes.Route) -> list[str]:
    return [plane + route.path for plane in route.planes] or [route.path]


def test_every_route_the_sdk_calls_is_in_the_document_with_its_method(app: FastAPI, doc: Doc) -> None:
    missing = []
    for name, route in routes.ROUTES.items():
        for path in _paths(route):
            there = _serves_websocket(app, path) if route.method == "WS" else route.method.lower() in doc["paths"].get(path, {})
            if not there:
                missing.append(f"routes.{name}: {route.method} {path}")
    assert len(routes.ROUTES) >= 60, f"found {len(routes.ROUTES)} routes"
    assert not missing, "the SDK calls routes the server's document does not have:\n  " + "\n  ".join(missing)


def _sdk_modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(SDK.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def test_every_request_the_sdk_builds_comes_from_the_route_table() -> None:
    """So the test above sees every call: a `Call(...)` names its method and URL only through a
    Route (`Call(*routes.X.at(...), ...)`), and no module but routes.py spells an API path."""
    strays = []
    for path, module in _sdk_modules():
        for node in ast.walk(module):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Call"
                    and not (node.args and isinstance(node.args[0], ast.Starred))):
                strays.append(f"{path.relative_to(SDK)}:{node.lineno}: a Call not made from a Route")
            if (path.name != "routes.py" and isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith(("/v1/", "/data/v1/", "/commands", "/files", "/code/"))):
                strays.append(f"{path.relative_to(SDK)}:{node.lineno}: the path {node.value!r} outside routes.py")
    assert not strays, "\n".join(strays)


def test_every_route_of_the_table_is_called() -> None:
    text = "".join(p.read_text() for p in SDK.rglob("*.py") if p.name != "routes.py")
    unused = [name for name in routes.ROUTES if f"routes.{name}" not in text]
    assert not unused, f"routes no call uses (remove them, or they go unchecked in use): {unused}"


# --- wire types -----------------------------------------------------------------------------------

def _wire_classes() -> list[type]:
    return [c for c in vars(wire_types).values()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == wire_types.__name__]


def _schema_name(cls: type) -> str:
    return SCHEMA_OF.get(cls, cls.__name__)


def _deref(doc: Doc, node: Any) -> tuple[str | None, Doc]:
    if isinstance(node, dict) and "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return name, doc["components"]["schemas"][name]
    return None, node if isinstance(node, dict) else {}


def _nullable(node: Doc) -> tuple[bool, Doc]:
    """Whether the schema allows null, and the schema of what else it allows."""
    options = node.get("anyOf")
    if options and any(o.get("type") == "null" for o in options):
        rest = [o for o in options if o.get("type") != "null"]
        return True, rest[0] if len(rest) == 1 else {"anyOf": rest}
    return False, node


class Drift:
    """What differs, each line naming the SDK type, its field and the schema."""

    def __init__(self, doc: Doc) -> None:
        self.doc, self.lines, self.pairs = doc, list[str](), list[tuple[type, str]]()

    def pair(self, cls: type, schema: str) -> None:
        if (cls, schema) not in self.pairs:
            self.pairs.append((cls, schema))

    def check_all(self) -> None:
        for cls in _wire_classes():
            if cls in NOT_IN_DOCUMENT:
                continue
            self.pair(cls, _schema_name(cls) if cls not in STEP_KEY else cls.__name__)
        done = 0
        while done < len(self.pairs):  # nested types add their own pairs as they are met
            cls, schema = self.pairs[done]
            done += 1
            self.check_class(cls, schema)

    def check_class(self, cls: type, name: str) -> None:
        schema = self.doc["components"]["schemas"].get(name)
        if schema is None:
            self.lines.append(f"{cls.__name__}: the document has no schema {name!r}")
            return
        if cls in STEP_KEY:  # {"env": {"key": ..., "value": ...}}: the step's fields are the inner object's
            key = STEP_KEY[cls]
            inner, schema = _deref(self.doc, schema.get("properties", {}).get(key))
            if list(schema) == []:
                self.lines.append(f"{cls.__name__}: schema {name} has no object under {key!r}")
                return
            name = f"{name}.{key} ({inner})"
        where = f"{cls.__name__} (schema {name})"
        properties, required = schema.get("properties", {}), set(schema.get("required", ()))
        fields = {wire_name(f): f for f in dataclasses.fields(cls)}
        for key in properties.keys() - fields.keys():
            self.lines.append(f"{where}: the server's field {key!r} is not in the SDK type")
        for key in fields.keys() - properties.keys():
            self.lines.append(f"{where}: the SDK's field {key!r} is not in the server's schema")
        for key in fields.keys() & properties.keys():
            f, tp = fields[key], hints(cls)[fields[key].name]
            defaulted = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            nullable, node = _nullable(properties[key])
            if key in required and defaulted:
                self.lines.append(f"{where}.{key}: required by the schema, but the SDK gives it a default")
            if key not in required and not defaulted and not admits_none(tp):
                self.lines.append(f"{where}.{key}: optional in the schema, but the SDK requires it (no default)")
            if nullable and not admits_none(tp):
                self.lines.append(f"{where}.{key}: the schema allows null, the SDK's type {tp} does not")
            if admits_none(tp) and not nullable and key in required:
                self.lines.append(f"{where}.{key}: the SDK's type allows None, the schema's does not")
            self.check_type(f"{where}.{key}", _non_null(tp), node)

    def check_type(self, where: str, tp: Any, node: Doc) -> None:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        ref, schema = _deref(self.doc, node)
        kind = schema.get("type")
        if tp is Any or node in ({}, True):
            return
        if origin in (typing.Union, types.UnionType):  # a union of wire types (the steps): the same refs
            mine = {_schema_name(a) for a in args}
            theirs = {_deref(self.doc, o)[0] for o in schema.get("anyOf", ())}
            if mine != theirs:
                self.lines.append(f"{where}: the SDK's union is of {sorted(mine)}, the schema's of {sorted(map(str, theirs))}")
            for a in args:
                self.pair(a, _schema_name(a))
        elif origin is typing.Literal or (isinstance(tp, type) and issubclass(tp, Enum)):
            values = set(args) if origin is typing.Literal else {m.value for m in tp}
            if values != set(schema.get("enum", ())):
                self.lines.append(f"{where}: the SDK's values {sorted(values)}, the schema's {schema.get('enum')}")
        elif origin is list:
            if kind != "array":
                self.lines.append(f"{where}: a list in the SDK, {kind or schema} in the schema")
            else:
                self.check_type(f"{where}[]", _non_null(args[0]), schema.get("items", {}))
        elif origin is dict:
            if kind != "object" or "properties" in schema:
                self.lines.append(f"{where}: a dict in the SDK, {ref or kind} in the schema")
            else:
                self.check_type(f"{where}{{}}", _non_null(args[1]), schema.get("additionalProperties", {}))
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if ref != _schema_name(tp):
                self.lines.append(f"{where}: the SDK's {tp.__name__} (schema {_schema_name(tp)}), the schema's {ref or kind}")
            self.pair(tp, _schema_name(tp))
        else:
            expected = {str: {"string"}, int: {"integer"}, float: {"number", "integer"}, bool: {"boolean"},
                        datetime: {"string"}}.get(tp)
            if expected is None:
                self.lines.append(f"{where}: the SDK's type {tp} is not one this test knows")
            elif kind not in expected and not (tp is bool and schema.get("const") in (True, False)):
                self.lines.append(f"{where}: {tp.__name__} in the SDK, {ref or kind or schema} in the schema")
            elif (tp is datetime) != (schema.get("format") == "date-time"):
                self.lines.append(f"{where}: {tp.__name__} in the SDK, format {schema.get('format')} in the schema")


def _non_null(tp: Any) -> Any:
    if admits_none(tp):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return tp


def test_every_type_of_types_py_is_a_schema_or_said_not_to_be() -> None:
    unknown = [c.__name__ for c in _wire_classes() if c not in NOT_IN_DOCUMENT and c not in SENT and not issubclass(c, Wire)]
    assert not unknown, f"types.py's {unknown}: make them Wire types, or say in NOT_IN_DOCUMENT why they are not"


def test_the_sdks_wire_types_are_the_documents_schemas(doc: Doc) -> None:
    drift = Drift(doc)
    drift.check_all()
    assert len(drift.pairs) >= 30, f"checked {len(drift.pairs)} types"
    assert not drift.lines, "the SDK's wire types differ from the server's OpenAPI document:\n  " + "\n  ".join(
        drift.lines)


@pytest.mark.parametrize(("what", "values", "schema", "whole"), ENUMS)
def test_the_sdks_enumerations_are_the_documents(doc: Doc, what: str, values: set[str], schema: str, whole: bool) -> None:
    theirs = set(doc["components"]["schemas"][schema]["enum"])
    assert values == theirs if whole else values <= theirs, f"{what} is {sorted(values)}; schema {schema}: {sorted(theirs)}"
