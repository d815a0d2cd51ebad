"""`sudo` in a box: the box user's way to root, as the API's `user="root"` is its caller's.

gVisor does not honour setuid bits (runsc 20240729 runs every process as if no_new_privs were set,
and hutch keeps the spec's `noNewPrivileges` for the runsc releases that can honour them), so
Debian's sudo could never become root in a box. This one asks the agent instead: it sends the
command, its environment and working directory, with its stdin, stdout and stderr as descriptors,
over a Unix socket in the box's own abstract namespace (`sudod.py`). The agent (root) checks who
asks (SO_PEERCRED: the box user or root, which is what `user ALL=(ALL:ALL) NOPASSWD: ALL` allows)
and starts the command with root's capabilities: those of a command the API runs as root, no more.
Signals sent to this process go to the command's process group; the command's exit is this
process' exit (a signal that ended it ends this process too); if this process dies, the agent
kills the command's process group, so a deadline that kills a command kills what it ran with sudo.

Run by /usr/bin/sudo in the base template (`python3 -I -S`), standard library only. The options
scripts and agents use: -u USER, -g GROUP, -E, --preserve-env=LIST, -H, -i, -s, -D DIR, -n, -S,
-k, -K, -v, -l, -V, -h, -p PROMPT (ignored: no password is ever asked), VAR=value before the command.
"""

from __future__ import annotations

import os
import socket
import struct
import sys

try:
    from hutch.guest import protocol as p
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]

LEN = struct.Struct("!I")  # a request's length, then the request (JSON), the stdio riding on its first bytes
ANSWER = struct.Struct("!Bi")  # agent to sudo: a kind and a value
SIGNAL = struct.Struct("!i")  # sudo to agent: a signal for the command's process group
PID, ERRNO, CWD_ERRNO, REFUSED, EXIT = 1, 2, 3, 4, 5  # EXIT's value: an exit code, or minus the signal
MAX_REQUEST = 4 * 2**20
SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Debian's secure_path
# What sudo keeps of the caller's environment: the terminal and locale, as Debian's sudo does, and
# the box's way out (the agent's proxy relay) and what TLS clients trust (hutch's egress CA): without
# them `sudo apt-get`, `sudo pip` and `sudo npm -g` could reach nothing.
KEEP = ("TERM", "COLORTERM", "COLORS", "LS_COLORS", "DISPLAY", "XAUTHORITY", "LANG", "LANGUAGE", "TZ",
        "LINES", "COLUMNS", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
        "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "NODE_EXTRA_CA_CERTS")
FORWARDED = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGWINCH", "SIGCONT")
WITH_VALUE = {"u": "user", "g": "group", "D": "chdir", "p": "prompt", "C": "close-from", "T": "command-timeout",
              "U": "other-user", "r": "role", "t": "type", "R": "chroot"}
FLAGS = {"A": "askpass", "B": "bell", "E": "preserve-env", "H": "set-home", "i": "login", "k": "reset-timestamp",
         "K": "remove-timestamp", "l": "list", "n": "non-interactive", "P": "preserve-groups", "S": "stdin",
         "s": "shell", "v": "validate", "V": "version", "h": "help", "b": "background", "e": "edit"}
USAGE = ("usage: sudo [-u user] [-g group] [-D directory] [-EHinSs] [--preserve-env=list] [VAR=value] "
         "[command [arg ...]]\n       sudo -l | -v | -k | -K | -V | -h\n")


class Usage(Exception):
    pass


def parse(args: list[str]) -> tuple[dict[str, str | bool], dict[str, str], list[str]]:
    """sudo's command line: its options (by long name), the VAR=value assignments, the command."""
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in WITH_VALUE.values():
                if not eq:
                    i += 1
                    if i == len(args):
                        raise Usage(f"option '--{name}' requires an argument")
                    value = args[i]
                opts[name] = value
            elif name in FLAGS.values() or name == "preserve-env":
                opts[name] = value if eq else True
            else:
                raise Usage(f"unrecognized option '--{name}'")
        elif arg.startswith("-") and len(arg) > 1:
            for j, c in enumerate(arg[1:], 1):
                if c in WITH_VALUE:
                    value = arg[j + 1:]
                    if not value:
                        i += 1
                        if i == len(args):
                            raise Usage(f"option requires an argument -- '{c}'")
                        value = args[i]
                    opts[WITH_VALUE[c]] = value
                    break
                if c not in FLAGS:
                    raise Usage(f"invalid option -- '{c}'")
                opts[FLAGS[c]] = True
        else:
            break
        i += 1
    assignments: dict[str, str] = {}
    while i < len(args) and "=" in args[i] and _is_name(args[i].partition("=")[0]):
        name, _, value = args[i].partition("=")
        assignments[name] = value
        i += 1
    return opts, assignments, args[i:]


def _is_name(s: str) -> bool:
    return bool(s) and not s[0].isdigit() and all(c.isalnum() or c == "_" for c in s) and s.isascii()


def _escape(arg: str) -> str:
    """An argument for `shell -c`, as sudo quotes it for -s and -i: every character but letters,
    digits, `_`, `-` and `$` behind a backslash."""
    return "".join(c if (c.isalnum() and c.isascii()) or c in "_-$" else "\\" + c for c in arg)


def target(opts: dict[str, str | bool]) -> tuple[str, int, int, list[int], str, str]:
    """Whom the command runs as: name, uid, gid, groups, home and shell."""
    import grp
    import pwd

    user = str(opts.get("user", "root"))
    try:
        pw = pwd.getpwuid(int(user[1:])) if user.startswith("#") else pwd.getpwnam(user)
    except (KeyError, ValueError):
        if not user.startswith("#") or not user[1:].isdigit():
            raise Usage(f"unknown user {user}") from None
        uid = int(user[1:])
        return user, uid, uid, [uid], "/", "/bin/sh"
    gid = pw.pw_gid
    if "group" in opts:
        group = str(opts["group"])
        try:
            gid = int(group[1:]) if group.startswith("#") else grp.getgrnam(group).gr_gid
        except (KeyError, ValueError):
            raise Usage(f"unknown group {group}") from None
    return pw.pw_name, pw.pw_uid, gid, os.getgrouplist(pw.pw_name, gid), pw.pw_dir, pw.pw_shell or "/bin/sh"


def plan(opts: dict[str, str | bool], assignments: dict[str, str], command: list[str],
         environ: dict[str, str]) -> tuple[list[str], dict[str, str], str, int, int, list[int]]:
    """The command's argv, environment, working directory, uid, gid and groups."""
    name, uid, gid, groups, home, shell = target(opts)
    if opts.get("preserve-env") is True:
        env = dict(environ)
    else:
        env = {k: v for k, v in environ.items() if k in KEEP or k.startswith("LC_")}
    listed = opts.get("preserve-env")
    kept = {k: environ[k] for k in (listed.split(",") if isinstance(listed, str) else ()) if k in environ}
    caller = _name(os.getuid())
    env.update({"PATH": SECURE_PATH, "HOME": home, "USER": name, "LOGNAME": name, "SHELL": shell,
                "MAIL": f"/var/mail/{name}", "SUDO_USER": caller, "SUDO_UID": str(os.getuid()),
                "SUDO_GID": str(os.getgid()), "SUDO_COMMAND": " ".join(command) or shell})
    env.update(kept)
    env.update(assignments)
    cwd = os.getcwd() if os.path.isdir(".") else "/"
    if opts.get("login"):
        argv = [shell, "-l", *(["-c", " ".join(_escape(a) for a in command)] if command else [])]
        cwd = home if os.path.isdir(home) else cwd
    elif opts.get("shell"):
        run = environ.get("SHELL") or shell
        argv = [run, *(["-c", " ".join(_escape(a) for a in command)] if command else [])]
        env["SHELL"] = run
    else:
        argv = command
    if isinstance(opts.get("chdir"), str):
        cwd = str(opts["chdir"])
    return argv, env, cwd, uid, gid, groups


def credentials() -> bytes:
    """Who is asking, as SCM_CREDENTIALS: the kernel (gVisor's sentry) refuses a pid not the sender's
    and a uid or gid it does not hold, so the agent learns it from the kernel, not from this process.
    (SO_PEERCRED cannot serve: gVisor 20240729 answers it with the asking process' own ids.)"""
    return struct.pack("3i", os.getpid(), os.geteuid(), os.getegid())


def _stdio() -> list[int]:
    """This process' stdin, stdout and stderr, with /dev/null for any that is closed."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise EOFError
        buf += part
    return buf


def ask_the_agent(argv: list[str], env: dict[str, str], cwd: str, uid: int, gid: int, groups: list[int],
                  service: str = p.SUDO_SOCKET) -> int:
    """Have the agent run the command; wait for it, passing signals on; its exit code."""
    import json
    import signal

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(service)  # bound by the agent as the box boots, before any command runs
    except OSError:
        return _fail("the agent's sudo service is not running in this box")
    body = json.dumps({"argv": argv, "env": env, "cwd": cwd, "uid": uid, "gid": gid, "groups": groups}).encode()
    if len(body) > MAX_REQUEST:
        return _fail("argument list too long")
    payload = LEN.pack(len(body)) + body
    try:
        sent = sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *_stdio())),
                                        (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials())])
        if sent < len(payload):  # (an empty send to a service that already answered and closed is EPIPE)
            sock.sendall(payload[sent:])
    except OSError as e:
        return _fail(f"could not reach the agent: {e.strerror}")

    def forward(sig: int, _frame: object) -> None:
        try:
            sock.send(SIGNAL.pack(sig))
        except OSError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    while True:
        try:
                answer: tuple[int, int] = ANSWER.unpack(recv_exact(sock, ANSWER.size))
        except (EOFError, OSError):
            return _fail("the agent ended the command's session")  # the agent died, or was replaced
        kind, value = answer
        if kind == PID:
            continue
        if kind == EXIT:
            if value < 0:
                signal.signal(-value, signal.SIG_DFL)
                os.kill(os.getpid(), -value)
                return 128 - value
            return value & 0xFF
        if kind == REFUSED:
            return _fail(f"{_name(os.getuid())} is not in the sudoers file")
        if kind == CWD_ERRNO:
            return _fail(f"unable to change directory to {cwd}: {os.strerror(value)}")
        if kind == ERRNO and value == 2:  # ENOENT
            return _fail(f"{argv[0]}: command not found")
        return _fail(f"unable to execute {argv[0]}: {os.strerror(value)}")


def run_as_root_already(argv: list[str], env: dict[str, str], cwd: str, uid: int, gid: int, groups: list[int]) -> int:
    """Root needs no agent: become the target here and run the command in this process."""
    try:
        os.chdir(cwd)
    except OSError as e:
        return _fail(f"unable to change directory to {cwd}: {e.strerror}")
    if uid != 0 or gid != 0:
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        return _fail(f"{argv[0]}: command not found")
    except OSError as e:
        return _fail(f"unable to execute {argv[0]}: {e.strerror}")
    return 1  # not reached


def _name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"#{uid}"


def _fail(message: str) -> int:
    sys.stderr.write(f"sudo: {message}\n")
    return 1


def main(args: list[str]) -> int:
    try:
        opts, assignments, command = parse(args)
        if opts.get("help"):
            sys.stdout.write(USAGE)
            return 0
        if opts.get("version"):
            sys.stdout.write("Sudo version 1.9 (hutch's: the box's agent runs the command)\n")
            return 0
        if opts.get("list"):
            sys.stdout.write(f"User {os.environ.get('USER', p.BOX_USER)} may run the following commands in this box:\n"
                             "    (ALL : ALL) NOPASSWD: ALL\n")
            return 0
        if opts.get("validate") or opts.get("remove-timestamp") or (opts.get("reset-timestamp") and not command):
            return 0  # no password, so nothing is cached
        if opts.get("edit") or opts.get("background"):
            raise Usage("-e and -b are not supported here")
        if not command and not opts.get("login") and not opts.get("shell"):
            raise Usage("a command is needed")
        argv, env, cwd, uid, gid, groups = plan(opts, assignments, command, dict(os.environ))
    except Usage as e:
        sys.stderr.write(f"sudo: {e}\n{USAGE}")
        return 1
    if os.geteuid() == 0:
        return run_as_root_already(argv, env, cwd, uid, gid, groups)
    return ask_the_agent(argv, env, cwd, uid, gid, groups)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
