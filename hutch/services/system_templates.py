"""The templates the server itself provides (no team's): the base every box and build starts from
unless told otherwise, the code interpreter once `hutch build-base` has built its root, and the
desktop once `hutch build-base --desktop` has built its."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hutch.node import base_image, box
from hutch.services.config import ServerConfig
from hutch.services.models import CreateTemplate
from hutch.store import Store, TemplateRecord

BASE_TEMPLATE = "hutch/base"
BASE_TEMPLATE_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "hutch/base"))
# The code interpreter (base_image.CODE_INTERPRETER), under E2B's name and hutch's: its start command
# is hutch/guest/interpreter.py (mounted with the agent), ready once its /health answers. One killed
# by a signal (by hand, or the box's memory limit) is started again a second later, as E2B's systemd
# does; one that exits ends the start command, so a box that cannot run it fails its create at once.
CODE_INTERPRETER_TEMPLATES = ("code-interpreter-v1", "hutch/code-interpreter")
CODE_INTERPRETER_START = (f"while :; do /usr/bin/python3 {box.AGENT_DIR}/interpreter.py; s=$?; "
                          "[ $s -gt 128 ] || exit $s; sleep 1; done")
CODE_INTERPRETER_READY = "curl -sf --max-time 5 -o /dev/null http://127.0.0.1:49999/health"

# The desktop (base_image.DESKTOP), under E2B's name and hutch's. No start command: e2b-desktop
# starts Xvfb and XFCE itself at create, at the resolution it was given, and hutch's create with a
# `desktop` runs the box's hutch-desktop (hutch.services.desktop). DISPLAY is every command's.
# Firefox and XFCE want more memory than a base box.
DESKTOP_TEMPLATES = ("desktop", "hutch/desktop")
DESKTOP_DISPLAY = ":0"
DESKTOP_MEMORY_MIB = 2048


@dataclass(frozen=True)
class BuiltOnDemand:
    """System templates whose root `hutch build-base` builds (the option that asks for it): each
    registered once its root is built."""

    names: tuple[str, ...]
    recipe: base_image.Recipe
    option: str
    spec: Callable[[ServerConfig], dict[str, Any]]
    env: dict[str, str] = field(default_factory=dict)


ON_DEMAND = (
    BuiltOnDemand(CODE_INTERPRETER_TEMPLATES, base_image.CODE_INTERPRETER, "",
                  lambda config: {"start_cmd": CODE_INTERPRETER_START, "ready_cmd": CODE_INTERPRETER_READY,
                                  "ready_timeout_seconds": 120}),
    BuiltOnDemand(DESKTOP_TEMPLATES, base_image.DESKTOP, " --desktop",
                  lambda config: {"memory_mib": max(config.memory_mib, DESKTOP_MEMORY_MIB)}, {"DISPLAY": DESKTOP_DISPLAY}),
)


def register_system_templates(config: ServerConfig, store: Store, rootfs: Path) -> None:
    """The base, and the others whose roots `hutch build-base` has built on this host (in a fleet,
    every node's cache has the same paths)."""
    _register(config, store, BASE_TEMPLATE, rootfs, {})
    for group in ON_DEMAND:
        if base_image.is_built(config.cache_dir, group.recipe):
            _register_group(config, store, group)


def register_late(config: ServerConfig, store: Store, name: str) -> str | None:
    """For a create naming a system template that is not registered: registered now if its root
    was built since the server started (`hutch build-base --desktop` while it runs), and None;
    else why it is missing, for the create's refusal (None for a name that is no system template's)."""
    for group in ON_DEMAND:
        if name in group.names:
            if not base_image.is_built(config.cache_dir, group.recipe):
                return (f"template {name!r} is a system template whose root is not built on this server: "
                        f"run `hutch build-base{group.option}` on it")
            _register_group(config, store, group)
    return None


def _register_group(config: ServerConfig, store: Store, group: BuiltOnDemand) -> None:
    root = base_image.base_root_path(config.cache_dir, group.recipe)
    for name in group.names:
        _register(config, store, name, root, group.spec(config), env=group.env)


def _register(config: ServerConfig, store: Store, name: str, rootfs: Path, extra: dict[str, Any],
              env: dict[str, str] | None = None) -> None:
    spec = CreateTemplate.model_validate({"name": "base", "vcpu": config.vcpu, "memory_mib": config.memory_mib,
                                          **extra}).model_dump(by_alias=True)
    spec.update(name=name, **{"from": None})
    store.put_system_template(TemplateRecord(id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), team_id=None,
                                             name=name, spec=spec, rootfs=str(rootfs), build_id=None,
                                             env=env or {}))
