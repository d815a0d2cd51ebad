"""A box's pause and its snapshot in place: the box checkpointed to disk (its memory, or its files
only), held to the checkpoint budgets, and, where the checkpoint fails, left running or failed.

    active ──pause──▶ pausing ──▶ paused
       └── checkpoint_in_place ──▶ pausing ──▶ active (its image kept elsewhere: a snapshot)
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from hutch.errors import ApiError, Code, not_found
from hutch.node import boxfiles
from hutch.node.api import NodeRuntime, NoSpaceError
from hutch.services.boxsetup import BoxSetup
from hutch.services.checkpoints import (
    CHECKPOINT_DONE,
    Checkpoints,
    checkpoint_bound,
    checkpoint_size,
    link_image,
    mount_paths,
    own_bytes,
)
from hutch.services.config import ServerConfig
from hutch.services.failures import Failures
from hutch.services.kills import Kills
from hutch.services.lifecycle import BoxLocks, CutShort, deadline, find_sandbox
from hutch.services.metrics import Metrics
from hutch.store import Event, PauseRefused, SandboxRecord, SandboxStatus, Store

log = logging.getLogger("hutch.server")

PAUSE_RETRY_SECONDS = 60  # after an automatic pause failed


class KeptRunning(ApiError):
    """A pause refused before anything was done to the box: it runs on."""


class Pauses:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime, locks: BoxLocks, setup: BoxSetup,
                 checkpoints: Checkpoints, failures: Failures, kills: Kills, metrics: Metrics) -> None:
        self.config, self.store, self.node, self.locks, self.setup = config, store, node, locks, setup
        self.checkpoints, self.failures, self.kills, self.metrics = checkpoints, failures, kills, metrics

    async def pause(self, team_id: str | None, sandbox_id: str, *, only_if_due: bool = False,
                    memory: bool | None = None) -> None:
        """Checkpoint the box to disk and free its memory. Idempotent. With `only_if_due` (the
        scheduler), only if the box is still active and past its deadline once the lock is held.
        With `memory` False (None: as the box's `pause_memory` says), keep its files only: its
        resume boots it afresh with them (hutch.node.boxfiles)."""
        async with self.locks[sandbox_id]:
            rec = find_sandbox(self.store, team_id, sandbox_id)
            due = rec.pause_at is not None and rec.pause_at <= time.time()
            if only_if_due and not (rec.status == SandboxStatus.ACTIVE and due):
                return
            if rec.status == SandboxStatus.PAUSED:
                return
            if only_if_due and rec.auto_delete_seconds == 0:  # it would be deleted once paused: no checkpoint
                await self.kills.remove(rec, "timeout")
                self.locks.forget(sandbox_id)
                return
            if rec.status != SandboxStatus.ACTIVE or not rec.runtime_id:
                raise ApiError(Code.SANDBOX_FAILED if rec.status == SandboxStatus.FAILED else Code.INVALID_STATE,
                               f"sandbox {rec.id} is {rec.status} and cannot be paused")
            # Another API server of a fleet may take it first: one of them pauses it. Its team's
            # and the node's checkpoints are counted in the same transaction.
            refused = await asyncio.to_thread(self.checkpoints.begin_pause, rec)
            if refused is not None and refused.budget != "state":
                await self._over_budget(rec, refused, only_if_due)
                return
            if refused is not None:
                if only_if_due:
                    return
                raise ApiError(Code.INVALID_STATE, f"sandbox {rec.id} is being paused or resumed elsewhere")
            image = self.checkpoints.image_dir(rec.id)
            files_only = memory is False or (memory is None and rec.pause_memory is False)
            started = time.perf_counter()
            try:
                if files_only:
                    await self._pause_files(rec, image)
                else:
                    await self.node.pause(rec.runtime_id, image)
                self.metrics.pause_seconds.observe(time.perf_counter() - started)
                if self.config.fleet is None:  # a fleet's node marks it whole itself, on its own mount
                    (image / CHECKPOINT_DONE).touch()
            except KeptRunning:  # a files-only pause refused before the box was stopped: it runs on
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.ACTIVE,
                                          checkpoint_bytes=None,  # a timeout's pause tried again in a minute
                                          pause_at=deadline(PAUSE_RETRY_SECONDS) if rec.pause_at is not None else None)
                raise
            except Exception as e:
                raise await self._checkpoint_failed(rec, e, Code.PAUSE_FAILED, retry=True) from e
            size = await asyncio.to_thread(checkpoint_size, image)  # what it holds of the budgets from now on
            self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.PAUSED,
                                      runtime_id=None, pause_at=None, delete_at=deadline(rec.auto_delete_seconds),
                                      checkpoint_bytes=size, pause_refused_at=None,
                                      event=Event("sandbox.paused", {"memory": not files_only,
                                                                     "reason": "timeout" if only_if_due else "asked"}))
        if rec.auto_delete_seconds == 0:
            await self.kills.kill(team_id, sandbox_id, only_if_due=True)

    async def checkpoint_in_place(self, team_id: str, sandbox_id: str, image: Path) -> SandboxRecord:
        """Save a box to `image` and let it run on (a snapshot): the node checkpoints it with
        `--leave-running`, so it keeps its id, runtime, token, deadlines and processes, and is
        stopped only while it is saved (marked `pausing` meanwhile: calls wait for it). A paused
        box's checkpoint is linked instead. If the checkpoint fails, a box that runs on stays
        active (snapshot_failed), one that died is failed."""
        async with self.locks[sandbox_id]:
            rec = find_sandbox(self.store, team_id, sandbox_id)
            if rec.status == SandboxStatus.PAUSED:
                await asyncio.to_thread(link_image, self.checkpoints.image_dir(rec.id), image)
                return rec
            if rec.status != SandboxStatus.ACTIVE or not rec.runtime_id:
                raise ApiError(Code.SANDBOX_FAILED if rec.status == SandboxStatus.FAILED else Code.INVALID_STATE,
                               f"sandbox {rec.id} is {rec.status}: no snapshot can be taken of it")
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.ACTIVE,), status=SandboxStatus.PAUSING):
                raise ApiError(Code.INVALID_STATE, f"sandbox {rec.id} is being paused or resumed elsewhere")
            try:
                await self.node.snapshot(rec.runtime_id, image)
            except Exception as e:
                raise await self._checkpoint_failed(rec, e, Code.SNAPSHOT_FAILED, retry=False) from e
            if self.config.fleet is None:  # a fleet's node marks it whole itself
                (image / CHECKPOINT_DONE).touch()
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.ACTIVE):
                raise not_found("sandbox", sandbox_id)  # killed meanwhile (on another server)
            return find_sandbox(self.store, None, rec.id)

    async def _checkpoint_failed(self, rec: SandboxRecord, e: Exception, code: Code, retry: bool) -> ApiError:
        """A checkpoint that failed (a pause's or a snapshot's), the lock held: a box that runs on is
        active again (with `retry`, a timeout's pause is tried again in a minute, not every second:
        a pause cuts the box's streams); one that died is failed. The error to answer."""
        assert rec.runtime_id is not None
        no_space = isinstance(e, NoSpaceError)  # found before anything was done to the box
        alive = no_space or (await self.node.is_alive(rec.runtime_id) and self.node.holds(rec.runtime_id))
        log.error("checkpointing %s failed: %s", rec.id, e)
        if alive:
            pause_at = deadline(PAUSE_RETRY_SECONDS) if retry and rec.pause_at is not None else rec.pause_at
            self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.ACTIVE,
                                      checkpoint_bytes=None, pause_at=pause_at)
        else:
            self.failures.mark_failed(rec.id, f"its checkpoint failed: {e}")
        runs_on = "; it runs on" if alive else ""
        if no_space or self.checkpoints.disk_full(e):
            return ApiError(Code.INSUFFICIENT_STORAGE, f"the server's disk has no room for the checkpoint of sandbox "
                            f"{rec.id} ({e}){runs_on}")
        return ApiError(code, f"sandbox {rec.id} could not be checkpointed: {e}{runs_on}")

    async def _pause_files(self, rec: SandboxRecord, image: Path) -> None:
        """A files-only pause (the lock held): what the box changed of its root saved from it while
        it runs, then the box stopped. The image is marked, so its resume boots afresh."""
        assert rec.runtime_id is not None
        agent = self.node.agent(rec.runtime_id)
        rootfs, _ = self.setup.limits(rec)
        if agent is None or self.config.fleet is not None:
            raise KeptRunning(Code.INVALID_STATE if agent is None else Code.INVALID_REQUEST,
                              f"sandbox {rec.id}'s files cannot be saved here (a files-only pause is a single host's)")
        shutil.rmtree(image, ignore_errors=True)
        try:
            await self.locks.paced(rec.id, boxfiles.save(agent, rootfs, image, checkpoint_bound(rec), own_bytes(rec),
                                                         mount_paths(rec)))
        except CutShort:
            shutil.rmtree(image, ignore_errors=True)
            raise KeptRunning(Code.NOT_FOUND, f"sandbox {rec.id} was deleted while its files were saved") from None
        except boxfiles.TooLarge as e:
            shutil.rmtree(image, ignore_errors=True)
            raise KeptRunning(Code.CHECKPOINT_BUDGET, f"sandbox {rec.id} was not paused: {e}; it runs on") from e
        except BaseException:
            shutil.rmtree(image, ignore_errors=True)
            raise
        (image / boxfiles.MARKER).touch()
        (image / CHECKPOINT_DONE).touch()  # whole before the box goes: a server that stops now keeps it
        await self.node.stop(rec.runtime_id, rec.box_key)

    async def _over_budget(self, rec: SandboxRecord, refused: PauseRefused, automatic: bool) -> None:
        """A pause a budget refused: nothing was done to the box. Asked for, it is a 429. At its
        timeout, the box runs on and is tried again every PAUSE_RETRY_SECONDS (a kill, a resume
        or an auto-delete may make room); refused for `over_budget_grace` seconds, it is stopped
        and marked failed, saying why (never a box that runs forever, never one gone unsaid)."""
        why = self.checkpoints.refusal(rec, refused)
        if not automatic:
            raise ApiError(Code.CHECKPOINT_BUDGET, f"sandbox {rec.id} was not paused: {why}; it runs on "
                           "(kill or resume a paused sandbox to make room)")
        now = time.time()
        since = rec.pause_refused_at or now
        if now - since >= self.config.over_budget_grace:
            log.warning("sandbox %s: its timeout's pause was refused for %.0f s (%s): stopping it", rec.id, now - since, why)
            self.failures.mark_failed(rec.id, f"its timeout came, and its pause was refused for {now - since:.0f} s "
                                      f"because {why}: it was stopped without a checkpoint")
            return
        if rec.pause_refused_at is None:
            log.warning("sandbox %s reached its timeout but was not paused: %s; it runs on, and is stopped in "
                        "%.0f s unless room is made", rec.id, why, self.config.over_budget_grace)
        retry = min(PAUSE_RETRY_SECONDS, since + self.config.over_budget_grace - now)  # and once the grace is over
        self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.ACTIVE,), pause_refused_at=since,
                                  pause_at=now + retry)

