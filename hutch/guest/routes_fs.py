"""The filesystem routes: stat, list, mkdir, move, remove and watch (fsops.py says how each user's
are kept safe), and `as_user`, which runs an fsops call for the acting user and turns its OSError
into the catalogue's code.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import TypeVar

try:
    from hutch.guest import fsops
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.exchange import EventStream, Exchange
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fsops  # type: ignore[import-not-found, no-redef]
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from exchange import EventStream, Exchange  # type: ignore[import-not-found, no-redef]

T = TypeVar("T")


def as_user(fn: Callable[[bool], T], user: object, what: str) -> T:
    """Run fn(trust_all) as the box user (links followed, the kernel checking the user's rights)
    or, for user "root", as root (only root's links followed). An OSError is raised as the
    Refusal that names it; `what` is the path (or paths) it is about."""
    try:
        if user == "root":
            return fn(False)
        with fsops.acting_as(p.BOX_UID, p.BOX_GID):
            return fn(True)
    except OSError as e:
        raise refusal_of(e, user, what) from None


def refusal_of(e: OSError, user: object, what: str) -> p.Refusal:
    if isinstance(e, fsops.UnsafePath):
        return p.Refusal(p.ERR_UNSAFE_PATH, f"{what} goes through a link the box's user made ({e})")
    if isinstance(e, fsops.TooMany):
        return p.Refusal(p.ERR_TOO_MANY_ENTRIES, f"{what}: {e.strerror}; list a smaller depth or a subdirectory")
    if isinstance(e, FileNotFoundError):
        return p.Refusal(p.ERR_NOT_FOUND, f"no such file or directory: {what}")
    if isinstance(e, NotADirectoryError):
        return p.Refusal(p.ERR_NOT_DIR, f"not a directory: {what} (or one of its parents)")
    if isinstance(e, IsADirectoryError):
        return p.Refusal(p.ERR_IS_DIR, f"{what}: {e.strerror}")
    if isinstance(e, FileExistsError):
        return p.Refusal(p.ERR_EXISTS, f"{what}: {e.strerror}")
    if isinstance(e, PermissionError):
        return p.Refusal(p.ERR_PERMISSION, f"{what}: permission denied to {'root' if user == 'root' else p.BOX_USER}")
    if e.errno == errno.ENOTEMPTY:
        return p.Refusal(p.ERR_EXISTS, f"{what}: the destination is a directory that is not empty")
    if e.errno == errno.EXDEV:
        return p.Refusal(p.ERR_IO, f"{what}: source and destination are on different filesystems")
    return p.Refusal(p.ERR_IO, f"{what}: {e.strerror or e}")


# --- reading ----------------------------------------------------------------------------------------

def stat(ex: Exchange) -> None:
    path = ex.path_arg()
    ex.answer_json(as_user(lambda trust: fsops.stat_path(path, trust), ex.query().get("user"), path))


def list_dir(ex: Exchange) -> None:
    path = ex.path_arg()
    query = ex.query()
    depth = query.get("depth", "1")
    if not (depth.isascii() and depth.isdigit() and 1 <= int(depth) <= fsops.MAX_DEPTH):
        raise p.Refusal(p.ERR_BAD_REQUEST, f"depth must be 1-{fsops.MAX_DEPTH}")
    entries = as_user(lambda trust: fsops.list_dir(path, int(depth), trust), query.get("user"), path)
    ex.answer_json({"entries": entries})


def watch(ex: Exchange) -> None:
    """Stream a directory's changes until the host goes or the directory does, with a ping
    every 10 s of quiet (a host that went away is noticed then). Watches as root, through
    root's links only."""
    path = ex.path_arg()
    query = ex.query()
    recursive = query.get("recursive") == "true"
    entries = query.get("entries") == "true"
    watched = as_user(lambda _trust: fsops.Watch(path, recursive), "root", path)
    try:
        stream = EventStream(ex)
        while stream.alive and not watched.ended:
            events = watched.read(L.PING_SECONDS)
            for name, kind in events:
                entry = watched.entry(name) if entries and kind in ("create", "write", "chmod") else None
                stream.send({"t": p.EVENT_FS, "name": name, "type": kind, **({"entry": entry} if entry else {})})
            if not events:
                stream.send({"t": p.EVENT_PING})
        stream.close()
    finally:
        watched.close()


# --- changing (a JSON body: {"path"} or {"source", "destination"}, and "user") ------------------------

def make_dir(ex: Exchange) -> None:
    (path,), user = _change_request(ex, "path")
    owner = (0, 0) if user == "root" else (p.BOX_UID, p.BOX_GID)
    made, created = as_user(lambda trust: fsops.make_dir(path, trust, owner), user, path)
    ex.answer_json({"entry": made, "created": created})


def move(ex: Exchange) -> None:
    (source, destination), user = _change_request(ex, "source", "destination")
    ex.answer_json(as_user(lambda trust: fsops.move(source, destination, trust), user, f"{source} -> {destination}"))


def remove(ex: Exchange) -> None:
    (path,), user = _change_request(ex, "path")
    as_user(lambda trust: fsops.remove(path, trust), user, path)
    ex.answer_json({})


def _change_request(ex: Exchange, *names: str) -> tuple[list[str], object]:
    """The body's paths, in the order named (each refused unless an absolute box path), and its user."""
    try:
        req = ex.json_body()
    except ValueError as e:
        raise p.Refusal(p.ERR_BAD_REQUEST, f"bad request: {e}") from None
    paths: list[str] = []
    for name in names:
        path = req.get(name)
        problem = p.path_problem(path) if isinstance(path, str) else "a string is needed"
        if problem or not isinstance(path, str):
            raise p.Refusal(p.ERR_BAD_PATH, f"{name}: {problem}")
        paths.append(path)
    return paths, req.get("user")
