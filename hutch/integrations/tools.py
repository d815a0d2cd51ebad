"""The agent tools, written once: bash, spawn, write_file, read_file, run against a box, and
run_code for a box of hutch/code-interpreter (offered when asked for: `specs(run_code=True)`).

Each framework module wraps these specs in its own tool type. A tool never raises into the
agent loop: a failing command, a missing file, a denied call or a dead box come back as text the
model reads (the exit code and stderr included), so it can correct itself.

Approval: every call can pass through `can_use_tool(name, input)` first (sync or async). It
answers `Allow()`, `Allow(updated_input={...})` (run with that input instead) or
`Deny("why")` (the model reads the message; the box is not touched).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hutch.sdk import AsyncSandbox, Execution, Sandbox, SandboxError, SandboxTimeoutError

MAX_OUTPUT = 32 * 1024  # characters of stdout, of stderr, of a file the model is shown
DEFAULT_TIMEOUT = 120


@dataclass(frozen=True)
class Allow:
    updated_input: dict[str, Any] | None = None


@dataclass(frozen=True)
class Deny:
    message: str


Decision = Allow | Deny
CanUseTool = Callable[[str, dict[str, Any]], "Decision | Awaitable[Decision]"]
AnySandbox = Sandbox | AsyncSandbox


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the input
    run: Callable[[AnySandbox, dict[str, Any]], Awaitable[str]]


async def _on(sandbox: AnySandbox, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A call of the SDK: awaited on the async one, on a worker thread on the blocking one."""
    if isinstance(sandbox, AsyncSandbox):
        return await fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


async def _call(sandbox: AnySandbox, path: str, *args: Any, **kwargs: Any) -> Any:
    """`sandbox.<path>(...)`."""
    fn: Any = sandbox
    for part in path.split("."):
        fn = getattr(fn, part)
    return await _on(sandbox, fn, *args, **kwargs)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + f"\n[... {len(text) - MAX_OUTPUT} more characters]"


def command_report(exit_code: int | None, stdout: str, stderr: str, note: str = "") -> str:
    """What the model sees of a command: its exit code first, then each stream."""
    head = note or f"exit code: {exit_code}"
    return f"{head}\nstdout:\n{_clip(stdout)}\nstderr:\n{_clip(stderr)}"


async def _bash(sandbox: AnySandbox, args: dict[str, Any]) -> str:
    timeout = args.get("timeout_seconds") or DEFAULT_TIMEOUT
    try:
        result = await _call(sandbox, "commands.run", str(args["command"]), cwd=args.get("cwd"), timeout_seconds=timeout)
    except SandboxTimeoutError as e:
        return command_report(None, e.stdout, e.stderr, note=f"timed out after {timeout} s")
    return command_report(result.exit_code, result.stdout, result.stderr)


async def _spawn(sandbox: AnySandbox, args: dict[str, Any]) -> str:
    """Start it in the background, watch it for a few seconds, and leave it running."""
    wait = min(max(int(args.get("wait_seconds") or 3), 0), 60)
    proc = await _call(sandbox, "commands.spawn", str(args["command"]), cwd=args.get("cwd"))
    try:
        try:
            code: int | None = await _on(sandbox, proc.wait, wait)
        except SandboxTimeoutError:
            code = None
        state = f"exited with code {code}" if code is not None else f"running in the background (pid {proc.pid})"
        return command_report(code, proc.stdout, proc.stderr, note=f"process {proc.pid}: {state} after {wait} s")
    finally:
        await _on(sandbox, proc.close)  # detach: it runs on


def execution_report(execution: Execution) -> str:
    """What the model sees of a run_code: its output, its value, its displays, its error."""
    parts = []
    if execution.logs.stdout:
        parts.append(f"stdout:\n{_clip(''.join(execution.logs.stdout))}")
    if execution.logs.stderr:
        parts.append(f"stderr:\n{_clip(''.join(execution.logs.stderr))}")
    for result in execution.results:
        shown = [f for f in result.formats() if f != "text"]
        if result.is_main_result:
            parts.append(f"result:\n{_clip(result.text or '')}" + (f"\n(also as: {', '.join(shown)})" if shown else ""))
        else:
            parts.append(f"display ({', '.join(result.formats())})" + (f":\n{_clip(result.text)}" if result.text else ""))
    if execution.error is not None:
        err = execution.error
        parts.append(f"error: {err.name}: {err.value}\n{_clip(err.traceback)}")
    return "\n".join(parts) or "(no output and no value)"


async def _run_code(sandbox: AnySandbox, args: dict[str, Any]) -> str:
    timeout = args.get("timeout_seconds") or DEFAULT_TIMEOUT
    try:
        execution = await _call(sandbox, "run_code", str(args["code"]), context=args.get("context_id") or None,
                                timeout=timeout)
    except SandboxTimeoutError:
        return f"timed out after {timeout} s: the code was interrupted (the kernel's state is kept)"
    return execution_report(execution)


async def _write_file(sandbox: AnySandbox, args: dict[str, Any]) -> str:
    content = str(args["content"])
    await _call(sandbox, "files.write", str(args["path"]), content)
    return f"wrote {len(content.encode())} bytes to {args['path']}"


async def _read_file(sandbox: AnySandbox, args: dict[str, Any]) -> str:
    data: bytes = await _call(sandbox, "files.read", str(args["path"]))
    return _clip(data.decode("utf-8", errors="replace"))


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


PATH = {"type": "string", "description": "an absolute path in the sandbox, e.g. /home/user/main.py"}
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("bash", "Run a shell command in the sandbox (Debian, as user 'user', /bin/sh) and get its exit code, "
             "stdout and stderr. Install packages, run scripts, inspect files.",
             _schema({"command": {"type": "string", "description": "the shell command"},
                      "cwd": {"type": "string", "description": "working directory (default: the home directory)"},
                      "timeout_seconds": {"type": "integer", "description": f"default {DEFAULT_TIMEOUT}"}},
                     ["command"]), _bash),
    ToolSpec("spawn", "Start a long-running command in the sandbox in the background (a server, a watcher, a build) "
             "and see what it printed in its first seconds; it keeps running after this returns.",
             _schema({"command": {"type": "string", "description": "the shell command"},
                      "cwd": {"type": "string", "description": "working directory (default: the home directory)"},
                      "wait_seconds": {"type": "integer", "description": "how long to watch it first (default 3, at most 60)"}},
                     ["command"]), _spawn),
    ToolSpec("write_file", "Write a text file in the sandbox (parent directories are made).",
             _schema({"path": PATH, "content": {"type": "string"}}, ["path", "content"]), _write_file),
    ToolSpec("read_file", "Read a text file from the sandbox.", _schema({"path": PATH}, ["path"]), _read_file),
)
RUN_CODE = ToolSpec(
    "run_code", "Run Python code in the sandbox's Jupyter kernel, which keeps variables and imports between calls. "
    "Returns stdout, stderr, the value of the last expression, displays (charts, tables) and any error with its "
    "traceback.",
    _schema({"code": {"type": "string", "description": "the Python code (a cell)"},
             "context_id": {"type": "string", "description": "a context's id, for a kernel of its own (default: the "
                                                             "shared one)"},
             "timeout_seconds": {"type": "integer", "description": f"default {DEFAULT_TIMEOUT}"}},
            ["code"]), _run_code)


def specs(run_code: bool = False) -> tuple[ToolSpec, ...]:
    """The tools a framework offers: with `run_code`, for a box of hutch/code-interpreter."""
    return (*TOOLS, RUN_CODE) if run_code else TOOLS


async def decide(can_use_tool: CanUseTool | None, name: str, args: dict[str, Any]) -> Decision:
    if can_use_tool is None:
        return Allow()
    decision = can_use_tool(name, args)
    if inspect.isawaitable(decision):
        decision = await decision
    if not isinstance(decision, (Allow, Deny)):
        return Deny(f"the approval hook answered {decision!r}, not Allow or Deny")
    return decision


async def invoke(spec: ToolSpec, sandbox: AnySandbox, args: dict[str, Any] | str,
                 can_use_tool: CanUseTool | None = None) -> str:
    """Run one tool call as the model asked it (a dict, or its JSON), through the approval hook."""
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError as e:
            return f"error: the arguments are not JSON: {e}"
    if not isinstance(args, dict):
        return "error: the arguments must be an object"
    missing = [k for k in spec.parameters["required"] if k not in args]
    if missing:
        return f"error: missing {', '.join(missing)}"
    decision = await decide(can_use_tool, spec.name, args)
    if isinstance(decision, Deny):
        return f"denied: {decision.message}"
    try:
        return await spec.run(sandbox, decision.updated_input if decision.updated_input is not None else args)
    except SandboxError as e:
        return f"error: {e.code}: {e.message}"


def run_blocking(coro: Awaitable[str]) -> str:
    """For frameworks that call tools from blocking code (with the blocking Sandbox)."""

    async def wait() -> str:
        return await coro

    return asyncio.run(wait())
