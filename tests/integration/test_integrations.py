"""Agents use hutch: the real frameworks' loops (OpenAI Agents SDK, LangChain tool calling, the
official MCP client, the Claude Agent SDK's in-process MCP server, Letta's client-side tools)
drive real boxes, with a scripted model on loopback in place of an LLM."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from hutch import AsyncSandbox, NotFoundError, Sandbox, ValidationError
from hutch.integrations.conversation import conversation_sandbox, kill_conversations
from hutch.integrations.scripted_model import Script, ScriptedModel, answer, call, text_of
from hutch.integrations.tools import Allow, Deny
from tests.integration.support import HUTCH, Env, free_port, wait_for

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # nothing leaves this machine


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    sb = Sandbox.create("agent-test")
    try:
        yield sb
    finally:
        sb.kill()


# --- OpenAI Agents SDK ----------------------------------------------------------------------------

def _agent(model: ScriptedModel, tools: list[Any], **kwargs: Any) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=model.url, api_key="offline")
    return Agent(name="coder", instructions="Use the sandbox.", tools=tools,
                 model=OpenAIChatCompletionsModel(model="scripted", openai_client=client), **kwargs)


def test_openai_agents_write_run_and_read_a_script(sandbox: Sandbox) -> None:
    from agents import Runner

    from hutch.integrations.openai_agents import sandbox_tools

    fib = "a, b = 0, 1\nfor _ in range(10): a, b = b, a + b\nprint(a)\nopen('/home/user/out.txt', 'w').write(str(a))\n"
    script: Script = [call("write_file", path="/home/user/fib.py", content=fib),
                      call("bash", command="python3 /home/user/fib.py"),
                      call("read_file", path="/home/user/out.txt"),
                      call("bash", command="exit 3"),
                      answer("fib(10) is 55")]
    with ScriptedModel(script) as model:
        result = Runner.run_sync(_agent(model, sandbox_tools(sandbox)), "compute fib(10) in the sandbox")
    assert result.final_output == "fib(10) is 55"
    results = model.tool_results()
    assert results[0].startswith("wrote ") and results[1] == "exit code: 0\nstdout:\n55\n\nstderr:\n"
    assert results[2] == "55" and results[3].startswith("exit code: 3"), "the model sees failures too"
    assert sandbox.files.read("/home/user/out.txt") == b"55"


def test_openai_agents_streamed_with_an_async_sandbox(env: Env) -> None:
    from agents import Runner

    from hutch.integrations.openai_agents import sandbox_tools

    async def go() -> list[str]:
        sb = await AsyncSandbox.create("stream")
        try:
            script: Script = [call("bash", command="echo streamed"), call("spawn", command="echo up; sleep 30", wait_seconds=1),
                              answer("all done now")]
            with ScriptedModel(script) as model:
                run = Runner.run_streamed(_agent(model, sandbox_tools(sb)), "say it")
                kinds = [getattr(event, "name", event.type) async for event in run.stream_events()]
                assert run.final_output == "all done now"
                assert "exit code: 0\nstdout:\nstreamed" in model.tool_results()[0]
                assert "running in the background" in model.tool_results()[1] and "stdout:\nup" in model.tool_results()[1]
                return kinds
        finally:
            await sb.kill()

    kinds = asyncio.run(go())
    assert "tool_called" in kinds and "tool_output" in kinds


def test_approval_denies_rm_and_can_rewrite_a_call(sandbox: Sandbox) -> None:
    from agents import Runner

    from hutch.integrations.openai_agents import sandbox_tools

    sandbox.files.write("/home/user/keep.txt", "precious")
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, args: dict[str, Any]) -> Allow | Deny:
        asked.append((name, args))
        if name == "bash" and "rm " in args["command"]:
            return Deny("deleting files is not allowed here")
        if name == "bash" and "sleep" in args["command"]:
            return Allow(updated_input={**args, "command": "echo rewritten"})
        return Allow()

    script: Script = [call("bash", command="rm -rf /home/user/keep.txt"), call("bash", command="sleep 100"), answer("ok")]
    with ScriptedModel(script) as model:
        Runner.run_sync(_agent(model, sandbox_tools(sandbox, can_use_tool=can_use_tool)), "clean up")
    assert model.tool_results()[0] == "denied: deleting files is not allowed here"
    assert "stdout:\nrewritten" in model.tool_results()[1]
    assert sandbox.files.read("/home/user/keep.txt") == b"precious"
    assert [a[1]["command"] for a in asked] == ["rm -rf /home/user/keep.txt", "sleep 100"]
    ops = [(e.op, e.detail) for e in sandbox.get_audit_log().entries]
    assert ("exec", "echo rewritten") in ops and not any("rm -rf" in d for _, d in ops), "a denied call never ran"


# --- LangChain ------------------------------------------------------------------------------------

def test_langchain_tool_calling(sandbox: Sandbox) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from hutch.integrations.langchain import sandbox_tools

    tools = {t.name: t for t in sandbox_tools(sandbox)}
    script: Script = [call("bash", command="uname -s; id -un"), call("write_file", path="/tmp/lc.txt", content="from langchain"),
                      answer("Linux, as user")]
    with ScriptedModel(script) as model:
        llm = ChatOpenAI(base_url=model.url, api_key=SecretStr("offline"), model="scripted").bind_tools(list(tools.values()))
        messages: list[Any] = [HumanMessage("what system is this?")]
        while True:
            reply = llm.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                break
            for tc in reply.tool_calls:
                messages.append(ToolMessage(tools[tc["name"]].invoke(tc["args"]), tool_call_id=tc["id"]))
    assert reply.content == "Linux, as user"
    assert messages[2].content == "exit code: 0\nstdout:\nLinux\nuser\n\nstderr:\n"
    assert sandbox.files.read("/tmp/lc.txt") == b"from langchain"


# --- Claude Agent SDK (its in-process SDK MCP server) and Letta -------------------------------------

def test_claude_agent_sdk_tools_through_its_in_process_mcp_server(sandbox: Sandbox) -> None:
    from mcp import Client

    from hutch.integrations.claude_agent import sandbox_tools

    server, allowed = sandbox_tools(sandbox, can_use_tool=lambda n, a: Deny("no") if "shutdown" in str(a) else Allow())
    assert server["type"] == "sdk" and allowed == ["mcp__hutch__bash", "mcp__hutch__spawn", "mcp__hutch__write_file",
                                               "mcp__hutch__read_file"]

    async def go() -> tuple[list[str], Any, Any, Any]:
        async with Client(server["instance"]) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            ran = await client.call_tool("bash", {"command": "echo claude > /tmp/c.txt; cat /tmp/c.txt"})
            read = await client.call_tool("read_file", {"path": "/tmp/c.txt"})
            denied = await client.call_tool("bash", {"command": "shutdown now"})
            return names, ran, read, denied

    names, ran, read, denied = asyncio.run(go())
    assert names == ["bash", "spawn", "write_file", "read_file"]
    assert ran.content[0].text.startswith("exit code: 0\nstdout:\nclaude") and not ran.is_error
    assert read.content[0].text == "claude\n"
    assert denied.is_error and denied.content[0].text == "denied: no"


def test_letta_client_side_tools(sandbox: Sandbox) -> None:
    from hutch.integrations.letta import sandbox_tools

    tools = sandbox_tools(sandbox)
    assert [s["name"] for s in tools.schemas] == ["bash", "spawn", "write_file", "read_file"]
    assert tools.schemas[0]["parameters"]["required"] == ["command"]
    assert tools.execute("bash", json.dumps({"command": "echo letta"})).startswith("exit code: 0\nstdout:\nletta")
    assert tools.execute("bash", "{not json").startswith("error: the arguments are not JSON")
    assert tools.execute("read_file", {"path": "/nope"}).startswith("error: file_not_found")
    assert tools.execute("nope", {}) == "error: no tool 'nope'"
    started = tools.execute("spawn", {"command": "echo serving; sleep 60", "wait_seconds": 1})
    assert "running in the background" in started and "stdout:\nserving" in started
    pid = int(started.split("(pid ")[1].split(")")[0])
    assert pid in [p.pid for p in sandbox.commands.list()], "it runs on after the tool returned"
    assert "exited with code 3" in tools.execute("spawn", {"command": "exit 3", "wait_seconds": 5})


# --- one box per conversation ---------------------------------------------------------------------

def test_one_box_per_conversation_across_two_turns(env: Env) -> None:
    tag = {"agent_id": f"conv-{os.getpid()}-{threading.get_ident()}"}
    try:
        with conversation_sandbox(tag) as first:
            first.commands.run("echo remembered > /home/user/notes.txt")
            first_id = first.id
        assert Sandbox.list(metadata=tag)[0].status == "paused", "no idle box between turns"
        with conversation_sandbox(tag) as second:
            assert second.id == first_id
            assert second.files.read("/home/user/notes.txt") == b"remembered\n"
    finally:
        assert kill_conversations(tag) == 1
    assert Sandbox.list(metadata=tag) == []


# --- the MCP server -------------------------------------------------------------------------------

def _client_env(env: Env, **more: str) -> dict[str, str]:
    return {**os.environ, "HUTCH_API_KEY": env.key_a, "HUTCH_BASE_URL": env.url, **more}


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _drive(client: Any) -> dict[str, str]:
    """The tools of a full MCP server, used as an agent would."""
    names = sorted(t.name for t in (await client.list_tools()).tools)
    assert names == sorted(["sandbox_create", "sandbox_exec", "sandbox_list", "sandbox_kill", "sandbox_pause",
                            "sandbox_resume", "files_read", "files_write", "preview_url", "run_code", "volume_create",
                            "volume_list", "volume_files_list", "volume_files_read", "volume_files_write",
                            "desktop_screenshot", "desktop_click", "desktop_type", "desktop_key"])
    made = json.loads(_text(await client.call_tool("sandbox_create", {"name": "mcp", "metadata": {"via": "mcp"}})))
    sid = made["id"]
    out = {"id": sid}
    out["write"] = _text(await client.call_tool("files_write", {"sandbox_id": sid, "path": "/tmp/m.txt", "content": "hi"}))
    out["exec"] = _text(await client.call_tool("sandbox_exec", {"sandbox_id": sid, "command": "cat /tmp/m.txt; exit 2"}))
    out["read"] = _text(await client.call_tool("files_read", {"sandbox_id": sid, "path": "/tmp/m.txt"}))
    out["list"] = _text(await client.call_tool("sandbox_list", {"metadata": {"via": "mcp"}}))
    out["preview"] = _text(await client.call_tool("preview_url", {"sandbox_id": sid, "port": 8000}))
    out["pause"] = _text(await client.call_tool("sandbox_pause", {"sandbox_id": sid}))
    out["after_pause"] = _text(await client.call_tool("sandbox_exec", {"sandbox_id": sid, "command": "cat /tmp/m.txt"}))
    out["missing"] = _text(await client.call_tool("sandbox_exec", {"sandbox_id": "nope", "command": "true"}))
    out["kill"] = _text(await client.call_tool("sandbox_kill", {"sandbox_id": sid}))
    return out


def _check(out: dict[str, str]) -> None:
    assert out["write"] == "wrote 2 bytes to /tmp/m.txt"
    assert out["exec"] == "exit code: 2\nstdout:\nhi\nstderr:\n"
    assert out["read"] == "hi" and out["id"] in out["list"]
    assert out["preview"].startswith("http://8000-" + out["id"])
    assert out["after_pause"].startswith("exit code: 0\nstdout:\nhi"), "a paused box resumes on the next call"
    assert out["missing"].startswith("error: not_found") and out["kill"] == f"killed {out['id']}"


def test_mcp_server_over_stdio(env: Env) -> None:
    from mcp import Client, StdioServerParameters

    async def go() -> dict[str, str]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "hutch.cli", "mcp", "serve"],
                                       env=_client_env(env))
        async with Client(params) as client:
            return await _drive(client)

    _check(asyncio.run(go()))


def test_mcp_server_over_http_wants_its_token(env: Env) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    proc = subprocess.Popen([*HUTCH, "mcp", "serve", "--listen", f"127.0.0.1:{port}"],
                            env=_client_env(env, HUTCH_MCP_TOKEN="s3cret"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"

        def up() -> bool:
            try:
                return httpx.post(url, json={}, timeout=2).status_code == 401
            except httpx.TransportError:
                return False

        wait_for(up, 30, "the MCP server")
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401

        async def go() -> dict[str, str]:
            async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}, timeout=120) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return await _drive(session)

        _check(asyncio.run(go()))
    finally:
        proc.terminate()
        proc.wait(20)


def test_mcp_ephemeral_runs_each_call_in_a_fresh_box(env: Env) -> None:
    from mcp import Client, StdioServerParameters

    before = {i.id for i in Sandbox.list()}

    async def go() -> tuple[list[str], str, str]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "hutch.cli", "mcp", "serve", "--ephemeral"],
                                       env=_client_env(env))
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            first = _text(await client.call_tool("sandbox_exec", {"command": "echo one > /tmp/f; cat /tmp/f"}))
            second = _text(await client.call_tool("sandbox_exec", {"command": "cat /tmp/f"}))
            return names, first, second

    names, first, second = asyncio.run(go())
    assert names == ["sandbox_exec"]
    assert first.startswith("exit code: 0\nstdout:\none") and second.startswith("exit code: 1"), "nothing persists"
    assert {i.id for i in Sandbox.list()} == before, "each box was deleted"


class _Impostor(BaseHTTPRequestHandler):
    """A "hutch server" that does not isolate with gVisor."""

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok", "isolation": "none"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


def test_mcp_ephemeral_fails_closed(env: Env) -> None:
    impostor = ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        for base in (f"http://127.0.0.1:{impostor.server_address[1]}", f"http://127.0.0.1:{free_port()}"):
            r = subprocess.run([*HUTCH, "mcp", "serve", "--ephemeral"], env=_client_env(env, HUTCH_BASE_URL=base),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            assert r.returncode == 1 and "refusing to serve" in r.stderr, r.stderr
    finally:
        impostor.shutdown()


def test_an_openai_agent_with_the_mcp_server_attached(env: Env) -> None:
    from agents import Runner
    from agents.mcp import MCPServerStdio

    def exec_in_made_box(messages: list[dict[str, Any]]) -> Any:
        made = json.loads(next(text_of(m) for m in reversed(messages) if m.get("role") == "tool"))
        return call("sandbox_exec", sandbox_id=made["id"], command="python3 -c 'print(6 * 7)'")

    def kill_it(messages: list[dict[str, Any]]) -> Any:
        sid = next(json.loads(text_of(m))["id"] for m in messages if m.get("role") == "tool" and '"id"' in text_of(m))
        return call("sandbox_kill", sandbox_id=sid)

    async def go() -> tuple[str, list[str]]:
        script: Script = [call("sandbox_create", name="from-agent"), exec_in_made_box, kill_it, answer("42")]
        with ScriptedModel(script) as model:
            async with MCPServerStdio(params={"command": sys.executable, "args": ["-m", "hutch.cli", "mcp", "serve"],
                                              "env": _client_env(env)}, client_session_timeout_seconds=120) as mcp:
                result = await Runner.run(_agent(model, [], mcp_servers=[mcp]), "what is 6 * 7?")
            return str(result.final_output), model.tool_results()

    final, results = asyncio.run(go())
    assert final == "42" and "stdout:\n42" in results[1] and results[2].startswith("killed ")


# --- the audit log ----------------------------------------------------------------------------------

def test_every_command_and_file_operation_is_audited(sandbox: Sandbox, env: Env) -> None:
    sandbox.commands.run("echo hi")
    sandbox.commands.run("exit 4")
    sandbox.commands.run("sleep 0.1", on_stdout=lambda _s: None)  # streamed
    sandbox.files.write("/tmp/a.txt", "x")
    sandbox.files.read("/tmp/a.txt")
    with pytest.raises(NotFoundError):
        sandbox.files.read("/tmp/missing")
    with pytest.raises(ValidationError):
        sandbox.commands.run("true", cwd="/no/such/dir")
    proc = sandbox.commands.spawn("sleep 30")
    proc.close()
    assert sandbox.commands.kill(proc.pid)
    entries = list(reversed(sandbox.get_audit_log().entries))
    got = [(e.op, e.detail, e.exit_code, e.outcome) for e in entries]
    assert got[:12] == [("exec", "echo hi", None, "ok"), ("exit", "echo hi", 0, "ok"),
                        ("exec", "exit 4", None, "ok"), ("exit", "exit 4", 4, "ok"),
                        ("exec", "sleep 0.1", None, "ok"), ("exit", "sleep 0.1", 0, "ok"),
                        ("file_write", "/tmp/a.txt", None, "ok"), ("file_read", "/tmp/a.txt", None, "ok"),
                        ("file_read", "/tmp/missing", None, "file_not_found"),
                        ("exec", "true  [cwd=/no/such/dir]", None, "invalid_cwd"),
                        ("spawn", "sleep 30", None, "ok"), ("signal", f"signal 15 to process {proc.pid}", None, "ok")]
    assert all(e.actor.startswith("127.0.0.1 ") for e in entries)
    table = subprocess.run([*HUTCH, "audit", sandbox.id], capture_output=True, text=True, timeout=60,
                           env=_client_env(env, HUTCH_ACTOR="the-cli-test"))
    assert "echo hi" in table.stdout and "invalid_cwd" in table.stdout
    sandbox.commands.run("sh -c \"$X\"", env={"X": "echo hidden"}, user="root")
    assert sandbox.get_audit_log(limit=1).entries[0].detail == 'sh -c "$X"  [user=root env=X]', "what could hide it"
    os.environ["HUTCH_ACTOR"] = "agent-42"
    try:
        again = Sandbox.connect(sandbox.id)
        again.commands.run("true")
        again.close()
    finally:
        del os.environ["HUTCH_ACTOR"]
    assert sandbox.get_audit_log(limit=1).entries[0].actor.endswith(" agent-42")
    attached = sandbox.commands.spawn("sleep 30")
    attached.kill()  # a signal over the process' WebSocket
    attached.close()
    newest = sandbox.get_audit_log(limit=1).entries[0]
    assert (newest.op, newest.detail, newest.outcome) == ("signal", f"signal 15 to process {attached.pid}", "ok")
