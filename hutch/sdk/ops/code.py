"""A sandbox's code interpreter (a box of hutch/code-interpreter): run code in a context's kernel
over a stream of NDJSON lines, and the contexts themselves."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode, ServerCode
from hutch.sdk.deadline import within
from hutch.sdk.errors import ConflictError, SandboxTimeoutError, ServerError, ValidationError
from hutch.sdk.flow import Call, Callback, Flow, NextLine
from hutch.sdk.ops.sandboxes import STREAM_TIMEOUT, DataPlane, send_data
from hutch.sdk.types import CodeContext, Execution, ExecutionError, Result

OnResult = Callable[[Result], Any]  # on the async SDK these may also return an awaitable
OnError = Callable[[ExecutionError], Any]
OnOutput = Callable[[str], Any]


def context_id(context: CodeContext | str) -> str:
    return context.id if isinstance(context, CodeContext) else context


def run(dp: DataPlane, code: str, *, language: str | None, context: CodeContext | str | None,
        on_stdout: OnOutput | None, on_stderr: OnOutput | None, on_result: OnResult | None,
        on_error: OnError | None, envs: dict[str, str] | None, timeout: float | None) -> Flow[Execution]:
    """Run code to its end, passing output, results and the error to the callbacks as they come.
    An error the code raised is in the Execution; a timeout is a SandboxTimeoutError."""
    if language is not None and context is not None:
        raise ValidationError("give a context or a language, not both (a context has its language)",
                              code=SdkCode.INVALID_ARGUMENT)
    body = {"code": code, "language": language, "context_id": None if context is None else context_id(context),
            "env": envs, "timeout_seconds": timeout}
    yield from send_data(dp, lambda: Call(
        *routes.RUN_CODE.at(dp.url), {**dp.headers(), "Accept": "application/x-ndjson"},
        json={k: v for k, v in body.items() if v is not None}, stream=True, timeout=STREAM_TIMEOUT))
    execution = Execution()
    while True:
        try:
            line = yield NextLine()
        except httpx.TimeoutException as e:
            raise SandboxTimeoutError("the code's stream went silent; the code may still be running in the "
                                      "sandbox", code=SdkCode.STREAM_TIMEOUT) from e
        except httpx.TransportError:
            line = None  # the connection broke: an early end, said below
        if line is None:
            raise ServerError("the code's stream ended before it finished", code=SdkCode.STREAM_ENDED)
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise ServerError("the code's stream sent a line that is not JSON", code=SdkCode.STREAM_ENDED) from None
        done = yield from _on_item(item, execution, on_stdout, on_stderr, on_result, on_error)
        if done:
            return execution


def _on_item(item: dict[str, Any], execution: Execution, on_stdout: OnOutput | None, on_stderr: OnOutput | None,
             on_result: OnResult | None, on_error: OnError | None) -> Flow[bool]:
    """Take one line into the execution; True at its end."""
    kind = item.get("type")
    if kind in ("stdout", "stderr"):
        text = str(item.get("text", ""))
        (execution.logs.stdout if kind == "stdout" else execution.logs.stderr).append(text)
        callback = on_stdout if kind == "stdout" else on_stderr
        if callback is not None:
            yield Callback(callback, text)
    elif kind == "result":
        result = Result.from_json(item)
        execution.results.append(result)
        if on_result is not None:
            yield Callback(on_result, result)
    elif kind == "error":
        execution.error = ExecutionError(name=str(item.get("name", "")), value=str(item.get("value", "")),
                                         traceback=str(item.get("traceback", "")))
        if on_error is not None:
            yield Callback(on_error, execution.error)
    elif kind == "number_of_executions":
        execution.execution_count = item.get("execution_count")
    elif kind == "end_of_execution":
        return True
    elif kind == "hutch_timeout":
        raise SandboxTimeoutError(str(item.get("message", "the code ran out of time")),
                                  code=SdkCode.EXECUTION_TIMEOUT)
    elif kind == "hutch_error":
        code = str(item.get("code", SdkCode.ERROR))
        cls = ConflictError if code == ServerCode.SANDBOX_FAILED else ServerError
        raise cls(str(item.get("message", "the code's stream broke off")), code=code)
    return False  # keepalive, and what a newer server may add


def create_context(dp: DataPlane, cwd: str | None, language: str | None,
                   timeout: float | None) -> Flow[CodeContext]:
    body = {k: v for k, v in {"cwd": cwd, "language": language}.items() if v is not None}
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.CREATE_CONTEXT.at(dp.url), dp.headers(),
                                                                  json=body, timeout=STREAM_TIMEOUT)))  # a kernel starts
    return CodeContext.from_json(json.loads(reply.body))


def list_contexts(dp: DataPlane, timeout: float | None) -> Flow[list[CodeContext]]:
    reply = yield from within(timeout, send_data(dp, lambda: Call(*routes.LIST_CONTEXTS.at(dp.url), dp.headers())))
    return [CodeContext.from_json(d) for d in json.loads(reply.body)]


def restart_context(dp: DataPlane, context: CodeContext | str, timeout: float | None) -> Flow[None]:
    where = routes.RESTART_CONTEXT.at(dp.url, context_id=context_id(context))
    yield from within(timeout, send_data(dp, lambda: Call(*where, dp.headers(),
                                                          timeout=STREAM_TIMEOUT)))  # a kernel starts


def remove_context(dp: DataPlane, context: CodeContext | str, timeout: float | None) -> Flow[None]:
    where = routes.REMOVE_CONTEXT.at(dp.url, context_id=context_id(context))
    yield from within(timeout, send_data(dp, lambda: Call(*where, dp.headers())))
