"""The channel protocol between the node and the guest agent: paths, names and error codes both sides share.

The channel is HTTP/1.1 over the per-box Unix socket. This module is standard-library only and is
imported by the agent inside the box as well as by the node on the host.
"""

VERSION = 1

# Where the host's directories appear inside every box.
GUEST_ROOT = "/.hutch"
CHANNEL_DIR = f"{GUEST_ROOT}/chan"  # host tmpfs, holds the agent's listening socket
AGENT_DIR = f"{GUEST_ROOT}/agent"  # this package, read-only
AGENT_BIN_DIR = f"{GUEST_ROOT}/bin"  # read-only: the compiled agent (agent/, Go), when boxes run it
AGENT_BINARY = "hutch-agent"  # its name there
RUNTIME_DIR = f"{GUEST_ROOT}/rt"  # a Debian root, read-only: the agent's Python
TRUST_DIR = f"{GUEST_ROOT}/ca"  # read-only: what TLS clients in the box trust (hutch.egress.ca)
CA_CERT = f"{TRUST_DIR}/ca.crt"  # hutch's egress CA alone
CA_BUNDLE = f"{TRUST_DIR}/bundle.crt"  # public roots, the server's extra CAs and hutch's CA
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's bundle path: the box's is replaced by CA_BUNDLE
SOCKET_NAME = "agent.sock"
EGRESS_SOCKET = "egress.sock"  # the host's egress proxy for this box, in the channel directory
INTERPRETER_PORT = 49999  # the code interpreter's server in a box (interpreter.py's PORT: a test keeps them equal)
PROXY_PORT = 3128  # the agent's relay to it, on 127.0.0.1 in the box: every process's HTTP(S)_PROXY
SUDO_SOCKET = "\0hutch-sudo"  # the agent's sudo service (sudod.py), in the box's own abstract namespace

# The unprivileged user that commands run as unless the caller asks for root.
BOX_USER = "user"
BOX_UID = 1000
BOX_GID = 1000
BOX_HOME = "/home/user"

# Routes of the agent.
HEALTH = f"/v{VERSION}/health"
EXEC = f"/v{VERSION}/exec"
FILES = f"/v{VERSION}/files"  # GET ?path=&user=: read as the box user unless user=root; PUT ?path=&user=: write
DIR_ZIP = f"/v{VERSION}/dir-zip"  # GET ?path=&user=: a zip of the tree the acting user can read, links not followed
PROCS = f"/v{VERSION}/procs"  # spawned processes: POST to start, GET to list, /{pid}/... below
PROC_EVENTS = "events"  # GET /procs/{pid}/events?after=SEQ: replay what is buffered, then follow
PROC_STDIN = "stdin"  # POST raw bytes
PROC_STDIN_CLOSE = "stdin-close"
PROC_SIGNAL = "signal"  # POST {"signal": int}, to the process group
PROC_RESIZE = "resize"  # POST {"rows": int, "cols": int}
TUNNEL = f"/v{VERSION}/tunnel"  # POST ?port=N: this connection becomes bytes to and from 127.0.0.1:N
QUIESCE = f"/v{VERSION}/quiesce"  # close every host socket before a checkpoint
WAKE_FILE = "wake"  # in the channel dir after a restore (or SIGUSR1): the agent listens again
# Filesystem operations (fsops.py), as the box user unless user=root; answers are entries (JSON
# objects: name, path, type, size, mode, permissions, owner, group, mtime, target).
FS_STAT = f"/v{VERSION}/fs/stat"  # GET ?path=&user=
FS_LIST = f"/v{VERSION}/fs/list"  # GET ?path=&depth=&user= -> {"entries": [...]}
FS_MKDIR = f"/v{VERSION}/fs/mkdir"  # POST {"path", "user"} -> {"entry", "created"}
FS_MOVE = f"/v{VERSION}/fs/move"  # POST {"source", "destination", "user"} -> the destination's entry
FS_REMOVE = f"/v{VERSION}/fs/remove"  # POST {"path", "user"} -> {}
FS_WATCH = f"/v{VERSION}/fs/watch"  # GET ?path=&recursive=true|false -> NDJSON fs events and pings

# Exec streams one JSON object a line; "t" names the event.
EVENT_START = "start"  # {"t": "start", "pid": int}
EVENT_STDOUT = "stdout"  # {"t": "stdout", "d": str}
EVENT_STDERR = "stderr"  # {"t": "stderr", "d": str}
EVENT_EXIT = "exit"  # {"t": "exit", "code": int | None, "timed_out": bool}
EVENT_ERROR = "error"  # {"t": "error", "code": str, "message": str}: the command could not start
EVENT_PING = "ping"  # {"t": "ping"}: the command is still running, and so is the box
EVENT_FS = "fs"  # {"t": "fs", "name": str, "type": "create" | "write" | "remove" | "rename" | "chmod"}
EVENT_DROPPED = "dropped"  # {"t": "dropped", "chars": int}: a spawned process' buffer lost this much output
# A spawned process' events also carry "s", their sequence number.

# Error codes the agent answers with (JSON body {"code", "message"}), each under the one status
# ERROR_STATUS gives it. The node maps each to a code of the server's catalogue (hutch.node.agent).
ERR_BAD_PATH = "invalid_path"
ERR_NOT_FOUND = "file_not_found"
ERR_IS_DIR = "is_a_directory"
ERR_NOT_DIR = "not_a_directory"
ERR_NOT_REGULAR = "not_a_regular_file"
ERR_UNSAFE_PATH = "unsafe_path"  # the path goes through a link the box's user made
ERR_BAD_REQUEST = "invalid_request"
ERR_NO_ROUTE = "no_such_route"  # the agent has no such route (or method of it): an older agent, say
ERR_BODY_TOO_LARGE = "body_too_large"  # a request body past what the route takes
ERR_BAD_CWD = "invalid_cwd"
ERR_START_FAILED = "command_start_failed"  # the command could not start (out of pids, say)
ERR_IO = "io_error"
ERR_NO_PROCESS = "process_not_found"
ERR_NOT_TTY = "not_a_terminal"
ERR_STDIN_CLOSED = "stdin_closed"
ERR_STDIN_FULL = "stdin_full"  # the process has not read its stdin for a while
ERR_TOO_MANY_PROCS = "too_many_processes"
ERR_PORT_CLOSED = "port_not_listening"  # nothing in the box accepts connections on that port
ERR_PERMISSION = "permission_denied"  # the acting user may not
ERR_EXISTS = "already_exists"
ERR_TOO_MANY_ENTRIES = "too_many_entries"  # a listing past the agent's cap
ERR_AGENT = "agent_error"  # a bug of the agent's

# Each code's one status: call sites name the code, never a status.
ERROR_STATUS = {
    ERR_BAD_PATH: 400,
    ERR_NOT_FOUND: 404,
    ERR_IS_DIR: 400,
    ERR_NOT_DIR: 400,
    ERR_NOT_REGULAR: 400,
    ERR_UNSAFE_PATH: 400,
    ERR_BAD_REQUEST: 400,
    ERR_NO_ROUTE: 404,
    ERR_BODY_TOO_LARGE: 413,
    ERR_BAD_CWD: 400,
    ERR_START_FAILED: 503,
    ERR_IO: 400,
    ERR_NO_PROCESS: 404,
    ERR_NOT_TTY: 400,
    ERR_STDIN_CLOSED: 409,
    ERR_STDIN_FULL: 409,
    ERR_TOO_MANY_PROCS: 429,
    ERR_PORT_CLOSED: 502,
    ERR_PERMISSION: 403,
    ERR_EXISTS: 409,
    ERR_TOO_MANY_ENTRIES: 400,
    ERR_AGENT: 500,
}


class Refusal(Exception):
    """An error answer of the agent's, raised where it is found and answered by the channel: its
    code (whose status ERROR_STATUS gives) and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

def path_problem(path: str) -> str | None:
    """Why a box path is unacceptable, or None: absolute, no '..' segment, no NUL."""
    if not path.startswith("/"):
        return "path must be absolute"
    if "\x00" in path:
        return "path must not contain NUL"
    if ".." in path.split("/"):
        return "path must not contain '..' segments"
    if len(path.encode()) > 4096:
        return "path is longer than 4096 bytes"
    return None


# E2B's file metadata: `user.e2b.<key>` extended attributes, checked as envd checks them
METADATA_PREFIX = "user.e2b."
MAX_METADATA_BYTES = 4096  # names (with the prefix) and values of one file's set, as envd bounds it


def metadata_problem(meta: object) -> str | None:
    """Why a metadata set cannot be stored (envd's rules: keys non-empty, printable ASCII keys and
    values, the whole set within MAX_METADATA_BYTES), or None."""
    if not isinstance(meta, dict):
        return "metadata must map names to strings"
    total = 0
    for key, value in meta.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return "metadata must map names to strings"
        if not key or len(METADATA_PREFIX) + len(key) > 255:
            return "a metadata key must be 1-246 bytes"
        if not _printable(key) or not _printable(value):
            return f"metadata key {key[:64]!r} or its value is not printable ASCII"
        total += len(METADATA_PREFIX) + len(key) + len(value)
    if total > MAX_METADATA_BYTES:
        return f"metadata is limited to {MAX_METADATA_BYTES} bytes"
    return None


def _printable(s: str) -> bool:
    return all(" " <= c <= "~" for c in s)
