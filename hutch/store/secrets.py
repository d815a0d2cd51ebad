"""The store's secrets (sealed values), their bindings to sandboxes' env vars, and each secret's audit of uses."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hutch.store.database import Database, conflict_insert, fitted
from hutch.store.records import SECRET_JSON, AuditRecord, BindingRecord, SecretRecord
from hutch.store.schema import secret_audit, secret_bindings, secrets_table

# Every command reads its box's bindings (their stand-ins are in its env): built once, not per call.
_BINDINGS_OF = (sa.select(secret_bindings, secrets_table.c.id.label("live"))
                .select_from(secret_bindings.outerjoin(secrets_table, secrets_table.c.id == secret_bindings.c.secret_id))
                .where(secret_bindings.c.sandbox_id.in_(sa.bindparam("ids", expanding=True))))


class SecretQueries(Database):
    def insert_secret(self, rec: SecretRecord) -> bool:
        """False if the team has a secret of that name already."""
        try:
            with self._tx() as c:
                c.execute(secrets_table.insert().values(**SECRET_JSON.row(rec)))
        except sa.exc.IntegrityError:
            return False
        return True

    def _secret(self, c: Connection, *where: Any) -> SecretRecord | None:
        row = c.execute(sa.select(secrets_table).where(*where)).first()
        return SECRET_JSON.record(SecretRecord, row) if row else None

    def get_secret(self, team_id: str, name: str) -> SecretRecord | None:
        with self._tx() as c:
            return self._secret(c, secrets_table.c.team_id == team_id, secrets_table.c.name == name)

    def secret_by_id(self, secret_id: str) -> SecretRecord | None:
        with self._tx() as c:
            return self._secret(c, secrets_table.c.id == secret_id)

    def list_secrets(self, team_id: str) -> list[SecretRecord]:
        """By name (sorted here: a database's collation may order names otherwise)."""
        with self._tx() as c:
            rows = c.execute(sa.select(secrets_table).where(secrets_table.c.team_id == team_id))
            return sorted((SECRET_JSON.record(SecretRecord, r) for r in rows), key=lambda s: s.name)

    def rotate_secret(self, secret_id: str, sealed: bytes, metadata: dict[str, str] | None = None) -> None:
        """A new value (and, if given, new metadata)."""
        more = SECRET_JSON.encoded({"metadata": metadata}) if metadata is not None else {}
        with self._tx() as c:
            c.execute(secrets_table.update().where(secrets_table.c.id == secret_id).values(
                sealed=sealed, version=secrets_table.c.version + 1, updated_at=time.time(), **more))

    def delete_secret(self, secret_id: str) -> None:
        with self._tx() as c:
            c.execute(secrets_table.delete().where(secrets_table.c.id == secret_id))

    # --- bindings -------------------------------------------------------------------------------

    def bind_secret(self, b: BindingRecord) -> None:
        """Bind a secret to an env var of a sandbox, in place of any binding it had (one INSERT ...
        ON CONFLICT: of two binds at once, the later stays and neither fails)."""
        row = b.to_row()
        with self._tx() as c:
            q = conflict_insert(c, secret_bindings).values(**row)
            c.execute(q.on_conflict_do_update(index_elements=[secret_bindings.c.sandbox_id, secret_bindings.c.env],
                                              set_={k: v for k, v in row.items() if k not in ("sandbox_id", "env")}))

    def unbind_secret(self, sandbox_id: str, env: str) -> bool:
        with self._tx() as c:
            return bool(c.execute(secret_bindings.delete().where(secret_bindings.c.sandbox_id == sandbox_id,
                                                                 secret_bindings.c.env == env)).rowcount)

    def bindings(self, sandbox_id: str) -> list[BindingRecord]:
        """A sandbox's bindings, each marked revoked if its secret is gone."""
        return self.bindings_of([sandbox_id]).get(sandbox_id, [])

    def bindings_of(self, sandbox_ids: Sequence[str]) -> dict[str, list[BindingRecord]]:
        """The bindings of several sandboxes in one query (a list of sandboxes shows them all),
        each sandbox's by env var name."""
        found: dict[str, list[BindingRecord]] = {}
        with self._tx() as c:
            for r in c.execute(_BINDINGS_OF, {"ids": list(sandbox_ids)}):
                rec = BindingRecord(**{k: v for k, v in r._mapping.items() if k != "live"}, revoked=r.live is None)
                found.setdefault(rec.sandbox_id, []).append(rec)
        for recs in found.values():
            recs.sort(key=lambda rec: rec.env)  # here, not in SQL: a database's collation may order names otherwise
        return found

    def bound_secrets(self, sandbox_id: str) -> list[tuple[BindingRecord, SecretRecord]]:
        """A sandbox's live bindings with their secrets, in one query (the egress proxy asks at
        every connection)."""
        b, s = secret_bindings.c, secrets_table.c
        q = sa.select(*secret_bindings.c, *[col.label(f"s_{col.name}") for col in secrets_table.c]).select_from(
            secret_bindings.join(secrets_table, s.id == b.secret_id)).where(b.sandbox_id == sandbox_id)
        with self._tx() as c:
            rows = c.execute(q).all()
        out = []
        for r in rows:
            m = r._mapping
            binding = BindingRecord(**{col.name: m[col.name] for col in secret_bindings.c})
            secret = SECRET_JSON.record(SecretRecord, {col.name: m[f"s_{col.name}"] for col in secrets_table.c})
            out.append((binding, secret))
        return sorted(out, key=lambda pair: pair[0].env)

    def secret_for_standin(self, standin: str, secret_id: str) -> SecretRecord | None:
        """The secret a stand-in is bound to now, if that is still `secret_id` (one query: the
        egress proxy asks at every request it swaps in)."""
        b, s = secret_bindings.c, secrets_table.c
        with self._tx() as c:
            row = c.execute(sa.select(secrets_table).select_from(secret_bindings.join(secrets_table, s.id == b.secret_id))
                            .where(b.standin == standin, s.id == secret_id)).first()
        return SECRET_JSON.record(SecretRecord, row) if row else None

    def delete_bindings(self, sandbox_id: str) -> None:
        with self._tx() as c:
            c.execute(secret_bindings.delete().where(secret_bindings.c.sandbox_id == sandbox_id))

    # --- the audit of uses (append-only) --------------------------------------------------------

    def add_secret_audit(self, **entry: Any) -> None:
        with self._tx() as c:
            c.execute(secret_audit.insert().values(**fitted(secret_audit, entry)))

    def secret_audit(self, team_id: str, name: str, limit: int, before: int | None = None,
                     sandbox_id: str | None = None) -> list[AuditRecord]:
        """Every use of the team's secrets of that name (this one, and any deleted before it),
        newest first; `before` an id from an earlier page."""
        a = secret_audit.c
        q = sa.select(secret_audit).where(a.team_id == team_id, a.secret_name == name)
        if before is not None:
            q = q.where(a.id < before)
        if sandbox_id is not None:
            q = q.where(a.sandbox_id == sandbox_id)
        with self._tx() as c:
            return [AuditRecord(**r._mapping) for r in c.execute(q.order_by(a.id.desc()).limit(limit))]
