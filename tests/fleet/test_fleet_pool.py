"""A node's warm pool in a fleet: a box taken from it holds its room in Ray like any other, under
its sandbox's name, until it is paused or killed; resumed, it holds room again.

A fleet of its own: one node with a warm pool of one, one API server. Ray's placement groups are
read from the test process, a driver of the fleet's Ray like the API server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import ray
from ray.util.placement_group import placement_group_table

from hutch import Sandbox
from hutch.fleet.cluster import BOX_GROUP, NAMESPACE
from hutch.store import Store
from tests.fleet.cluster import Fleet
from tests.integration.support import wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0:
        pytest.skip("a fleet needs root (network namespaces, runsc): scripts/test --fleet runs as root")
    with Fleet(node_names=("a",), apis=1, warm_pool=1) as f:
        ray.init(address=f.ray_address, namespace=NAMESPACE, log_to_driver=False)
        try:
            yield f
        finally:
            ray.shutdown()


def reservation(sandbox_id: str) -> str | None:
    """The state of the box's reservation in Ray, None if it has none."""
    for group in placement_group_table().values():
        if group.get("name") == BOX_GROUP + sandbox_id and group.get("state") != "REMOVED":
            return str(group["state"])
    return None


def test_a_box_from_the_warm_pool_holds_its_room_until_paused_and_again_once_resumed(fleet: Fleet) -> None:
    boxes = fleet.node("a").run_dir / "boxes"
    wait_for(lambda: any(boxes.glob("pool-*")), 120, "the node's warm pool to fill")
    sb = Sandbox.create("pooled", **fleet.client_args(0))
    store = Store(fleet.store_url)
    try:
        rec = store.get_sandbox(sb.id)
        assert rec is not None and rec.box_key.startswith("pool-"), "the create was served from the pool"
        assert reservation(sb.id) == "CREATED"
        assert sb.commands.run("echo hi").stdout == "hi\n"
        sb.pause()
        wait_for(lambda: reservation(sb.id) is None, 30, "a paused box to hold no room")
        sb.resume()
        assert reservation(sb.id) == "CREATED"
        assert sb.commands.run("echo back").stdout == "back\n"
        sb.kill()
        wait_for(lambda: reservation(sb.id) is None, 30, "a killed box to hold no room")
    finally:
        store.engine.dispose()
