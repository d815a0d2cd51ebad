"""The store's webhooks: a team's endpoints, and each delivery attempt.

An endpoint is delivered its team's events past its cursor by one API server at a time, the one
holding its lease (`lease_webhook`): a fleet's servers all run deliverers, and the lease (a
conditional update) picks one. Every write of a delivery's progress is conditional on still
holding it, so a server that stalled past its lease writes nothing over its successor's work.
"""

from __future__ import annotations

import random
import time
from typing import Any

import sqlalchemy as sa

from hutch.store.database import Database, fitted, hold
from hutch.store.events import record
from hutch.store.records import WEBHOOK_JSON, DeliveryRecord, WebhookRecord
from hutch.store.schema import events, teams, webhook_deliveries, webhooks

KEPT_DELIVERIES = 1000  # attempts kept per webhook: the newest (older ones go as new ones are written)


class WebhookQueries(Database):
    def insert_webhook(self, rec: WebhookRecord, team_max: int) -> bool:
        """Record a webhook, its cursor the newest event (it is told what happens from now on);
        False if its team has `team_max` already (nothing changed)."""
        w = webhooks.c
        with self._tx() as c:
            hold(c, teams, teams.c.id == rec.team_id)
            if c.execute(sa.select(sa.func.count()).where(w.team_id == rec.team_id)).scalar_one() >= team_max:
                return False
            rec.cursor = int(c.execute(sa.select(sa.func.max(events.c.id))).scalar() or 0)
            c.execute(webhooks.insert().values(**WEBHOOK_JSON.row(rec)))
        return True

    def get_webhook(self, webhook_id: str, team_id: str | None = None) -> WebhookRecord | None:
        q = sa.select(webhooks).where(webhooks.c.id == webhook_id)
        if team_id is not None:
            q = q.where(webhooks.c.team_id == team_id)
        with self._tx() as c:
            row = c.execute(q).first()
        return WEBHOOK_JSON.record(WebhookRecord, row) if row else None

    def list_webhooks(self, team_id: str, flavor: str | None = None) -> list[WebhookRecord]:
        q = sa.select(webhooks).where(webhooks.c.team_id == team_id)
        if flavor is not None:
            q = q.where(webhooks.c.flavor == flavor)
        with self._tx() as c:
            rows = c.execute(q.order_by(webhooks.c.created_at, webhooks.c.id)).all()
        return [WEBHOOK_JSON.record(WebhookRecord, r) for r in rows]

    def update_webhook(self, webhook_id: str, team_id: str, **values: Any) -> WebhookRecord | None:
        """Change what `values` names (url, name, types, sealed, enabled); enabling clears why it
        was disabled and takes back no delivery (it goes on from its cursor). None if not found."""
        if values.get("enabled"):
            values["disabled_reason"] = None
        with self._tx() as c:
            done = c.execute(webhooks.update().where(webhooks.c.id == webhook_id, webhooks.c.team_id == team_id)
                             .values(**WEBHOOK_JSON.encoded(values), updated_at=time.time()))
            if not done.rowcount:
                return None
        return self.get_webhook(webhook_id, team_id)

    def delete_webhook(self, webhook_id: str, team_id: str) -> bool:
        with self._tx() as c:
            done = c.execute(webhooks.delete().where(webhooks.c.id == webhook_id, webhooks.c.team_id == team_id))
            if done.rowcount:
                c.execute(webhook_deliveries.delete().where(webhook_deliveries.c.webhook_id == webhook_id))
        return bool(done.rowcount)

    # --- delivery ---------------------------------------------------------------------------------

    def webhooks_behind(self, now: float, owner: str) -> list[WebhookRecord]:
        """Enabled webhooks whose team has an event past their cursor, and whose lease is free or
        ours (one team's events wake only its own webhooks; the index on events' team and id
        answers each in a step)."""
        w, e = webhooks.c, events.c
        behind = sa.exists().where(e.team_id == w.team_id, e.id > w.cursor)
        q = sa.select(webhooks).where(w.enabled.is_(True), behind,
                                      sa.or_(w.lease_until < now, w.lease_owner == owner))
        with self._tx() as c:
            return [WEBHOOK_JSON.record(WebhookRecord, r) for r in c.execute(q.order_by(w.id))]

    def lease_webhook(self, webhook_id: str, owner: str, until: float) -> WebhookRecord | None:
        """Take (or keep) an enabled webhook's lease until `until`; the webhook as it now is, or None
        if another server holds it or it is gone or disabled."""
        w = webhooks.c
        now = time.time()
        with self._tx() as c:
            done = c.execute(webhooks.update().where(
                w.id == webhook_id, w.enabled.is_(True), sa.or_(w.lease_until < now, w.lease_owner == owner))
                .values(lease_owner=owner, lease_until=until))
            if not done.rowcount:
                return None
            row = c.execute(sa.select(webhooks).where(w.id == webhook_id)).first()
        return WEBHOOK_JSON.record(WebhookRecord, row) if row else None

    def advance_webhook(self, webhook_id: str, owner: str, cursor: int) -> bool:
        """Move the cursor on, if the lease is still ours; False if it is not (stop delivering)."""
        w = webhooks.c
        with self._tx() as c:
            done = c.execute(webhooks.update().where(w.id == webhook_id, w.lease_owner == owner, w.cursor < cursor)
                             .values(cursor=cursor))
            if done.rowcount:
                return True
            return c.execute(sa.select(w.id).where(w.id == webhook_id, w.lease_owner == owner,
                                                   w.enabled.is_(True))).first() is not None

    def release_webhook(self, webhook_id: str, owner: str) -> None:
        w = webhooks.c
        with self._tx() as c:
            c.execute(webhooks.update().where(w.id == webhook_id, w.lease_owner == owner)
                      .values(lease_owner=None, lease_until=0.0))

    def disable_webhook(self, webhook_id: str, owner: str, reason: str) -> bool:
        """Disable a webhook whose deliveries kept failing, with its event (`webhook.disabled`), if
        the lease is still ours."""
        w = webhooks.c
        with self._tx() as c:
            row = c.execute(webhooks.update().where(w.id == webhook_id, w.lease_owner == owner, w.enabled.is_(True))
                            .values(enabled=False, disabled_reason=reason, lease_owner=None, lease_until=0.0,
                                    updated_at=time.time())
                            .returning(w.team_id, w.url)).first()
            if row is None:
                return False
            record(c, row.team_id, "webhook.disabled", None, webhook_id=webhook_id, url=row.url, reason=reason)
        return True

    def add_delivery(self, **entry: Any) -> None:
        """Write one attempt (unless its webhook was deleted meanwhile), and now and then let go of
        the webhook's attempts past the newest KEPT_DELIVERIES."""
        d = webhook_deliveries.c
        with self._tx() as c:
            if c.execute(sa.select(webhooks.c.id).where(webhooks.c.id == entry["webhook_id"])).first() is None:
                return
            c.execute(webhook_deliveries.insert().values(**fitted(webhook_deliveries, entry)))
            if random.random() < 0.01:  # about every 100th of each webhook's: a count per attempt costs a scan
                floor = c.execute(sa.select(d.id).where(d.webhook_id == entry["webhook_id"]).order_by(d.id.desc())
                                  .offset(KEPT_DELIVERIES).limit(1)).scalar()
                if floor is not None:
                    c.execute(webhook_deliveries.delete().where(d.webhook_id == entry["webhook_id"], d.id <= floor))

    def deliveries(self, webhook_id: str, limit: int = 100) -> list[DeliveryRecord]:
        """A webhook's attempts, newest first."""
        d = webhook_deliveries.c
        with self._tx() as c:
            rows = c.execute(sa.select(webhook_deliveries).where(d.webhook_id == webhook_id)
                             .order_by(d.id.desc()).limit(limit)).all()
        return [DeliveryRecord(**dict(r._mapping)) for r in rows]
