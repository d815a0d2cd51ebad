"""Templates built from code with the real, unmodified e2b SDK (2.63): Template.build with COPY
steps from the client's files, RUN as the base's user and as root, ENV, a start command and its
readiness; one template built from another; a failed step with its log; an image this server
cannot pull; and the template, its steps and builds as hutch sees them."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import httpx

from hutch import CopyStep, Template
from tests.integration.support import Env
from tests.integration.test_e2b import python_of

CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "templates.py"


def run_templates(env: Env, tag: str, context: Path) -> dict[str, Any]:
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd"}
    done = subprocess.run([str(python_of("2.63.0")), str(CLIENT), tag, str(context)], env=variables,
                          capture_output=True, text=True, timeout=900)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"templates failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_template_build_from_code_lands_as_a_hutch_template(env: Env, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "hello.txt").write_text("hello from the client\n")
    (tmp_path / "sub" / "a.txt").write_text("a file in sub\n")
    tag = secrets.token_hex(4)
    out = run_templates(env, tag, tmp_path)
    assert out["built"] == {"template_id_set": True, "build_id_set": True} and out["log_has_steps"] is True
    assert out["exists"] == [True, False]
    assert out["files"] == {"hello": "hello from the client\n", "sub": "a file in sub\n", "sub_mode": "755 root",
                            "marker": "built\n", "who": "user\n", "root_made": "yes\n", "env": "hi there\n",
                            "started": "yes\n"}
    assert out["child"] == "built\nchild\n", "a template built from another, booted by name:tag"
    # the failing template's one step is its first, as E2B numbers them
    assert out["failed"].startswith("BuildException: step 1 (RUN echo about-to-fail; exit 3) exited with code 3")
    assert out["failed_log_has_output"] is True, "the step's output reached on_build_logs"
    assert "python:3.12-slim" in out["image"] and out["image"].startswith("BuildException")
    assert out["tags"] == ["default"]
    # hutch sees it: its steps (a copy step among them), its builds and its log
    mine = Template.get(f"e2b-tpl-{tag}")
    assert sum(isinstance(s, CopyStep) for s in mine.info.steps) == 2 and mine.info.status == "ready"
    assert mine.info.user == "user" and mine.info.env.get("GREETING") == "hi there"


def test_template_uploads_are_signed_bounded_and_the_teams_own(env: Env) -> None:
    api, key = f"{env.url}/e2b", {"X-API-KEY": env.server.e2b_key()}
    made = httpx.post(f"{api}/v3/templates", headers=key, json={"name": f"up-{secrets.token_hex(4)}"})
    assert made.status_code == 202
    template_id = made.json()["templateID"]
    digest = "ab" * 32
    link = httpx.get(f"{api}/templates/{template_id}/files/{digest}", headers=key).json()
    assert link["present"] is False
    url = link["url"]
    assert httpx.put(url.replace("sig=", "sig=x"), content=b"x").status_code == 401
    assert httpx.put(url.replace(digest, "cd" * 32), content=b"x").status_code == 401, "the link names its hash"
    assert httpx.put(url, content=b"a tar would be here").status_code == 200
    assert httpx.get(f"{api}/templates/{template_id}/files/{digest}", headers=key).json() == {"present": True}
    assert httpx.get(f"{api}/templates/{template_id}/files/nothex", headers=key).status_code == 400
    bad_steps = [{"type": "RUN", "args": ["true", "nobody"]}, {"type": "COPY", "args": ["a", "b"]},
                 {"type": "MAGIC", "args": []}, {"type": "ENV", "args": ["ODD"]}]
    for step in bad_steps:
        again = httpx.post(f"{api}/v3/templates", headers=key, json={"name": made.json()["names"][0]}).json()
        r = httpx.post(f"{api}/v2/templates/{template_id}/builds/{again['buildID']}", headers=key,
                       json={"fromImage": "e2bdev/base", "steps": [step]})
        assert r.status_code == 400, (step, r.text)
    r = httpx.post(f"{api}/v2/templates/{template_id}/builds/not-asked-for", headers=key, json={"steps": []})
    assert r.status_code == 404
    assert httpx.post(f"{api}/v3/templates", headers=key, json={"name": "x", "cpuCount": 64}).status_code == 400
