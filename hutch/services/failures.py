"""Boxes that die: one whose runtime ends on its own (memory limit, crash, outside kill) or that a
call finds gone is recorded failed, and what the host held for it is freed."""

from __future__ import annotations

import asyncio
import logging

from hutch.errors import ApiError, Code
from hutch.node.api import NodeRuntime
from hutch.store import Event, SandboxRecord, SandboxStatus, Store

log = logging.getLogger("hutch.server")


class Failures:
    def __init__(self, store: Store, node: NodeRuntime) -> None:
        self.store, self.node = store, node
        node.notify_exits(self._box_ended)

    def mark_failed(self, sandbox_id: str, why: str) -> None:
        """Record a box as failed (never one deleted meanwhile) and free what the host held."""
        rec = self.store.get_sandbox(sandbox_id)
        running = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)
        changed = self.store.update_sandbox(sandbox_id, only_if_status=running,
                                            status=SandboxStatus.FAILED, failure=why, pause_at=None,
                                            event=Event("sandbox.failed", {"reason": why}))
        if changed and rec is not None and rec.runtime_id:
            self.node.stop_later(rec.runtime_id, rec.box_key)

    async def box_unreachable(self, rec: SandboxRecord) -> ApiError:
        """The agent did not answer: find out whether the box died, and record it if so.

        A box being killed (memory limit, fork bomb) drops its channel a moment before runsc
        reports it gone, so look a few times before calling it merely unreachable.
        """
        current = self.store.get_sandbox(rec.id)
        if current is None:
            return ApiError(Code.NOT_FOUND, f"sandbox {rec.id} was deleted while the call ran")
        if current.status == SandboxStatus.FAILED:
            return ApiError(Code.SANDBOX_FAILED, f"sandbox {rec.id} has failed: {current.failure or 'unknown'}")
        if current.status != SandboxStatus.ACTIVE:
            return ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} was paused while the call ran; call again")
        runtime_id = current.runtime_id
        for _ in range(6):
            if not runtime_id or not await self.node.is_alive(runtime_id):
                current = self.store.get_sandbox(rec.id)
                why = (current.failure if current else None) or "the sandbox's runtime ended"
                self.mark_failed(rec.id, why)
                return ApiError(Code.SANDBOX_FAILED, f"sandbox {rec.id} has failed: {why}")
            await asyncio.sleep(0.25)
        return ApiError(Code.SANDBOX_UNREACHABLE, f"sandbox {rec.id} did not answer; try again")

    def _box_ended(self, runtime_id: str) -> None:
        rec = self.store.sandbox_by_runtime(runtime_id)
        if rec is not None and rec.status == SandboxStatus.ACTIVE:
            log.warning("sandbox %s failed: its box ended (memory limit, crash or outside kill)", rec.id)
            self.mark_failed(rec.id, "the sandbox's runtime ended (out of memory, crashed, or killed)")
