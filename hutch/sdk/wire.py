"""Reading the SDK's wire types off JSON from their fields: one reader for every answer type.

A field reads the key of its own name, or the one `renamed` gives it (`from_` is "from"). A key the
answer leaves out gives the field's default, or None where its type allows None; a key the SDK does
not know (a newer server's) is skipped. tests/unit/test_sdk_openapi.py checks these same fields
against the server's OpenAPI document.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

W = TypeVar("W", bound="Wire")

WIRE_NAME = "wire"  # a field's metadata: the JSON key, when it is not the field's name
READER = "read"  # a field's metadata: how its value is read, when its type does not say (a union of steps)


def renamed(key: str) -> dict[str, Any]:
    """A field's metadata: it is `key` on the wire."""
    return {WIRE_NAME: key}


def wire_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get(WIRE_NAME, f.name))


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, its string annotations resolved (once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def admits_none(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


class Wire:
    """A dataclass the server answers: `from_json` reads it off a JSON object."""

    @classmethod
    def from_json(cls: type[W], d: Mapping[str, Any]) -> W:
        return read_object(cls, d)


def read_object(cls: type[W], d: Mapping[str, Any]) -> W:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key, tp = wire_name(f), hints(cls)[f.name]
        if key in d:
            reader: Callable[[Any], Any] | None = f.metadata.get(READER)
            kwargs[f.name] = reader(d[key]) if reader is not None else read(tp, d[key])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if not admits_none(tp):
                raise KeyError(f"{cls.__name__}: the answer has no {key!r}")
            kwargs[f.name] = None
    return cls(**kwargs)


def read(tp: Any, value: Any) -> Any:
    """A JSON value as the type `tp`: datetimes parsed, wire types read, lists and dicts item by item."""
    if value is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        (tp,) = [a for a in args if a is not type(None)]  # X | None; a union of more names its READER
        return read(tp, value)
    if origin is list:
        return [read(args[0], v) for v in value]
    if origin is dict:
        return {k: read(args[1], v) for k, v in value.items()}
    if tp is datetime:
        return datetime.fromisoformat(value)
    if isinstance(tp, type) and issubclass(tp, Wire):
        return tp.from_json(value)
    return value
