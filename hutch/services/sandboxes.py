"""Sandbox lifecycle: what create, update, pause, resume, kill, the lifetime scheduler and the
reconcile at start do to the store and the node.

The store is the truth for what exists; the node holds what runs. Every transition takes the
box's lock, so two calls on one box never interleave: a connect during a pause waits for it, two
resumes restore once, a kill during a pause runs after it.

    active ──pause──▶ pausing ──▶ paused ──resume (or any data-plane call)──▶ resuming ──▶ active
       │                                   │
       └── its runtime ends ──▶ failed      └── auto_delete_seconds ──▶ deleted
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hutch import tracing
from hutch.errors import ApiError, BuildFailure, Code, not_found
from hutch.node import boxcmd, boxfiles
from hutch.node.api import CHECKPOINT_SLACK, BoxAgent, BoxRef, BoxStartError, LimitsUnavailable, NodeRuntime, NoSpaceError
from hutch.node.pool import WarmPool
from hutch.node.spec import Limits
from hutch.preview.proxy import PreviewSite
from hutch.services.config import ServerConfig
from hutch.services.header_rules import Rules
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
from hutch.services.secrets import Secrets
from hutch.services.templates import BASE_TEMPLATE_ID
from hutch.services.tokens import TokenSigner
from hutch.services.volumes import Volumes, mounts_of
from hutch.store import (
    CheckpointBudgets,
    Event,
    PauseRefused,
    SandboxRecord,
    SandboxStatus,
    SnapshotRecord,
    Store,
    TemplateRecord,
)

log = logging.getLogger("hutch.server")
T = TypeVar("T")

CHECKPOINT_DONE = "hutch-checkpoint-complete"  # written into an image directory once it is whole
STUCK_SECONDS = 1800.0  # a pause or resume older than this was left by a server that died (a pause may take 10 min)
PAUSE_RETRY_SECONDS = 60  # after an automatic pause failed
LIFETIME_STEPS = 64  # boxes paused or deleted by their deadlines at once, each on its own (a task waiting on it)
STEPS_STOP_SECONDS = 30.0  # a stopping server waits this long at most for its cancelled steps to end
LIFETIME_STEPS_PER_TEAM = 4  # of them, one team's: its boxes that stall their pauses hold back no other team's
DISK_RESERVE = 64 * 2**20  # below this much free space in the data dir, a failed pause is called a full disk
RETENTION_EVERY = 60  # lifetime ticks between two passes of the logs' retention
CHECKPOINT_SHARE = 0.8  # of the checkpoints' filesystem, their default budget (the rest: the store, roots, disks)
BUDGET_NAMES = {"team_paused": "team_max_paused", "team_bytes": "team_max_paused_bytes",
                "all_bytes": "checkpoint_budget_bytes"}  # a refusal's budget, by its setting's name


def checkpoint_size(image: Path) -> int:
    """The disk a checkpoint's directory takes: its regular files' allocated blocks, links never
    followed (0 if it is gone)."""
    total = 0
    for top, dirs, files in os.walk(image, followlinks=False):
        for name in (*files, *dirs):
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_blocks * 512
    return total


def link_image(source: Path, target: Path) -> None:
    """A second directory of a finished checkpoint: its files hard-linked (neither is ever written
    again; a copy where the two are on different filesystems), links in it never followed."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, mode=0o700)
    for entry in os.scandir(source):
        if not entry.is_file(follow_symlinks=False):  # an image is files only: anything else is not whole
            raise OSError(f"{entry.path} is not a regular file: the image cannot be linked")
        try:
            os.link(entry.path, target / entry.name, follow_symlinks=False)
        except OSError:
            shutil.copy2(entry.path, target / entry.name, follow_symlinks=False)


def checkpoint_bound(rec: SandboxRecord) -> int:
    """The most a box's checkpoint can take: its memory and its own disk, if it has one (its
    writes go into the checkpoint), and the node's slack. What a pause holds against the budgets
    where the node's estimate cannot be had (a fleet's API server sees no node's /proc)."""
    return (rec.memory_mib + (rec.disk_mib or 0)) * 2**20 + CHECKPOINT_SLACK


def own_bytes(rec: SandboxRecord) -> int:
    """The most a box can store of its own: its disk or its memory, whichever is larger (a box
    whose disk could not be made, or that came back from before disks, writes into memory)."""
    return max(rec.disk_mib or 0, rec.memory_mib) * 2**20


def _mount_paths(rec: SandboxRecord) -> tuple[str, ...]:
    """Where the box mounts volumes: a files-only save or restore leaves those paths alone."""
    return tuple(m["path"] for m in rec.volumes or ())


class _Unchanged:
    """A keyword's default that means "as it is" (None means "none")."""


UNCHANGED = _Unchanged()


class _KeptRunning(ApiError):
    """A pause refused before anything was done to the box: it runs on."""


class _CutShort(Exception):
    """Work a box paces (its files saved or laid back) that a kill of the box cut short."""


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


class Sandboxes:
    def __init__(self, config: ServerConfig, store: Store, node: NodeRuntime, signer: TokenSigner,
                 secrets: Secrets) -> None:
        self.config, self.store, self.node, self.signer, self.secrets = config, store, node, signer, secrets
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._box_paced: dict[str, asyncio.Task[Any]] = {}  # files saved or laid back: a kill cuts them short
        self._kills_waiting: Counter[str] = Counter()  # kills waiting for a box's lock: no paced work starts
        self._lifetime_steps: dict[str, tuple[str, asyncio.Task[None]]] = {}  # the scheduler's, one per box: its team's
        self._starting = 0
        self.booting_roots: Counter[str] = Counter()  # template roots of creates not yet recorded
        self.pool: WarmPool | None = None
        self.volumes: Volumes | None = None  # set by the composition root (hutch.server.state)
        self.preview_site = PreviewSite(config.preview_domain, None if config.preview_https else config.preview_port,
                                        config.preview_https)
        self.metrics = Metrics()
        self.owner: str | None = None  # a fleet node's name: its start takes back only its own boxes
        self._logged_up_to = 0  # the network log's newest id at the last retention pass
        node.notify_exits(self._box_ended)

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
        rec = self.store.get_sandbox(sandbox_id, team_id)
        if rec is None:
            raise not_found("sandbox", sandbox_id)
        tracing.annotate(sandbox_id=rec.id)
        return rec

    def image_dir(self, sandbox_id: str) -> Path:
        return self.config.checkpoint_dir / sandbox_id

    def _limits(self, rec: SandboxRecord) -> tuple[Path, Limits]:
        rootfs = rec.rootfs
        if rootfs is None:  # a box from before templates could be built: it boots from the base
            base = self.store.get_template(BASE_TEMPLATE_ID)
            rootfs = base.rootfs if base else None
        # (a fleet's API server has no roots of its own: the node that boots the box checks)
        if rootfs is None or (self.config.fleet is None and not Path(rootfs).is_dir()):
            raise ApiError(Code.TEMPLATE_ROOT_GONE, f"the template root of sandbox {rec.id} is gone")
        # (a restore takes the disk's kind from the checkpoint: see Node.restore)
        return Path(rootfs), Limits.of_shape(rec.vcpu, rec.memory_mib, self.config.pids, rec.disk_mib or 0)

    def base_limits(self) -> Limits:
        """What a box of the base template gets: the warm pool boots its boxes with these."""
        base = self.store.get_template(BASE_TEMPLATE_ID)
        assert base is not None, "the base template is registered before the pool is made"
        spec = base.spec
        return Limits.of_shape(spec["vcpu"], spec["memory_mib"], self.config.pids, spec.get("disk_mib") or 0)

    def defaults(self, rec: SandboxRecord, template: TemplateRecord | None = None) -> boxcmd.Defaults:
        """What every command in the box starts with (unless the call says otherwise): the
        template's env, workdir and user, with the sandbox's env and its secrets' stand-ins on top."""
        if template is None and rec.template_id:
            template = self.store.get_template(rec.template_id)
        env = {**(template.env if template else {}), **rec.env_vars, **self.secrets.standins(rec.id)}
        return boxcmd.Defaults(env=env, cwd=template.workdir if template else None,
                               user=template.user if template else None)

    def _disk_full(self, e: BaseException) -> bool:
        try:
            free = shutil.disk_usage(self.config.data_dir).free
        except OSError:
            free = 0
        return "no space left" in str(e).lower() or free < DISK_RESERVE

    def _check_capacity(self, team_id: str) -> None:
        def running(counts: dict[str, int]) -> int:
            return counts.get(SandboxStatus.ACTIVE, 0) + counts.get(SandboxStatus.RESUMING, 0)

        # a fleet's room is its nodes': Ray's reservations say (no_capacity)
        if self.config.fleet is None and running(self.store.count_by_status()) + self._starting >= self.config.max_sandboxes:
            raise ApiError(Code.TOO_MANY_SANDBOXES,
                           f"this node runs at most {self.config.max_sandboxes} sandboxes; kill or pause one")
        if running(self.store.count_by_status(team_id)) >= self.config.team_max_sandboxes:
            raise ApiError(Code.TOO_MANY_SANDBOXES,
                           f"a team runs at most {self.config.team_max_sandboxes} sandboxes; kill or pause one")

    @staticmethod
    def _deadline(seconds: int | None) -> float | None:
        return None if seconds is None else time.time() + seconds

    # --- create, update -------------------------------------------------------------------------

    def _template(self, team_id: str, ref: str | None) -> TemplateRecord:
        template = self.store.get_template(ref or BASE_TEMPLATE_ID, team_id)
        if template is None:
            raise ApiError(Code.TEMPLATE_NOT_FOUND, f"template {ref!r} does not exist")
        if template.rootfs is None:
            raise ApiError(Code.TEMPLATE_NOT_READY, f"template {template.name!r} has no finished build yet "
                                                      "(wait for its build, or see why it failed)")
        return template

    async def create(self, team_id: str, req: CreateSandbox, *, e2b: E2BTraits | None = None,
                     snapshot: tuple[SnapshotRecord, Path] | None = None,
                     header_rules: Rules | None = None) -> SandboxRecord:
        """A new box; with `e2b` (E2B's API), one that keeps E2B's ways (E2BTraits).
        With `snapshot` (hutch.services.snapshots: the record and its image), the box continues
        from it: the snapshot's template, shape, env (the create's on top), egress rules and
        secrets unless the create gives its own, and new stand-ins; no start command runs."""
        template: TemplateRecord | None = None
        if snapshot is None:
            template = self._template(team_id, req.from_template)
            origin = _Origin(template.id, template.name, template.rootfs, template.spec["memory_mib"],
                             template.spec["vcpu"], template.spec.get("disk_mib"))
        else:
            snap = snapshot[0]
            if not snap.memory and snap.template_id:  # files only: a fresh box of the template, started as one
                template = self.store.get_template(snap.template_id)
            origin = _Origin(snap.template_id, snap.template, snap.rootfs, snap.memory_mib, snap.vcpu, snap.disk_mib,
                             snap.env_vars, snap.network, snap.secrets)
        self._check_capacity(team_id)
        if req.pause_memory is False and self.config.fleet is not None:
            raise ApiError(Code.INVALID_REQUEST, "a files-only pause is a single host's: a fleet keeps the memory")
        rec = SandboxRecord(
            id=str(uuid.uuid4()), team_id=team_id, name=req.name, template=origin.template_name, status=SandboxStatus.ACTIVE,
            memory_mib=origin.memory_mib, vcpu=origin.vcpu, metadata=req.metadata or {},
            env_vars={**origin.env_vars, **(req.env_vars or {})}, timeout_seconds=req.timeout_seconds,
            auto_delete_seconds=req.auto_delete_seconds, pause_at=self._deadline(req.timeout_seconds),
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
        rootfs, limits = self._limits(rec)
        held = self.volumes.hold(mounts) if self.volumes is not None else []
        self._starting += 1
        self.booting_roots[str(rootfs)] += 1  # a template delete meanwhile must not take its root
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
                self._starting -= 1
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
            self.booting_roots[str(rootfs)] -= 1
            if not self.booting_roots[str(rootfs)]:
                del self.booting_roots[str(rootfs)]
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
            await boxfiles.restore(agent, image, _mount_paths(rec))
        except BaseException as e:
            await asyncio.shield(self.kill(None, rec.id))
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
                                              self.defaults(rec, template), spec["ready_timeout_seconds"])
        except BaseException as e:
            await asyncio.shield(self.kill(None, rec.id))
            if isinstance(e, boxcmd.StartError):
                code = Code.READY_TIMEOUT if e.code == BuildFailure.READY_TIMEOUT else Code.TEMPLATE_START_FAILED
                raise ApiError(code,
                               f"the sandbox did not become ready: {e}") from e
            raise

    async def update(self, team_id: str, sandbox_id: str, req: UpdateSandbox, *,
                     header_rules: Rules | _Unchanged | None = UNCHANGED, said: bool = True) -> SandboxRecord:
        """`header_rules` (hutch.services.header_rules), if given, replace the box's. `said`: whether
        it is an event (not for a change that is how another call is carried out)."""
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            changes = {k: getattr(req, k) for k in req.model_fields_set}
            if not isinstance(header_rules, _Unchanged):
                changes["header_rules"] = header_rules
            if "metadata" in changes and changes["metadata"] is None:
                changes["metadata"] = {}
            if changes.get("network") is not None:  # the egress proxy reads it at each new connection
                changes["network"] = changes["network"].model_dump()
            if "timeout_seconds" in changes and rec.status == SandboxStatus.ACTIVE:
                changes["pause_at"] = self._deadline(changes["timeout_seconds"])  # counts from now
                changes["pause_refused_at"] = None  # and a budget's refusal of the last one is forgotten
            if "auto_delete_seconds" in changes and rec.status == SandboxStatus.PAUSED:
                changes["delete_at"] = self._deadline(changes["auto_delete_seconds"])
            if changes:
                shown = {k: v for k, v in changes.items() if k in ("timeout_seconds", "auto_delete_seconds")}
                asked = sorted(k for k in changes if k not in ("pause_at", "pause_refused_at", "delete_at"))
                event = Event("sandbox.updated", {"changed": asked, **shown}) if said else None
                self.store.update_sandbox(rec.id, event=event, **changes)
            return self.get(team_id, sandbox_id)

    async def attach_secret(self, team_id: str, sandbox_id: str, env: str, secret: str) -> list[SecretBinding]:
        """On an active or paused box: commands started after this see the stand-in."""
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            self.secrets.attach(team_id, rec, env, secret)
            return self.secrets.bindings(rec.id)

    async def detach_secret(self, team_id: str, sandbox_id: str, env: str) -> list[SecretBinding]:
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            self.secrets.detach(rec, env)
            return self.secrets.bindings(rec.id)

    # --- pause, resume --------------------------------------------------------------------------

    async def pause(self, team_id: str | None, sandbox_id: str, *, only_if_due: bool = False,
                    memory: bool | None = None) -> None:
        """Checkpoint the box to disk and free its memory. Idempotent. With `only_if_due` (the
        scheduler), only if the box is still active and past its deadline once the lock is held.
        With `memory` False (None: as the box's `pause_memory` says), keep its files only: its
        resume boots it afresh with them (hutch.node.boxfiles)."""
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            due = rec.pause_at is not None and rec.pause_at <= time.time()
            if only_if_due and not (rec.status == SandboxStatus.ACTIVE and due):
                return
            if rec.status == SandboxStatus.PAUSED:
                return
            if only_if_due and rec.auto_delete_seconds == 0:  # it would be deleted once paused: no checkpoint
                await self._remove(rec, "timeout")
                self._locks.pop(sandbox_id, None)
                return
            if rec.status != SandboxStatus.ACTIVE or not rec.runtime_id:
                raise ApiError(Code.SANDBOX_FAILED if rec.status == SandboxStatus.FAILED else Code.INVALID_STATE,
                               f"sandbox {rec.id} is {rec.status} and cannot be paused")
            # Another API server of a fleet may take it first: one of them pauses it. Its team's
            # and the node's checkpoints are counted in the same transaction.
            refused = await asyncio.to_thread(self._begin_pause, rec)
            if refused is not None and refused.budget != "state":
                await self._over_budget(rec, refused, only_if_due)
                return
            if refused is not None:
                if only_if_due:
                    return
                raise ApiError(Code.INVALID_STATE, f"sandbox {rec.id} is being paused or resumed elsewhere")
            image = self.image_dir(rec.id)
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
            except _KeptRunning:  # a files-only pause refused before the box was stopped: it runs on
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.ACTIVE,
                                          checkpoint_bytes=None,  # a timeout's pause tried again in a minute
                                          pause_at=self._deadline(PAUSE_RETRY_SECONDS) if rec.pause_at is not None else None)
                raise
            except Exception as e:
                raise await self._checkpoint_failed(rec, e, Code.PAUSE_FAILED, retry=True) from e
            size = await asyncio.to_thread(checkpoint_size, image)  # what it holds of the budgets from now on
            self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.PAUSED,
                                      runtime_id=None, pause_at=None, delete_at=self._deadline(rec.auto_delete_seconds),
                                      checkpoint_bytes=size, pause_refused_at=None,
                                      event=Event("sandbox.paused", {"memory": not files_only,
                                                                     "reason": "timeout" if only_if_due else "asked"}))
        if rec.auto_delete_seconds == 0:
            await self.kill(team_id, sandbox_id, only_if_due=True)

    async def _checkpoint_failed(self, rec: SandboxRecord, e: Exception, code: Code, retry: bool) -> ApiError:
        """A checkpoint that failed (a pause's or a snapshot's), the lock held: a box that runs on is
        active again (with `retry`, a timeout's pause is tried again in a minute, not every second:
        a pause cuts the box's streams); one that died is failed. The error to answer."""
        assert rec.runtime_id is not None
        no_space = isinstance(e, NoSpaceError)  # found before anything was done to the box
        alive = no_space or (await self.node.is_alive(rec.runtime_id) and self.node.holds(rec.runtime_id))
        log.error("checkpointing %s failed: %s", rec.id, e)
        if alive:
            pause_at = self._deadline(PAUSE_RETRY_SECONDS) if retry and rec.pause_at is not None else rec.pause_at
            self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSING,), status=SandboxStatus.ACTIVE,
                                      checkpoint_bytes=None, pause_at=pause_at)
        else:
            self.mark_failed(rec.id, f"its checkpoint failed: {e}")
        runs_on = "; it runs on" if alive else ""
        if no_space or self._disk_full(e):
            return ApiError(Code.INSUFFICIENT_STORAGE, f"the server's disk has no room for the checkpoint of sandbox "
                            f"{rec.id} ({e}){runs_on}")
        return ApiError(code, f"sandbox {rec.id} could not be checkpointed: {e}{runs_on}")

    async def _pause_files(self, rec: SandboxRecord, image: Path) -> None:
        """A files-only pause (the lock held): what the box changed of its root saved from it while
        it runs, then the box stopped. The image is marked, so its resume boots afresh."""
        assert rec.runtime_id is not None
        agent = self.node.agent(rec.runtime_id)
        rootfs, _ = self._limits(rec)
        if agent is None or self.config.fleet is not None:
            raise _KeptRunning(Code.INVALID_STATE if agent is None else Code.INVALID_REQUEST,
                               f"sandbox {rec.id}'s files cannot be saved here (a files-only pause is a single host's)")
        shutil.rmtree(image, ignore_errors=True)
        try:
            await self._paced_by_box(rec.id, boxfiles.save(agent, rootfs, image, checkpoint_bound(rec), own_bytes(rec),
                                                           _mount_paths(rec)))
        except _CutShort:
            shutil.rmtree(image, ignore_errors=True)
            raise _KeptRunning(Code.NOT_FOUND, f"sandbox {rec.id} was deleted while its files were saved") from None
        except boxfiles.TooLarge as e:
            shutil.rmtree(image, ignore_errors=True)
            raise _KeptRunning(Code.CHECKPOINT_BUDGET, f"sandbox {rec.id} was not paused: {e}; it runs on") from e
        except BaseException:
            shutil.rmtree(image, ignore_errors=True)
            raise
        (image / boxfiles.MARKER).touch()
        (image / CHECKPOINT_DONE).touch()  # whole before the box goes: a server that stops now keeps it
        await self.node.stop(rec.runtime_id, rec.box_key)

    async def _paced_by_box(self, sandbox_id: str, work: Coroutine[Any, Any, T]) -> T:
        """Work under the box's lock that programs the box controls pace (its files saved or laid
        back, each within its own deadline): a kill of the box cuts it short (_CutShort) rather than
        wait for it. The caller's own cancellation stays a cancellation."""
        if self._kills_waiting[sandbox_id]:
            work.close()
            raise _CutShort()
        task = asyncio.ensure_future(work)
        self._box_paced[sandbox_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise
            raise _CutShort() from None
        finally:
            self._box_paced.pop(sandbox_id, None)

    async def _boot_files(self, rec: SandboxRecord, rootfs: Path, limits: Limits, image: Path) -> BoxRef:
        """The resume of a files-only pause: a fresh box of the template with the saved files (the
        box's own, so they pace it: a kill cuts it short), its start command run; nothing of it is
        left if that fails."""
        box = await self.node.boot(rec.box_key, rootfs, limits, volumes=mounts_of(rec.volumes))
        try:
            agent = self.node.agent(box.runtime_id)
            if agent is None:
                raise BoxStartError("the box ended as it started")
            await self._paced_by_box(rec.id, self._take_files_back(rec, agent, image))
        except BaseException:
            await asyncio.shield(self.node.stop(box.runtime_id, rec.box_key))
            raise
        return box

    async def _take_files_back(self, rec: SandboxRecord, agent: BoxAgent, image: Path) -> None:
        await boxfiles.restore(agent, image, _mount_paths(rec))
        template = self.store.get_template(rec.template_id) if rec.template_id else None
        spec = template.spec if template else {}
        if spec.get("start_cmd") or spec.get("ready_cmd"):
            await boxcmd.start_and_wait_ready(agent, spec.get("start_cmd"), spec.get("ready_cmd"),
                                              self.defaults(rec, template), spec["ready_timeout_seconds"])

    def files_only(self, rec: SandboxRecord) -> bool:
        """Whether a paused box kept its files only (its resume boots it afresh)."""
        return (self.image_dir(rec.id) / boxfiles.MARKER).exists()

    async def checkpoint_in_place(self, team_id: str, sandbox_id: str, image: Path) -> SandboxRecord:
        """Save a box to `image` and let it run on (a snapshot): the node checkpoints it with
        `--leave-running`, so it keeps its id, runtime, token, deadlines and processes, and is
        stopped only while it is saved (marked `pausing` meanwhile: calls wait for it). A paused
        box's checkpoint is linked instead. If the checkpoint fails, a box that runs on stays
        active (snapshot_failed), one that died is failed."""
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            if rec.status == SandboxStatus.PAUSED:
                await asyncio.to_thread(link_image, self.image_dir(rec.id), image)
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
            return self.get(None, rec.id)

    def checkpoint_budgets(self) -> CheckpointBudgets:
        """The budgets a pause is held to now; the defaults follow the checkpoints' filesystem."""
        every = self.config.checkpoint_budget_bytes
        if every is None:
            where = self.config.checkpoint_dir
            every = int(shutil.disk_usage(next(p for p in (where, *where.parents) if p.exists())).total
                        * CHECKPOINT_SHARE)
        team = self.config.team_max_paused_bytes
        return CheckpointBudgets(team_paused=self.config.team_max_paused,
                                 team_bytes=every // 2 if team is None else team, all_bytes=every)

    def _reserve(self, rec: SandboxRecord) -> int:
        """What a pause holds against the budgets until its checkpoint's real size is known: the
        node's own estimate (which its free-disk check uses too), else the box's bound."""
        estimate = self.node.checkpoint_estimate(rec.runtime_id) if rec.runtime_id else None
        return checkpoint_bound(rec) if estimate is None else estimate

    def _begin_pause(self, rec: SandboxRecord) -> PauseRefused | None:
        """Off the event loop: a statfs (of a fleet's shared mount, maybe) and one transaction."""
        return self.store.begin_pause(rec.id, self._reserve(rec), self.checkpoint_budgets())

    async def _over_budget(self, rec: SandboxRecord, refused: PauseRefused, automatic: bool) -> None:
        """A pause a budget refused: nothing was done to the box. Asked for, it is a 429. At its
        timeout, the box runs on and is tried again every PAUSE_RETRY_SECONDS (a kill, a resume
        or an auto-delete may make room); refused for `over_budget_grace` seconds, it is stopped
        and marked failed, saying why (never a box that runs forever, never one gone unsaid)."""
        setting = BUDGET_NAMES[refused.budget]
        if refused.budget == "team_paused":
            why = f"its team has {refused.held} paused sandboxes, the most it may have ({setting}={refused.limit})"
        else:
            whose = "its team's" if refused.budget == "team_bytes" else "the server's"
            why = (f"{whose} checkpoints take {refused.held / 2**20:.0f} MiB of {refused.limit / 2**20:.0f} MiB "
                   f"({setting}), and this one may take about {self._reserve(rec) / 2**20:.0f} MiB")
        if not automatic:
            raise ApiError(Code.CHECKPOINT_BUDGET, f"sandbox {rec.id} was not paused: {why}; it runs on "
                           "(kill or resume a paused sandbox to make room)")
        now = time.time()
        since = rec.pause_refused_at or now
        if now - since >= self.config.over_budget_grace:
            log.warning("sandbox %s: its timeout's pause was refused for %.0f s (%s): stopping it", rec.id, now - since, why)
            self.mark_failed(rec.id, f"its timeout came, and its pause was refused for {now - since:.0f} s "
                             f"because {why}: it was stopped without a checkpoint")
            return
        if rec.pause_refused_at is None:
            log.warning("sandbox %s reached its timeout but was not paused: %s; it runs on, and is stopped in "
                        "%.0f s unless room is made", rec.id, why, self.config.over_budget_grace)
        retry = min(PAUSE_RETRY_SECONDS, since + self.config.over_budget_grace - now)  # and once the grace is over
        self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.ACTIVE,), pause_refused_at=since,
                                  pause_at=now + retry)

    async def resume(self, team_id: str | None, sandbox_id: str) -> SandboxRecord:
        """Restore a paused box (a no-op for an active one); the access token rotates, except for
        a box made through E2B's API (`stable_token`): E2B's SDK keeps the token it was first given."""
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            if rec.status == SandboxStatus.ACTIVE:
                return rec
            if rec.status != SandboxStatus.PAUSED:
                raise ApiError(Code.SANDBOX_FAILED if rec.status == SandboxStatus.FAILED else Code.INVALID_STATE,
                               f"sandbox {rec.id} is {rec.status}: {rec.failure or 'it cannot be resumed'}")
            self._check_capacity(rec.team_id)
            rootfs, limits = self._limits(rec)
            image = self.image_dir(rec.id)
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSED,), status=SandboxStatus.RESUMING):
                raise ApiError(Code.INVALID_STATE, f"sandbox {rec.id} is being resumed elsewhere; connect again")
            files_only = self.files_only(rec)
            started = time.perf_counter()
            try:
                if files_only:
                    box = await self._boot_files(rec, rootfs, limits, image)
                else:
                    box = await self.node.restore(rec.box_key, rootfs, limits, image, volumes=mounts_of(rec.volumes))
                self.metrics.resume_seconds.observe(time.perf_counter() - started)
            except _CutShort:  # its kill waits for the lock: it finds the box paused, as it was
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.PAUSED)
                raise ApiError(Code.NOT_FOUND, f"sandbox {rec.id} was deleted while it was resumed") from None
            except Exception as e:
                log.error("resuming %s failed: %s", rec.id, e)
                # the image is still there: try again (unless the sandbox was killed meanwhile)
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.PAUSED)
                raise ApiError(Code.RESUME_FAILED, f"the sandbox could not be resumed: {e}") from e
            if not self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,), status=SandboxStatus.ACTIVE,
                                             event=Event("sandbox.resumed", {"memory": not files_only}),
                                             runtime_id=box.runtime_id, node=box.node, delete_at=None,
                                             checkpoint_bytes=None,
                                             token_generation=rec.token_generation + (0 if rec.stable_token else 1),
                                             pause_at=self._deadline(rec.timeout_seconds)):
                await self.node.stop(box.runtime_id, rec.box_key)  # killed meanwhile (on another server): no box without a record
                raise not_found("sandbox", sandbox_id)
            shutil.rmtree(image, ignore_errors=True)  # restored: the image is no longer needed
            return self.get(team_id, sandbox_id)

    async def connect(self, team_id: str, sandbox_id: str) -> SandboxRecord:
        """The record a client reconnects to: resumed if paused; a failed one as it is."""
        rec = self.get(team_id, sandbox_id)
        if rec.status in (SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.RESUMING):
            rec = await self.resume(team_id, sandbox_id)
        return rec

    # --- kill -----------------------------------------------------------------------------------

    async def kill(self, team_id: str | None, sandbox_id: str, *, only_if_due: bool = False) -> None:
        """Delete a sandbox and all it holds. With `only_if_due` (auto-delete), only if it is
        still paused past its deadline once the lock is held: a call may have resumed it since.
        A files-only pause or resume under way is cut short (its box's programs pace it), never
        waited for."""
        if only_if_due:
            await self._kill(team_id, sandbox_id, only_if_due)
            return
        self.get(team_id, sandbox_id)  # only the box's own team cuts its work short
        self._kills_waiting[sandbox_id] += 1
        try:
            if (paced := self._box_paced.get(sandbox_id)) is not None:
                paced.cancel()  # its caller hears "deleted": the kill goes on even if this one's caller goes
                await asyncio.shield(self._kill(team_id, sandbox_id, only_if_due))
            else:
                await self._kill(team_id, sandbox_id, only_if_due)
        finally:
            self._kills_waiting[sandbox_id] -= 1
            if not self._kills_waiting[sandbox_id]:
                del self._kills_waiting[sandbox_id]

    async def _kill(self, team_id: str | None, sandbox_id: str, only_if_due: bool) -> None:
        async with self._locks[sandbox_id]:
            rec = self.get(team_id, sandbox_id)
            due = rec.delete_at is not None and rec.delete_at <= time.time()
            if only_if_due and not (rec.status == SandboxStatus.PAUSED and due):
                return
            await self._remove(rec, "auto_delete" if only_if_due else "asked")
        self._locks.pop(sandbox_id, None)

    async def _remove(self, rec: SandboxRecord, why: str) -> None:
        """With the box's lock held; `why`: asked, timeout (a deadline that deletes) or auto_delete."""
        if rec.runtime_id:
            await self.node.stop(rec.runtime_id, rec.box_key)
        shutil.rmtree(self.image_dir(rec.id), ignore_errors=True)
        # (not if another API server of a fleet deleted it first: one kill, one event)
        self.store.update_sandbox(rec.id, only_if_status=tuple(s for s in SandboxStatus if s != SandboxStatus.DELETED),
                                  status=SandboxStatus.DELETED, runtime_id=None, pause_at=None, delete_at=None,
                                  event=Event("sandbox.killed", {"reason": why}))
        self.store.delete_network_log(rec.id)
        self.store.delete_bindings(rec.id)
        self.store.unpublish_port(rec.id)

    # --- the data plane's view ------------------------------------------------------------------

    async def running_box(self, rec: SandboxRecord, *, asked: bool = False) -> BoxAgent:
        """The agent of the live box behind a record, resumed first if it is paused (or pausing,
        or resuming: the lock makes this wait for that to finish), unless traffic may not wake it
        (auto-resume off) and the resume was not `asked` for by the call itself (a snapshot of it).
        Raises ChannelError if a pause takes the box meanwhile."""
        current = self.get(None, rec.id)  # the caller's record may be older than a pause
        if current.status != SandboxStatus.ACTIVE:
            if not asked and current.auto_resume is False and current.status in (SandboxStatus.PAUSING,
                                                                                 SandboxStatus.PAUSED):
                raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} is paused, and traffic does not wake it "
                                                    "(auto-resume is off): resume or connect to it first")
            current = await self.resume(None, rec.id)  # a failed box raises here
        agent = self.node.agent(current.runtime_id) if current.runtime_id else None
        if agent is None:
            raise ApiError(Code.SANDBOX_NOT_RUNNING, f"sandbox {rec.id} is {current.status}")
        return agent

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

    def mark_failed(self, sandbox_id: str, why: str) -> None:
        """Record a box as failed (never one deleted meanwhile) and free what the host held."""
        rec = self.store.get_sandbox(sandbox_id)
        running = (SandboxStatus.ACTIVE, SandboxStatus.PAUSING, SandboxStatus.RESUMING)
        changed = self.store.update_sandbox(sandbox_id, only_if_status=running,
                                            status=SandboxStatus.FAILED, failure=why, pause_at=None,
                                            event=Event("sandbox.failed", {"reason": why}))
        if changed and rec is not None and rec.runtime_id:
            self.node.stop_later(rec.runtime_id, rec.box_key)

    def _box_ended(self, runtime_id: str) -> None:
        rec = self.store.sandbox_by_runtime(runtime_id)
        if rec is not None and rec.status == SandboxStatus.ACTIVE:
            log.warning("sandbox %s failed: its box ended (memory limit, crash or outside kill)", rec.id)
            self.mark_failed(rec.id, "the sandbox's runtime ended (out of memory, crashed, or killed)")

    # --- lifetimes ------------------------------------------------------------------------------

    async def run_lifetimes(self, every: float = 1.0) -> None:
        """Pause boxes past their timeout and delete boxes paused past their auto-delete. The
        deadlines are in the store, so a restarted server keeps them. Now and then, settle a
        pause or resume left midway by a server that died (a fleet's others live on)."""
        try:
            await self._run_lifetimes(every)
        finally:  # the server stops: so do the steps under way, before it closes what they use
            steps = [step for _, step in self._lifetime_steps.values()]
            for step in steps:
                step.cancel()
            if steps:
                await asyncio.wait(steps, timeout=STEPS_STOP_SECONDS)

    async def _run_lifetimes(self, every: float) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(every)
            ticks += 1
            if ticks % 60 == 0:
                try:
                    await self.settle_stuck()
                except Exception:
                    log.exception("settling stuck pauses and resumes failed")
            if ticks % RETENTION_EVERY == 1:  # at the first tick too: a server that restarts often still prunes
                try:
                    await asyncio.to_thread(self.prune_logs)
                except Exception:
                    log.exception("pruning the logs failed")
            to_pause, to_delete = self.store.due(time.time())
            due = [(sandbox_id, team, False) for sandbox_id, team in to_delete]  # deletes first: they free room
            due += [(sandbox_id, team, True) for sandbox_id, team in to_pause]
            for sandbox_id, team, pause in next_steps(due, self._lifetime_steps):
                step = asyncio.get_running_loop().create_task(self._lifetime_step(sandbox_id, pause))
                self._lifetime_steps[sandbox_id] = (team, step)

    async def _lifetime_step(self, sandbox_id: str, pause: bool) -> None:
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
            self._lifetime_steps.pop(sandbox_id, None)

    def prune_logs(self, now: float | None = None) -> int:
        """The logs' retention (on a worker thread: it deletes in batches): rows older than
        `audit_retention_days`, and each box's network log beyond its newest
        `network_log_max_rows`. Returns how many rows went. Each API server of a fleet prunes;
        what one deleted the other finds gone."""
        removed = 0
        if self.config.audit_retention_days > 0:
            cutoff = (now or time.time()) - self.config.audit_retention_days * 86400
            removed += self.store.prune_logs_before(cutoff)
        self._logged_up_to, capped = self.store.cap_network_logs(self.config.network_log_max_rows, self._logged_up_to)
        removed += capped
        if removed:
            log.info("log retention: %d rows deleted", removed)
        return removed

    async def settle_stuck(self, now: float | None = None) -> None:
        """A pause or resume unchanged for longer than any takes: its server died midway. A
        pause is settled as at a start (kept if its checkpoint is whole, else the box runs on or
        has failed); a resume goes back to paused (its image is kept until a resume succeeds; a
        box the node restored meanwhile belongs to no record, and the node stops it)."""
        cutoff = (now or time.time()) - STUCK_SECONDS
        for status in (SandboxStatus.PAUSING, SandboxStatus.RESUMING):
            for rec in self.store.list_sandboxes(None, status=status):
                if rec.updated_at > cutoff or self._locks[rec.id].locked():
                    continue
                async with self._locks[rec.id]:
                    current = self.store.get_sandbox(rec.id)
                    if current is None or current.status != status or current.updated_at > cutoff:
                        continue
                    log.warning("sandbox %s was left %s by a server that stopped: settling it", rec.id, status)
                    if status == SandboxStatus.PAUSING:
                        await self._settle_pausing(current)
                    else:
                        self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.RESUMING,),
                                                  status=SandboxStatus.PAUSED)

    # --- restart --------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """At start: take back the boxes that still run, settle what a crash left half-done,
        mark the rest failed, and clear strays."""
        records = [r for r in self.store.list_sandboxes(None) if self.owner is None or r.node == self.owner]
        for rec in records:
            if rec.status == SandboxStatus.PAUSING:
                await self._settle_pausing(rec)
            elif rec.status == SandboxStatus.RESUMING and self.owner is None:  # a fleet's may be under way elsewhere
                self.store.update_sandbox(rec.id, status=SandboxStatus.PAUSED)  # the image was kept until resumed
        live = [r for r in self.store.list_sandboxes(None, status=SandboxStatus.ACTIVE)
                if r.runtime_id and (self.owner is None or r.node == self.owner)]
        alive = await self.node.adopt({r.runtime_id: r.box_key for r in live if r.runtime_id})
        for rec in live:
            if rec.runtime_id not in alive:
                self.mark_failed(rec.id, "the sandbox was not running when the server started")
        if self.owner is not None:
            return  # a fleet's checkpoints are every node's: not one node's to clear
        paused = self.store.list_sandboxes(None, status=SandboxStatus.PAUSED)
        keep = {r.id for r in paused}
        for rec in paused:
            if rec.checkpoint_bytes is None:  # paused by a hutch that kept no sizes: measured once
                size = await asyncio.to_thread(checkpoint_size, self.image_dir(rec.id))
                self.store.update_sandbox(rec.id, only_if_status=(SandboxStatus.PAUSED,), checkpoint_bytes=size)
        images = self.config.checkpoint_dir
        for d in images.iterdir() if images.exists() else ():
            if d.name not in keep:
                shutil.rmtree(d, ignore_errors=True)  # reclaim the disk of boxes that are gone

    async def _settle_pausing(self, rec: SandboxRecord) -> None:
        image = self.image_dir(rec.id)
        if (image / CHECKPOINT_DONE).exists():
            if rec.runtime_id:
                await self.node.stop(rec.runtime_id, rec.box_key)
            self.store.update_sandbox(rec.id, status=SandboxStatus.PAUSED, runtime_id=None, pause_at=None,
                                      delete_at=self._deadline(rec.auto_delete_seconds),
                                      checkpoint_bytes=await asyncio.to_thread(checkpoint_size, image),
                                      event=Event("sandbox.paused", {"memory": not self.files_only(rec),
                                                                     "reason": "settled"}))
        elif rec.runtime_id and await self.node.is_alive(rec.runtime_id):
            await self.node.wake(rec.runtime_id)  # it may have quiesced: listen again
            shutil.rmtree(image, ignore_errors=True)
            self.store.update_sandbox(rec.id, status=SandboxStatus.ACTIVE, checkpoint_bytes=None)
        else:
            self.mark_failed(rec.id, "the server stopped while the sandbox was pausing")

