"""The real, unmodified e2b SDK reaching a box another API server made: `python e2b_reach.py ID`,
run by test_fleet.py with an e2b line's own python (.cache/e2b-<version>) and only E2B_API_KEY,
E2B_API_URL and E2B_SANDBOX_URL (and PATH) set. Prints one JSON object. Standard library and e2b only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from e2b import Sandbox


def main() -> None:
    sbx = Sandbox.connect(sys.argv[1])
    run = sbx.commands.run("cat /tmp/made-by; echo to-stderr >&2")
    sbx.files.write("/tmp/from-e2b.txt", "written by e2b")
    out: dict[str, Any] = {
        "id": sbx.sandbox_id,
        "stdout": run.stdout, "stderr": run.stderr, "exit_code": run.exit_code,
        "read": sbx.files.read("/tmp/from-e2b.txt"),
        "running": sbx.is_running(),
    }
    print(json.dumps(out), flush=True)
    os._exit(0)  # not the interpreter's shutdown: the SDK's HTTP client may crash in it


if __name__ == "__main__":
    main()
