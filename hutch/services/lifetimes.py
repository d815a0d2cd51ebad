"""The lifetime scheduler: boxes past their timeout paused (or deleted, with an auto-delete of 0),
boxes paused past their auto-delete deleted. The deadlines are in the store, so a restarted server
keeps them; in a fleet every API server runs one, and the box's lock and its status pick one.

    active ── timeout ──▶ paused ── auto_delete_seconds ──▶ deleted

It steps each box on its own task, a few at a time and fewer of one team's, so a box that stalls
its pause holds back only itself and its team. Now and then it also settles what a dead server
left midway and prunes the logs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hutch.errors import ApiError
from hutch.store import Store

log = logging.getLogger("hutch.server")

LIFETIME_STEPS = 64  # boxes paused or deleted by their deadlines at once, each on its own (a task waiting on it)
STEPS_STOP_SECONDS = 30.0  # a stopping server waits this long at most for its cancelled steps to end
LIFETIME_STEPS_PER_TEAM = 4  # of them, one team's: its boxes that stall their pauses hold back no other team's


class Step(Protocol):
    """A pause or kill of one box, only if it is still due once its lock is held."""

    def __call__(self, team_id: str | None, sandbox_id: str, *, only_if_due: bool) -> Awaitable[None]: ...


def next_steps(due: list[tuple[str, str, bool]], running: dict[str, tuple[str, Any]]) -> list[tuple[str, str, bool]]:
    """Of the boxes due (id, team, pause or delete), in order, those the scheduler starts now
    beside the steps `running` (id: (team, step)): none twice, at most LIFETIME_STEPS in all and
    LIFETIME_STEPS_PER_TEAM of one team's; the rest wait for a next tick, still due."""
    held = Counter(team for team, _ in running.values())
    room = LIFETIME_STEPS - len(running)
    chosen = []
    for sandbox_id, team, pause in due:
        if room <= 0:
            break
        if sandbox_id in running or held[team] >= LIFETIME_STEPS_PER_TEAM:
            continue  # a slow one holds back itself and its team, no other
        chosen.append((sandbox_id, team, pause))
        held[team] += 1
        room -= 1
    return chosen


class Lifetimes:
    def __init__(self, store: Store, pause: Step, kill: Step, settle_stuck: Callable[[], Awaitable[None]],
                 prune_logs: Callable[[], int], prune_every: int) -> None:
        """`prune_every`: seconds between two passes of the logs' retention (`prune_logs`)."""
        self.store, self.pause, self.kill = store, pause, kill
        self.settle_stuck, self.prune_logs, self.prune_every = settle_stuck, prune_logs, prune_every
        self._steps: dict[str, tuple[str, asyncio.Task[None]]] = {}  # one per box: its team's, its task

    async def run(self, every: float = 1.0) -> None:
        """Until the server stops."""
        try:
            await self._run(every)
        finally:  # the server stops: so do the steps under way, before it closes what they use
            steps = [step for _, step in self._steps.values()]
            for step in steps:
                step.cancel()
            if steps:
                await asyncio.wait(steps, timeout=STEPS_STOP_SECONDS)

    async def _run(self, every: float) -> None:
        ticks = 0
        prune_ticks = max(1, round(self.prune_every / every))
        while True:
            await asyncio.sleep(every)
            ticks += 1
            if ticks % 60 == 0:
                try:
                    await self.settle_stuck()
                except Exception:
                    log.exception("settling stuck pauses and resumes failed")
            # at the first tick too: a server that restarts often still prunes
            if ticks % prune_ticks == 1 % prune_ticks:
                try:
                    await asyncio.to_thread(self.prune_logs)
                except Exception:
                    log.exception("pruning the logs failed")
            to_pause, to_delete = self.store.due(time.time())
            due = [(sandbox_id, team, False) for sandbox_id, team in to_delete]  # deletes first: they free room
            due += [(sandbox_id, team, True) for sandbox_id, team in to_pause]
            for sandbox_id, team, pause in next_steps(due, self._steps):
                step = asyncio.get_running_loop().create_task(self._step(sandbox_id, pause))
                self._steps[sandbox_id] = (team, step)

    async def _step(self, sandbox_id: str, pause: bool) -> None:
        """A timeout's pause or an auto-delete's kill, of one box (the scheduler's own task)."""
        try:
            if pause:
                log.info("sandbox %s reached its timeout: pausing", sandbox_id)
                await self.pause(None, sandbox_id, only_if_due=True)
            else:
                log.info("sandbox %s was paused past its auto-delete: deleting", sandbox_id)
                await self.kill(None, sandbox_id, only_if_due=True)
        except ApiError as e:
            log.warning("lifetime action on %s failed: %s", sandbox_id, e.message)
        except Exception:
            log.exception("lifetime action on %s failed", sandbox_id)
        finally:
            self._steps.pop(sandbox_id, None)
