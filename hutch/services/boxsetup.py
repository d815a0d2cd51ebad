"""What a box boots with, and whether there is room for it: its template, its root and limits, what
its commands start with, and the node's and the team's caps on running boxes.

A create, a resume and a files-only pause all read a box's root and limits the same way, so they
are worked out here once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hutch.errors import ApiError, Code
from hutch.node import boxcmd
from hutch.node.spec import Limits
from hutch.services import system_templates
from hutch.services.config import ServerConfig
from hutch.services.secrets import Secrets
from hutch.services.system_templates import BASE_TEMPLATE_ID
from hutch.store import SandboxRecord, SandboxStatus, Store, TemplateRecord


class BoxSetup:
    def __init__(self, config: ServerConfig, store: Store, secrets: Secrets) -> None:
        self.config, self.store, self.secrets = config, store, secrets
        self.starting = 0  # boots under way: they count against the node's cap before they are recorded
        self.booting_roots: Counter[str] = Counter()  # template roots of creates not yet recorded

    def template(self, team_id: str, ref: str | None) -> TemplateRecord:
        """The template a create boots from (the base unless it names one), with a finished build."""
        template = self.store.get_template(ref or BASE_TEMPLATE_ID, team_id)
        if template is None:  # a system template built since the start is registered now
            missing = system_templates.register_late(self.config, self.store, ref) if ref else None
            template = self.store.get_template(ref, team_id) if ref and not missing else None
        if template is None:
            raise ApiError(Code.TEMPLATE_NOT_FOUND, missing or f"template {ref!r} does not exist")
        if template.rootfs is None:
            raise ApiError(Code.TEMPLATE_NOT_READY, f"template {template.name!r} has no finished build yet "
                                                      "(wait for its build, or see why it failed)")
        return template

    def limits(self, rec: SandboxRecord) -> tuple[Path, Limits]:
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

    def check_capacity(self, team_id: str) -> None:
        """Refuse a box that would run past the node's or the team's cap (paused boxes count for neither)."""
        def running(counts: dict[str, int]) -> int:
            return counts.get(SandboxStatus.ACTIVE, 0) + counts.get(SandboxStatus.RESUMING, 0)

        # a fleet's room is its nodes': Ray's reservations say (no_capacity)
        if self.config.fleet is None and running(self.store.count_by_status()) + self.starting >= self.config.max_sandboxes:
            raise ApiError(Code.TOO_MANY_SANDBOXES,
                           f"this node runs at most {self.config.max_sandboxes} sandboxes; kill or pause one")
        if running(self.store.count_by_status(team_id)) >= self.config.team_max_sandboxes:
            raise ApiError(Code.TOO_MANY_SANDBOXES,
                           f"a team runs at most {self.config.team_max_sandboxes} sandboxes; kill or pause one")
