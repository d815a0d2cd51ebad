"""A stand-in for Anthropic's Messages API, for driving the real Claude Code CLI offline. Run
inside a network namespace of its own with the CLI (tests/integration/test_claude_code.py), so the CLI
cannot reach anything but this.

    python3 anthropic_model.py PORT COMMAND

A request offering the tool `mcp__hutch__bash` is answered with a call of it running COMMAND;
once that call's result comes back, with a text that quotes the result; any other request (the
CLI's own side requests) with a short text. Streamed (server-sent events) or not, as asked.
"""

from __future__ import annotations

import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL = "mcp__hutch__bash"


def _tool_result(messages: list[dict[str, Any]]) -> str | None:
    """The text of the last message's tool result, if it is one."""
    if not messages or not isinstance(messages[-1].get("content"), list):
        return None
    for block in messages[-1]["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content)
    return None


def reply(body: dict[str, Any], command: str) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop reason of the answer."""
    tools = [t.get("name") for t in body.get("tools", [])]
    result = _tool_result(body.get("messages", []))
    if result is not None:
        return [{"type": "text", "text": f"The sandbox said: {result.strip()}"}], "end_turn"
    if TOOL in tools:
        return [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": TOOL,
                 "input": {"command": command}}], "tool_use"
    return [{"type": "text", "text": "ok"}], "end_turn"


def events(body: dict[str, Any], blocks: list[dict[str, Any]], stop: str) -> list[dict[str, Any]]:
    message = {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
               "model": body.get("model", "scripted"), "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 1}}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            out.append({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            out.append({"type": "content_block_start", "index": i,
                        "content_block": {**block, "input": {}}})
            out.append({"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        out.append({"type": "content_block_stop", "index": i})
    out.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 10}})
    out.append({"type": "message_stop"})
    return out


def serve(port: int, command: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            path = self.path.split("?", 1)[0]
            if path.endswith("/count_tokens"):
                return self._json({"input_tokens": 10})
            if not path.endswith("/v1/messages"):
                return self._json({"type": "error", "error": {"type": "not_found_error", "message": path}}, 404)
            blocks, stop = reply(body, command)
            if not body.get("stream"):
                msg = events(body, blocks, stop)[0]["message"]
                return self._json({**msg, "content": blocks, "stop_reason": stop})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for event in events(body, blocks, stop):
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

        def _json(self, payload: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
