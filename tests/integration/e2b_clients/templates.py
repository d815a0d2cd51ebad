"""Drives the real, unmodified e2b SDK's Template SDK (2.63) against hutch; prints what happened as
one JSON object.

Run by tests/integration/test_e2b_templates.py with the SDK line's own python and only
E2B_API_KEY and E2B_API_URL set: `python templates.py <tag> <context dir>`. Standard library and e2b.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from e2b import Sandbox, Template, wait_for_file

TAG, CONTEXT = sys.argv[1], sys.argv[2]
out: dict[str, Any] = {}


def caught(fn: Any) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]
    return "none"


def main() -> None:
    logs: list[str] = []
    name = f"e2b-tpl-{TAG}"
    template = (Template(file_context_path=CONTEXT).from_base_image()
                .copy("hello.txt", "/home/user/hello.txt")
                .copy("sub", "/opt/sub/", user="root", mode=0o755)
                .set_envs({"GREETING": "hi there"})
                .run_cmd("echo built > /home/user/marker && whoami > /home/user/who")
                .run_cmd("touch /root-made", user="root")
                .set_start_cmd("touch /home/user/started && sleep infinity", wait_for_file("/home/user/started")))
    info = Template.build(template, name, cpu_count=1, memory_mb=1024,
                          on_build_logs=lambda entry: logs.append(str(entry.message)))
    out["built"] = {"template_id_set": bool(info.template_id), "build_id_set": bool(info.build_id)}
    out["log_has_steps"] = any("built" in line or "COPY" in line for line in logs)
    out["exists"] = [Template.exists(name), Template.exists(f"nope-{TAG}")]
    sbx = Sandbox.create(name, timeout=120)
    try:
        run = sbx.commands.run
        out["files"] = {"hello": sbx.files.read("/home/user/hello.txt"), "sub": run("cat /opt/sub/a.txt").stdout,
                        "sub_mode": run("stat -c '%a %U' /opt/sub/a.txt").stdout.strip(),
                        "marker": sbx.files.read("/home/user/marker"), "who": sbx.files.read("/home/user/who"),
                        "root_made": run("test -e /root-made && echo yes").stdout,
                        "env": run("echo $GREETING").stdout, "started": run("test -e /home/user/started && echo yes").stdout}
    finally:
        sbx.kill()

    child_name = f"{name}-child"
    child = Template().from_template(name).run_cmd("echo child > /home/user/child")
    Template.build(child, child_name)
    sbx = Sandbox.create(f"{child_name}:latest", timeout=120)
    try:
        out["child"] = sbx.commands.run("cat /home/user/marker /home/user/child").stdout
    finally:
        sbx.kill()

    failing = Template().from_base_image().run_cmd("echo about-to-fail; exit 3")
    fail_logs: list[str] = []
    out["failed"] = caught(lambda: Template.build(failing, f"{name}-bad",
                                                  on_build_logs=lambda e: fail_logs.append(str(e.message))))
    out["failed_log_has_output"] = any("about-to-fail" in line for line in fail_logs)
    out["image"] = caught(lambda: Template.build(Template().from_image("python:3.12-slim"), f"{name}-img"))
    out["tags"] = [t.tag for t in Template.get_tags(name)]


main()
print(json.dumps(out), flush=True)
os._exit(0)  # as client.py: e2b 2.63's Rust transport may abort at interpreter exit
