"""The logs' retention: audit rows older than `audit_retention_days`, and each box's network log
beyond its newest `network_log_max_rows` (the lifetime scheduler runs it now and then)."""

from __future__ import annotations

import logging
import time

from hutch.services.config import ServerConfig
from hutch.store import Store

log = logging.getLogger("hutch.server")

EVERY_SECONDS = 60  # between two passes, unless the audit's retention is short


class LogRetention:
    def __init__(self, config: ServerConfig, store: Store) -> None:
        self.config, self.store = config, store
        self._logged_up_to = 0  # the network log's newest id at the last pass

    @property
    def every_seconds(self) -> int:
        """Between two passes: a minute, or a tenth of an audit retention shorter than ten minutes
        (a row past its time is then gone within a tenth of that time more)."""
        days = self.config.audit_retention_days
        return EVERY_SECONDS if days <= 0 else max(1, min(EVERY_SECONDS, int(days * 86400 / 10)))

    def prune(self, now: float | None = None) -> int:
        """On a worker thread (it deletes in batches). Returns how many rows went. Each API server
        of a fleet prunes; what one deleted the other finds gone."""
        removed = 0
        if self.config.audit_retention_days > 0:
            cutoff = (now or time.time()) - self.config.audit_retention_days * 86400
            removed += self.store.prune_logs_before(cutoff)
        self._logged_up_to, capped = self.store.cap_network_logs(self.config.network_log_max_rows, self._logged_up_to)
        removed += capped
        if removed:
            log.info("log retention: %d rows deleted", removed)
        return removed
