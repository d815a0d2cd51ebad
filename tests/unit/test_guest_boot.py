"""What the agent imports to boot, as it is started in a box (`-S -s -B`, its modules beside it,
no hutch package): none of the modules that cost a box's boot tens of milliseconds under gVisor,
which the agent imports only where a call needs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import hutch.guest

GUEST = Path(hutch.guest.__file__).parent
SLOW = {"ctypes", "dataclasses", "inspect", "shutil", "zipfile", "http.server", "email", "ssl"}


def test_the_agent_boots_without_the_slow_modules() -> None:
    probe = (f"import json, sys; sys.path.insert(0, {str(GUEST)!r}); import agent, channel; "
             "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-S", "-s", "-B", "-c", probe], capture_output=True, text=True, check=True,
                         cwd="/")
    loaded = set(json.loads(out.stdout))
    assert {"channel", "launch", "spawner", "fsops", "procs"} <= loaded  # it did load the agent, as a box does
    assert not loaded & SLOW
