"""Bring a template built on a single-host hutch into a fleet (a fleet does not build them yet).

A built template is a record (its spec, env, workdir, user) and a root directory. This copies the
root into the fleet's shared directory, `DIR/templates/<the root's key>/rootfs`, which every node
boots from, and writes the record into the fleet's store for the team of the same name, pointing
at the copy. A template whose build wrote nothing boots from the base, which every node has.
Run as root (the root's files keep their owners) where the shared directory is mounted, with
hutch's virtual environment, and the single host's server stopped or idle:

    PGPASSWORD=... /opt/hutch/.venv/bin/python deploy/import_template.py \\
        --source sqlite:////var/lib/hutch/hutch.db --fleet postgresql://hutch@10.0.0.11/hutch \\
        --shared /srv/hutch-shared [--team default] NAME...

Importing again under the same name needs the fleet's copy deleted first (`hutch template rm`);
a deleted template's root stays in DIR/templates until removed by hand.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from hutch.services.system_templates import BASE_TEMPLATE_ID
from hutch.store import Store, TemplateRecord


class CannotImport(Exception):
    """A template that cannot be brought over, and why."""


def import_template(source: Store, fleet: Store, shared: Path, team: str, name: str) -> TemplateRecord:
    src_team, dst_team = source.team_by_name(team), fleet.team_by_name(team)
    if src_team is None or dst_team is None:
        raise CannotImport(f"no team named {team!r} in the {'source' if src_team is None else 'fleet'}'s store")
    rec = source.get_template(name, src_team)
    if rec is None or rec.team_id is None:
        raise CannotImport(f"team {team!r} has no template {name!r} of its own in the source's store")
    if rec.rootfs is None:
        raise CannotImport(f"template {name!r} has no good build to bring over")
    if fleet.get_template(name, dst_team) is not None:
        raise CannotImport(f"the fleet's team {team!r} has a template {name!r} already")
    base, fleet_base = source.get_template(BASE_TEMPLATE_ID), fleet.get_template(BASE_TEMPLATE_ID)
    if base is not None and rec.rootfs == base.rootfs:
        if fleet_base is None or fleet_base.rootfs is None:
            raise CannotImport("the fleet's store has no base template yet: start a fleet member first")
        rootfs = Path(fleet_base.rootfs)  # the nodes' own base, at their cache dir
    else:
        rootfs = copy_root(Path(rec.rootfs), shared / "templates")
    copy = TemplateRecord(id=str(uuid.uuid4()), team_id=dst_team, name=rec.name, spec=rec.spec, rootfs=str(rootfs),
                          build_id=None, env=rec.env, workdir=rec.workdir, user=rec.user)
    try:
        fleet.put_template(copy)
    except KeyError:
        raise CannotImport(f"the fleet's team {team!r} has a template {name!r} already") from None
    return copy


def copy_root(rootfs: Path, templates: Path) -> Path:
    """`<key>/rootfs` into the shared templates directory, whole or not at all (a partial copy
    is renamed into place only once complete); one already there is used as it is."""
    if rootfs.name != "rootfs" or not rootfs.is_dir():
        raise CannotImport(f"{rootfs} is not a template root on this machine")
    final = templates / rootfs.parent.name
    if (final / "rootfs").is_dir():
        return final / "rootfs"
    templates.mkdir(parents=True, exist_ok=True)
    partial = templates / f"{rootfs.parent.name}.partial-import"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        # cp -a: owners, modes, links, times and what xattrs the share keeps
        subprocess.run(["cp", "-a", "--", str(rootfs), str(partial / "rootfs")], check=True)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final / "rootfs"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--source", required=True, help="the single host's store (sqlite:////var/lib/hutch/hutch.db)")
    p.add_argument("--fleet", required=True, help="the fleet's store (postgresql://user@host/db)")
    p.add_argument("--shared", required=True, type=Path, help="the fleet's shared directory, mounted here")
    p.add_argument("--team", default="default", help="the team, by name, in both stores (default %(default)s)")
    p.add_argument("names", nargs="+", metavar="NAME")
    args = p.parse_args(argv)
    source, fleet = Store(args.source), Store(args.fleet)
    failed = 0
    for name in args.names:
        try:
            rec = import_template(source, fleet, args.shared, args.team, name)
        except (CannotImport, subprocess.CalledProcessError, OSError) as e:
            print(f"{name}: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {rec.rootfs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
