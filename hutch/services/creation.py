"""A new box: booted from its template (or claimed from the warm pool), or restored from a
snapshot, with its volumes mounted and its secrets bound, recorded in the same transaction that
counts its team's boxes, then started (its template's start command, or a snapshot's files laid
back). Nothing is left of a create that fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch.errors import ApiError, BuildFailure, Code
from hutch.node import boxcmd, boxfiles
from hutch.node.api import BoxRef, BoxStartError, LimitsUnavailable, NodeRuntime
from hutch.node.pool import WarmPool
from hutch.services.boxsetup import BoxSetup
from hutch.services.checkpoints import mount_paths
from hutch.services.config import ServerConfig
from hutch.services.header_rules import Rules
from hutch.services.kills import Kills
from hutch.services.lifecycle import deadline
from hutch.services.metrics import Metrics
from hutch.services.models import CreateSandbox
from hutch.services.secrets import Secrets
from hutch.services.volumes import Volumes, mounts_of
from hutch.store import Event, SandboxRecord, SandboxStatus, SnapshotRecord, Store, TemplateRecord

log = logging.getLogger("hutch.server")


@dataclass(frozen=True)
class E2BTraits:
    """What a box made through E2B's API (hutch.e2b) keeps of E2B's ways: its access token never
    rotates on resume (the SDK keeps the one it was first given); with `public_traffic`, its ports
    answer at their E2B host names without its traffic token (hutch.e2b.ports); with `auto_resume`
    false, no call or request wakes it once paused (None: any does, hutch's way); `secure`, its code
    interpreter's port wants the token even when its other ports are public."""

    public_traffic: bool = False
    auto_resume: bool | None = None
    secure: bool = True

    @classmethod
    def of(cls, rec: SandboxRecord) -> E2BTraits | None:
        """A box's traits, or None for a box hutch's own API made."""
        if not rec.stable_token:
            return None
        return cls(bool(rec.public_traffic), rec.auto_resume, rec.secure is not False)


@dataclass(frozen=True)
class _Origin:
    """What a new box is made from: a template, or a snapshot (which adds its source's env, egress
    rules and secrets)."""

    template_id: str | None
    template_name: str
    rootfs: str | None
    memory_mib: int
    vcpu: int
    disk_mib: int | None
    env_vars: dict[str, str] = field(default_factory=dict)
    network: dict[str, list[str]] | None = None
    secrets: dict[str, str] = field(default_factory=dict)


class Creation:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime, secrets: Secrets, setup: BoxSetup,
                 kills: Kills, metrics: Metrics) -> None:
        self.config, self.store, self.node, self.secrets, self.setup = config, store, node, secrets, setup
        self.kills, self.metrics = kills, metrics
        self.pool: WarmPool | None = None  # both set by the composition root (hutch.server.state)
        self.volumes: Volumes | None = None

    async def create(self, team_id: str, req: CreateSandbox, *, e2b: E2BTraits | None = None,
                     snapshot: tuple[SnapshotRecord, Path] | None = None,
                     header_rules: Rules | None = None) -> SandboxRecord:
        """A new box; with `e2b` (E2B's API), one that keeps E2B's ways (E2BTraits).
        With `snapshot` (hutch.services.snapshots: the record and its image), the box continues
        from it: the snapshot's template, shape, env (the create's on top), egress rules and
        secrets unless the create gives its own, and new stand-ins; no start command runs."""
        template: TemplateRecord | None = None
        if snapshot is None:
            template = self.setup.template(team_id, req.from_template)
            origin = _Origin(template.id, template.name, template.rootfs, template.spec["memory_mib"],
                             template.spec["vcpu"], template.spec.get("disk_mib"))
        else:
            snap = snapshot[0]
            if not snap.memory and snap.template_id:  # files only: a fresh box of the template, started as one
                template = self.store.get_template(snap.template_id)
            origin = _Origin(snap.template_id, snap.template, snap.rootfs, snap.memory_mib, snap.vcpu, snap.disk_mib,
                             snap.env_vars, snap.network, snap.secrets)
        self.setup.check_capacity(team_id)
        if req.pause_memory is False and self.config.fleet is not None:
            raise ApiError(Code.INVALID_REQUEST, "a files-only pause is a single host's: a fleet keeps the memory")
        rec = SandboxRecord(
            id=str(uuid.uuid4()), team_id=team_id, name=req.name, template=origin.template_name, status=SandboxStatus.ACTIVE,
            memory_mib=origin.memory_mib, vcpu=origin.vcpu, metadata=req.metadata or {},
            env_vars={**origin.env_vars, **(req.env_vars or {})}, timeout_seconds=req.timeout_seconds,
            auto_delete_seconds=req.auto_delete_seconds, pause_at=deadline(req.timeout_seconds),
            network=req.network.model_dump() if req.network else origin.network, preview_access=req.preview_access,
            template_id=origin.template_id, rootfs=origin.rootfs, disk_mib=origin.disk_mib,
            pause_memory=req.pause_memory, header_rules=header_rules,
            stable_token=True if e2b else None, public_traffic=(e2b and e2b.public_traffic) or None,
            auto_resume=e2b.auto_resume if e2b else None, secure=False if e2b and not e2b.secure else None,
        )
        wanted = req.secrets if req.secrets is not None else {
            env: name for env, name in origin.secrets.items() if env not in rec.env_vars}
        bindings = self.secrets.new_bindings(team_id, rec.id, wanted)  # a missing secret: 404, nothing made
        mounts = self._mounts(team_id, req, snapshot[0] if snapshot else None)
        rec.volumes = mounts or None
        rootfs, limits = self.setup.limits(rec)
        held = self.volumes.hold(mounts) if self.volumes is not None else []
        self.setup.starting += 1
        self.setup.booting_roots[str(rootfs)] += 1  # a template delete meanwhile must not take its root
        started = time.perf_counter()
        try:
            try:
                restoring = snapshot is not None and snapshot[0].memory
                # the pool's boxes mount no volumes
                claimed = (await self.pool.claim(rootfs, limits)
                           if self.pool is not None and not restoring and not mounts else None)
                source = "snapshot" if snapshot else "warm_pool" if claimed else "boot"
                if snapshot is not None and restoring:
                    box = await self.node.restore(rec.id, rootfs, limits, snapshot[1], volumes=mounts_of(mounts))
                else:
                    box = claimed or await self.node.boot(rec.id, rootfs, limits, volumes=mounts_of(mounts))
            except LimitsUnavailable as e:  # the node logged what its operator must do
                raise ApiError(Code.LIMITS_UNAVAILABLE, f"the sandbox could not start: {e}") from e
            except BoxStartError as e:
                log.error("a box failed to start: %s", e)
                raise ApiError(Code.BOOT_FAILED, f"the sandbox could not start: {e}") from e
            finally:
                self.setup.starting -= 1
            rec.runtime_id, rec.box_key, rec.node = box.runtime_id, box.key, box.node
            try:
                # the team's count and the insert in one transaction: creates at once (on any API
                # server) cannot take more than the team's places between them
                made = Event("sandbox.created", {"template_id": rec.template_id, "source": source,
                                                 **({"snapshot_id": snapshot[0].id} if snapshot else {}),
                                                 # the box its snapshot was taken of (a fork's source)
                                                 **({"from_sandbox_id": snapshot[0].source_sandbox_id}
                                                    if snapshot and snapshot[0].source_sandbox_id else {})})
                inserted = self.store.insert_sandbox(rec, bindings, team_max=self.config.team_max_sandboxes, event=made)
            except BaseException as e:
                await self.node.stop(box.runtime_id, rec.box_key)  # never a box without a record
                if isinstance(e, LookupError):  # a volume it mounts was deleted meanwhile
                    raise ApiError(Code.VOLUME_NOT_FOUND, f"the sandbox could not start: {e}") from e
                raise
            if not inserted:
                await self.node.stop(box.runtime_id, rec.box_key)
                raise ApiError(Code.TOO_MANY_SANDBOXES, f"a team runs at most {self.config.team_max_sandboxes} "
                                                        "sandboxes; kill or pause one")
        finally:
            if self.volumes is not None:
                self.volumes.let_go(held)
            self.setup.booting_roots[str(rootfs)] -= 1
            if not self.setup.booting_roots[str(rootfs)]:
                del self.setup.booting_roots[str(rootfs)]
        if snapshot is not None and not snapshot[0].memory:
            await self._lay_files(rec, box, snapshot[1])
        if template is not None and (template.spec.get("start_cmd") or template.spec.get("ready_cmd")):
            await self._start_template(rec, box, template)
        self.metrics.create_seconds.labels(source).observe(time.perf_counter() - started)
        return rec

    def _mounts(self, team_id: str, req: CreateSandbox, snap: SnapshotRecord | None) -> list[dict[str, Any]]:
        """The volumes the new box mounts: the create's, else a snapshot's box's. A box restored
        from memory must have a volume at each path its snapshot's box had (runsc restores only
        the mounts it saved); which volume is there may differ."""
        if req.volumes is None:
            if snap is None or not snap.volumes:
                return []
            ids = [m["volume_id"] for m in snap.volumes]
            if any(self.store.get_volume(i, team_id) is None for i in ids):
                raise ApiError(Code.VOLUME_NOT_FOUND, "a volume the snapshot's box mounted was deleted: "
                                                      "give the create volumes of its own")
            return [dict(m) for m in snap.volumes]
        if self.volumes is None:
            raise ApiError(Code.VOLUMES_UNAVAILABLE, "this server keeps no volumes")
        mounts = self.volumes.resolve_mounts(team_id, req.volumes)
        if snap is not None and snap.memory and {m["path"] for m in mounts} != {m["path"] for m in snap.volumes or ()}:
            raise ApiError(Code.INVALID_REQUEST, "a box restored from a snapshot mounts volumes at the paths its "
                                                 "snapshot's box had: " + (", ".join(sorted(
                                                     m["path"] for m in snap.volumes or ())) or "none"))
        return mounts

    async def _lay_files(self, rec: SandboxRecord, box: BoxRef, image: Path) -> None:
        """A files-only snapshot's files, laid over the fresh box; a box that cannot take them is
        removed, and the create fails."""
        try:
            agent = self.node.agent(box.runtime_id)
            if agent is None:
                raise ApiError(Code.BOOT_FAILED, "the box ended as it started")
            await boxfiles.restore(agent, image, mount_paths(rec))
        except BaseException as e:
            await asyncio.shield(self.kills.kill(None, rec.id))
            if isinstance(e, ApiError):
                raise ApiError(Code.BOOT_FAILED, f"the sandbox could not take the snapshot's files: {e.message}") from e
            raise

    async def _start_template(self, rec: SandboxRecord, box: BoxRef, template: TemplateRecord) -> None:
        """Start the template's start command and wait until its probe passes; a box that does
        not become ready is removed, and the create fails."""
        spec = template.spec
        try:
            agent = self.node.agent(box.runtime_id)
            if agent is None:
                raise boxcmd.StartError(BuildFailure.START_FAILED, "the box ended as it started")
            await boxcmd.start_and_wait_ready(agent, spec.get("start_cmd"), spec.get("ready_cmd"),
                                              self.setup.defaults(rec, template), spec["ready_timeout_seconds"])
        except BaseException as e:
            await asyncio.shield(self.kills.kill(None, rec.id))
            if isinstance(e, boxcmd.StartError):
                code = Code.READY_TIMEOUT if e.code == BuildFailure.READY_TIMEOUT else Code.TEMPLATE_START_FAILED
                raise ApiError(code,
                               f"the sandbox did not become ready: {e}") from e
            raise

