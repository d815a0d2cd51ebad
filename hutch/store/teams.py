"""The store's teams and their API keys (kept only as hashes)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import uuid

import sqlalchemy as sa

from hutch.store.database import Database
from hutch.store.schema import api_keys, teams

API_KEY_PREFIX = "hutch_"
E2B_KEY_PREFIX = "e2b_"


def hash_secret(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# Every control-plane call looks its key up: the statement is built once, not per call.
_KEY_TEAM = sa.select(api_keys.c.key_hash, api_keys.c.team_id).where(api_keys.c.key_hash == sa.bindparam("digest"))


class TeamQueries(Database):
    def create_team(self, name: str) -> str:
        team_id = str(uuid.uuid4())
        with self._tx() as c:
            c.execute(teams.insert().values(id=team_id, name=name, created_at=time.time()))
        return team_id

    def team_by_name(self, name: str) -> str | None:
        with self._tx() as c:
            return c.execute(sa.select(teams.c.id).where(teams.c.name == name)).scalar()

    def create_api_key(self, team_id: str, e2b: bool = False) -> str:
        """A new key for the team. `e2b`: shaped as E2B's (`e2b_` + 40 hex digits), which the e2b
        SDK before 2.63 demands; it works on hutch's own API as well."""
        raw = E2B_KEY_PREFIX + secrets.token_hex(20) if e2b else API_KEY_PREFIX + secrets.token_urlsafe(32)
        with self._tx() as c:
            c.execute(api_keys.insert().values(key_hash=hash_secret(raw), team_id=team_id,
                                               prefix=raw[:12], created_at=time.time()))
        return raw

    def team_for_api_key(self, raw: str) -> str | None:
        digest = hash_secret(raw)
        with self._tx() as c:
            row = c.execute(_KEY_TEAM, {"digest": digest}).first()
        # the lookup is by hash, so timing tells nothing of the key; compare anyway, in constant time
        if row is None or not hmac.compare_digest(row.key_hash, digest):
            return None
        return str(row.team_id)
