"""The store on PostgreSQL: every test of tests/unit/test_store.py again (but those that read the
SQLite file itself), each on a database of its own; and what only a shared server shows, several
processes migrating one empty database at once."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from hutch.store import Store, migrations, schema
from tests.unit import test_store as on_sqlite
from tests.unit.test_store import at_once, revision_of, schema_differences

team = on_sqlite.team
for _name, _test in vars(on_sqlite).items():
    if _name.startswith("test_") and "db" not in inspect.signature(_test).parameters:
        globals()[_name] = _test


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = Store(url)
    yield s
    s.engine.dispose()


@pytest.fixture
def another(url: str) -> Iterator[Store]:
    s = Store(url)
    yield s
    s.engine.dispose()


def test_the_store_runs_on_postgresql_through_psycopg(store: Store) -> None:
    assert (store.engine.dialect.name, store.engine.dialect.driver) == ("postgresql", "psycopg")


def test_servers_opening_one_empty_database_at_once_all_open_it(url: str) -> None:
    """Without the advisory lock, two would both create the tables and all but one would fail."""
    stores = at_once(*[lambda: Store(url)] * 4)
    try:
        with stores[0].engine.connect() as c:
            assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() == [migrations.head()]
        team = stores[1].create_team("team-a")
        assert stores[2].team_by_name("team-a") == team
    finally:
        for s in stores:
            s.engine.dispose()
    assert revision_of(url) == migrations.head()
    assert schema_differences(url) == []


def test_log_ids_are_64_bit(store: Store) -> None:
    """A fleet's network log passes 2**31 rows in weeks."""
    for table in (schema.network_log, schema.secret_audit, schema.audit_log):
        with store.engine.connect() as c:
            [column] = [col for col in sa.inspect(c).get_columns(table.name) if col["name"] == "id"]
        assert isinstance(column["type"], sa.BigInteger), table.name
