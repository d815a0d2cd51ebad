"""Issue 19's judge, the rest of it: templates built on any node boot on every node, and secrets,
egress rules and the audit log apply on every node, whichever API server is asked.

A fleet of its own (cluster.py: PostgreSQL, a Ray head, nodes a, b and c, API servers 0 and 1),
so test_fleet.py's destructive tests never meet these. Each node offers 4 vcpu, and the templates
here make 4-vcpu boxes: a box fills a node, so three boxes of a template land one on each node,
whatever Ray's placement prefers. Which node builds is the store's `template_builds.node` (the API
does not say; the build's log does, in its first line), read from the fleet's PostgreSQL.
"""

from __future__ import annotations

import os
import secrets as random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hutch import BuildError, ConflictError, NetworkConfig, RunStep, Sandbox, Secret, Template
from hutch.sdk.types import BuildLogLine
from hutch.store import Store
from tests.fleet.cluster import Fleet
from tests.integration.support import wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(600)]

NODES = ("a", "b", "c")
VCPU = 4  # a whole node's (Fleet(vcpu=4) below): a box of these templates fills a node
STEP_FILE = "/srv/made-by-step"
MARK = "written-by-step-0"
# The sleep outlasts a node's orphan sweep (a box no sandbox claims is stopped after 60 s, looked
# at every 30 s): a build box is no sandbox's, and must be spared.
STEPS = [RunStep(run=f"echo {MARK} > {STEP_FILE} && echo wrote"), RunStep(run="echo sleeping && sleep 90 && echo slept")]
# An address the node's egress proxy refuses by the box's own rules: the proxy answers 403 itself
# and connects nowhere (and a node's namespace has no route off the fleet's bridge anyway).
NOWHERE = "198.51.100.7"
DENY_ALL = NetworkConfig(deny_out=["0.0.0.0/0"])


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0:
        pytest.skip("a fleet needs root (network namespaces, runsc): scripts/test --fleet runs as root")
    # placement_wait: a create right after a kill may wait a moment for the room Ray gives back
    with Fleet(node_names=NODES, apis=2, vcpu=VCPU, memory_mib=4096, placement_wait=30) as f:
        yield f


@pytest.fixture(scope="module")
def store(fleet: Fleet) -> Iterator[Store]:
    """The fleet's PostgreSQL, read as a test looks behind the API (which node builds)."""
    s = Store(fleet.store_url)
    yield s
    s.engine.dispose()


@pytest.fixture(scope="module")
def slow(fleet: Fleet) -> Template:
    """A 4-vcpu template whose second step sleeps 90 s, created (queued) through API server 0."""
    return Template.create("slow", steps=STEPS, vcpu=VCPU, memory_mib=1024, **fleet.client_args(0))


@pytest.fixture(scope="module")
def wide(fleet: Fleet) -> Template:
    """A 4-vcpu template of no steps (quick to build), for boxes one on each node."""
    template = Template.create("wide", vcpu=VCPU, memory_mib=1024, **fleet.client_args(0))
    template.wait_until_ready(timeout_seconds=300)
    return template


# --- helpers --------------------------------------------------------------------------------------

@dataclass
class Follower:
    """A build's log followed in a thread (through one API server), so the test can act meanwhile."""

    template: Template
    build_id: str
    lines: list[BuildLogLine] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        try:
            for line in self.template.stream_build_logs(self.build_id, follow=True):
                self.lines.append(line)
        except BaseException as e:  # told to the test
            self.error = e
        finally:
            self.done.set()

    def texts(self) -> list[str]:
        """The log's lines (an entry may hold a few)."""
        return [t for x in list(self.lines) for t in x.text.split("\n")]

    def step_texts(self, step: int) -> list[str]:
        return [t for x in list(self.lines) if x.step == step for t in x.text.split("\n")]

    def wait_text(self, text: str, timeout: float) -> None:
        wait_for(lambda: text in self.texts() or self.done.is_set(), timeout, f"{text!r} in the build's log")
        assert text in self.texts(), (self.error, self.texts())

    def wait_end(self, timeout: float) -> None:
        """Until the stream ends by itself (the server ended it: the build ended)."""
        assert self.done.wait(timeout), f"the log stream did not end within {timeout:g} s: {self.texts()[-5:]}"
        assert self.error is None, self.error


def build_boxes(fleet: Fleet, build_id: str) -> dict[str, list[str]]:
    """Each node's build boxes of this build: the directories its Node keeps them in."""
    prefix = f"build-{build_id[:12]}-"
    return {name: sorted(p.name for p in (node.run_dir / "boxes").glob(prefix + "*")) for name, node in fleet.nodes.items()}


def box_processes(fleet: Fleet, node: str, key: str) -> list[int]:
    """The node's processes (runsc's) that name a box's key."""
    found = []
    for pid in fleet.node(node).pids():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if key in cmdline:
            found.append(pid)
    return found


@dataclass(frozen=True)
class Placed:
    box: Sandbox
    api: int  # the API server that made it

    @property
    def other(self) -> int:
        return 1 - self.api


@contextmanager
def one_on_each_node(fleet: Fleet, template: Template, apis: Sequence[int], **create: Any) -> Iterator[dict[str, Placed]]:
    """A box of a 4-vcpu template on each node (a box fills a node), made through `apis` in turn;
    killed at the end."""
    made: list[Placed] = []
    try:
        for n in range(len(NODES)):
            api = apis[n % len(apis)]
            made.append(Placed(Sandbox.create(f"{template.name}-{n}", from_template=template.name, **create,
                                              **fleet.client_args(api)), api))
        where = {p.box.get_info().node or "": p for p in made}
        assert sorted(where) == sorted(NODES), f"4-vcpu boxes on 4-vcpu nodes, not one per node: {sorted(where)}"
        yield where
    finally:
        for p in made:
            p.box.kill()


# --- templates ----------------------------------------------------------------------------------

@pytest.mark.timeout(400)
def test_a_template_built_on_one_node_boots_on_every_node(fleet: Fleet, store: Store, slow: Template) -> None:
    assert slow.status == "building" and slow.latest_build is not None
    build_id = slow.latest_build.id
    seen = Template.get("slow", **fleet.client_args(1))  # the other API server knows it at once
    assert seen.id == slow.id and seen.latest_build is not None and seen.latest_build.id == build_id
    follower = Follower(seen, build_id)  # through API server 1, from the build's first line

    follower.wait_text("sleeping", 180)  # in step 1's build box
    record = store.get_build(build_id)
    assert record is not None and record.status == "running" and record.node in NODES, record
    builder = record.node
    running = build_boxes(fleet, build_id)
    assert running == {n: ([f"build-{build_id[:12]}-1"] if n == builder else []) for n in NODES}, running
    assert box_processes(fleet, builder, f"build-{build_id[:12]}-1"), "the build box runs on its node"

    follower.wait_end(240)  # the sleep outlives the node's orphan sweep: the box is spared
    lines = follower.lines
    assert [x.seq for x in lines] == list(range(1, len(lines) + 1)), "every line once, from the first"
    assert lines[0].text == f"running on node {builder}" and lines[0].step is None, lines[0]
    assert "wrote" in follower.step_texts(0), follower.texts()
    assert {"sleeping", "slept"} <= set(follower.step_texts(1)), follower.texts()
    assert lines[-1].step is None and lines[-1].text.startswith("ready: "), lines[-1]
    for api in (0, 1):
        info = Template.get("slow", **fleet.client_args(api))
        assert info.status == "ready" and info.latest_build is not None, info
        assert (info.latest_build.id, info.latest_build.status) == (build_id, "ready")
    done = store.get_build(build_id)
    assert done is not None and (done.status, done.node) == ("ready", builder), done
    assert build_boxes(fleet, build_id) == {n: [] for n in NODES}, "no build box is left anywhere"

    # booted on every node, the builder's and the two others: each sees what step 0 wrote
    with one_on_each_node(fleet, seen, apis=[1]) as placed:
        for node, p in placed.items():
            run = p.box.commands.run(f"cat {STEP_FILE}")
            assert (run.exit_code, run.stdout) == (0, f"{MARK}\n"), (node, run)
            assert p.box.get_info().vcpu_count == VCPU
        rows = {r["name"]: r for r in fleet.node_list(0)}
        assert {n: (r["boxes"], r["vcpu_reserved"]) for n, r in rows.items()} == {n: (1, VCPU) for n in NODES}, rows


@pytest.mark.timeout(300)
def test_a_rebuild_cancelled_through_the_other_server_stops_on_its_node(fleet: Fleet, store: Store,
                                                                       slow: Template) -> None:
    slow.wait_until_ready(timeout_seconds=240)  # test_a_template_built... built it
    rebuild = slow.rebuild(no_cache=True)  # through API server 0; every step runs again
    on_1 = Template.get("slow", **fleet.client_args(1))
    follower = Follower(on_1, rebuild.id)
    follower.wait_text("sleeping", 180)
    record = store.get_build(rebuild.id)
    assert record is not None and record.status == "running" and record.node in NODES, record
    builder = record.node
    key = f"build-{rebuild.id[:12]}-1"
    assert build_boxes(fleet, rebuild.id)[builder] == [key]
    assert box_processes(fleet, builder, key)

    cancelled = Template.get("slow", **fleet.client_args(1)).cancel_build(rebuild.id)
    assert cancelled.status == "cancelled"
    follower.wait_end(30)  # the stream ends once the build does, not after the sleep
    assert "slept" not in follower.texts(), follower.texts()
    assert follower.lines[-1].text == "cancelled", follower.texts()[-5:]

    def box_gone() -> bool:
        return build_boxes(fleet, rebuild.id)[builder] == [] and not box_processes(fleet, builder, key)

    wait_for(box_gone, 30, f"the cancelled build's box to be gone from node {builder}")
    assert build_boxes(fleet, rebuild.id) == {n: [] for n in NODES}
    record = store.get_build(rebuild.id)
    assert record is not None and record.status == "cancelled", record
    with pytest.raises(BuildError) as caught:
        slow.wait_until_ready(timeout_seconds=60)  # through API server 0
    assert caught.value.code == "cancelled"
    with pytest.raises(ConflictError):
        on_1.cancel_build(rebuild.id)  # it has ended
    # the template keeps its last good image, and boots from it
    assert [b.status for b in on_1.list_builds()] == ["cancelled", "ready"]
    assert Template.get("slow", **fleet.client_args(0)).status == "ready"
    box = Sandbox.create("after-cancel", from_template="slow", **fleet.client_args(0))
    try:
        assert box.commands.run(f"cat {STEP_FILE}").stdout == f"{MARK}\n"
    finally:
        box.kill()


# --- egress, the network log and the audit log ---------------------------------------------------

def test_egress_rules_and_both_logs_apply_on_every_node(fleet: Fleet, wide: Template) -> None:
    probe = f"curl -s -D - -o /dev/null --max-time 3 http://{NOWHERE}/"
    with one_on_each_node(fleet, wide, apis=[0, 1], network=DENY_ALL) as placed:
        for node, p in placed.items():
            marker = f"echo made-through-{p.api}-on-{node}"
            assert p.box.commands.run(marker).stdout == f"made-through-{p.api}-on-{node}\n"
            refused = p.box.commands.run(probe, timeout_seconds=60)
            head = refused.stdout.splitlines()
            assert head and head[0].startswith("HTTP/1.1 403"), (node, refused)
            assert "X-Hutch-Egress: deny_out:0.0.0.0/0" in [h.strip() for h in head], (node, refused)

            info = Sandbox.connect(p.box.id, **fleet.client_args(p.other)).get_info()
            assert (info.node, info.network) == (node, NetworkConfig(allow_out=[], deny_out=["0.0.0.0/0"])), info

            def denial(box_id: str = p.box.id, other: int = p.other) -> list[Any]:
                entries = Sandbox.get_network_log_by_id(box_id, **fleet.client_args(other)).entries
                return [e for e in entries if e.host == NOWHERE]

            wait_for(lambda: bool(denial()), 20, f"node {node}'s denial in the network log")
            entries = denial()
            assert len(entries) == 1, entries
            e = entries[0]
            assert (e.port, e.ip, e.verdict, e.rule, e.bytes_out, e.bytes_in) == \
                (80, NOWHERE, "denied", "deny_out:0.0.0.0/0", 0, 0), (node, e)

            audit = Sandbox.get_audit_log_by_id(p.box.id, **fleet.client_args(p.other)).entries
            got = [(a.op, a.detail, a.exit_code, a.outcome) for a in reversed(audit)]
            assert got[:4] == [("exec", marker, None, "ok"), ("exit", marker, 0, "ok"),
                               ("exec", probe, None, "ok"), ("exit", probe, 0, "ok")], (node, got)


# --- secrets ------------------------------------------------------------------------------------

def test_a_secret_is_only_a_stand_in_in_boxes_on_every_node(fleet: Fleet, store: Store, wide: Template) -> None:
    value = "sk-ant-REAL-" + random.token_hex(16)
    secret = Secret.create(f"anthropic-{random.token_hex(4)}", value=value, provider="anthropic",
                           **fleet.client_args(0))
    try:
        bound = {"ANTHROPIC_API_KEY": secret.name}
        with one_on_each_node(fleet, wide, apis=[0], secrets=bound) as placed:
            standins = {}
            for node, p in placed.items():
                standin = p.box.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip()
                assert standin.startswith("hutch_standin_") and value not in standin, (node, standin)
                # the same through the other server, and nowhere in the box's environments
                other = Sandbox.connect(p.box.id, **fleet.client_args(1))
                assert other.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip() == standin
                everything = other.commands.run("env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'", user="root")
                assert standin in everything.stdout and value not in everything.stdout, node
                info = other.get_info()
                assert [(b.env, b.secret, b.revoked) for b in info.secrets] == \
                    [("ANTHROPIC_API_KEY", secret.name, False)], info.secrets
                assert {b.env: b.standin for b in store.bindings(p.box.id)} == {"ANTHROPIC_API_KEY": standin}, \
                    "the stand-in the node's proxy swaps is the one the box sees"
                standins[node] = standin
            assert len(set(standins.values())) == len(NODES), "each box its own stand-in"

            on_1 = Secret.get(secret.name, **fleet.client_args(1))
            assert (on_1.provider, on_1.allowed_hosts) == (secret.provider, secret.allowed_hosts)
            for p in placed.values():  # no request left a box: nothing was swapped, on any node
                assert on_1.audit(sandbox_id=p.box.id).entries == []
            assert Secret.audit_by_name(secret.name, **fleet.client_args(1)).entries == []
    finally:
        secret.delete()
