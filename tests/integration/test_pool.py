"""The warm pool: creates claim pre-booted boxes, which are never shared, and the pool refills."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import httpx

from hutch import EnvStep, Sandbox, Template, WorkdirStep
from tests.integration.support import Env, in_background, runsc_cli, wait_for


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
    for runtime_id in pooled:
        runsc_cli(env.server, "kill", runtime_id, "KILL")
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
