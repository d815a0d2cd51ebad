"""Drives the real, unmodified e2b-code-interpreter SDK against hutch and prints what happened as one
JSON object.

Run by tests/integration/test_code_interpreter.py with the venv scripts/test makes for it
(.cache/e2b-code-interpreter), with only E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL set:
`python code_interpreter.py <scenario> [arg]`. Standard library and the SDK only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from e2b_code_interpreter import AsyncSandbox, Sandbox  # type: ignore[import-not-found]

SCENARIO = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else ""
out: dict[str, Any] = {}


def caught(fn: Any) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]
    return "none"


def execution(e: Any) -> dict[str, Any]:
    return {"text": e.text, "stdout": e.logs.stdout, "stderr": e.logs.stderr, "count": e.execution_count,
            "error": None if e.error is None else {"name": e.error.name, "value": e.error.value,
                                                   "traceback": e.error.traceback},
            "results": [{"formats": list(r.formats()), "main": r.is_main_result, "text": r.text, "data": r.data,
                         "png": (r.png or "")[:16], "png_size": len(r.png or "")} for r in e.results]}


def run_sync() -> None:
    """Letta-style: create, run, and read the result shapes."""
    started = time.monotonic()
    sbx = Sandbox.create(timeout=300)
    out["create_seconds"] = time.monotonic() - started
    out["id"] = sbx.sandbox_id
    started = time.monotonic()
    out["sum"] = execution(sbx.run_code("1+1"))
    out["run_seconds"] = time.monotonic() - started
    sbx.run_code("x = 41")
    out["state"] = execution(sbx.run_code("x + 1"))
    seen: list[str] = []
    out["logs"] = execution(sbx.run_code("import sys\nprint('hello')\nprint('oops', file=sys.stderr)",
                                         on_stdout=lambda m: seen.append(m.line)))
    out["seen"] = seen
    out["chart"] = execution(sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"))
    out["pandas"] = execution(sbx.run_code("import pandas as pd, numpy as np\n"
                                           "pd.DataFrame({'a': np.arange(3), 't': pd.to_datetime(['2024-01-01'] * 3)})"))
    out["not_a_frame"] = execution(sbx.run_code("[1, 2]"))
    out["error"] = execution(sbx.run_code("def f():\n    raise ValueError('bad value')\nf()"))
    out["env"] = execution(sbx.run_code("import os\nos.environ.get('CI_VAR')", envs={"CI_VAR": "given"}))
    out["env_after"] = execution(sbx.run_code("'CI_VAR' in os.environ"))
    out["root_cwd"] = caught(lambda: sbx.create_code_context(cwd="/root"))
    ctx = sbx.create_code_context(cwd="/tmp")
    out["context"] = {"language": ctx.language, "cwd": ctx.cwd}
    out["ctx_cwd"] = execution(sbx.run_code("import os\nos.getcwd()", context=ctx))
    out["ctx_isolated"] = execution(sbx.run_code("x", context=ctx))
    sbx.run_code("y = 5", context=ctx)
    out["listed"] = sorted(c.cwd for c in sbx.list_code_contexts())
    sbx.restart_code_context(ctx)
    out["after_restart"] = execution(sbx.run_code("y", context=ctx))
    sbx.remove_code_context(ctx)
    out["listed_after_remove"] = len(sbx.list_code_contexts())
    out["removed_run"] = caught(lambda: sbx.run_code("1", context=ctx))
    out["died"] = execution(sbx.run_code("import os\nos._exit(1)"))
    out["after_death"] = execution(sbx.run_code("'alive' + ' again'"))
    pil = "import numpy\nfrom PIL import Image\nimage = Image.fromarray((numpy.ones((16, 16, 3)) * 200).astype('uint8'))\n"
    out["pil_show"] = execution(sbx.run_code(pil + "image.show()"))
    out["pil_save"] = execution(sbx.run_code(pil + "image.save('/tmp/test.png')\nprint('saved')"))
    out["cobol"] = caught(lambda: sbx.run_code("DISPLAY 'hi'", language="cobol"))
    out["files"] = sbx.files.read("/home/user/.bashrc")[:0] == ""  # envd still answers beside it
    sbx.kill()


def languages() -> None:
    """Bash, JavaScript and TypeScript: state, envs for one call, errors, contexts of their own."""
    # as E2B's "secure access" tests make theirs: its ports want the traffic token
    sbx = Sandbox.create(timeout=300, envs={"BOX_VAR": "from-create"}, secure=True,
                         network={"allow_public_traffic": False})
    public = Sandbox.create(timeout=60, network={"allow_public_traffic": True})  # E2B's default, said
    out["public"] = public.sandbox_id != sbx.sandbox_id
    public.kill()
    out["listed_at_start"] = sorted(c.language for c in sbx.list_code_contexts())
    out["health_on_any_address"] = sbx.commands.run('curl -s -o /dev/null -w "%{http_code}" '
                                                    "http://0.0.0.0:49999/health").stdout
    out["bash"] = execution(sbx.run_code("kept=from-the-first; echo hi", language="bash"))
    out["bash_state"] = execution(sbx.run_code('echo "$kept $BV $BOX_VAR"', language="bash", envs={"BV": "given"}))
    out["bash_env_after"] = execution(sbx.run_code('echo "${BV-unset}"', language="bash"))
    out["bash_override"] = execution(sbx.run_code('echo "$BOX_VAR"', language="bash", envs={"BOX_VAR": "over"}))
    out["bash_restored"] = execution(sbx.run_code('echo "$BOX_VAR"', language="bash"))
    odd = "x'y \"z\" $(echo no) \\ end\ttab\x01\r\x1b[A"  # quotes, a substitution, a terminal's keys
    out["bash_odd"] = execution(sbx.run_code('echo "${#ODD}"; case "$ODD" in *\'$(echo no)\'*) echo kept;; esac',
                                             language="bash", envs={"ODD": odd}))
    out["bash_odd_length"] = len(odd)
    out["bash_error"] = execution(sbx.run_code("ls /nowhere", language="bash"))
    bash_ctx = sbx.create_code_context(language="bash", cwd="/tmp")
    out["bash_context"] = {"language": bash_ctx.language, "cwd": bash_ctx.cwd}
    out["bash_ctx_run"] = execution(sbx.run_code('pwd; echo "${kept-apart}"', context=bash_ctx))
    out["js"] = execution(sbx.run_code("console.log('Hello, World!')", language="js"))
    sbx.run_code("let n = 41", language="javascript")
    out["js_state"] = execution(sbx.run_code("n + 1", language="javascript"))
    out["js_await"] = execution(sbx.run_code("await Promise.resolve('Hello World!')", language="js"))
    out["js_import"] = execution(sbx.run_code("import { readFileSync } from 'node:fs'\nconsole.log(typeof readFileSync)",
                                              language="js"))
    out["js_env"] = execution(sbx.run_code("process.env.FOO + ' ' + process.env.BOX_VAR", language="js",
                                           envs={"FOO": "bar"}))
    out["js_env_after"] = execution(sbx.run_code("process.env.FOO || 'default'", language="js"))
    out["js_override"] = execution(sbx.run_code("process.env.BOX_VAR", language="js", envs={"BOX_VAR": "over"}))
    out["js_restored"] = execution(sbx.run_code("process.env.BOX_VAR", language="js"))
    out["js_error"] = execution(sbx.run_code("throw new TypeError('bad value')", language="js"))
    out["ts"] = execution(sbx.run_code("const message: string = 'Hello, World!'; console.log(message)", language="ts"))
    js_ctx = sbx.create_code_context(language="javascript", cwd="/tmp")
    out["js_context"] = {"language": js_ctx.language, "cwd": js_ctx.cwd}
    out["js_ctx_run"] = execution(sbx.run_code("Deno.cwd() + ' ' + typeof n", context=js_ctx))
    sbx.remove_code_context(js_ctx)  # each Deno kernel holds ~280 MB of the box's 1 GiB
    out["r"] = execution(sbx.run_code('print("Hello, World!")', language="r"))
    out["r_env"] = execution(sbx.run_code('Sys.getenv("FOO")', language="r", envs={"FOO": "bär"}))
    out["r_env_after"] = execution(sbx.run_code('Sys.getenv("FOO", "default")', language="r"))
    out["r_cwd"] = execution(sbx.run_code("getwd()", language="r"))
    out["r_override"] = execution(sbx.run_code('Sys.getenv("BOX_VAR")', language="r", envs={"BOX_VAR": "over"}))
    out["r_restored"] = execution(sbx.run_code('Sys.getenv("BOX_VAR")', language="r"))
    out["contexts"] = sorted((c.language, c.cwd) for c in sbx.list_code_contexts())
    sbx.kill()


def timeout() -> None:
    sbx = Sandbox.create(timeout=300)
    out["id"] = sbx.sandbox_id
    started = time.monotonic()
    out["timed_out"] = caught(lambda: sbx.run_code("import time\ntime.sleep(60)\nprint('finished')", timeout=3))
    out["timeout_seconds"] = time.monotonic() - started
    started = time.monotonic()
    out["after"] = execution(sbx.run_code("1+1", timeout=30))  # the kernel was interrupted, not left busy
    out["after_seconds"] = time.monotonic() - started
    # streamed as it comes: the first line long before the cell ends
    started = time.monotonic()
    first: list[float] = []
    sbx.run_code("import time\nprint('first', flush=True)\ntime.sleep(4)\nprint('second')",
                 on_stdout=lambda m: first.append(time.monotonic() - started))
    out["first_after"], out["run_took"] = first[0], time.monotonic() - started
    big = sbx.run_code("print('x' * (3 * 2**20))")  # one message of 3 MiB
    out["big"] = {"size": sum(len(s) for s in big.logs.stdout), "tail": big.logs.stdout[-1][-80:]}
    sbx.kill()


def pause() -> None:
    sbx = Sandbox.create(timeout=300)
    out["id"] = sbx.sandbox_id
    sbx.run_code("kept = 'across the pause'")
    ctx = sbx.create_code_context()
    sbx.run_code("z = 7", context=ctx)
    sbx.pause() if hasattr(sbx, "pause") else sbx.beta_pause()
    out["state"] = Sandbox.get_info(sbx.sandbox_id).state.value
    again = Sandbox.connect(sbx.sandbox_id)
    out["kept"] = execution(again.run_code("kept"))
    out["ctx_kept"] = execution(again.run_code("z", context=ctx))
    again.kill()


def killed() -> None:
    """The box killed while a cell runs: E2B's "sandbox was killed" error, not a hang."""
    import threading

    sbx = Sandbox.create(timeout=300)
    out["id"] = sbx.sandbox_id
    started = threading.Event()
    threading.Thread(target=lambda: started.wait(60) and Sandbox.kill(sbx.sandbox_id), daemon=True).start()
    begun = time.monotonic()
    out["error"] = caught(lambda: sbx.run_code("import time\nprint('running', flush=True)\ntime.sleep(120)",
                                               on_stdout=lambda m: started.set(), timeout=200))
    out["seconds"] = time.monotonic() - begun


async def run_async() -> None:
    """As Letta's run_code tool calls it: AsyncSandbox.create, run_code, kill."""
    sbx = await AsyncSandbox.create(timeout=300, envs={"BOX_VAR": "from-create"})
    out["id"] = sbx.sandbox_id
    out["sum"] = execution(await sbx.run_code("import math\nmath.factorial(5)"))
    out["box_env"] = execution(await sbx.run_code("import os\nos.environ['BOX_VAR']"))
    out["namespace"] = execution(await sbx.run_code("[n for n in dir() if 'hutch' in n or n == 'annotations']"))
    out["logs"] = execution(await sbx.run_code("print('async hello')"))
    ctx = await sbx.create_code_context()
    out["ctx"] = execution(await sbx.run_code("'in a context'", context=ctx))
    await sbx.kill()


def wrong_token() -> None:
    """The box's id with another box's (or no) token: envd's 401, on the port as on envd."""
    import httpx

    sbx = Sandbox.create(timeout=120)
    out["id"] = sbx.sandbox_id
    url = sbx._jupyter_url
    base = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999"}
    for name, headers in [("none", base), ("wrong", {**base, "X-Access-Token": "x" * 40}),
                          ("wrong_traffic", {**base, "E2B-Traffic-Access-Token": "x" * 40}),
                          ("envd_wrong", {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": "x" * 40})]:
        path = "/health" if name == "envd_wrong" else "/execute"
        r = httpx.post(url + path, headers=headers, json={"code": "open('/tmp/ran', 'w')"}) if path == "/execute" \
            else httpx.get(url + path, headers=headers)
        out[name] = [r.status_code, r.json()]
    out["ran"] = sbx.files.exists("/tmp/ran")
    listed = httpx.get(url + "/contexts", headers={**base, "E2B-Traffic-Access-Token": sbx.traffic_access_token})
    out["listed"] = [listed.status_code, listed.headers.get("content-security-policy")]
    for port in ("0", "70000", "abc", "50000"):
        r = httpx.get(url + "/health", headers={**base, "E2b-Sandbox-Port": port, "X-Access-Token": sbx._envd_access_token})
        out[f"port_{port}"] = [r.status_code, r.json()]
    out["good"] = execution(sbx.run_code("'ok'"))
    sbx.kill()


CHARTS = {
    "line": """import numpy as np, matplotlib.pyplot as plt
x = np.linspace(0, 2 * np.pi, 100)
plt.figure(figsize=(10, 6))
plt.plot(x, np.sin(x), label='sin(x)')
plt.plot(x, np.cos(x), label='cos(x)')
plt.xlabel("Time (s)"); plt.ylabel("Amplitude (Hz)"); plt.title('Plot of sin(x) and cos(x)')
plt.show()""",
    "bar": """import matplotlib.pyplot as plt
plt.bar(['Author A', 'Author B', 'Author C', 'Author D'], [100, 200, 300, 400])
plt.xlabel('Authors'); plt.ylabel('Number of Books Sold'); plt.title('Book Sales by Authors')
plt.show()""",
    "pie": """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["No", "No, in blue"], autopct='%1.1f%%', startangle=90)
plt.title('Will I wake up early tomorrow?')
plt.show()""",
    "box": """import matplotlib.pyplot as plt
data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}
fig, ax = plt.subplots()
ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)
ax.set_title('Exam Scores Distribution'); ax.set_xlabel('Class'); ax.set_ylabel('Score')
plt.show()""",
    "super": """import numpy as np, matplotlib.pyplot as plt
fig, axs = plt.subplots(1, 2)
fig.suptitle('Multiple Charts Example')
axs[0].plot(np.linspace(0, 10, 100), np.sin(np.linspace(0, 10, 100)), 'r'); axs[0].set_title('Sine Wave'); axs[0].grid(True)
axs[1].scatter([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], label='Dataset 1'); axs[1].set_xlabel('X'); axs[1].set_ylabel('Y')
axs[1].set_title('Scatter Plot'); axs[1].grid(True)
plt.show()""",
    "image": """import numpy as np, matplotlib.pyplot as plt
plt.imshow(np.zeros((4, 4)))
plt.show()""",
}


def charts() -> None:
    """Each chart's result as the SDK parses it: its class, its fields, its elements'."""
    sbx = Sandbox.create(timeout=300)
    for name, code in CHARTS.items():
        execution_ = sbx.run_code(code)
        result = execution_.results[0]
        chart = result.chart
        out[name] = {"error": None if execution_.error is None else execution_.error.value,
                     "formats": list(result.formats()), "png": bool(result.png), "class": type(chart).__name__,
                     "chart": chart.to_dict() if chart is not None else None,
                     "elements": [type(e).__name__ for e in chart.elements] if chart is not None else []}
    sbx.kill()


def from_template() -> None:
    """A box of template ARG, a template of the team's built from code-interpreter-v1."""
    sbx = Sandbox.create(template=ARG, timeout=120)
    out["marker"] = execution(sbx.run_code("open('/opt/marker').read().strip()"))
    sbx.kill()


SCENARIOS: dict[str, Callable[[], None]] = {
    "run": run_sync, "languages": languages, "timeout": timeout, "pause": pause, "killed": killed,
    "wrong_token": wrong_token, "from_template": from_template, "charts": charts,
    "async": lambda: asyncio.run(run_async())}

SCENARIOS[SCENARIO]()
print(json.dumps(out), flush=True)
# Not the interpreter's own exit: e2b 2.63's HTTP transport (pyqwest, in Rust) was seen to abort
# (SIGABRT, nothing on stderr) in about one exit in five here, after everything above had run.
os._exit(0)
