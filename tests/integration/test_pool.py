"""The warm pool: creates claim pre-booted boxes, which are never shared, and the pool refills."""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from typing import Any

import httpx

from hutch import EnvStep, Sandbox, Template, WorkdirStep
from hutch.node.idle import freezer_file, thaw
from tests.integration.support import Env, in_background, make_server, retire, runsc_cli, wait_for


def _pool(env: Env) -> int:
    return int(httpx.get(f"{env.url}/health").json()["warm_pool"])


def test_a_create_claims_from_the_pool_and_the_pool_refills(env: Env) -> None:
    wait_for(lambda: _pool(env) == 2, timeout=30, what="a full pool")
    sb = Sandbox.create(name="from-pool")
    try:
        assert _pool(env) == 1, "the create took a pooled box"
        assert sb.commands.run("id -un").stdout == "user\n"
        wait_for(lambda: _pool(env) == 2, timeout=30, what="the pool to refill")
    finally:
        sb.kill()


def test_a_claimed_box_carries_nothing_of_an_earlier_one(env: Env) -> None:
    for round_ in range(3):
        wait_for(lambda: _pool(env) == 2, timeout=30, what="a full pool")
        sb = Sandbox.create(name=f"claim-{round_}", env_vars={"ROUND": str(round_)})
        try:
            r = sb.commands.run("ls /tmp/left-behind* 2>/dev/null; pgrep -f '^left-behind'; echo $ROUND")
            assert r.stdout == f"{round_}\n", "no file, process or env of an earlier box"
            sb.commands.run("touch /tmp/left-behind-$ROUND; nohup sh -c 'exec -a left-behind sleep 600' "
                            ">/dev/null 2>&1 &")
        finally:
            sb.kill()


def test_an_empty_pool_only_means_a_cold_boot(env: Env) -> None:
    made: list[Any] = []

    def create(i: int) -> None:
        made.append(Sandbox.create(name=f"burst-{i}"))

    creates = [in_background(partial(create, i)) for i in range(4)]
    try:
        for c in creates:
            c.join(120)
        assert not [e for c in creates for e in c.errors] and len(made) == 4
        assert len({sb.id for sb in made}) == 4
        outputs = {sb.commands.run("cat /proc/sys/kernel/random/boot_id").stdout for sb in made}
        assert len(outputs) == 4, "four boxes, four kernels: no box was handed out twice"
    finally:
        for sb in made:
            sb.kill()


def test_a_pooled_box_that_died_is_never_handed_out(env: Env) -> None:
    wait_for(lambda: _pool(env) == 2, timeout=30, what="a full pool")
    owned = {r.runtime_id for r in env.server.store().list_sandboxes(None) if r.runtime_id}
    pooled = set(runsc_cli(env.server, "list", "--quiet").split()) - owned
    assert len(pooled) == 2
    for runtime_id in pooled:  # every process of it dies, as in a crash (thawed first: a frozen one cannot)
        thaw(runtime_id)
        for pid in freezer_file(runtime_id)[0].with_name("cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
    sb = Sandbox.create(name="after-pool-death")
    try:
        assert sb.commands.run("echo fine").stdout == "fine\n"
    finally:
        sb.kill()
    wait_for(lambda: _pool(env) == 2, timeout=30, what="the pool to refill with live boxes")


def test_another_template_never_gets_a_pooled_box(env: Env) -> None:
    """The pool holds base-template boxes with the base's limits; a create for anything else boots
    its own box (the rule that keeps a template's change from handing out stale boxes)."""
    small = Template.create(f"small-{time.time_ns()}", memory_mib=512,
                            steps=[EnvStep(key="FROM_TEMPLATE", value="small"), WorkdirStep(workdir="/tmp")])
    small.wait_until_ready()
    wait_for(lambda: _pool(env) == 2, timeout=30, what="a full pool")
    sb = Sandbox.create(name="small", from_template=small)
    try:
        assert _pool(env) == 2, "no pooled box was taken"
        info = sb.get_info()
        assert info.template == small.name and info.memory_mib == 512
        assert sb.commands.run("echo $FROM_TEMPLATE; pwd").stdout == "small\n/tmp\n"
    finally:
        sb.kill()
        small.delete()


def _waiting(server: Any) -> set[str]:
    owned = {r.runtime_id for r in server.store().list_sandboxes(None) if r.runtime_id}
    return set(runsc_cli(server, "list", "--quiet").split()) - owned


def _frozen(runtime_id: str) -> bool:
    path, frozen, _ = freezer_file(runtime_id)
    return path.read_text().strip() in (frozen, "FREEZING")  # cgroup v1 says FREEZING on its way


def test_waiting_boxes_are_frozen_and_a_burst_grows_the_pool_for_the_next() -> None:
    server = make_server("--warm-pool", "1", "--warm-pool-max", "3")
    server.start()
    try:
        url = server.url
        kw = server.client_args()
        wait_for(lambda: int(httpx.get(f"{url}/health").json()["warm_pool"]) == 1, timeout=60, what="a full pool")
        waiting = _waiting(server)
        assert len(waiting) == 1 and all(_frozen(r) for r in waiting), "a waiting box costs no CPU"
        made: list[Any] = []
        creates = [in_background(lambda: made.append(Sandbox.create(name="burst", **kw))) for _ in range(3)]
        try:
            for c in creates:
                c.join(120)
            assert not [e for c in creates for e in c.errors] and len(made) == 3
            assert [sb.commands.run("echo up").stdout for sb in made] == ["up\n"] * 3, "a claimed box was thawed"
            # three creates at once: the pool grows to three once creates are quiet, for the next burst
            wait_for(lambda: int(httpx.get(f"{url}/health").json()["warm_pool"]) == 3, timeout=120,
                     what="the pool to grow to the burst")
            grown = _waiting(server)
            assert len(grown) == 3 and all(_frozen(r) for r in grown)
            claimed = {r.runtime_id for r in server.store().list_sandboxes(None) if r.runtime_id}
            assert len(claimed) == 3 and not any(_frozen(r) for r in claimed), "the claimed boxes run"
        finally:
            for sb in made:
                sb.kill()
    finally:
        retire(server)
