"""What the first revision does to a database a hutch before migrations made: no version was kept
then, so its shape (which tables, which columns, which indexes) says what it lacks.

Only what an older hutch made differently changes: tables, nullable columns and indexes are added
where missing, and the oldest layout of `templates` goes (below). Every row stays.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection


def bring_to(conn: Connection, meta: sa.MetaData) -> None:
    """Make the database hold `meta`'s tables: create those missing, complete those there."""
    _drop_old_templates(conn, meta)
    meta.create_all(conn)  # the tables it lacks, with their indexes
    _add_missing_columns(conn, meta)
    _add_missing_indexes(conn, meta)


def _drop_old_templates(conn: Connection, meta: sa.MetaData) -> None:
    """hutch before templates could be built kept only the base in a `templates` keyed by name:
    pin the sandboxes booted from it to its root, and drop the table (the base is registered
    again at every start)."""
    inspector = sa.inspect(conn)
    if "templates" not in inspector.get_table_names():
        return
    if "id" in {col["name"] for col in inspector.get_columns("templates")}:
        return
    roots: dict[str, str] = {str(n): str(r) for n, r in conn.execute(sa.text("SELECT name, rootfs FROM templates"))}
    _add_missing_columns(conn, meta)  # the sandboxes' rootfs column
    for name, rootfs in roots.items():
        conn.execute(sa.text("UPDATE sandboxes SET rootfs = :r WHERE template = :n AND rootfs IS NULL"),
                     {"r": rootfs, "n": name})
    conn.execute(sa.text("DROP TABLE templates"))


def _add_missing_columns(conn: Connection, meta: sa.MetaData) -> None:
    """A table an older hutch made gets the nullable columns added since (nothing else changes
    shape in place)."""
    inspector = sa.inspect(conn)
    existing = set(inspector.get_table_names())
    quote = conn.dialect.identifier_preparer.quote
    for table in meta.sorted_tables:
        if table.name not in existing:
            continue
        have = {col["name"] for col in inspector.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have and col.nullable:
                conn.execute(sa.text(f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(col.name)} "
                                     f"{col.type.compile(conn.dialect)}"))


def _add_missing_indexes(conn: Connection, meta: sa.MetaData) -> None:
    """The indexes of tables an older hutch made before the index was (creating a table makes its
    indexes; adding a column to one did not)."""
    inspector = sa.inspect(conn)
    for table in meta.sorted_tables:
        have = {ix["name"] for ix in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in have:
                index.create(conn)
