"""The `hutch` command: run the server, and manage sandboxes and templates from a terminal.

Client commands read HUTCH_API_KEY and HUTCH_BASE_URL, or, on the server's own machine, the
client.env that `hutch serve` writes into its data dir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hutch.sdk import (
    BuildError,
    BuildInfo,
    BuildLogLine,
    EnvStep,
    NetworkConfig,
    NetworkLogEntry,
    ProcessInfo,
    Provider,
    RunStep,
    Sandbox,
    SandboxError,
    SandboxInfo,
    Secret,
    SecretAuditEntry,
    SecretInfo,
    Template,
    TemplateInfo,
    UserStep,
    WorkdirStep,
)
from hutch.sdk.ops import step_body
from hutch.server.config import DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, DEFAULT_PORT

CLIENT_ENV = "client.env"


# --- server side ----------------------------------------------------------------------------------

def cmd_build_base(args: argparse.Namespace) -> int:
    from hutch.node import base_image

    root = base_image.build(args.cache_dir, progress=lambda line: print(line, flush=True))
    print(f"base template: {root}")
    return 0


def _admin_key(store: Any, data_dir: Path, variable: str = "HUTCH_API_KEY") -> str:
    """The default team's key (or its E2B-shaped key, for E2B_API_KEY): made on first start, kept
    (0600) in the data dir to print again."""
    env_file = data_dir / CLIENT_ENV
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith(f"{variable}="):
                key = line.split("=", 1)[1]
                if store.team_for_api_key(key):
                    return key
    team_id = store.team_by_name("default") or store.create_team("default")
    new_key: str = store.create_api_key(team_id, e2b=variable == "E2B_API_KEY")
    return new_key


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from hutch.node import base_image
    from hutch.server.app import create_app
    from hutch.server.config import ServerConfig
    from hutch.store import Store

    config = ServerConfig(data_dir=args.data_dir, cache_dir=args.cache_dir, host=args.host, port=args.port,
                          warm_pool=args.warm_pool, max_sandboxes=args.max_sandboxes,
                          team_max_sandboxes=args.team_max_sandboxes, egress_hosts=args.egress_hosts,
                          egress_system_dns=not args.egress_no_system_dns, trust_ca=tuple(args.trust_ca or ()),
                          preview_port=args.preview_port, preview_domain=args.preview_domain,
                          preview_https=args.preview_https, max_builds=args.max_builds,
                          image_dirs=tuple(args.image_dir or ()), registry_pulls=args.registry_pulls)
    config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not base_image.is_built(config.cache_dir):
        base_image.build(config.cache_dir, progress=lambda line: print(line, flush=True))
    store = Store(config.db_url)
    key = _admin_key(store, config.data_dir)
    e2b_key = _admin_key(store, config.data_dir, "E2B_API_KEY")
    env_file = config.data_dir / CLIENT_ENV
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:  # and the same team for the e2b SDK (hutch.e2b)
        f.write(f"HUTCH_BASE_URL={config.base_url}\nHUTCH_API_KEY={key}\n"
                f"E2B_API_URL={config.base_url}/e2b\nE2B_SANDBOX_URL={config.base_url}/e2b/envd\n"
                f"E2B_API_KEY={e2b_key}\n")
    # The key goes to a person at a terminal, never into a log file (stdout redirected)
    shown = key if sys.stdout.isatty() else f"$(grep HUTCH_API_KEY= {env_file} | cut -d= -f2)"
    print(f"hutch is serving on {config.base_url}\n"
          f"  export HUTCH_BASE_URL={config.base_url}\n  export HUTCH_API_KEY={shown}\n"
          f"  (also in {env_file})", flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per channel request is noise
    from hutch.server.attach import MAX_FRAME

    # A WebSocket frame is held whole before the app sees it: keep frames and the queue small.
    # The standard asyncio loop, not uvloop: uvloop's start_tls (the egress proxy terminating a
    # box's TLS to swap a secret in) lost the tail of large answers when the server closed first.
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="warning", loop="asyncio",
                access_log=False, timeout_graceful_shutdown=5, ws_max_size=MAX_FRAME + 4096, ws_max_queue=4)
    return 0


def cmd_team_create(args: argparse.Namespace) -> int:
    from hutch.server.config import ServerConfig
    from hutch.store import Store

    store = Store(ServerConfig(data_dir=args.data_dir).db_url)
    if store.team_by_name(args.name):
        print(f"a team named {args.name!r} exists already", file=sys.stderr)
        return 1
    key = store.create_api_key(store.create_team(args.name), e2b=args.e2b)
    print(json.dumps({"team": args.name, "api_key": key}) if args.json else key)
    return 0


# --- client side ----------------------------------------------------------------------------------

def _client_env(data_dir: Path) -> None:
    """Fill HUTCH_API_KEY and HUTCH_BASE_URL from the local server's client.env when unset."""
    env_file = data_dir / CLIENT_ENV
    if os.environ.get("HUTCH_API_KEY") or not env_file.exists():
        return
    try:
        lines = env_file.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        key, _, value = line.partition("=")
        if key in ("HUTCH_API_KEY", "HUTCH_BASE_URL"):
            os.environ.setdefault(key, value)


def _pairs(items: Sequence[str] | None, what: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"hutch: {what} must be KEY=VALUE, not {item!r}")
        result[key] = value
    return result


def _info_json(info: SandboxInfo | ProcessInfo | NetworkLogEntry | SecretInfo | SecretAuditEntry | Provider
               | TemplateInfo | BuildInfo | BuildLogLine) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(asdict(info), default=str))
    if isinstance(info, TemplateInfo):  # as the HTTP API spells it
        data["steps"] = [step_body(step) for step in info.steps]
        data = {("from" if k == "from_" else k): v for k, v in data.items()}
    return data


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [header, *rows])


def cmd_create(args: argparse.Namespace) -> int:
    network = NetworkConfig(allow_out=args.allow_out or [], deny_out=args.deny_out or []) \
        if args.allow_out or args.deny_out else None
    sb = Sandbox.create(args.name, from_template=args.template, timeout_seconds=args.timeout,
                        metadata=_pairs(args.metadata, "--metadata") or None, env_vars=_pairs(args.env, "--env") or None,
                        network=network, secrets=_pairs(args.secret, "--secret") or None)
    info = sb.get_info()
    sb.close()
    print(json.dumps(_info_json(info)) if args.json else info.id)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    boxes = Sandbox.list(metadata=_pairs(args.metadata, "--metadata") or None, status=args.status)
    if args.json:
        print(json.dumps([_info_json(b) for b in boxes]))
        return 0
    rows = [[b.id, b.name, b.status, b.template, b.created_at.strftime("%Y-%m-%d %H:%M:%S"),
             ",".join(f"{k}={v}" for k, v in b.metadata.items())] for b in boxes]
    print(_table(rows, ["ID", "NAME", "STATUS", "TEMPLATE", "CREATED", "METADATA"]))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    info = sb.get_info()
    sb.close()
    data = _info_json(info)
    if args.json:
        print(json.dumps(data))
    else:
        print("\n".join(f"{k:<20} {v}" for k, v in data.items()))
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    command = args.command
    if not command:
        raise SystemExit("hutch: exec needs a command after --")
    import shlex

    line = command[0] if len(command) == 1 else shlex.join(command)
    sb = Sandbox.connect(args.id)
    try:
        result = sb.commands.run(
            line, cwd=args.cwd, env=_pairs(args.env, "--env") or None, timeout_seconds=args.timeout, user=args.user,
            on_stdout=None if args.json else lambda d: (sys.stdout.write(d), sys.stdout.flush()),
            on_stderr=None if args.json else lambda d: (sys.stderr.write(d), sys.stderr.flush()))
    finally:
        sb.close()
    if args.json:
        print(json.dumps(asdict(result)))
    return result.exit_code if 0 <= result.exit_code < 256 else 1


def cmd_shell(args: argparse.Namespace) -> int:
    import asyncio

    from hutch.shell import run_shell

    if not os.isatty(sys.stdin.fileno()) and not args.command:
        raise SystemExit("hutch: shell needs a terminal (or a command after --)")
    import shlex

    line = None if not args.command else args.command[0] if len(args.command) == 1 else shlex.join(args.command)
    code = asyncio.run(run_shell(args.id, line, args.user))
    return code if 0 <= code < 256 else 1


def cmd_netlog(args: argparse.Namespace) -> int:
    page = Sandbox.get_network_log_by_id(args.id, limit=args.limit)  # no resume: a paused box's log reads too
    if args.json:
        print(json.dumps([_info_json(e) for e in page.entries]))
        return 0
    rows = [[e.at.strftime("%H:%M:%S"), f"{e.host}:{e.port}", e.ip or "-", e.verdict, e.rule,
             str(e.bytes_out), str(e.bytes_in)] for e in page.entries]
    print(_table(rows, ["TIME", "DESTINATION", "ADDRESS", "VERDICT", "RULE", "OUT", "IN"]))
    return 0


def _secret_value(args: argparse.Namespace) -> str:
    """Never from the command line, where `ps` shows it: a variable named by --from-env, else stdin."""
    if args.from_env:
        value = os.environ.get(args.from_env)
        if not value:
            raise SystemExit(f"hutch: ${args.from_env} is not set")
        return value
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("secret value: ")
    return sys.stdin.read().rstrip("\r\n")


def cmd_secret(args: argparse.Namespace) -> int:
    if args.action != "ls" and not args.name:
        raise SystemExit(f"hutch: secret {args.action} needs a secret name")
    if args.action == "create":
        secret = Secret.create(args.name, _secret_value(args), provider=args.provider,
                               allowed_hosts=args.allowed_host or None,
                               auth={"header": args.header, "format": args.format} if args.header else None)
        print(json.dumps(_info_json(secret.info)) if args.json else f"created {secret.name}")
    elif args.action == "rotate":
        secret = Secret.get(args.name)
        secret.rotate(_secret_value(args))
        print(json.dumps(_info_json(secret.info)) if args.json else f"rotated {secret.name} (version {secret.version})")
    elif args.action == "rm":
        Secret.delete_by_name(args.name)
        if not args.json:
            print(f"deleted {args.name}")
    elif args.action == "ls":
        secrets = Secret.list()
        if args.json:
            print(json.dumps([_info_json(s.info) for s in secrets]))
        else:
            rows = [[s.name, s.provider or "-", ",".join(s.allowed_hosts), f"{s.auth.header}: {s.auth.format}",
                     str(s.version)] for s in secrets]
            print(_table(rows, ["NAME", "PROVIDER", "HOSTS", "AUTH", "VERSION"]))
    elif args.action == "audit":
        page = Secret.audit_by_name(args.name, limit=args.limit, sandbox_id=args.sandbox)
        if args.json:
            print(json.dumps([_info_json(e) for e in page.entries]))
        else:
            rows = [[e.at.strftime("%Y-%m-%d %H:%M:%S"), e.sandbox_id, e.env, e.host, e.method, e.path,
                     str(e.status or "-")] for e in page.entries]
            print(_table(rows, ["TIME", "SANDBOX", "ENV", "HOST", "METHOD", "PATH", "STATUS"]))
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    try:
        if args.port is None:
            ports = sb.list_preview_ports()
            if args.json:
                print(json.dumps([json.loads(json.dumps(asdict(p), default=str)) for p in ports]))
            else:
                print(_table([[str(p.port), p.access, p.url] for p in ports], ["PORT", "ACCESS", "URL"]))
            return 0
        if args.private:
            sb.publish_preview_port(args.port, access="private")
            out = sb.get_signed_preview_url(args.port, expires_in_seconds=args.expires)
        else:
            if args.publish:
                sb.publish_preview_port(args.port, access="public")
            out = sb.get_preview_url(args.port)
    finally:
        sb.close()
    print(json.dumps({"url": out}) if args.json else out)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from hutch.integrations.mcp_server import IsolationError, serve

    try:
        serve(args.listen, os.environ.get("HUTCH_MCP_TOKEN"), args.ephemeral)
    except IsolationError as e:
        print(f"hutch: {e}: refusing to serve", file=sys.stderr)
        return 1
    return 0


def cmd_providers(args: argparse.Namespace) -> int:
    providers = Provider.list()
    if args.json:
        print(json.dumps([_info_json(p) for p in providers]))
        return 0
    rows = [[p.name, p.env, ",".join(p.allowed_hosts), f"{p.auth.header}: {p.auth.format}"] for p in providers]
    print(_table(rows, ["PROVIDER", "ENV", "HOSTS", "AUTH"]))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    page = Sandbox.get_audit_log_by_id(args.id, limit=args.limit)
    if args.json:
        print(json.dumps([json.loads(json.dumps(asdict(e), default=str)) for e in page.entries]))
        return 0
    rows = [[e.at.strftime("%Y-%m-%d %H:%M:%S"), e.actor, e.op, "-" if e.exit_code is None else str(e.exit_code),
             e.outcome, e.detail.replace("\n", " ")[:80]] for e in page.entries]
    print(_table(rows, ["TIME", "WHO", "OP", "EXIT", "OUTCOME", "WHAT"]))
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    sb = Sandbox.connect(args.id)
    try:
        procs = sb.commands.list()
    finally:
        sb.close()
    if args.json:
        print(json.dumps([_info_json(p) for p in procs]))
        return 0
    rows = [[str(p.pid), p.user, "yes" if p.pty else "no", p.started_at.strftime("%Y-%m-%d %H:%M:%S"),
             p.command.replace("\n", " ")[:80]] for p in procs]
    print(_table(rows, ["PID", "USER", "TTY", "STARTED", "COMMAND"]))
    return 0


def cmd_cp(args: argparse.Namespace) -> int:
    def split(spec: str) -> tuple[str | None, str]:
        box, sep, path = spec.partition(":")
        return (box, path) if sep and path.startswith("/") else (None, spec)

    (src_box, src), (dst_box, dst) = split(args.src), split(args.dst)
    if (src_box is None) == (dst_box is None):
        raise SystemExit("hutch: cp copies between this machine and a sandbox: one side must be ID:/path")
    if src_box:
        sb = Sandbox.connect(src_box)
        try:
            data = sb.files.read(src)
        finally:
            sb.close()
        if dst == "-":
            sys.stdout.buffer.write(data)
        else:
            Path(dst).write_bytes(data)
    else:
        assert dst_box is not None
        data = sys.stdin.buffer.read() if src == "-" else Path(src).read_bytes()
        sb = Sandbox.connect(dst_box)
        try:
            sb.files.write(dst, data)
        finally:
            sb.close()
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    for sandbox_id in args.ids:
        Sandbox.kill_by_id(sandbox_id)
        if not args.json:
            print(f"killed {sandbox_id}")
    return 0


# --- templates ------------------------------------------------------------------------------------

class _Step(argparse.Action):
    """Appends (kind, value) to one list, so --run, --env, --workdir and --user keep their order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        steps = [*(getattr(namespace, self.dest) or []), (self.const, values)]  # a new list: defaults are shared
        setattr(namespace, self.dest, steps)


def _steps(pairs: Sequence[tuple[str, str]] | None) -> list[RunStep | EnvStep | WorkdirStep | UserStep]:
    steps: list[RunStep | EnvStep | WorkdirStep | UserStep] = []
    for kind, value in pairs or []:
        if kind == "run":
            steps.append(RunStep(value))
        elif kind == "env":
            ((key, val),) = _pairs([value], "--env").items()
            steps.append(EnvStep(key, val))
        elif kind == "workdir":
            steps.append(WorkdirStep(value))
        else:
            steps.append(UserStep(value))
    return steps


def _print_log_line(line: BuildLogLine) -> None:
    """Build output goes to stderr as it comes, so that stdout holds only the result."""
    sys.stderr.write(line.text if line.text.endswith("\n") else line.text + "\n")
    sys.stderr.flush()


def _wait(template: Template, args: argparse.Namespace) -> int:
    """Wait for the latest build unless --no-wait; print the template's id (or JSON), exit 1 if it failed."""
    if not args.no_wait:
        try:
            template.wait_until_ready(on_log=None if args.json else _print_log_line)
        except BuildError as e:
            # numbered from 1, as the log's "step 2/3" lines say
            where = "" if e.step is None else f" at step {e.step + 1}" + ("" if e.exit_code is None else
                                                                          f" (exit code {e.exit_code})")
            if args.json:
                print(json.dumps({"error": {"code": e.code, "message": e.message, "build_id": e.build_id,
                                            "step": e.step, "exit_code": e.exit_code}}), file=sys.stderr)
            else:
                print(f"hutch: build {e.build_id} of {template.name} failed{where}: {e.message} ({e.code})",
                      file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"\nhutch: stopped waiting; the build goes on (hutch template cancel {template.name} stops it)",
                  file=sys.stderr)
            raise
    print(json.dumps(_info_json(template.info)) if args.json else template.id)
    return 0


def cmd_template_create(args: argparse.Namespace) -> int:
    template = Template.create(args.name, from_=args.from_, steps=_steps(args.steps), start_cmd=args.start_cmd,
                               ready_cmd=args.ready_cmd, ready_timeout_seconds=args.ready_timeout, vcpu=args.vcpu,
                               memory_mib=args.memory, disk_mib=args.disk)
    return _wait(template, args)


def cmd_template_rebuild(args: argparse.Namespace) -> int:
    template = Template.get(args.name)
    template.rebuild(no_cache=args.no_cache)
    return _wait(template, args)


def cmd_template_ls(args: argparse.Namespace) -> int:
    templates = Template.list()
    if args.json:
        print(json.dumps([_info_json(t.info) for t in templates]))
        return 0
    rows = [[t.id, t.name, t.status, t.info.from_ or "-", "-" if t.latest_build is None else t.latest_build.status,
             f"{t.info.vcpu}/{t.info.memory_mib}/{t.info.disk_mib}", t.info.created_at.strftime("%Y-%m-%d %H:%M:%S")]
            for t in templates]
    print(_table(rows, ["ID", "NAME", "STATUS", "FROM", "LAST BUILD", "VCPU/MEM/DISK", "CREATED"]))
    return 0


def cmd_template_rm(args: argparse.Namespace) -> int:
    for name in args.names:
        Template.delete_by_name(name)
        if not args.json:
            print(f"deleted {name}")
    return 0


def cmd_template_logs(args: argparse.Namespace) -> int:
    template = Template.get(args.name)
    for line in template.stream_build_logs(args.build, follow=not args.no_follow):
        if args.json:
            print(json.dumps(_info_json(line)), flush=True)
        else:
            sys.stdout.write(line.text if line.text.endswith("\n") else line.text + "\n")
            sys.stdout.flush()
    return 0


def cmd_template_builds(args: argparse.Namespace) -> int:
    builds = Template.get(args.name).list_builds()
    if args.json:
        print(json.dumps([_info_json(b) for b in builds]))
        return 0

    def when(b: BuildInfo) -> str:
        return "-" if b.finished_at is None else b.finished_at.strftime("%Y-%m-%d %H:%M:%S")

    rows = [[b.id, b.status, f"{b.steps_cached}/{b.steps_total}", b.created_at.strftime("%Y-%m-%d %H:%M:%S"), when(b),
             "-" if b.error is None else b.error.code + ("" if b.error.step is None else f" (step {b.error.step + 1})")]
            for b in builds]
    print(_table(rows, ["ID", "STATUS", "CACHED", "CREATED", "FINISHED", "ERROR"]))
    return 0


def cmd_template_cancel(args: argparse.Namespace) -> int:
    build = Template.get(args.name).cancel_build(args.build)
    print(json.dumps(_info_json(build)) if args.json else f"cancelled {build.id}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hutch", description="Self-hosted gVisor sandboxes for AI agents.")
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="server state (default %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the server")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    s.add_argument("--warm-pool", type=int, default=2, metavar="N",
                   help="base-template boxes kept booted so creates are instant (default %(default)s; 0: none)")
    s.add_argument("--max-sandboxes", type=int, default=256, metavar="N",
                   help="running sandboxes this node takes before it answers 429 (default %(default)s)")
    s.add_argument("--team-max-sandboxes", type=int, default=64, metavar="N",
                   help="running sandboxes one team may have (default %(default)s)")
    s.add_argument("--egress-hosts", type=Path, metavar="FILE",
                   help="an /etc/hosts-style map the egress proxy resolves names with before DNS")
    s.add_argument("--egress-no-system-dns", action="store_true",
                   help="resolve boxes' destinations only with --egress-hosts (others fail)")
    s.add_argument("--trust-ca", action="append", type=Path, metavar="PEM",
                   help="a CA certificate boxes and the secret-swapping proxy trust beyond the host's store "
                        "(a TLS-inspecting proxy's, say; repeatable)")
    s.add_argument("--preview-port", type=int, default=7424, metavar="P",
                   help="where preview URLs are served (default %(default)s)")
    s.add_argument("--preview-domain", default="localhost",
                   help="preview URLs are http://PORT-ID.DOMAIN:P (default %(default)s: this machine's browsers)")
    s.add_argument("--preview-https", action="store_true",
                   help="a TLS proxy on 443 fronts the preview port: URLs say https, cookies are Secure")
    s.add_argument("--max-builds", type=int, default=2, help="template builds run at once (default %(default)s)")
    s.add_argument("--image-dir", type=Path, action="append", metavar="DIR",
                   help="a directory templates may import local OCI images from (repeatable; "
                        "default: <data dir>/images)")
    s.add_argument("--registry-pulls", action="store_true",
                   help="let templates pull images from registries (docker://...) over the host's network")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("build-base", help="build the base template (Debian) if it is not built")
    s.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    s.set_defaults(fn=cmd_build_base)

    s = sub.add_parser("team-create", help="make a team and print its API key (on the server machine)")
    s.add_argument("name")
    s.add_argument("--e2b", action="store_true",
                   help="an E2B-shaped key (e2b_<hex>), for the e2b SDK at E2B_API_URL=<server>/e2b")
    s.set_defaults(fn=cmd_team_create)

    s = sub.add_parser("create", help="create a sandbox and print its id")
    s.add_argument("--name", default="cli")
    s.add_argument("--template", help="the template to boot from, by name or id (default hutch/base)")
    s.add_argument("--timeout", type=int, help="seconds of activity before it pauses")
    s.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE")
    s.add_argument("--env", "-e", action="append", metavar="KEY=VALUE")
    s.add_argument("--allow-out", action="append", metavar="CIDR|DOMAIN", help="egress allow rule (repeatable)")
    s.add_argument("--deny-out", action="append", metavar="CIDR", help="egress deny rule (repeatable)")
    s.add_argument("--secret", "-s", action="append", metavar="ENV=SECRET",
                   help="bind a secret to an env var: the box sees only a stand-in (repeatable)")
    s.set_defaults(fn=cmd_create)

    s = sub.add_parser("template", help="templates sandboxes boot from: create, ls, rm, logs, builds, rebuild, cancel")
    tsub = s.add_subparsers(dest="template_cmd", required=True)
    t = tsub.add_parser("create", help="build a template: steps run in the order given; waits for the build")
    t.add_argument("name")
    t.add_argument("--from", dest="from_", default="hutch/base", metavar="SRC",
                   help="hutch/base (default), a template, docker://REF (if the server pulls), or an image in "
                        "a directory the server reads them from: oci-archive:/PATH.tar, docker-archive:/PATH.tar, "
                        "oci:/DIR[:TAG]")
    t.add_argument("--run", dest="steps", action=_Step, const="run", metavar="CMD", help="run a command (repeatable)")
    t.add_argument("--env", dest="steps", action=_Step, const="env", metavar="KEY=VALUE",
                   help="set a variable for later steps and the boxes (repeatable)")
    t.add_argument("--workdir", dest="steps", action=_Step, const="workdir", metavar="DIR",
                   help="the directory later steps and the boxes start in (repeatable)")
    t.add_argument("--user", dest="steps", action=_Step, const="user", metavar="NAME",
                   help="user or root: who later steps and the boxes' commands run as (repeatable)")
    t.add_argument("--start-cmd", metavar="CMD", help="a long-running process started in every box")
    t.add_argument("--ready-cmd", metavar="CMD", help="polled until it exits 0 before a box is handed out")
    t.add_argument("--ready-timeout", type=int, metavar="SECONDS", help="how long --ready-cmd may take (1-3600)")
    t.add_argument("--vcpu", type=int, metavar="N", help="the boxes' vCPUs (1-4)")
    t.add_argument("--memory", type=int, metavar="MIB", help="the boxes' memory (256-4096)")
    t.add_argument("--disk", type=int, metavar="MIB", help="the boxes' disk (1024-8192)")
    t.add_argument("--no-wait", action="store_true", help="return once the build is queued")
    t.set_defaults(fn=cmd_template_create)

    t = tsub.add_parser("ls", help="list templates (the team's and the system ones)")
    t.set_defaults(fn=cmd_template_ls)

    t = tsub.add_parser("rm", help="delete templates (not while boxes or builds use them)")
    t.add_argument("names", nargs="+", metavar="NAME")
    t.set_defaults(fn=cmd_template_rm)

    t = tsub.add_parser("logs", help="a build's log (default: the latest build), followed to its end")
    t.add_argument("name")
    t.add_argument("--build", metavar="ID")
    t.add_argument("--no-follow", action="store_true", help="print what was logged so far and stop")
    t.set_defaults(fn=cmd_template_logs)

    t = tsub.add_parser("builds", help="a template's builds, newest first")
    t.add_argument("name")
    t.set_defaults(fn=cmd_template_builds)

    t = tsub.add_parser("rebuild", help="build a template again from its spec; waits for the build")
    t.add_argument("name")
    t.add_argument("--no-cache", action="store_true", help="run every step again")
    t.add_argument("--no-wait", action="store_true", help="return once the build is queued")
    t.set_defaults(fn=cmd_template_rebuild)

    t = tsub.add_parser("cancel", help="stop a build (default: the latest)")
    t.add_argument("name")
    t.add_argument("--build", metavar="ID")
    t.set_defaults(fn=cmd_template_cancel)

    s = sub.add_parser("secret", help="manage secrets: create, ls, rotate, rm, audit")
    s.add_argument("action", choices=["create", "ls", "rotate", "rm", "audit"])
    s.add_argument("name", nargs="?")
    s.add_argument("--provider", help="anthropic, openai, ... (hutch providers)")
    s.add_argument("--allowed-host", action="append", metavar="DOMAIN", help="where it may be sent (repeatable)")
    s.add_argument("--header", help="the header clients send it in (default: the provider's, else authorization)")
    s.add_argument("--format", default="{value}", help='the header value, "{value}" for the secret (e.g. "Bearer {value}")')
    s.add_argument("--from-env", metavar="VAR", help="read the value from this variable (default: stdin)")
    s.add_argument("--sandbox", help="audit: only this sandbox's requests")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_secret)

    s = sub.add_parser("preview", help="a box's preview URLs: hutch preview ID [PORT [--publish | --private]]")
    s.add_argument("id")
    s.add_argument("port", type=int, nargs="?")
    s.add_argument("--publish", action="store_true", help="publish the port, public")
    s.add_argument("--private", action="store_true", help="publish the port, private, and print a signed link")
    s.add_argument("--expires", type=int, default=3600, metavar="SECONDS", help="the signed link's life (default 1 h)")
    s.set_defaults(fn=cmd_preview)

    s = sub.add_parser("mcp", help="an MCP server of hutch's sandboxes: hutch mcp serve [--listen HOST:PORT]")
    s.add_argument("action", choices=["serve"])
    s.add_argument("--listen", metavar="HOST:PORT",
                   help="streamable HTTP at /mcp instead of stdio; clients send Authorization: Bearer $HUTCH_MCP_TOKEN")
    s.add_argument("--ephemeral", action="store_true",
                   help="one tool, sandbox_exec, each call in a fresh box deleted afterwards (fails closed)")
    s.set_defaults(fn=cmd_mcp)

    s = sub.add_parser("providers", help="services a secret can name as its provider")
    s.set_defaults(fn=cmd_providers)

    s = sub.add_parser("ls", help="list sandboxes")
    s.add_argument("--status")
    s.add_argument("--metadata", "-m", action="append", metavar="KEY=VALUE")
    s.set_defaults(fn=cmd_ls)

    s = sub.add_parser("info", help="show a sandbox")
    s.add_argument("id")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("exec", help="run a command in a sandbox: hutch exec ID -- CMD ...")
    s.add_argument("id")
    s.add_argument("--cwd")
    s.add_argument("--env", "-e", action="append", metavar="KEY=VALUE")
    s.add_argument("--timeout", type=float)
    s.add_argument("--user", choices=["user", "root"])
    s.add_argument("command", nargs="*", help="everything after --")
    s.set_defaults(fn=cmd_exec)

    s = sub.add_parser("shell", help="an interactive terminal in a sandbox: hutch shell ID [-- CMD ...]")
    s.add_argument("id")
    s.add_argument("--user", choices=["user", "root"])
    s.add_argument("command", nargs="*", help="everything after -- (default: a login shell)")
    s.set_defaults(fn=cmd_shell)

    s = sub.add_parser("netlog", help="a sandbox's network log: every connection it tried, newest first")
    s.add_argument("id")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_netlog)

    s = sub.add_parser("audit", help="a sandbox's audit log: every command and file operation, newest first")
    s.add_argument("id")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(fn=cmd_audit)

    s = sub.add_parser("ps", help="the processes spawned in a sandbox that still run")
    s.add_argument("id")
    s.set_defaults(fn=cmd_ps)

    s = sub.add_parser("cp", help="copy a file: hutch cp LOCAL ID:/path, or hutch cp ID:/path LOCAL ('-' is stdio)")
    s.add_argument("src")
    s.add_argument("dst")
    s.set_defaults(fn=cmd_cp)

    s = sub.add_parser("kill", help="delete sandboxes")
    s.add_argument("ids", nargs="+")
    s.set_defaults(fn=cmd_kill)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first `--` is the command, whatever options it holds
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser().parse_args(argv[: len(argv) - len(rest) - 1] if "--" in argv else argv)
    if args.cmd in ("exec", "shell") and rest:
        args.command = rest
    if args.cmd not in ("serve", "build-base", "team-create"):
        _client_env(args.data_dir)
    try:
        code: int = args.fn(args)
        return code
    except SandboxError as e:
        if args.json:
            print(json.dumps({"error": {"code": e.code, "message": e.message, "status_code": e.status_code}}),
                  file=sys.stderr)
        else:
            print(f"hutch: {e.message} ({e.code})", file=sys.stderr)
        return 124 if e.code == "command_timeout" else 1  # 124, as timeout(1) does
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hutch template logs NAME | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141


if __name__ == "__main__":
    sys.exit(main())
