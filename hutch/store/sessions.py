"""The store's web-console sessions: a signed-in browser's cookie, kept only as its hash, with its
team, its CSRF token and its expiry (hutch.console hands them out and checks them)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

from hutch.store.database import Database
from hutch.store.schema import console_sessions, teams
from hutch.store.teams import hash_secret


@dataclass(frozen=True)
class ConsoleSession:
    team_id: str
    team_name: str
    csrf: str
    key_prefix: str
    expires_at: float


class SessionQueries(Database):
    def open_session(self, team_id: str, key_prefix: str, lifetime: float) -> str:
        """A new session for the team; the raw cookie value (only its hash is kept). Sessions
        that have expired go at the same time, so the table holds only live ones."""
        raw = secrets.token_urlsafe(32)
        now = time.time()
        with self._tx() as c:
            c.execute(console_sessions.delete().where(console_sessions.c.expires_at < now))
            c.execute(console_sessions.insert().values(token_hash=hash_secret(raw), team_id=team_id,
                                                       csrf=secrets.token_urlsafe(32), key_prefix=key_prefix[:16],
                                                       created_at=now, expires_at=now + lifetime))
        return raw

    def console_session(self, raw: str) -> ConsoleSession | None:
        """The live session a cookie stands for (looked up by hash: timing tells nothing of it)."""
        s = console_sessions.c
        with self._tx() as c:
            row = c.execute(sa.select(s.team_id, teams.c.name, s.csrf, s.key_prefix, s.expires_at)
                            .select_from(console_sessions.join(teams, teams.c.id == s.team_id))
                            .where(s.token_hash == hash_secret(raw), s.expires_at > time.time())).first()
        return ConsoleSession(str(row.team_id), str(row.name), str(row.csrf), str(row.key_prefix),
                              float(row.expires_at)) if row else None

    def close_session(self, raw: str) -> None:
        with self._tx() as c:
            c.execute(console_sessions.delete().where(console_sessions.c.token_hash == hash_secret(raw)))
