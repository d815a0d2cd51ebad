"""A throwaway PostgreSQL server for tests, run as root: its own data directory, a socket directory
inside it, 127.0.0.1 (or another address of the host) at a free port, trust authentication, no
fsync; stopped at the end.

The server binaries are Debian's `postgresql` package (/usr/lib/postgresql/<version>/bin, the
highest version there). Debian's own cluster service is never started or touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_ROOT = Path("/usr/lib/postgresql")
PG_USER = "postgres"  # initdb refuses root: the server runs as the package's user
DATABASE = "hutch"


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries are not installed."""


def server_binaries() -> Path | None:
    """The bin directory of the highest installed PostgreSQL, or None."""
    found = [p.parent for p in PG_ROOT.glob("*/bin/postgres") if p.parent.parent.name.isdigit()]
    return max(found, key=lambda b: int(b.parent.name)) if found else None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _as_postgres(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", PG_USER, "--", *map(str, args)], capture_output=True, text=True,
                          check=False, timeout=120)


def _checked(what: str, done: subprocess.CompletedProcess[str], log: Path | None = None) -> None:
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}\n{tail}")


@contextmanager
def running_postgres(directory: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """A PostgreSQL server whose files are all under `directory` (it must be reachable by the
    postgres user: not under a 0700 directory of root's, as pytest's tmp_path is; its log is
    `postgres.log` there), listening on `host`, with an empty database; yields
    `postgresql://postgres@HOST:PORT/hutch`. Off loopback (a fleet's bridge), any client is trusted."""
    binaries = server_binaries()
    if binaries is None:
        raise PostgresMissing(f"PostgreSQL's server is not installed (no {PG_ROOT}/*/bin/postgres): "
                              "apt-get install postgresql (scripts/test does)")
    if os.geteuid() != 0:
        raise PermissionError("running_postgres runs the server as the postgres user: it needs root")
    data, sockets, log = directory / "data", directory / "sockets", directory / "postgres.log"
    directory.mkdir(parents=True, exist_ok=True)
    sockets.mkdir()
    for path in (directory, sockets):
        shutil.chown(path, PG_USER, PG_USER)
    _checked("initdb", _as_postgres(binaries / "initdb", "-D", data, "-U", PG_USER, "--auth=trust",
                                     "--encoding=UTF8", "--no-locale", "--no-sync"))
    if host != "127.0.0.1":  # initdb trusts loopback only; the test's other hosts come from the bridge
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write("host all all all trust\n")
    port = _free_port(host)
    options = (f"-c listen_addresses={host} -c port={port} -c unix_socket_directories={sockets} "
               "-c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    _checked("pg_ctl start", _as_postgres(binaries / "pg_ctl", "-D", data, "-l", log, "-o", options,
                                           "-w", "-t", "60", "start"), log)
    try:
        _checked("createdb", _as_postgres(binaries / "createdb", "-h", sockets, "-p", str(port), "-U", PG_USER, DATABASE))
        yield f"postgresql://{PG_USER}@{host}:{port}/{DATABASE}"
    finally:
        _checked("pg_ctl stop", _as_postgres(binaries / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop"), log)
