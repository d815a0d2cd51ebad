"""The code interpreter's server inside a box: E2B's port-49999 protocol over Jupyter kernels.

The code-interpreter template starts it as the box user with the template's own python3 (Debian's,
which has jupyter_client and ipykernel); hutch's envd facade reaches it through the box's agent
when a request carries `E2b-Sandbox-Port: 49999` (or comes to `49999-<id>.<E2B domain>`), having
checked the box's token (not asked of a box made with E2B's `secure: false` and public traffic,
whose e2b 1.x client sends none: hutch.e2b.ports). It listens on
every address of the box, as E2B's does, which is loopback alone (a box has no network card).

    GET  /health                    200 "OK" once the default Python context runs (a default
                                    JavaScript one is listed too, its kernel started when first used)
    POST /execute                   {code, context_id?, language?, env_vars?}: NDJSON, as it comes
    POST /contexts                  {language?, cwd?}: a new context (its own kernel)
    GET  /contexts                  every context
    DELETE /contexts/<id>           stop its kernel
    POST /contexts/<id>/restart     a fresh kernel, same id, language and cwd

An execution streams `number_of_executions`, `stdout`/`stderr` (text, timestamp), `result`
(the kernel's MIME bundle under E2B's names, `is_main_result` for the cell's value) and `error`
(name, value, traceback), with `keepalive` lines in quiet spells. A client that goes away (its
timeout, say) interrupts the kernel. Output is bounded per message and per execution.

Languages: Python (ipykernel) always; bash (bash_kernel), JavaScript and TypeScript (Deno's
kernel) and R (IRkernel), where the root has them (the code-interpreter root does). The kernel protocol is
jupyter_client's; this module only maps it to E2B's shapes.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import queue
import re
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORT = 49999
HOST = "0.0.0.0"
DEFAULT_CWD = "/home/user"
# E2B's language names -> the kernel that runs each, where the root has it: Deno's runs both
# JavaScript and TypeScript (E2B runs TypeScript in its JavaScript kernel too), in a default
# context for each name
LANGUAGES = {"python": "python3", "bash": "bash", "javascript": "deno", "typescript": "deno", "deno": "deno",
             "r": "ir"}
ALIASES = {"py": "python", "python3": "python", "js": "javascript", "ts": "typescript"}
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what bash can export
# bash's own, which a bash context may not be given: the prompt bash_kernel reads its output by,
# the idle timeout that ends the shell, the read-only ones
BASH_OWN = frozenset({"PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "TMOUT", "UID", "EUID", "PPID", "BASHOPTS",
                      "SHELLOPTS", "BASH_VERSINFO", "BASHPID", "GROUPS"})
BASH_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 @%+=:,./_-")
MAX_BODY = 2 * 2**20  # hutch's facade holds requests to 1 MiB before they get here
MAX_TEXT = 1 * 2**20  # one stdout/stderr message, a traceback, a result's text
MAX_LINE = 16 * 2**20  # one NDJSON line (a result with its images)
MAX_OUTPUT = 64 * 2**20  # one execution's whole stream
MAX_CONTEXTS = 32
KEEPALIVE = 10.0  # a line at least this often: a client that left is found by the write
POLL = 0.25  # how often a waiting execution looks whether its client left
START_TIMEOUT = 60.0  # a kernel's start or restart
DRAIN_TIMEOUT = 10.0  # after an interrupt, the kernel's end of the cell
ALIVE_EVERY = 1.0  # in a quiet cell, how often the kernel's process is looked at
# As E2B's kernels: plain tracebacks (no terminal colours), whole sequences in a result's text, and
# DataFrames also as `e2b/data` (interpreter_kernel.py, beside this file)
KERNEL_STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "interpreter_kernel.py")
KERNEL_ARGUMENTS = ["--InteractiveShell.colors=NoColor", "--PlainTextFormatter.max_seq_length=0",
                    f"--IPKernelApp.exec_files={[KERNEL_STARTUP]}"]
MIME_FIELDS = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown", "image/svg+xml": "svg",
               "image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf", "text/latex": "latex",
               "application/json": "json", "application/javascript": "javascript", "e2b/data": "data",
               "e2b/chart": "chart"}

Emit = Callable[[dict[str, Any]], bool]  # False: the client is gone
Gone = Callable[[], bool]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"


def result_of(data: dict[str, Any], main: bool) -> dict[str, Any]:
    """A kernel's MIME bundle as E2B's result: its known types by name, the rest in `extra`; a
    string's quotes taken off its text, as E2B's server does."""
    out: dict[str, Any] = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    for mime, value in data.items():
        name = MIME_FIELDS.get(mime)
        if name is None:
            extra[mime] = value
        else:
            out[name] = value
    text = out.get("text")
    if isinstance(text, str):
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]
        out["text"] = _clip(text)
    if extra:
        out["extra"] = extra
    return out


def _line(item: dict[str, Any]) -> bytes:
    """One NDJSON line, held to MAX_LINE: the largest formats go first, then the text is cut."""
    line = json.dumps(item).encode()
    while len(line) > MAX_LINE:
        sizes = {k: len(json.dumps(v)) for k, v in item.items() if k not in ("type", "is_main_result", "text")}
        if not sizes:
            item = {**item, "text": _clip(str(item.get("text", "")), MAX_LINE // 2)}
            return json.dumps(item).encode() + b"\n"
        item = {k: v for k, v in item.items() if k != max(sizes, key=lambda k: sizes[k])}
        line = json.dumps(item).encode()
    return line + b"\n"


class Context:
    """One kernel and what E2B knows of it. Its executions run one at a time (the lock)."""

    def __init__(self, language: str, cwd: str) -> None:
        self.id, self.language, self.cwd = str(uuid.uuid4()), language, cwd
        self.lock = threading.Lock()
        self.starting = threading.Lock()
        self.removed = False
        self.km: Any = None
        self.kc: Any = None

    def view(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self) -> None:
        """Start the kernel unless it was (a lazy context's first use starts it); a context
        removed meanwhile is not found, rather than given a kernel nothing would stop."""
        with self.starting:
            if self.removed:
                raise BadRequest(404, f"Context {self.id} not found")
            if self.km is None:
                self._start()

    def remove(self) -> None:
        with self.starting:
            self.removed = True
        self.stop()

    def _start(self) -> None:
        from jupyter_client.manager import KernelManager  # type: ignore[import-not-found]

        if not (os.path.isdir(self.cwd) and os.access(self.cwd, os.X_OK)):
            raise ValueError(f"the working directory {self.cwd!r} does not exist or the box user cannot enter it")
        kernel = LANGUAGES[self.language]
        km, kc = KernelManager(kernel_name=kernel), None
        try:  # kept only once it answers: a kernel that failed to start is started anew next time
            with KERNELS:  # jupyter_client's sync calls run an event loop of their own: one at a time
                # debugpy's warning about frozen modules would open every kernel's log
                km.start_kernel(cwd=self.cwd, env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"},
                                extra_arguments=KERNEL_ARGUMENTS if kernel == "python3" else [])
                kc = km.client()
                kc.start_channels()
            kc.wait_for_ready(timeout=START_TIMEOUT)
        except BaseException:
            with KERNELS, contextlib.suppress(Exception):
                if kc is not None:
                    kc.stop_channels()
                km.shutdown_kernel(now=True)
            raise
        self.km, self.kc = km, kc

    def restart(self) -> None:
        if self.km is None:  # never started: a start is its restart
            self.start()
            return
        with KERNELS:
            self.km.restart_kernel(now=True)
        self.kc.wait_for_ready(timeout=START_TIMEOUT)

    def stop(self) -> None:
        with KERNELS, contextlib.suppress(Exception):
            if self.kc is not None:
                self.kc.stop_channels()
            if self.km is not None:
                self.km.shutdown_kernel(now=True)

    def alive(self) -> bool:
        with KERNELS:
            if self.km is None:
                return False
            if self.km.is_alive():
                return True
            # Popen.poll takes an ECHILD from waitpid for a death (CPython then says it exited 0):
            # seen just after a box was restored from its checkpoint, the kernel running on. A
            # kernel whose process is there and no zombie is alive.
            return _running(getattr(self.km.provisioner, "pid", None))

    def interrupt(self) -> None:
        with KERNELS, contextlib.suppress(Exception):
            if self.km is not None:
                self.km.interrupt_kernel()

    # --- executions -----------------------------------------------------------------------------

    def execute(self, code: str, env: dict[str, str], emit: Emit, gone: Gone) -> None:
        """Run a cell and emit what it makes. `env` holds for this cell only."""
        while not self.lock.acquire(timeout=POLL):  # the one before it still runs
            if gone():
                return
        try:
            if env:
                self._silent(set_env(self.language, env))
            try:
                self._run(code, emit, gone)
            finally:
                if env:
                    self._silent(restore_env(self.language, list(env)))
        finally:
            self.lock.release()

    def _silent(self, code: str) -> None:
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        with contextlib.suppress(KernelDied):
            for _ in self._messages(msg_id, lambda: False, deadline=time.monotonic() + DRAIN_TIMEOUT):
                pass

    def _messages(self, msg_id: str, gone: Gone, deadline: float | None = None) -> Iterator[dict[str, Any] | None]:
        """The kernel's IOPub messages for one request until it is idle again (None in quiet
        spells). A client that leaves interrupts the cell; what follows is read and dropped."""
        quiet = 0.0
        interrupted = False
        looked = time.monotonic()
        while True:
            if deadline is not None and time.monotonic() > deadline:
                return
            try:
                msg = self.kc.get_iopub_msg(timeout=POLL)
            except queue.Empty:
                quiet += POLL
                if time.monotonic() - looked > ALIVE_EVERY:
                    looked = time.monotonic()
                    if not self.alive():
                        raise KernelDied from None
                if not interrupted and gone():
                    self.interrupt()
                    interrupted, deadline = True, time.monotonic() + DRAIN_TIMEOUT
                if quiet >= KEEPALIVE:
                    quiet = 0.0
                    yield None
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            quiet = 0.0
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                self._reply(msg_id)
                return
            if not interrupted:
                yield msg

    def _reply(self, msg_id: str) -> None:
        """Read the cell's reply off the shell channel, so replies do not pile up there."""
        with contextlib.suppress(queue.Empty):
            while self.kc.get_shell_msg(timeout=1.0).get("parent_header", {}).get("msg_id") != msg_id:
                pass

    def _run(self, code: str, emit: Emit, gone: Gone) -> None:
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=True)
        sent = 0
        cut = False
        left = False

        def out(item: dict[str, Any], small: bool = False) -> None:
            nonlocal sent, cut, left
            if left:
                return
            line_size = len(_line(item))
            if not small and sent + line_size > MAX_OUTPUT:
                if not cut:
                    cut = True
                    left = not emit({"type": "stderr", "text": f"[output truncated: an execution streams at most "
                                                               f"{MAX_OUTPUT} bytes]\n", "timestamp": _now()})
                return
            sent += line_size
            left = not emit(item)

        try:
            self._stream(msg_id, out, lambda: left or gone())
        except KernelDied:  # as Jupyter's server does: a fresh kernel, and the cell's error says so
            out({"type": "error", "name": "ContextRestarting", "value": "Context was restarted",
                 "traceback": "the kernel died (it exited, or ran out of memory) and was restarted"}, small=True)
            self.restart()

    def _stream(self, msg_id: str, out: Callable[..., None], gone: Gone) -> None:
        errored = False
        for msg in self._messages(msg_id, gone):
            if msg is None:
                out({"type": "keepalive"}, small=True)
                continue
            kind, content = msg["msg_type"], msg["content"]
            stamp = msg.get("header", {}).get("date")
            stamp = stamp.isoformat() if isinstance(stamp, datetime.datetime) else str(stamp or _now())
            if kind == "execute_input":
                out({"type": "number_of_executions", "execution_count": content.get("execution_count")}, small=True)
            elif kind == "stream" and content.get("name") in ("stdout", "stderr"):
                out({"type": content["name"], "text": _clip(content.get("text", "")), "timestamp": stamp})
            elif kind in ("execute_result", "display_data"):
                out(result_of(dict(content.get("data", {})), kind == "execute_result"))
            elif kind == "error" and not errored:
                errored = True
                out({"type": "error", "name": _clip(str(content.get("ename", "")), 1024),
                     "value": _clip(str(content.get("evalue", ""))),
                     "traceback": _clip("\n".join(content.get("traceback", [])))}, small=True)


KERNELS = threading.Lock()


def _running(pid: object) -> bool:
    """Whether a process of ours runs (exists, and is no zombie)."""
    if type(pid) is not int or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def env_refusal(language: str, env: dict[str, str]) -> str | None:
    """Why these env vars cannot be set in a kernel of `language` (None: they can)."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            return f"env var {name[:64]!r}: a name is not empty and holds no '=', and neither holds a NUL"
        if LANGUAGES[language] == "bash" and (not SHELL_NAME.fullmatch(name) or name in BASH_OWN
                                             or name.startswith("_hutch")):
            return f"env var name {name[:64]!r} is not one a bash context can export"
    return None


def _bash_word(value: str) -> str:
    """`value` as a bash $'...' word of printable ASCII alone: bash_kernel types each cell into a
    terminal, where a control character would be a key press (^A, a tab's completion), not data."""
    return "$'" + "".join(chr(b) if chr(b) in BASH_SAFE else f"\\x{b:02x}" for b in value.encode()) + "'"


def set_env(language: str, env: dict[str, str]) -> str:
    """A silent cell that sets `env` (env_refusal found nothing to refuse) in the kernel and keeps
    what it replaced, for restore_env."""
    kernel = LANGUAGES[language]
    if kernel == "bash":  # `|| :`: under the user's `set -e`, a declare -p of an unset name would end the shell
        return (f"_hutch_env=$(declare -p {' '.join(env)} 2>/dev/null || :); export "
                + " ".join(f"{k}={_bash_word(v)}" for k, v in env.items()))
    if kernel == "ir":  # a JSON string is an R string literal (the box's locale is UTF-8)
        names = ", ".join(json.dumps(k, ensure_ascii=False) for k in env)
        values = ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {json.dumps(v, ensure_ascii=False)}"
                           for k, v in env.items())
        return f".hutch_env <- Sys.getenv(c({names}), unset = NA, names = TRUE); invisible(do.call(Sys.setenv, list({values})))"
    if kernel == "deno":  # JSON is a JavaScript literal
        return (f"globalThis._hutch_env = Object.fromEntries({json.dumps(list(env))}.map((k) => [k, Deno.env.get(k)])); "
                f"for (const [k, v] of Object.entries({json.dumps(env)})) Deno.env.set(k, v);")
    return (f"import os as _o, sys as _s; _s._hutch_env = {{k: _o.environ.get(k) for k in {list(env)!r}}}; "
            f"_o.environ.update({env!r})")


def restore_env(language: str, names: list[str]) -> str:
    """A silent cell that puts back what set_env replaced (unset what was not set)."""
    kernel = LANGUAGES[language]
    if kernel == "bash":
        return f'unset -v {" ".join(names)}; eval "$_hutch_env"; unset -v _hutch_env'
    if kernel == "ir":
        return ("for (.k in names(.hutch_env)) if (is.na(.hutch_env[[.k]])) Sys.unsetenv(.k) else "
                "do.call(Sys.setenv, setNames(list(.hutch_env[[.k]]), .k)); rm(.hutch_env, .k)")
    if kernel == "deno":
        return ("for (const [k, v] of Object.entries(globalThis._hutch_env ?? {})) "
                "v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v); delete globalThis._hutch_env;")
    return ("import os as _o, sys as _s\nfor _k, _v in _s.__dict__.pop('_hutch_env', {}).items():\n"
            "    _o.environ.pop(_k, None) if _v is None else _o.environ.__setitem__(_k, _v)\n"
            "del _o, _s")


def installed_languages() -> list[str]:
    """The languages whose kernel is installed in this root (Python's always is)."""
    from jupyter_client.kernelspec import KernelSpecManager  # type: ignore[import-not-found]

    specs = KernelSpecManager().find_kernel_specs()
    return [lang for lang, kernel in LANGUAGES.items() if lang == "python" or kernel in specs]


AVAILABLE: list[str] = ["python"]  # installed_languages(), at start


class KernelDied(Exception):
    """The kernel process is gone (it exited, or the box's memory limit killed it)."""


class Contexts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.defaults_lock = threading.Lock()  # one default context per language, however many ask at once
        self.all: dict[str, Context] = {}
        self.default: dict[str, str] = {}  # language -> its default context's id

    def views(self) -> list[dict[str, str]]:
        with self.lock:
            return [c.view() for c in self.all.values()]

    def create(self, language: str, cwd: str, lazy: bool = False) -> Context:
        """A new context; its kernel started now, or (lazy) at its first use."""
        with self.lock:
            if len(self.all) >= MAX_CONTEXTS:
                raise OverflowError(f"a sandbox holds at most {MAX_CONTEXTS} contexts: remove one")
        ctx = Context(language, cwd)
        if not lazy:
            ctx.start()
        with self.lock:
            self.all[ctx.id] = ctx
        return ctx

    def default_for(self, language: str, lazy: bool = False) -> Context:
        with self.defaults_lock:
            with self.lock:
                ctx = self.all.get(self.default.get(language, ""))
            if ctx is None:
                ctx = self.create(language, DEFAULT_CWD, lazy)
                with self.lock:
                    self.default[language] = ctx.id
        return ctx

    def get(self, context_id: str) -> Context | None:
        with self.lock:
            return self.all.get(context_id)

    def remove(self, context_id: str) -> bool:
        with self.lock:
            ctx = self.all.pop(context_id, None)
            for lang in [k for k, v in self.default.items() if v == context_id]:
                del self.default[lang]
        if ctx is None:
            return False
        ctx.remove()
        return True


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def language_of(name: object) -> str:
    if name is None or name == "":
        return "python"
    if not isinstance(name, str):
        raise BadRequest(400, "language must be a string")
    lang = name.strip().lower()
    lang = ALIASES.get(lang, lang)
    if lang not in AVAILABLE:
        raise BadRequest(400, f"language {name[:64]!r} is not available in this sandbox (it has: "
                              f"{', '.join(AVAILABLE)})")
    return lang


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hutch-interpreter"
    contexts: Contexts

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- plumbing -------------------------------------------------------------------------------

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("content-length") or "0"
        if not length.isdigit() or int(length) > MAX_BODY:
            raise BadRequest(413, f"request bodies are limited to {MAX_BODY} bytes")
        raw = self.rfile.read(int(length)) if int(length) else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise BadRequest(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest(400, "the body must be a JSON object")
        return body

    def _send(self, status: int, body: object, text: bool = False) -> None:
        data = (str(body) if text else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _handle(self, route: Callable[[], None]) -> None:
        try:
            route()
        except BadRequest as e:
            self._send(e.status, str(e), text=True)
        except OverflowError as e:
            self._send(429, str(e), text=True)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a kernel that will not start, say: E2B's server answers 500 with the reason
            self._send(500, f"{type(e).__name__}: {e}"[:2000], text=True)

    def _client_gone(self) -> bool:
        """Whether the client closed its end: readable with nothing to read."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # --- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._handle(lambda: self._send(200, "OK"))
        elif path == "/contexts":
            self._handle(lambda: self._send(200, self.contexts.views()))
        else:
            self._handle(lambda: self._send(404, f"{path[:200]} is not a route of the code interpreter", text=True))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        parts = path.split("/")
        if path == "/execute":
            self._handle(self._execute)
        elif path == "/contexts":
            self._handle(self._create)
        elif len(parts) == 4 and parts[1] == "contexts" and parts[3] == "restart":
            self._handle(lambda: self._restart(parts[2]))
        else:
            self._handle(lambda: self._send(404, f"{path[:200]} is not a route of the code interpreter", text=True))

    def do_DELETE(self) -> None:
        parts = self.path.split("?", 1)[0].rstrip("/").split("/")
        if len(parts) == 3 and parts[1] == "contexts":
            self._handle(lambda: self._remove(parts[2]))
        else:
            self._handle(lambda: self._send(404, "not a route of the code interpreter", text=True))

    def _create(self) -> None:
        body = self._body()
        cwd = body.get("cwd") or DEFAULT_CWD
        if not isinstance(cwd, str):
            raise BadRequest(400, "cwd must be a string")
        try:
            ctx = self.contexts.create(language_of(body.get("language")), cwd)
        except ValueError as e:
            raise BadRequest(400, str(e)) from None
        self._send(200, ctx.view())

    def _remove(self, context_id: str) -> None:
        if not self.contexts.remove(context_id):
            raise BadRequest(404, f"Context {context_id[:64]} not found")
        self._send(200, None)

    def _restart(self, context_id: str) -> None:
        ctx = self.contexts.get(context_id)
        if ctx is None:
            raise BadRequest(404, f"Context {context_id[:64]} not found")
        ctx.interrupt()  # a running cell ends first (its stream says KeyboardInterrupt)
        with ctx.lock:
            ctx.restart()
        self._send(200, None)

    def _execute(self) -> None:
        body = self._body()
        code, context_id, env = body.get("code"), body.get("context_id"), body.get("env_vars") or {}
        if not isinstance(code, str):
            raise BadRequest(400, "code must be a string")
        if context_id and body.get("language"):
            raise BadRequest(400, "Only one of context_id or language can be provided")
        if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise BadRequest(400, "env_vars must map names to strings")
        if context_id:
            found = self.contexts.get(str(context_id))
            if found is None:
                raise BadRequest(404, f"Context {str(context_id)[:64]} not found")
            ctx = found
        else:
            ctx = self.contexts.default_for(language_of(body.get("language")))
        if (refusal := env_refusal(ctx.language, env)) is not None:
            raise BadRequest(400, refusal)
        ctx.start()  # a lazy context's first use (a kernel that will not start: a 500 with its reason)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

        def emit(item: dict[str, Any]) -> bool:
            line = _line(item)
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                return True
            except OSError:
                return False

        try:
            ctx.execute(code, env, emit, self._client_gone)
        except Exception as e:  # the head is sent: the failure goes in the stream (a context removed meanwhile)
            emit({"type": "error", "name": type(e).__name__, "value": str(e)[:2000], "traceback": ""})
        if emit({"type": "end_of_execution"}):
            with contextlib.suppress(OSError):
                self.wfile.write(b"0\r\n\r\n")


def main() -> None:
    AVAILABLE[:] = installed_languages()
    contexts = Contexts()
    Handler.contexts = contexts
    server = ThreadingHTTPServer((HOST, PORT), Handler)
    server.daemon_threads = True
    contexts.default_for("python")  # before /health answers: a ready box runs code at once
    if "javascript" in AVAILABLE:  # listed as E2B's is; Deno's kernel (~280 MB) only once it is used
        contexts.default_for("javascript", lazy=True)
    print(f"code interpreter listening on {HOST}:{PORT}", file=sys.stderr, flush=True)
    server.serve_forever(poll_interval=3600.0)  # it never shuts down: no timer to wake the box twice a second


if __name__ == "__main__":
    main()
