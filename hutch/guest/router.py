"""The agent's routes, by method and path, each answered by the module that does its job; an error
a route raises (protocol.Refusal) is answered here, under its code's one status.

Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import ClassVar

try:
    from hutch.guest import protocol as p
    from hutch.guest import routes_channel, routes_exec, routes_files, routes_fs, routes_procs
    from hutch.guest.exchange import Exchange
    from hutch.guest.procs import ProcTable
    from hutch.guest.spawner import Spawner
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]
    import routes_channel  # type: ignore[import-not-found, no-redef]
    import routes_exec  # type: ignore[import-not-found, no-redef]
    import routes_files  # type: ignore[import-not-found, no-redef]
    import routes_fs  # type: ignore[import-not-found, no-redef]
    import routes_procs  # type: ignore[import-not-found, no-redef]
    from exchange import Exchange  # type: ignore[import-not-found, no-redef]
    from procs import ProcTable  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner  # type: ignore[import-not-found, no-redef]


class Router(Exchange):
    """One connection's requests, each sent to its route."""

    # The box's, shared by every connection; channel.serve() sets them before it listens.
    spawner: ClassVar[Spawner]
    procs: ClassVar[ProcTable]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        route = self.route()
        answer = ROUTES.get((method, route))
        if answer is None and method in ("GET", "POST") and route.startswith(p.PROCS + "/"):
            answer = lambda r: routes_procs.one(r, r.procs, method)
        try:
            if answer is None:
                raise p.Refusal(p.ERR_NO_ROUTE, "no such route")
            answer(self)
        except p.Refusal as e:
            if self._head_sent:  # too late for an error answer: http1 ends the connection
                raise
            self.refuse(e.code, e.message)


ROUTES: dict[tuple[str, str], Callable[[Router], None]] = {
    ("GET", p.HEALTH): routes_channel.health,
    ("POST", p.QUIESCE): routes_channel.quiesce,
    ("POST", p.TUNNEL): routes_channel.tunnel,
    ("POST", p.EXEC): lambda r: routes_exec.run(r, r.spawner),
    ("GET", p.PROCS): lambda r: routes_procs.list_running(r, r.procs),
    ("POST", p.PROCS): lambda r: routes_procs.spawn(r, r.procs),
    ("GET", p.FILES): routes_files.read_file,
    ("PUT", p.FILES): routes_files.write_file,
    ("GET", p.DIR_ZIP): routes_files.zip_dir,
    ("GET", p.FS_STAT): routes_fs.stat,
    ("GET", p.FS_LIST): routes_fs.list_dir,
    ("GET", p.FS_WATCH): routes_fs.watch,
    ("POST", p.FS_MKDIR): routes_fs.make_dir,
    ("POST", p.FS_MOVE): routes_fs.move,
    ("POST", p.FS_REMOVE): routes_fs.remove,
}
