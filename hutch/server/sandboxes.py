"""Sandbox lifecycle: what create, update, kill and the reconcile at start do to the store and node.

The store is the truth for what exists; the node holds what runs. Every transition takes the
box's lock, so two calls on one box never interleave.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from pathlib import Path

from hutch.node.node import Box, BoxStartError, Node
from hutch.node.spec import Limits
from hutch.server.config import ServerConfig
from hutch.server.errors import ApiError, not_found
from hutch.server.models import CreateSandbox, SandboxAccess, SandboxInfo, UpdateSandbox, timestamp
from hutch.server.tokens import TokenSigner
from hutch.store import SandboxRecord, Store, TemplateRecord

log = logging.getLogger("hutch.server")

BASE_TEMPLATE = "hutch/base"


class Sandboxes:
    def __init__(self, config: ServerConfig, store: Store, node: Node, signer: TokenSigner) -> None:
        self.config, self.store, self.node, self.signer = config, store, node, signer
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._starting = 0
        node.on_exit = self._box_ended

    # --- views ----------------------------------------------------------------------------------

    def info(self, rec: SandboxRecord) -> SandboxInfo:
        return SandboxInfo(
            id=rec.id, name=rec.name, status=rec.status, template=rec.template,  # type: ignore[arg-type]
            metadata=rec.metadata, timeout_seconds=rec.timeout_seconds,
            auto_delete_seconds=rec.auto_delete_seconds, vcpu_count=rec.vcpu, memory_mib=rec.memory_mib,
            created_at=timestamp(rec.created_at), updated_at=timestamp(rec.updated_at), failure=rec.failure,
        )

    def access(self, rec: SandboxRecord) -> SandboxAccess:
        return SandboxAccess(
            **self.info(rec).model_dump(),
            access_token=self.signer.token(rec.id, rec.token_generation),
            data_plane_url=f"{self.config.base_url}/data/v1/sandboxes/{rec.id}",
        )

    def get(self, team_id: str, sandbox_id: str) -> SandboxRecord:
        rec = self.store.get_sandbox(sandbox_id, team_id)
        if rec is None:
            raise not_found("sandbox", sandbox_id)
        return rec

    # --- lifecycle ------------------------------------------------------------------------------

    async def create(self, team_id: str, req: CreateSandbox) -> SandboxRecord:
        template = self.store.get_template(req.from_template or BASE_TEMPLATE)
        if template is None:
            raise ApiError(404, "template_not_found", f"template {req.from_template!r} does not exist")
        running = len(self.store.list_sandboxes(None, status="active")) + self._starting
        if running >= self.config.max_sandboxes:
            raise ApiError(429, "too_many_sandboxes",
                           f"this node runs at most {self.config.max_sandboxes} sandboxes; kill or pause one")
        limits = Limits(memory_mib=template.memory_mib, pids=self.config.pids, cpu_shares=1024 * template.vcpu)
        self._starting += 1
        try:
            box = await self.node.start(Path(template.rootfs), limits)
        except BoxStartError as e:
            log.error("a box failed to start: %s", e)
            raise ApiError(503, "boot_failed", f"the sandbox could not start: {e}") from e
        finally:
            self._starting -= 1
        rec = SandboxRecord(
            id=str(uuid.uuid4()), team_id=team_id, name=req.name, template=template.name, status="active",
            memory_mib=template.memory_mib, vcpu=template.vcpu, metadata=req.metadata or {},
            env_vars=req.env_vars or {}, timeout_seconds=req.timeout_seconds,
            auto_delete_seconds=req.auto_delete_seconds, runtime_id=box.runtime_id,
        )
        try:
            self.store.insert_sandbox(rec)
        except BaseException:
            await self.node.stop(box.runtime_id)  # never a box without a record
            raise
        return rec

    async def update(self, team_id: str, sandbox_id: str, req: UpdateSandbox) -> SandboxRecord:
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            changes = {k: getattr(req, k) for k in req.model_fields_set}
            if "metadata" in changes and changes["metadata"] is None:
                changes["metadata"] = {}
            if changes:
                self.store.update_sandbox(rec.id, **changes)
            return self.get(team_id, sandbox_id)

    async def kill(self, team_id: str, sandbox_id: str) -> None:
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            if rec.runtime_id:
                await self.node.stop(rec.runtime_id)
            self.store.update_sandbox(rec.id, status="deleted", runtime_id=None)
        self._locks.pop(sandbox_id, None)

    async def running_box(self, rec: SandboxRecord) -> Box:
        """The live box behind an active record, or a clear error saying why there is none."""
        if rec.status == "failed":
            raise ApiError(409, "sandbox_failed", f"sandbox {rec.id} has failed: {rec.failure or 'unknown'}")
        box = self.node.get(rec.runtime_id) if rec.runtime_id and rec.status == "active" else None
        if box is None:
            raise ApiError(409, "sandbox_not_running", f"sandbox {rec.id} is {rec.status}")
        return box

    async def box_unreachable(self, rec: SandboxRecord) -> ApiError:
        """The agent did not answer: find out whether the box died, and record it if so.

        A box being killed (memory limit, fork bomb) drops its channel a moment before runsc
        reports it gone, so look a few times before calling it merely unreachable.
        """
        for _ in range(6):
            if not rec.runtime_id or not await self.node.is_alive(rec.runtime_id):
                current = self.store.get_sandbox(rec.id)
                why = (current.failure if current else None) or "the sandbox's runtime ended"
                self.mark_failed(rec.id, why)
                return ApiError(409, "sandbox_failed", f"sandbox {rec.id} has failed: {why}")
            await asyncio.sleep(0.25)
        return ApiError(503, "sandbox_unreachable", f"sandbox {rec.id} did not answer; try again")

    def mark_failed(self, sandbox_id: str, why: str) -> None:
        self.store.update_sandbox(sandbox_id, status="failed", failure=why)

    def _box_ended(self, runtime_id: str) -> None:
        for rec in self.store.list_sandboxes(None, status="active"):
            if rec.runtime_id == runtime_id:
                log.warning("sandbox %s failed: its box ended (memory limit, crash or outside kill)", rec.id)
                self.mark_failed(rec.id, "the sandbox's runtime ended (out of memory, crashed, or killed)")

    async def reconcile(self) -> None:
        """At start: take back the boxes that still run, mark the others failed, clear strays."""
        live = [r for r in self.store.list_sandboxes(None) if r.status == "active" and r.runtime_id]
        alive = await self.node.adopt({r.runtime_id for r in live if r.runtime_id})
        for rec in live:
            if rec.runtime_id not in alive:
                self.mark_failed(rec.id, "the sandbox was not running when the server started")


def register_base_template(store: Store, rootfs: Path, config: ServerConfig) -> None:
    store.put_template(TemplateRecord(name=BASE_TEMPLATE, rootfs=str(rootfs), env={}, workdir=None,
                                      vcpu=config.vcpu, memory_mib=config.memory_mib, created_at=time.time()))
