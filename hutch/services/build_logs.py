"""Builds' logs: one NDJSON file per build (in a fleet, in the shared directory, written by the node
that runs the build), followed live while the build runs here, or by polling the file and the
build's record where another node writes it; and the lines build boxes' connections add to them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from hutch.egress.policy import Policy
from hutch.egress.rules import NetworkRules
from hutch.errors import BuildFailure, build_error
from hutch.services.config import ServerConfig
from hutch.store import BuildStatus, Store
from hutch.templates.buildlog import BuildLog, Ended, follow, follow_file

log = logging.getLogger("hutch.server")

BUILD_BOX_PREFIX = "build-"  # the host directory names of build boxes (their egress policy)


class BuildLogs:
    def __init__(self, config: ServerConfig, store: Store, logs_dir: Path) -> None:
        self.config, self.store, self.logs_dir = config, store, logs_dir
        self.logs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.live: dict[str, BuildLog] = {}  # build id -> the log of a build running in this process

    def path(self, build_id: str) -> Path:
        return self.logs_dir / f"{build_id}.ndjson"

    def follow(self, build_id: str, after: int, wait: bool) -> AsyncIterator[bytes]:
        if self.config.fleet is None or build_id in self.live:
            return follow(self.live.get(build_id), self.path(build_id), after, wait)
        return follow_file(self.path(build_id), after, wait, lambda: self._ended(build_id))  # a node writes it

    def _ended(self, build_id: str) -> Ended | None:
        """How a build ended, by its record; None while it is queued or running."""
        build = self.store.get_build(build_id)
        if build is None:
            return BuildStatus.CANCELLED, build_error(BuildFailure.CANCELLED, "the template was deleted")
        if build.status in (BuildStatus.QUEUED, BuildStatus.RUNNING):
            return None
        return build.status, build.error

    def end(self, build_id: str, status: str, error: dict[str, Any], line: str | None = None) -> None:
        """End the log of a build no process runs (after `line`, if given)."""
        try:
            blog = BuildLog(self.path(build_id), sync=self.config.fleet is not None)
            if line is not None:
                blog.system(line)
            blog.finish(status, error)
        except OSError as e:
            log.warning("build %s: its log cannot be ended: %s", build_id, e)

    def egress_policy(self, box_key: str) -> Policy | None:
        """A build box reaches the internet (packages, registries) under the rules every box has
        (never private ranges or the host); its connections are told in the build's log."""
        if not box_key.startswith(BUILD_BOX_PREFIX):
            return None
        return Policy(box_key, NetworkRules.parse((), ()))

    def egress_record(self, box_key: str, line: str) -> None:
        for build_id, blog in self.live.items():
            if box_key.startswith(f"{BUILD_BOX_PREFIX}{build_id[:12]}"):
                blog.system(line)
                return
