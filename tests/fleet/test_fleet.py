"""Issue 19's judge: a whole fleet on this machine (a Ray head, PostgreSQL, nodes a, b and c each in
a network namespace of its own, API servers 0 and 1; see cluster.py) and what a user of it checks.

The tests share one fleet and run in this order: what only reads first, then what destroys (an API
server killed, node a lost, the fleet filled). Each node offers 12 vcpu and 12288 MiB, and a base
box takes 1 vcpu and 1024 MiB: 36 boxes fit in three nodes, 24 in two.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from hutch import ConflictError, Events, RateLimitError, Sandbox, SandboxError, Volume, Webhooks
from tests.fleet.cluster import REPO, Fleet, ray_resource_requests
from tests.integration.support import needs_installed, wait_for

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(600)]

NODES = ("a", "b", "c")
BOXES = 30  # made through the two API servers in turn
E2B_PYTHON = REPO / ".cache" / "e2b-2.63.0" / "bin" / "python"
E2B_CLIENT = Path(__file__).resolve().parent / "e2b_reach.py"
COUNTER = "i=0; while :; do i=$((i+1)); echo $i >> /tmp/count; sleep 0.2; done"


@dataclass(frozen=True)
class Made:
    id: str
    api: int  # the API server that created it

    @property
    def other(self) -> int:
        return 1 - self.api


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    if os.geteuid() != 0:
        pytest.skip("a fleet needs root (network namespaces, runsc): scripts/test --fleet runs as root")
    with Fleet(node_names=NODES, apis=2, api_args=("--webhook-allow", "127.0.0.1")) as f:
        yield f


@pytest.fixture(scope="module")
def spread(fleet: Fleet) -> Iterator[list[Made]]:
    """BOXES boxes, made through API servers 0 and 1 in turn (six creates at a time); they live
    until the module's end, so node a's share of them is active when a is lost."""

    def make(n: int) -> Made:
        box = Sandbox.create(f"spread-{n}", metadata={"suite": "fleet", "n": str(n)}, **fleet.client_args(n % 2))
        box.close()
        return Made(box.id, n % 2)

    with ThreadPoolExecutor(6) as pool:
        made = list(pool.map(make, range(BOXES)))
    try:
        yield made
    finally:
        for m in made:
            for api in (m.api, m.other):
                try:
                    Sandbox.kill_by_id(m.id, **fleet.client_args(api))
                    break
                except SandboxError:
                    continue


def nodes_of(fleet: Fleet, api: int) -> dict[str, str]:
    """Every listed box's node, through API server `api`: id -> node name."""
    return {i.id: i.node or "" for i in Sandbox.list(**fleet.client_args(api))}


def one_per_node(fleet: Fleet, spread: list[Made]) -> dict[str, Made]:
    where = nodes_of(fleet, 0)
    found: dict[str, Made] = {}
    for m in spread:
        found.setdefault(where[m.id], m)
    return found


# --- a volume (first: before `spread` holds its boxes, the fleet has room) --------------------------

MOST_BOXES = 6  # made one at a time until two nodes hold one


def test_a_volume_is_one_for_boxes_on_two_nodes_and_both_servers(fleet: Fleet) -> None:
    vol = Volume.create(f"fleet-{os.urandom(3).hex()}", size_mib=64, **fleet.client_args(0))
    by_node: dict[str, Sandbox] = {}
    made: list[Sandbox] = []
    try:
        for n in range(MOST_BOXES):
            box = Sandbox.create(f"vol-{n}", volumes={"/mnt/v": vol.name}, **fleet.client_args(n % 2))
            made.append(box)
            by_node.setdefault(box.get_info().node or "", box)
            if len(by_node) >= 2:
                break
        assert len(by_node) >= 2, f"{len(made)} boxes landed on one node: {set(by_node)}"
        writer, reader = list(by_node.values())[:2]
        writer.commands.run("head -c 1048576 /dev/urandom > /mnt/v/blob && sha256sum /mnt/v/blob | cut -c1-64 "
                            "> /mnt/v/blob.sum")
        got = reader.commands.run("sha256sum /mnt/v/blob | cut -c1-64; cat /mnt/v/blob.sum").stdout.split()
        assert len(got) == 2 and got[0] == got[1], "a box on another node opens the closed file whole"
        other = Volume.get(vol.id, **fleet.client_args(1))
        assert other.files.read_text("/blob.sum").strip() == got[0], "and the files API of the other server"
        other.files.write("/from-api.txt", "written through server 1")
        assert writer.commands.run("cat /mnt/v/from-api.txt").stdout == "written through server 1"
        with pytest.raises(ConflictError):
            other.delete()
    finally:
        for box in made:
            box.kill()
    vol.delete()


def test_both_servers_tell_the_events_in_one_order_and_a_webhook_gets_each_once(fleet: Fleet) -> None:
    """Boxes made and killed through both API servers: each server pages the same events in the
    same order, and a webhook (which both servers' deliverers could send) is sent each one once."""
    got: list[tuple[str, bytes]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append((self.headers["Hutch-Event-Id"], self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/"
    hook = Webhooks.create(url, types=["sandbox.created", "sandbox.killed"], **fleet.client_args(0))
    try:
        made = []
        for n in range(4):
            box = Sandbox.create(f"told-{n}", **fleet.client_args(n % 2))
            made.append(box.id)
            Sandbox.kill_by_id(box.id, **fleet.client_args(1 - n % 2))
        pages = [[(e.id, e.type, e.sandbox_id) for e in Events.list(types=["sandbox.created", "sandbox.killed"],
                                                                      limit=1000, **fleet.client_args(i)).events
                  if e.sandbox_id in made] for i in (0, 1)]
        assert pages[0] == pages[1] and len(pages[0]) == 8, pages
        assert [t for _, t, _ in pages[0]] == ["sandbox.created", "sandbox.killed"] * 4
        wanted = [i for i, _, _ in pages[0]]
        wait_for(lambda: {int(i) for i, _ in got} >= set(wanted), 60, "the deliveries")
        ids = [int(i) for i, body in got if json.loads(body)["sandbox_id"] in made]
        assert ids == wanted, "each event once, in order"
        attempts = Webhooks.deliveries(hook.id, **fleet.client_args(1))
        assert sorted(d.event_id for d in attempts) == sorted(set(d.event_id for d in attempts)), "none sent twice"
    finally:
        Webhooks.delete(hook.id, **fleet.client_args(1))
        receiver.shutdown()


# --- what only reads ---------------------------------------------------------------------------

def test_boxes_land_on_every_node_and_the_nodes_add_up(fleet: Fleet, spread: list[Made]) -> None:
    where = nodes_of(fleet, 1)
    assert set(where) >= {m.id for m in spread}, "API server 1 lists every box, whichever server made it"
    placed = Counter(where[m.id] for m in spread)
    assert set(placed) == set(NODES), f"30 boxes did not land on all three nodes: {placed}"
    for api in (0, 1):
        rows = {r["name"]: r for r in fleet.node_list(api)}
        assert set(rows) == set(NODES) and all(r["health"] == "up" for r in rows.values()), rows
        assert {name: r["boxes"] for name, r in rows.items()} == dict(placed), rows
        assert sum(r["boxes"] for r in rows.values()) == BOXES
        assert all(r["vcpu"] == fleet.vcpu and r["memory_mib"] == fleet.memory_mib for r in rows.values()), rows
        assert {name: r["vcpu_reserved"] for name, r in rows.items()} == dict(placed), "a base box reserves 1 vcpu"


@pytest.mark.parametrize("node", NODES)
def test_commands_files_spawn_and_previews_reach_each_node_through_the_other_server(
        fleet: Fleet, spread: list[Made], node: str) -> None:
    made = one_per_node(fleet, spread)[node]
    Sandbox.connect(made.id, **fleet.client_args(made.api)).files.write("/tmp/made-by", f"api {made.api}\n")
    box = Sandbox.connect(made.id, **fleet.client_args(made.other))
    assert box.get_info().node == node

    run = box.commands.run("cat /tmp/made-by; echo oops >&2; exit 4")
    assert (run.stdout, run.stderr, run.exit_code) == (f"api {made.api}\n", "oops\n", 4)

    blob = os.urandom(256 * 1024)
    box.files.write("/tmp/blob", blob)
    assert box.files.read("/tmp/blob") == blob
    assert Sandbox.connect(made.id, **fleet.client_args(made.api)).files.read("/tmp/blob") == blob, "and back"

    proc = box.commands.spawn("echo spawned $((40 + 2)); echo late >&2; exit 3")
    assert proc.wait(timeout=60) == 3
    assert (proc.stdout, proc.stderr) == ("spawned 42\n", "late\n")

    box.files.write("/tmp/site/index.html", f"<p>served from node {node}</p>")
    box.commands.spawn("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1").close()
    probe = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8000), timeout=1)\""
    wait_for(lambda: box.commands.run(probe).exit_code == 0, 30, "the box's web server")
    published = box.publish_preview_port(8000)
    preview_port = fleet.api(made.other).preview_port
    assert published.url == f"http://8000-{made.id}.localhost:{preview_port}"
    page = httpx.get(f"http://127.0.0.1:{preview_port}/", headers={"Host": urlsplit(published.url).netloc}, timeout=60)
    assert page.status_code == 200 and f"served from node {node}" in page.text
    box.unpublish_preview_port(8000)


@pytest.mark.parametrize("node", NODES)
def test_the_e2b_sdk_reaches_each_node_through_the_other_server(fleet: Fleet, spread: list[Made], node: str) -> None:
    needs_installed(f"e2b 2.63.0 in {E2B_PYTHON.parent.parent}", E2B_PYTHON.exists())
    made = one_per_node(fleet, spread)[node]
    Sandbox.connect(made.id, **fleet.client_args(made.api)).files.write("/tmp/made-by", f"api {made.api}\n")
    env = fleet.env(made.other)
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", **{k: v for k, v in env.items() if k.startswith("E2B_")}}
    done = subprocess.run([str(E2B_PYTHON), str(E2B_CLIENT), made.id], env=variables, capture_output=True, text=True,
                          timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"e2b failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    out = json.loads(lines[-1])
    assert out == {"id": made.id, "stdout": f"api {made.api}\n", "stderr": "to-stderr\n", "exit_code": 0,
                   "read": "written by e2b", "running": True}
    assert Sandbox.connect(made.id, **fleet.client_args(made.api)).files.read_text("/tmp/from-e2b.txt") == "written by e2b"


# --- what destroys: an API server, then node a, then the fleet's room ---------------------------------

def test_an_api_server_killed_loses_nothing(fleet: Fleet, spread: list[Made]) -> None:
    ids = {m.id for m in spread}
    fleet.kill_api(0)
    listed = {i.id: i.status for i in Sandbox.list(**fleet.client_args(1))}
    assert ids <= set(listed) and all(listed[i] == "active" for i in ids), listed
    for m in spread:  # every box answers through the server that is left, whoever made it
        box = Sandbox.connect(m.id, **fleet.client_args(1))
        assert box.commands.run(f"echo {m.id}").stdout == f"{m.id}\n"
        box.close()
    fleet.start_api(0)
    again = {i.id: i.status for i in Sandbox.list(**fleet.client_args(0))}
    assert ids <= set(again) and all(again[i] == "active" for i in ids), again
    made = next(m for m in spread if m.api == 0)
    assert Sandbox.connect(made.id, **fleet.client_args(0)).commands.run("echo back").stdout == "back\n"


@dataclass(frozen=True)
class Loss:
    paused: Made  # a box of node a's, paused with a counter and a file in it, before a was lost
    counted: int  # how far its counter had got when it was paused (at least)
    active: list[str]  # node a's other boxes, active when a was lost


@pytest.fixture(scope="module")
def lost_a(fleet: Fleet, spread: list[Made]) -> Loss:
    """Node a lost (every process of its 'host' killed at once) with a paused box and active ones."""
    where = nodes_of(fleet, 0)
    on_a = [m for m in spread if where[m.id] == "a"]
    assert len(on_a) >= 2, f"node a has {len(on_a)} boxes: {Counter(where.values())}"
    paused = on_a[0]
    box = Sandbox.connect(paused.id, **fleet.client_args(paused.api))
    box.files.write("/home/user/notes.txt", "kept across hosts")
    box.commands.spawn(COUNTER).close()
    wait_for(lambda: len(box.files.read_text("/tmp/count").split()) >= 10, 30, "the counter to count")
    counted = len(box.files.read_text("/tmp/count").split())
    box.pause()
    assert box.get_info().status == "paused"
    fleet.kill_node("a")
    fleet.wait_ray_sees("a", alive=False)
    return Loss(paused, counted, [m.id for m in on_a[1:]])


def test_a_paused_box_of_a_lost_node_resumes_on_another_with_its_memory(fleet: Fleet, lost_a: Loss) -> None:
    m = lost_a.paused
    # at once, as a user would: whether or not an API server has marked node a down yet
    box = Sandbox.connect(m.id, **fleet.client_args(m.other))  # a paused box is resumed by connect
    info = box.get_info()
    assert info.status == "active" and info.node in ("b", "c"), info
    assert box.files.read_text("/home/user/notes.txt") == "kept across hosts"

    def counts() -> list[int]:
        return [int(x) for x in box.files.read_text("/tmp/count").split()]

    before = counts()
    assert len(before) >= lost_a.counted
    wait_for(lambda: len(counts()) >= len(before) + 10, 30, "the counter to go on")
    seen = counts()
    # the same shell, its $i in memory: the sequence goes on where it was, never starts again at 1
    assert seen == list(range(1, len(seen) + 1)), seen


def test_active_boxes_of_a_lost_node_fail_with_node_lost(fleet: Fleet, lost_a: Loss) -> None:
    def failed() -> bool:
        listed = {i.id: i for i in Sandbox.list(**fleet.client_args(1))}
        return all(listed[i].status == "failed" and "node_lost" in (listed[i].failure or "") for i in lost_a.active)

    wait_for(failed, 60, f"node a's {len(lost_a.active)} active boxes to read failed: node_lost")
    for api in (0, 1):
        for i in lost_a.active:
            with pytest.raises(SandboxError):  # a call on a failed box is an error, not a hang
                Sandbox.connect(i, **fleet.client_args(api)).commands.run("true", timeout_seconds=30)
    health = {r["name"]: r["health"] for r in fleet.node_list(0)}
    assert health == {"a": "down", "b": "up", "c": "up"}, health


def test_a_full_fleet_answers_no_capacity_and_asks_ray_for_room(fleet: Fleet) -> None:
    up = [r for r in fleet.node_list(0) if r["health"] == "up"]
    active = [i for i in Sandbox.list(**fleet.client_args(0)) if i.status == "active"]
    room = sum(r["vcpu"] for r in up) - len(active)  # each a base box: 1 vcpu (and 1024 MiB of 1024 per vcpu)
    assert room > 0, (up, len(active))
    made: list[Sandbox] = []
    try:
        with pytest.raises(RateLimitError) as refused:
            for n in range(room + 3):
                made.append(Sandbox.create(f"fill-{n}", **fleet.client_args(n % 2)))
        assert len(made) == room, f"{len(made)} boxes fitted in a room of {room}"
        assert (refused.value.status_code, refused.value.code) == (429, "no_capacity"), refused.value
        asked = ray_resource_requests(fleet.ray_address)
        assert any(b.get("hutch_vcpu", 0) >= 1 and b.get("hutch_memory_mib", 0) >= 1024 for b in asked), asked
        rows = fleet.node_list(1)
        assert all(r["vcpu_reserved"] == r["vcpu"] for r in rows if r["health"] == "up"), rows
    finally:
        for box in made:
            box.kill()
    again = Sandbox.create("after-fill", **fleet.client_args(1))  # the room is back once they are gone
    assert again.get_info().node in ("b", "c")
    again.kill()
