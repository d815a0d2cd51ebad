"""The real, unmodified e2b-code-interpreter SDK (2.11.5) against hutch: the `code-interpreter-v1`
template, and E2B's port-49999 protocol reached through envd's URL.

The SDK lives in its own virtual environment (.cache/e2b-code-interpreter, made by scripts/test);
tests/integration/e2b_clients/code_interpreter.py runs there in a subprocess with only E2B_API_KEY,
E2B_API_URL and E2B_SANDBOX_URL (and PATH) set, and prints JSON for the asserts.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from hutch import NotFoundError, RunStep, Sandbox, Template
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from hutch.services.system_templates import CODE_INTERPRETER_READY, CODE_INTERPRETER_START
from tests.integration.support import Env, client_result, needs_installed, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "code_interpreter.py"
VERSION = "2.11.5"
PNG_MAGIC = "iVBORw0KGgo"  # b"\x89PNG\r\n\x1a\n", base64


def run_client(env: Env, scenario: str, arg: str = "") -> dict[str, Any]:
    python = ROOT / ".cache" / "e2b-code-interpreter" / "bin" / "python"
    needs_installed(f"e2b-code-interpreter {VERSION} in {python.parent.parent}", python.exists())
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd"}
    return client_result(python, CLIENT, [scenario, arg], variables)


def test_a_matplotlib_figure_is_also_e2bs_chart_of_its_data(env: Env) -> None:
    """A figure's data, read from matplotlib's own objects, as e2b_code_interpreter parses it
    (`Result.chart`): the cells are E2B's own chart tests'."""
    out = run_client(env, "charts")
    for name in ("line", "bar", "pie", "box", "super", "image"):
        assert out[name]["error"] is None and out[name]["png"] is True, name  # the PNG as before
    line = out["line"]
    assert line["class"] == "LineChart" and "chart" in line["formats"]
    chart = line["chart"]
    assert (chart["title"], chart["x_label"], chart["y_label"], chart["x_unit"], chart["y_unit"]) == \
        ("Plot of sin(x) and cos(x)", "Time (s)", "Amplitude (Hz)", "s", "Hz")
    assert chart["x_scale"] == chart["y_scale"] == "linear"
    assert all(isinstance(t, float) for t in chart["x_ticks"]) and len(chart["x_tick_labels"]) == len(chart["x_ticks"])
    assert [e["label"] for e in chart["elements"]] == ["sin(x)", "cos(x)"]
    assert [len(e["points"]) for e in chart["elements"]] == [100, 100]
    assert chart["elements"][0]["points"][0] == [0.0, 0.0] and chart["elements"][1]["points"][0] == [0.0, 1.0]

    bar = out["bar"]
    assert bar["class"] == "BarChart" and (bar["chart"]["x_label"], bar["chart"]["y_label"]) == \
        ("Authors", "Number of Books Sold")
    assert [(e["label"], e["value"]) for e in bar["chart"]["elements"]] == \
        [("Author A", 100.0), ("Author B", 200.0), ("Author C", 300.0), ("Author D", 400.0)]
    pie = out["pie"]
    assert pie["class"] == "PieChart" and pie["chart"]["title"] == "Will I wake up early tomorrow?"
    assert [(e["label"], e["angle"], e["radius"]) for e in pie["chart"]["elements"]] == \
        [("No", 324.0, 1.0), ("No, in blue", 36.0, 1.0)]
    box = out["box"]
    assert box["class"] == "BoxAndWhiskerChart" and box["chart"]["title"] == "Exam Scores Distribution"
    assert [(e["label"], e["min"], e["first_quartile"], e["median"], e["third_quartile"], e["max"], e["outliers"])
            for e in box["chart"]["elements"]] == [("Class A", 78.0, 85.0, 88.0, 90.0, 92.0, []),
                                                   ("Class B", 84.0, 84.75, 88.0, 90.5, 95.0, [76.0]),
                                                   ("Class C", 75.0, 79.0, 82.0, 86.0, 88.0, [])]
    both = out["super"]
    assert both["class"] == "SuperChart" and both["chart"]["title"] == "Multiple Charts Example"
    assert both["elements"] == ["LineChart", "ScatterChart"]
    sine, scatter = both["chart"]["elements"]
    assert (sine["title"], sine["x_label"], len(sine["elements"]), len(sine["elements"][0]["points"])) == \
        ("Sine Wave", None, 1, 100)
    assert (scatter["title"], scatter["x_label"], scatter["y_label"]) == ("Scatter Plot", "X", "Y")
    assert scatter["elements"] == [{"label": "Dataset 1", "points": [[1.0, 5.0], [2.0, 4.0], [3.0, 3.0], [4.0, 2.0],
                                                                      [5.0, 1.0]]}]
    assert out["image"]["class"] == "Chart" and out["image"]["chart"]["type"] == "unknown"  # an image: no data read


def test_run_code_results_logs_charts_errors_and_contexts(env: Env) -> None:
    out = run_client(env, "run")
    assert out["sum"]["text"] == "2" and out["sum"]["error"] is None
    assert out["sum"]["results"][0]["main"] is True and out["sum"]["count"] == 1
    assert out["state"]["text"] == "42"  # state kept between calls
    assert out["logs"]["stdout"] == ["hello\n"] and out["logs"]["stderr"] == ["oops\n"]
    assert out["seen"] == ["hello\n"]  # the on_stdout callback, as the line came
    chart = out["chart"]["results"]
    assert len(chart) == 1 and chart[0]["main"] is False and "png" in chart[0]["formats"]
    assert chart[0]["png"].startswith(PNG_MAGIC) and chart[0]["png_size"] > 1000
    frame = out["pandas"]["results"][0]
    assert "html" in frame["formats"] and "data" in frame["formats"]  # a DataFrame's table, and its columns
    assert frame["data"] == {"a": [0, 1, 2], "t": ["2024-01-01T00:00:00"] * 3}
    assert out["not_a_frame"]["results"][0]["formats"] == ["text"]
    error = out["error"]["error"]
    assert (error["name"], error["value"]) == ("ValueError", "bad value")
    assert "\x1b[" not in error["traceback"]  # as E2B's kernels: no terminal colours
    assert "raise ValueError('bad value')" in error["traceback"] and "----> 3 f()" in error["traceback"]
    assert out["error"]["text"] is None
    assert out["env"]["text"] == "given" and out["env_after"]["text"] == "False"  # envs hold for one call
    assert out["root_cwd"].startswith("SandboxException: 400") and "cannot enter" in out["root_cwd"]
    assert out["context"] == {"language": "python", "cwd": "/tmp"}
    assert out["ctx_cwd"]["text"] == "/tmp"
    assert out["ctx_isolated"]["error"]["name"] == "NameError"  # a context has its own kernel
    assert out["listed"] == ["/home/user", "/home/user", "/tmp"]  # the default Python and JavaScript ones, and ctx
    assert out["after_restart"]["error"]["name"] == "NameError"  # a fresh kernel
    assert out["listed_after_remove"] == 2 and out["removed_run"].startswith("NotFoundException")
    assert out["died"]["error"]["name"] == "ContextRestarting"  # a kernel that died, as Jupyter tells it
    assert out["after_death"]["text"] == "alive again"
    for shown in ("pil_show", "pil_save"):  # a PIL image shown or saved comes back, as in E2B's kernels
        assert [r["formats"] for r in out[shown]["results"]] == [["text", "png"]], out[shown]
        assert out[shown]["results"][0]["png"].startswith(PNG_MAGIC)
    assert out["pil_save"]["stdout"] == ["saved\n"]
    assert out["cobol"].startswith("SandboxException: 400") and "not available" in out["cobol"]
    assert out["files"] is True


def test_bash_javascript_typescript_and_r_contexts(env: Env) -> None:
    out = run_client(env, "languages")
    assert out["public"] is True  # allowPublicTraffic is served (tests/integration/test_e2b_domain.py)
    assert out["listed_at_start"] == ["javascript", "python"]  # E2B's two defaults (Deno's started when used)
    assert out["health_on_any_address"] == "200"  # as E2B's own tests ask it, past the egress proxy

    def said(name: str) -> str:  # bash_kernel streams a terminal's output in the pieces it reads
        return "".join(out[name]["stdout"])

    assert said("bash") == "hi\n" and out["bash"]["error"] is None  # bash_kernel's context
    assert said("bash_state") == "from-the-first given from-create\n"  # its state kept, envs for the call
    assert said("bash_env_after") == "unset\n"
    assert said("bash_override") == "over\n" and said("bash_restored") == "from-create\n"  # put back after the call
    assert said("bash_odd") == f"{out['bash_odd_length']}\nkept\n"  # as given: nothing run, no key pressed
    bash_error = out["bash_error"]
    assert bash_error["error"] is not None and bash_error["error"]["value"] == "2"  # the exit code, as bash_kernel tells it
    assert "No such file or directory" in said("bash_error")  # a terminal's: stderr comes as stdout
    assert out["bash_context"] == {"language": "bash", "cwd": "/tmp"}
    assert said("bash_ctx_run") == "/tmp\napart\n"  # its own shell, in its own directory
    # Deno's kernel, for JavaScript and TypeScript
    assert out["js"]["stdout"] == ["Hello, World!\n"] and out["js"]["error"] is None
    assert out["js_state"]["text"] == "42"
    assert out["js_await"]["text"] == "Hello World!"  # top-level await; a string's text is the string, as E2B's
    assert out["js_import"]["stdout"] == ["function\n"]
    assert out["js_env"]["text"] == "bar from-create" and out["js_env_after"]["text"] == "default"
    assert out["js_override"]["text"] == "over" and out["js_restored"]["text"] == "from-create"
    assert (out["js_error"]["error"]["name"], out["js_error"]["error"]["value"]) == ("TypeError", "bad value")
    assert out["ts"]["stdout"] == ["Hello, World!\n"] and out["ts"]["error"] is None
    assert out["js_context"] == {"language": "javascript", "cwd": "/tmp"}
    assert out["js_ctx_run"]["text"] == "/tmp undefined"  # a kernel of its own
    # IRkernel, Debian's: a value is a display (no main result), as in E2B's
    def shown(name: str) -> str:
        return str(out[name]["results"][0]["text"])

    assert out["r"]["stdout"] == ['[1] "Hello, World!"\n']
    assert shown("r_env") == '[1] "bär"' and shown("r_env_after") == '[1] "default"'
    assert shown("r_cwd") == '[1] "/home/user"'
    assert shown("r_override") == '[1] "over"' and shown("r_restored") == '[1] "from-create"'
    assert out["contexts"] == [["bash", "/home/user"], ["bash", "/tmp"], ["javascript", "/home/user"],
                               ["python", "/home/user"], ["r", "/home/user"], ["typescript", "/home/user"]]


def test_the_async_sandbox_as_lettas_run_code_calls_it(env: Env) -> None:
    out = run_client(env, "async")
    assert out["sum"]["text"] == "120"
    assert out["box_env"]["text"] == "from-create"  # the sandbox's envs reach its kernels
    assert out["namespace"]["text"] == "[]"  # hutch's kernel start-up leaves nothing in the user's names
    assert out["logs"]["stdout"] == ["async hello\n"]
    assert out["ctx"]["text"] == "in a context"


def test_a_timeout_interrupts_the_kernel_and_output_streams_bounded(env: Env) -> None:
    out = run_client(env, "timeout")
    assert out["timed_out"].startswith("TimeoutException: Execution timed out")
    assert out["timeout_seconds"] < 20
    assert out["after"]["text"] == "2" and out["after_seconds"] < 20  # not behind a 60 s sleep
    assert out["after"]["stdout"] == []  # the interrupted cell printed nothing later
    assert out["first_after"] < out["run_took"] - 2  # NDJSON streams through hutch, line by line
    assert 2**20 <= out["big"]["size"] < 2**20 + 200 and "[truncated:" in out["big"]["tail"]  # bounded


def test_kernels_and_contexts_survive_pause_and_resume(env: Env) -> None:
    out = run_client(env, "pause")
    assert out["state"] == "paused"
    assert out["kept"]["text"] == "across the pause"
    assert out["ctx_kept"]["text"] == "7", out["ctx_kept"]  # (was ContextRestarting: see Context.alive)


def test_a_box_killed_mid_cell_is_e2bs_killed_error(env: Env) -> None:
    out = run_client(env, "killed")
    assert out["error"].startswith("TimeoutException: The sandbox was killed while the request was in progress")
    assert out["seconds"] < 60


def test_a_wrong_token_is_refused_as_envd_refuses_it(env: Env) -> None:
    out = run_client(env, "wrong_token")
    for case in ("none", "wrong", "wrong_traffic"):
        assert out[case][0] == 401, case
    assert out["wrong"] == out["envd_wrong"] and out["wrong_traffic"] == out["envd_wrong"]
    assert out["ran"] is False  # nothing reached the kernel
    assert out["listed"] == [200, "sandbox"]  # the traffic token opens it; the answer is sandboxed
    assert out["good"]["text"] == "ok"
    for port in ("0", "70000", "abc", "50000"):  # never a port; nothing listens there
        status, body = out[f"port_{port}"]
        assert status == 502 and body["message"] == "The sandbox is running but port is not open", port


def test_the_template_is_hutchs_too(env: Env) -> None:
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    box = Sandbox.create(name="interpreter", from_template="hutch/code-interpreter")
    try:
        r = box.commands.run("curl -s -X POST http://127.0.0.1:49999/execute -d '{\"code\": \"6*7\"}'")
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        assert {"type": "result", "is_main_result": True, "text": "42"} in lines
        assert lines[-1] == {"type": "end_of_execution"}
        owners = box.commands.run("ps -eo user:12,args | grep -E 'interpreter.py|ipykernel' | grep -v grep").stdout
        procs = owners.splitlines()  # the start command's loop, the server, its Python kernel: the box user's
        assert len(procs) == 3 and all(line.startswith("user ") for line in procs), procs
        # killed, it is started again (a fresh default context), as E2B's systemd restarts its server
        server = "pgrep -f '^/usr/bin/python3 .*interpreter.py'"
        killed = box.commands.run(server).stdout.strip()
        assert killed and box.commands.run(f"kill -KILL {killed}").exit_code == 0
        wait_for(lambda: box.commands.run(server).stdout.strip() not in ("", killed), timeout=60,
                 what="another interpreter server")
        wait_for(lambda: box.commands.run(CODE_INTERPRETER_READY).exit_code == 0, timeout=60,
                 what="the interpreter to answer again")
        r = box.commands.run("curl -s -X POST http://127.0.0.1:49999/execute -d '{\"code\": \"6*7\"}'")
        assert {"type": "result", "is_main_result": True, "text": "42"} in [json.loads(line) for line in r.stdout.splitlines()]
    finally:
        box.kill()


def test_a_template_built_from_it_keeps_its_interpreter(env: Env) -> None:
    """As E2B's builds: a template built from code-interpreter-v1 that sets neither a start nor a
    ready command runs its parent's, so run_code works in its boxes; one that sets its own keeps
    its own."""
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    name = f"ci-child-{int(time.time() * 1000) % 10**8}"
    child = Template.create(name, from_="code-interpreter-v1", steps=[RunStep("echo custom-step > /opt/marker")])
    own = Template.create(f"{name}-own", from_="code-interpreter-v1", start_cmd="sleep infinity",
                          ready_timeout_seconds=30)
    try:
        shown = child.info
        assert (shown.start_cmd, shown.ready_cmd, shown.ready_timeout_seconds) == \
            (CODE_INTERPRETER_START, CODE_INTERPRETER_READY, 120)
        assert (own.info.start_cmd, own.info.ready_cmd, own.info.ready_timeout_seconds) == ("sleep infinity", None, 30)
        own.delete()  # not built: what it would run is what it said
        child.wait_until_ready(timeout_seconds=600)
        out = run_client(env, "from_template", name)
        assert out["marker"]["text"] == "custom-step" and out["marker"]["error"] is None
    finally:
        for made in (f"{name}-own", name):
            with contextlib.suppress(NotFoundError):
                Template.delete_by_name(made)
