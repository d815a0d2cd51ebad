"""A scripted model on loopback that speaks OpenAI's Chat Completions API: the stand-in for an
LLM in hutch's tests and in the examples' offline mode (pointed at with each SDK's base URL).

Each request gets the next step of a script: tool calls, or a final answer. A step may be a
function of the conversation so far, so a script can read the tool results it got back (and the
examples can show a model reacting to them). Streaming (`"stream": true`) is served as OpenAI's
server-sent chunks. Every request is kept for the test to read.

    with ScriptedModel([call("bash", command="ls"), answer("done")]) as model:
        client = AsyncOpenAI(base_url=model.url, api_key="offline")
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def text_of(message: dict[str, Any]) -> str:
    """A message's text, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def call(tool: str, /, **arguments: Any) -> Step:
    return Step(tool_calls=[(tool, arguments)])


def answer(text: str) -> Step:
    return Step(content=text)


Script = list[Step | Callable[[list[dict[str, Any]]], Step]]


class ScriptedModel:
    def __init__(self, script: Script) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                step = model.next_step(body)
                if body.get("stream"):
                    self._stream(body, step)
                else:
                    self._send(200, _completion(body, step))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], step: Step) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in _chunks(body, step):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_step(self, body: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(body)
            if not self.script:
                return answer("(the script has ended)")
            step = self.script.pop(0)
        return step(body.get("messages", [])) if callable(step) else step

    def tool_results(self) -> list[str]:
        """Every tool result the model was given back, in order."""
        seen: list[str] = []
        for request in self.requests:
            for m in request.get("messages", []):
                if m.get("role") == "tool":
                    text = text_of(m)
                    if text not in seen:
                        seen.append(text)
        return seen

    def __enter__(self) -> ScriptedModel:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _calls(step: Step) -> list[dict[str, Any]]:
    return [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}} for name, arguments in step.tool_calls]


USAGE = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}


def _completion(body: dict[str, Any], step: Step) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.content}
    if step.tool_calls:
        message["tool_calls"] = _calls(step)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"), "usage": USAGE,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if step.tool_calls else "stop"}]}


def _chunks(body: dict[str, Any], step: Step) -> list[dict[str, Any]]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "scripted")}
    chunks: list[dict[str, Any]] = []
    if step.content is not None:
        for word in step.content.split(" "):  # a word at a time, as a model streams
            text = word if not chunks else " " + word
            chunks.append({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                                "finish_reason": None}]})
    for i, c in enumerate(_calls(step)):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{**c, "index": i}]},
                                            "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {},
                                        "finish_reason": "tool_calls" if step.tool_calls else "stop"}]})
    chunks.append({**base, "choices": [], "usage": USAGE})
    return chunks
