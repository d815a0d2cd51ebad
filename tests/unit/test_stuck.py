"""A pause or resume left midway by a server that died (one of a fleet's API servers, say): the
others settle it once it is older than any pause or resume takes, and never one still under way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from hutch.node.api import NodeRuntime
from hutch.secrets.vault import Vault
from hutch.services.checkpoints import CHECKPOINT_DONE
from hutch.services.config import ServerConfig
from hutch.services.recovery import STUCK_SECONDS
from hutch.services.sandboxes import Sandboxes
from hutch.services.secrets import Secrets
from hutch.services.tokens import TokenSigner
from hutch.store import SandboxRecord, SandboxStatus, Store
from tests.unit.test_store import new_record


class Node:
    """The node's answers a settle asks for: which boxes run, and the stops it is told."""

    def __init__(self, alive: set[str]) -> None:
        self.alive, self.stopped, self.woken = alive, list[str](), list[str]()

    def notify_exits(self, callback: Callable[[str], None]) -> None:
        pass

    async def is_alive(self, runtime_id: str) -> bool:
        return runtime_id in self.alive

    async def stop(self, runtime_id: str, key: str | None = None) -> None:
        self.stopped.append(runtime_id)

    def stop_later(self, runtime_id: str, key: str) -> None:
        self.stopped.append(runtime_id)

    async def wake(self, runtime_id: str) -> None:
        self.woken.append(runtime_id)


def sandboxes(tmp_path: Path, node: Node) -> tuple[Sandboxes, Store, str]:
    config = ServerConfig(data_dir=tmp_path)
    store = Store(config.db_url)
    team = store.create_team("t")
    return (Sandboxes(config, store, cast(NodeRuntime, node), TokenSigner(b"k" * 32),
                      Secrets(store, Vault(tmp_path / "secrets.key"))), store, team)


def left(store: Store, team: str, status: str, runtime_id: str) -> SandboxRecord:
    rec = new_record(team, status=status, runtime_id=runtime_id)
    assert store.insert_sandbox(rec)
    return rec


def test_a_stuck_pause_with_a_whole_checkpoint_is_kept_and_one_without_runs_on_or_fails(tmp_path: Path) -> None:
    node = Node(alive={"h-alive"})
    sb, store, team = sandboxes(tmp_path, node)
    whole = left(store, team, SandboxStatus.PAUSING, "h-whole")
    (sb.checkpoints.image_dir(whole.id)).mkdir(parents=True)
    (sb.checkpoints.image_dir(whole.id) / CHECKPOINT_DONE).touch()
    running = left(store, team, SandboxStatus.PAUSING, "h-alive")
    gone = left(store, team, SandboxStatus.PAUSING, "h-gone")
    resuming = left(store, team, SandboxStatus.RESUMING, "h-resuming")
    asyncio.run(sb.recovery.settle_stuck(now=time.time() + STUCK_SECONDS + 1))
    status = {r.id: r.status for r in store.list_sandboxes(None)}
    assert status == {whole.id: SandboxStatus.PAUSED, running.id: SandboxStatus.ACTIVE, gone.id: SandboxStatus.FAILED,
                      resuming.id: SandboxStatus.PAUSED}
    assert "h-whole" in node.stopped and node.woken == ["h-alive"]


def test_a_pause_or_resume_under_way_is_left_alone(tmp_path: Path) -> None:
    node = Node(alive=set())
    sb, store, team = sandboxes(tmp_path, node)
    pausing = left(store, team, SandboxStatus.PAUSING, "h-1")
    resuming = left(store, team, SandboxStatus.RESUMING, "h-2")
    asyncio.run(sb.recovery.settle_stuck(now=time.time() + STUCK_SECONDS - 60))  # young: their servers may be at it
    assert {r.id: r.status for r in store.list_sandboxes(None)} == {pausing.id: SandboxStatus.PAUSING,
                                                                    resuming.id: SandboxStatus.RESUMING}
    assert node.stopped == [] and node.woken == []
