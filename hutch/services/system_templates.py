"""The templates the server itself provides (no team's): the base every box and build starts from
unless told otherwise, the code interpreter once `hutch build-base` has built its root, and the
desktop once `hutch build-base --desktop` has built its."""

from __future__ import annotations

import uuid
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


def register_system_templates(config: ServerConfig, store: Store, rootfs: Path) -> None:
    """The base, and the code interpreter once `hutch build-base` has built its root on this host
    (in a fleet, every node's cache has the same paths)."""
    _register(config, store, BASE_TEMPLATE, rootfs, {})
    if base_image.is_built(config.cache_dir, base_image.CODE_INTERPRETER):
        interpreter = base_image.base_root_path(config.cache_dir, base_image.CODE_INTERPRETER)
        for name in CODE_INTERPRETER_TEMPLATES:
            _register(config, store, name, interpreter, {"start_cmd": CODE_INTERPRETER_START,
                                                         "ready_cmd": CODE_INTERPRETER_READY,
                                                         "ready_timeout_seconds": 120})
    if base_image.is_built(config.cache_dir, base_image.DESKTOP):
        desktop = base_image.base_root_path(config.cache_dir, base_image.DESKTOP)
        for name in DESKTOP_TEMPLATES:
            _register(config, store, name, desktop, {"memory_mib": max(config.memory_mib, DESKTOP_MEMORY_MIB)},
                      env={"DISPLAY": DESKTOP_DISPLAY})


def _register(config: ServerConfig, store: Store, name: str, rootfs: Path, extra: dict[str, Any],
              env: dict[str, str] | None = None) -> None:
    spec = CreateTemplate.model_validate({"name": "base", "vcpu": config.vcpu, "memory_mib": config.memory_mib,
                                          **extra}).model_dump(by_alias=True)
    spec.update(name=name, **{"from": None})
    store.put_system_template(TemplateRecord(id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), team_id=None,
                                             name=name, spec=spec, rootfs=str(rootfs), build_id=None,
                                             env=env or {}))
