"""The logs' retention: audit rows older than `audit_retention_days`, and each box's network log
beyond its newest `network_log_max_rows` (the lifetime scheduler runs it now and then)."""

from __future__ import annotations

import logging
import time

from hutch.services.config import ServerConfig
from hutch.store import Store

log = logging.getLogger("hutch.server")


class LogRetention:
    def __init__(self, config: ServerConfig, store: Store) -> None:
        self.config, self.store = config, store
        self._logged_up_to = 0  # the network log's newest id at the last pass

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
