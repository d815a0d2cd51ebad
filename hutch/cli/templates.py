"""Templates sandboxes boot from: template create, ls, rm, logs, builds, rebuild and cancel."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from hutch.cli.shared import EXIT_FAILURE, Subparsers, info_json, pairs, table
from hutch.sdk import BuildError, BuildInfo, BuildLogLine, EnvStep, RunStep, Template, UserStep, WorkdirStep


class _Step(argparse.Action):
    """Appends (kind, value) to one list, so --run, --env, --workdir and --user keep their order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        steps = [*(getattr(namespace, self.dest) or []), (self.const, values)]  # a new list: defaults are shared
        setattr(namespace, self.dest, steps)


def add_template(sub: Subparsers) -> None:
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


def _steps(kinds_and_values: Sequence[tuple[str, str]] | None) -> list[RunStep | EnvStep | WorkdirStep | UserStep]:
    steps: list[RunStep | EnvStep | WorkdirStep | UserStep] = []
    for kind, value in kinds_and_values or []:
        if kind == "run":
            steps.append(RunStep(value))
        elif kind == "env":
            ((key, val),) = pairs([value], "--env").items()
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
            return EXIT_FAILURE
        except KeyboardInterrupt:
            print(f"\nhutch: stopped waiting; the build goes on (hutch template cancel {template.name} stops it)",
                  file=sys.stderr)
            raise
    print(json.dumps(info_json(template.info)) if args.json else template.id)
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
        print(json.dumps([info_json(t.info) for t in templates]))
        return 0
    rows = [[t.id, t.name, t.status, t.info.from_ or "-", "-" if t.latest_build is None else t.latest_build.status,
             f"{t.info.vcpu}/{t.info.memory_mib}/{t.info.disk_mib}", t.info.created_at.strftime("%Y-%m-%d %H:%M:%S")]
            for t in templates]
    print(table(rows, ["ID", "NAME", "STATUS", "FROM", "LAST BUILD", "VCPU/MEM/DISK", "CREATED"]))
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
            print(json.dumps(info_json(line)), flush=True)
        else:
            sys.stdout.write(line.text if line.text.endswith("\n") else line.text + "\n")
            sys.stdout.flush()
    return 0


def cmd_template_builds(args: argparse.Namespace) -> int:
    builds = Template.get(args.name).list_builds()
    if args.json:
        print(json.dumps([info_json(b) for b in builds]))
        return 0

    def when(b: BuildInfo) -> str:
        return "-" if b.finished_at is None else b.finished_at.strftime("%Y-%m-%d %H:%M:%S")

    rows = [[b.id, b.status, f"{b.steps_cached}/{b.steps_total}", b.created_at.strftime("%Y-%m-%d %H:%M:%S"), when(b),
             "-" if b.error is None else b.error.code + ("" if b.error.step is None else f" (step {b.error.step + 1})")]
            for b in builds]
    print(table(rows, ["ID", "STATUS", "CACHED", "CREATED", "FINISHED", "ERROR"]))
    return 0


def cmd_template_cancel(args: argparse.Namespace) -> int:
    build = Template.get(args.name).cancel_build(args.build)
    print(json.dumps(info_json(build)) if args.json else f"cancelled {build.id}")
    return 0
