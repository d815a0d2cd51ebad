"""Fixtures: a PostgreSQL server for the session, and a new database on it for each test. These
tests boot no hutch server: the session's server of tests/integration is not started for them."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.support import needs_installed
from tests.postgres import running_postgres, server_binaries


@pytest.fixture(autouse=True)
def _client_config() -> None:
    """In place of tests/integration's, which starts the session's hutch server: nothing to point at."""


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """The URL of the session's server's own database (`hutch`), to make others from."""
    needs_installed("PostgreSQL (Debian's postgresql)", server_binaries() is not None)
    directory = Path(tempfile.mkdtemp(prefix="hutch-pg-"))  # under /tmp: the postgres user reaches it
    try:
        with running_postgres(directory) as url:
            yield url
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def url(postgres: str) -> Iterator[str]:
    """A database of the test's own, empty, dropped after it."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield postgres.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
