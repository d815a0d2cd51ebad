"""The fleet's smoke, run by every `scripts/test` (and so by CI): two nodes and two API servers on
this machine (see cluster.py), a box on each node made through both servers, and one node lost (its boxes' failure an event). The
whole fleet suite (test_fleet*.py) stays behind `scripts/test --fleet`."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from hutch import Events, Sandbox, SandboxError
from tests.fleet.cluster import Fleet
from tests.integration.support import wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(600)]

MOST_BOXES = 8  # made one at a time until both nodes hold one


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0:
        pytest.skip("a fleet needs root (network namespaces, runsc): scripts/test runs as root")
    with Fleet(node_names=("s", "t"), apis=2) as f:
        yield f


def test_a_box_on_each_node_answers_both_servers_and_a_lost_nodes_box_fails(fleet: Fleet) -> None:
    by_node: dict[str, Sandbox] = {}
    made: list[Sandbox] = []
    try:
        for n in range(MOST_BOXES):
            box = Sandbox.create(f"smoke-{n}", **fleet.client_args(n % 2))
            made.append(box)
            by_node.setdefault(box.get_info().node or "", box)
            if len(by_node) == 2:
                break
        assert set(by_node) == {"s", "t"}, f"{len(made)} boxes landed on {set(by_node)} only"
        for name, box in by_node.items():
            for api in (0, 1):  # each box through either server, whichever made it
                there = Sandbox.connect(box.id, **fleet.client_args(api))
                assert there.commands.run(f"echo {name}{api}").stdout == f"{name}{api}\n"
                there.files.write("/tmp/f", f"via {api}")
                assert there.files.read_text("/tmp/f") == f"via {api}"
        health = {r["name"]: r["health"] for r in fleet.node_list(1)}
        assert health == {"s": "up", "t": "up"}, health

        fleet.kill_node("s")
        fleet.wait_ray_sees("s", alive=False)
        lost = [b.id for b in made if b.get_info().node == "s"]

        def failed() -> bool:
            listed = {i.id: i for i in Sandbox.list(**fleet.client_args(1))}
            return all(listed[i].status == "failed" and "node_lost" in (listed[i].failure or "") for i in lost)

        wait_for(failed, 90, "the lost node's boxes to read failed: node_lost")
        told = Events.list(sandbox_id=lost[0], types=["sandbox.failed"], **fleet.client_args(0)).events
        assert [e.data.get("node") for e in told] == ["s"] and "node_lost" in str(told[0].data["reason"])
        with pytest.raises(SandboxError):  # a call on a failed box is an error, not a hang
            Sandbox.connect(lost[0], **fleet.client_args(0)).commands.run("true", timeout_seconds=30)
        kept = Sandbox.connect(by_node["t"].id, **fleet.client_args(0))
        assert kept.commands.run("echo still").stdout == "still\n", "the other node's box runs on"
        health = {r["name"]: r["health"] for r in fleet.node_list(0)}
        assert health == {"s": "down", "t": "up"}, health
    finally:
        for box in made:
            try:
                box.kill()
            except SandboxError:
                pass
