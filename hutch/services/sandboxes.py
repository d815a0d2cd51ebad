"""Sandboxes: the one service every front (hutch's API, E2B's, the console, the data plane) asks of
a box's lifecycle. It answers for a box (its views, its changes, its secrets) and hands each
transition to the collaborator whose job it is; all of them take the box's lock (lifecycle.py).

    active ──pause──▶ pausing ──▶ paused ──resume (or any data-plane call)──▶ resuming ──▶ active
       │                                   │
       └── its runtime ends ──▶ failed      └── auto_delete_seconds ──▶ deleted

- creation.py: create (from a template, the warm pool or a snapshot)
- pauses.py: pause, and a snapshot's checkpoint in place, held to the budgets (checkpoints.py)
- resumes.py: resume, and the live box a data-plane call reaches
- kills.py: kill; failures.py: a box found dead
- lifetimes.py: the deadlines' scheduler; recovery.py: what a stopped server left midway
- boxsetup.py: what a box boots with, and the caps on running boxes
"""

from __future__ import annotations

from pathlib import Path

from hutch.errors import ApiError
from hutch.node import boxcmd
from hutch.node.api import BoxAgent, NodeRuntime
from hutch.preview.proxy import PreviewSite
from hutch.services.boxsetup import BoxSetup
from hutch.services.checkpoints import Checkpoints
from hutch.services.config import ServerConfig
from hutch.services.creation import Creation, E2BTraits
from hutch.services.failures import Failures
from hutch.services.header_rules import Rules
from hutch.services.kills import Kills
from hutch.services.lifecycle import BoxLocks, deadline, find_sandbox
from hutch.services.lifetimes import Lifetimes
from hutch.services.metrics import Metrics
from hutch.services.models import (
    CreateSandbox,
    NetworkConfig,
    NetworkLogEntry,
    NetworkLogPage,
    SandboxAccess,
    SandboxInfo,
    SecretBinding,
    UpdateSandbox,
    timestamp,
)
from hutch.services.pauses import Pauses
from hutch.services.recovery import Recovery
from hutch.services.resumes import Resumes
from hutch.services.retention import LogRetention
from hutch.services.secrets import Secrets
from hutch.services.tokens import TokenSigner
from hutch.services.volumes import Volumes
from hutch.store import Event, SandboxRecord, SandboxStatus, SnapshotRecord, Store


class _Unchanged:
    """A keyword's default that means "as it is" (None means "none")."""


UNCHANGED = _Unchanged()


class Sandboxes:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime, signer: TokenSigner,
                 secrets: Secrets) -> None:
        self.config, self.store, self.node, self.signer, self.secrets = config, store, node, signer, secrets
        self.locks = BoxLocks()
        self.metrics = Metrics()
        self.preview_site = PreviewSite(config.preview_domain, None if config.preview_https else config.preview_port,
                                        config.preview_https)
        self.setup = BoxSetup(config, store, secrets)
        self.checkpoints = Checkpoints(config, store, node)
        self.failures = Failures(store, node)
        self.kills = Kills(store, node, self.locks, self.checkpoints)
        self.creation = Creation(config, store, node, secrets, self.setup, self.kills, self.metrics)
        self.pauses = Pauses(config, store, node, self.locks, self.setup, self.checkpoints, self.failures, self.kills,
                             self.metrics)
        self.resumes = Resumes(store, node, self.locks, self.setup, self.checkpoints, self.metrics)
        self.recovery = Recovery(config, store, node, self.locks, self.checkpoints, self.failures)
        retention = LogRetention(config, store)
        self.lifetimes = Lifetimes(store, self.pauses.pause, self.kills.kill, self.recovery.settle_stuck,
                                   retention.prune, retention.every_seconds)

    # --- views ----------------------------------------------------------------------------------

    def infos(self, recs: list[SandboxRecord]) -> list[SandboxInfo]:
        """Many at once: their secret bindings in one query."""
        bindings = self.secrets.bindings_of([r.id for r in recs])
        return [self.info(r, bindings.get(r.id, [])) for r in recs]

    def info(self, rec: SandboxRecord, bindings: list[SecretBinding] | None = None) -> SandboxInfo:
        return SandboxInfo(
            id=rec.id, name=rec.name, status=rec.status, template=rec.template,  # type: ignore[arg-type]
            metadata=rec.metadata, timeout_seconds=rec.timeout_seconds,
            auto_delete_seconds=rec.auto_delete_seconds, vcpu_count=rec.vcpu, memory_mib=rec.memory_mib,
            created_at=timestamp(rec.created_at), updated_at=timestamp(rec.updated_at), failure=rec.failure,
            network=NetworkConfig.model_validate(rec.network) if rec.network is not None else None,
            secrets=self.secrets.bindings(rec.id) if bindings is None else bindings,
            preview_access=rec.preview_access or "public",  # type: ignore[arg-type]
            preview_url_template=self.preview_site.url(rec.id, "{port}"), node=rec.node,
            volumes=Volumes.mounted(rec.volumes),
        )

    def network_log(self, team_id: str, sandbox_id: str, limit: int, before: int | None) -> NetworkLogPage:
        rec = self.get(team_id, sandbox_id)
        rows = self.store.network_log(rec.id, limit, before)
        entries = [NetworkLogEntry(**{**r.__dict__, "at": timestamp(r.at)}) for r in rows]
        return NetworkLogPage(entries=entries, next_before=rows[-1].id if len(rows) == limit else None)

    def access(self, rec: SandboxRecord) -> SandboxAccess:
        return SandboxAccess(
            **self.info(rec).model_dump(),
            access_token=self.signer.token(rec.id, rec.token_generation),
            data_plane_url=f"{self.config.base_url}/data/v1/sandboxes/{rec.id}",
        )

    def get(self, team_id: str | None, sandbox_id: str) -> SandboxRecord:
        return find_sandbox(self.store, team_id, sandbox_id)

    # --- changes --------------------------------------------------------------------------------

    async def update(self, team_id: str, sandbox_id: str, req: UpdateSandbox, *,
                     header_rules: Rules | _Unchanged | None = UNCHANGED, said: bool = True) -> SandboxRecord:
        """`header_rules` (hutch.services.header_rules), if given, replace the box's. `said`: whether
        it is an event (not for a change that is how another call is carried out)."""
        async with self.locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            changes = {k: getattr(req, k) for k in req.model_fields_set}
            if not isinstance(header_rules, _Unchanged):
                changes["header_rules"] = header_rules
            if "metadata" in changes and changes["metadata"] is None:
                changes["metadata"] = {}
            if changes.get("network") is not None:  # the egress proxy reads it at each new connection
                changes["network"] = changes["network"].model_dump()
            if "timeout_seconds" in changes and rec.status == SandboxStatus.ACTIVE:
                changes["pause_at"] = deadline(changes["timeout_seconds"])  # counts from now
                changes["pause_refused_at"] = None  # and a budget's refusal of the last one is forgotten
            if "auto_delete_seconds" in changes and rec.status == SandboxStatus.PAUSED:
                changes["delete_at"] = deadline(changes["auto_delete_seconds"])
            if changes:
                shown = {k: v for k, v in changes.items() if k in ("timeout_seconds", "auto_delete_seconds")}
                asked = sorted(k for k in changes if k not in ("pause_at", "pause_refused_at", "delete_at"))
                event = Event("sandbox.updated", {"changed": asked, **shown}) if said else None
                self.store.update_sandbox(rec.id, event=event, **changes)
            return self.get(team_id, sandbox_id)

    async def attach_secret(self, team_id: str, sandbox_id: str, env: str, secret: str) -> list[SecretBinding]:
        """On an active or paused box: commands started after this see the stand-in."""
        async with self.locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            self.secrets.attach(team_id, rec, env, secret)
            return self.secrets.bindings(rec.id)

    async def detach_secret(self, team_id: str, sandbox_id: str, env: str) -> list[SecretBinding]:
        async with self.locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            self.secrets.detach(rec, env)
            return self.secrets.bindings(rec.id)

    # --- the transitions, each its collaborator's -------------------------------------------------

    async def create(self, team_id: str, req: CreateSandbox, *, e2b: E2BTraits | None = None,
                     snapshot: tuple[SnapshotRecord, Path] | None = None,
                     header_rules: Rules | None = None) -> SandboxRecord:
        """See Creation.create."""
        return await self.creation.create(team_id, req, e2b=e2b, snapshot=snapshot, header_rules=header_rules)

    async def pause(self, team_id: str | None, sandbox_id: str, *, memory: bool | None = None) -> None:
        """See Pauses.pause (the scheduler's own, `only_if_due`, is the lifetimes')."""
        await self.pauses.pause(team_id, sandbox_id, memory=memory)

    async def checkpoint_in_place(self, team_id: str, sandbox_id: str, image: Path) -> SandboxRecord:
        """See Pauses.checkpoint_in_place."""
        return await self.pauses.checkpoint_in_place(team_id, sandbox_id, image)

    async def resume(self, team_id: str | None, sandbox_id: str) -> SandboxRecord:
        """See Resumes.resume."""
        return await self.resumes.resume(team_id, sandbox_id)

    async def connect(self, team_id: str, sandbox_id: str) -> SandboxRecord:
        """See Resumes.connect."""
        return await self.resumes.connect(team_id, sandbox_id)

    async def kill(self, team_id: str | None, sandbox_id: str) -> None:
        """See Kills.kill (the scheduler's own, `only_if_due`, is the lifetimes')."""
        await self.kills.kill(team_id, sandbox_id)

    # --- the data plane's view ------------------------------------------------------------------

    async def running_box(self, rec: SandboxRecord, *, asked: bool = False) -> BoxAgent:
        """See Resumes.running_box."""
        return await self.resumes.running_box(rec, asked=asked)

    async def box_unreachable(self, rec: SandboxRecord) -> ApiError:
        """See Failures.box_unreachable."""
        return await self.failures.box_unreachable(rec)

    def defaults(self, rec: SandboxRecord) -> boxcmd.Defaults:
        """What every command in the box starts with (BoxSetup.defaults)."""
        return self.setup.defaults(rec)

    def files_only(self, rec: SandboxRecord) -> bool:
        """Whether a paused box kept its files only (its resume boots it afresh)."""
        return self.checkpoints.files_only(rec)
