"""hutch's own SDK against the code interpreter of a hutch/code-interpreter box: `run_code` (sync and
async) with its results, logs and errors, contexts (a bash one too), a chart, a timeout, a pip
install, a box without the interpreter, and the MCP server's run_code tool. Three boxes in all."""

from __future__ import annotations

import asyncio
import io
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

from hutch import AsyncSandbox, ConflictError, NotFoundError, Result, Sandbox, SandboxTimeoutError, ValidationError
from hutch.node import base_image
from hutch.sdk.types import ExecutionError
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Env, needs_installed

TEMPLATE = "hutch/code-interpreter"
PNG_MAGIC = "iVBORw0KGgo"  # b"\x89PNG\r\n\x1a\n", base64


@pytest.fixture(scope="module")
def box(env: Env) -> Iterator[Sandbox]:
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    # module-wide, so before the per-test client config: the key and URL given here
    sb = Sandbox.create("run-code", from_template=TEMPLATE, api_key=env.key_a, base_url=env.url)
    try:
        yield sb
    finally:
        sb.kill()


def test_run_code_value_output_errors_and_charts(box: Sandbox) -> None:
    seen: list[str] = []
    ex = box.run_code("print('hello')\nx = 40\nx + 2", on_stdout=seen.append)
    assert ex.text == "42" and ex.error is None and ex.execution_count is not None
    assert ex.logs.stdout == ["hello\n"] and ex.logs.stderr == [] and seen == ["hello\n"]
    assert [r.is_main_result for r in ex.results] == [True] and ex.results[0].formats() == ["text"]
    assert box.run_code("x").text == "40"  # the kernel keeps its state between calls
    assert box.run_code("import sys; print('oops', file=sys.stderr)").logs.stderr == ["oops\n"]

    errors: list[ExecutionError] = []
    failed = box.run_code("def f():\n    raise ValueError('bad value')\nf()", on_error=errors.append)
    assert failed.error is not None and (failed.error.name, failed.error.value) == ("ValueError", "bad value")
    assert "raise ValueError('bad value')" in failed.error.traceback and errors == [failed.error]
    assert failed.text is None

    shown: list[Result] = []
    chart = box.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", on_result=shown.append)
    assert chart.error is None and len(chart.results) == 1 and shown == chart.results
    png = chart.results[0]
    assert not png.is_main_result and "png" in png.formats() and png.png is not None
    assert png.png.startswith(PNG_MAGIC) and len(png.png) > 1000

    assert box.run_code("import os; os.environ.get('ONLY_NOW')", envs={"ONLY_NOW": "given"}).text == "given"
    assert box.run_code("import os; os.environ.get('ONLY_NOW') is None").text == "True"  # envs hold for one run

    ops = [e.op for e in box.get_audit_log(limit=20).entries]
    assert "run_code" in ops


def test_contexts(box: Sandbox) -> None:
    ctx = box.create_code_context(cwd="/tmp")
    assert (ctx.language, ctx.cwd) == ("python", "/tmp")
    assert box.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
    box.run_code("y = 7", context=ctx)
    isolated = box.run_code("y")  # the default context is another kernel
    assert isolated.error is not None and isolated.error.name == "NameError"
    assert box.run_code("y", context=ctx.id).text == "7"
    assert ctx.id in [c.id for c in box.list_code_contexts()]
    box.restart_code_context(ctx)
    restarted = box.run_code("y", context=ctx)
    assert restarted.error is not None and restarted.error.name == "NameError"  # a fresh kernel
    box.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in box.list_code_contexts()]
    with pytest.raises(NotFoundError) as gone:
        box.run_code("1", context=ctx)
    assert gone.value.code == "context_not_found"
    with pytest.raises(ValidationError):
        box.run_code("1", context=ctx, language="python")
    shell = box.create_code_context(language="bash")
    assert shell.language == "bash" and box.run_code("echo $((6 * 7))", context=shell).logs.stdout == ["42\n"]
    box.remove_code_context(shell)
    with pytest.raises(ValidationError) as bad:  # the interpreter's refusal, typed
        box.create_code_context(language="cobol")
    assert bad.value.code == "invalid_request" and "not available" in bad.value.message


def test_a_timeout_interrupts_the_kernel_and_keeps_its_state(box: Sandbox) -> None:
    box.run_code("kept = 'still here'")
    started = time.monotonic()
    with pytest.raises(SandboxTimeoutError) as late:
        box.run_code("import time\nfor _ in range(600): time.sleep(0.1)", timeout=1)
    assert late.value.code == "execution_timeout"
    assert box.run_code("kept").text == "still here"  # the cell was interrupted: the kernel is free again
    assert time.monotonic() - started < 15  # not after the cell's whole minute


def _text(result: Any) -> str:
    return str(result.content[0].text)


def test_code_can_pip_install_for_the_box_user_and_its_kernel_imports_it(box: Sandbox) -> None:
    """As in E2B's image: no PEP 668 refusal, and the user's site directory is on the running
    kernel's path (a wheel made here: the box reaches no package index in a test)."""
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("hello_hutch.py", "WORD = 'installed'\n")
        whl.writestr("hello_hutch-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hello-hutch\nVersion: 1.0\n")
        whl.writestr("hello_hutch-1.0.dist-info/WHEEL",
                     "Wheel-Version: 1.0\nGenerator: hutch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr("hello_hutch-1.0.dist-info/RECORD", "")
    box.files.write("/tmp/hello_hutch-1.0-py3-none-any.whl", wheel.getvalue())
    pip = box.run_code("%pip install --no-index --no-deps /tmp/hello_hutch-1.0-py3-none-any.whl")
    assert pip.error is None and "Successfully installed hello-hutch-1.0" in "".join(pip.logs.stdout), pip.logs
    assert box.run_code("import hello_hutch; hello_hutch.WORD").text == "installed"
    where = box.commands.run("python3 -c 'import hello_hutch; print(hello_hutch.__file__)'").stdout
    assert where.startswith("/home/user/.local/lib/python3"), where  # the user's, not the system's


def test_the_mcp_run_code_tool(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp import Client

    from hutch.integrations.mcp_server import build

    monkeypatch.setenv("HUTCH_ACTOR", "hutch-mcp")

    async def go() -> tuple[str, str]:
        async with Client(build()) as client:
            ok = await client.call_tool("run_code", {"sandbox_id": box.id, "code": "print('hi')\n6 * 7"})
            bad = await client.call_tool("run_code", {"sandbox_id": box.id, "code": "1/0"})
            return _text(ok), _text(bad)

    ok, bad = asyncio.run(go())
    assert ok == "stdout:\nhi\n\nresult:\n42"
    assert bad.startswith("error: ZeroDivisionError: division by zero\n")


def test_the_agent_tools_offer_run_code_when_asked(box: Sandbox) -> None:
    from hutch.integrations.letta import sandbox_tools

    assert "run_code" not in [s["name"] for s in sandbox_tools(box).schemas]  # a plain box's tools stay as they were
    tools = sandbox_tools(box, run_code=True)
    assert [s["name"] for s in tools.schemas] == ["bash", "spawn", "write_file", "read_file", "run_code"]
    assert tools.execute("run_code", {"code": "z = 5\nz * 3"}) == "result:\n15"


def test_the_async_sdk() -> None:
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))

    async def go() -> dict[str, Any]:
        sb = await AsyncSandbox.create("run-code-async", from_template=TEMPLATE)
        try:
            seen: list[str] = []

            async def on_stdout(text: str) -> None:
                seen.append(text)

            ex = await sb.run_code("print('async hello')\nsum(range(16))", on_stdout=on_stdout)
            ctx = await sb.create_code_context()
            in_ctx = await sb.run_code("import os; os.getcwd()", context=ctx)
            listed = [c.id for c in await sb.list_code_contexts()]
            return {"text": ex.text, "stdout": ex.logs.stdout, "seen": seen, "cwd": in_ctx.text,
                    "listed": ctx.id in listed}
        finally:
            await sb.kill()

    out = asyncio.run(go())
    assert out == {"text": "120", "stdout": ["async hello\n"], "seen": ["async hello\n"], "cwd": "/home/user",
                   "listed": True}


def test_a_box_without_the_interpreter_says_so() -> None:
    sb = Sandbox.create("no-interpreter")
    try:
        with pytest.raises(ConflictError) as no:
            sb.run_code("1")
        assert no.value.code == "interpreter_unavailable" and "hutch/code-interpreter" in no.value.message
        with pytest.raises(ConflictError) as listing:
            sb.list_code_contexts()
        assert listing.value.code == "interpreter_unavailable"
    finally:
        sb.kill()
