"""The warm pool: creates claim pre-booted boxes, which are never shared, and the pool refills."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from functools import partial
from typing import Any

from hutch import EnvStep, Sandbox, Template, WorkdirStep
from hutch.node.idle import freezer_file, thaw
from tests.integration.support import Env, Server, frozen, in_background, make_server, pooled, retire, runsc_cli, thawed, wait_for


def _waiting(server: Server) -> set[str]:
    """The runtime ids of the pool's boxes: runsc's containers that no sandbox record names."""
    owned = {r.runtime_id for r in server.store().list_sandboxes(None) if r.runtime_id}
    return set(runsc_cli(server, "list", "--quiet").split()) - owned


def _all_frozen(runtime_ids: set[str]) -> bool:
    return all(frozen(r) for r in runtime_ids)  # cgroup v1 is FREEZING on its way: waited on


def test_a_create_claims_from_the_pool_and_the_pool_refills(env: Env) -> None:
    wait_for(lambda: pooled(env.url) == 2, timeout=30, what="a full pool")
    waiting = _waiting(env.server)
    sb = Sandbox.create(name="from-pool")
    try:
        # by the box, not the count: the compiled agent boots the refill before a count could see the gap
        assert env.server.record(sb.id).runtime_id in waiting, "the create took a pooled box"
        assert sb.commands.run("id -un").stdout == "user\n"
        wait_for(lambda: pooled(env.url) == 2, timeout=30, what="the pool to refill")
    finally:
        sb.kill()


def test_a_claimed_box_carries_nothing_of_an_earlier_one(env: Env) -> None:
    for round_ in range(3):
        wait_for(lambda: pooled(env.url) == 2, timeout=30, what="a full pool")
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
    wait_for(lambda: pooled(env.url) == 2, timeout=30, what="a full pool")
    waiting = _waiting(env.server)
    assert len(waiting) == 2
    for runtime_id in waiting:  # every process of it dies, as in a crash (thawed first: a frozen one cannot)
        thaw(runtime_id)
        for pid in freezer_file(runtime_id)[0].with_name("cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # the box may take its siblings down first
                os.kill(int(pid), signal.SIGKILL)
    sb = Sandbox.create(name="after-pool-death")
    try:
        assert sb.commands.run("echo fine").stdout == "fine\n"
    finally:
        sb.kill()
    wait_for(lambda: pooled(env.url) == 2, timeout=30, what="the pool to refill with live boxes")


def test_another_template_never_gets_a_pooled_box(env: Env) -> None:
    """The pool holds base-template boxes with the base's limits; a create for anything else boots
    its own box (the rule that keeps a template's change from handing out stale boxes)."""
    small = Template.create(f"small-{time.time_ns()}", memory_mib=512,
                            steps=[EnvStep(key="FROM_TEMPLATE", value="small"), WorkdirStep(workdir="/tmp")])
    small.wait_until_ready()
    wait_for(lambda: pooled(env.url) == 2, timeout=30, what="a full pool")
    waiting = _waiting(env.server)
    sb = Sandbox.create(name="small", from_template=small)
    try:
        assert env.server.record(sb.id).runtime_id not in waiting, "no pooled box was taken"
        assert waiting <= _waiting(env.server), "the pool's boxes all wait still"
        info = sb.get_info()
        assert info.template == small.name and info.memory_mib == 512
        assert sb.commands.run("echo $FROM_TEMPLATE; pwd").stdout == "small\n/tmp\n"
    finally:
        sb.kill()
        small.delete()


def test_waiting_boxes_are_frozen_and_a_burst_grows_the_pool_for_the_next() -> None:
    server = make_server("--warm-pool", "1", "--warm-pool-max", "3")
    server.start()
    try:
        url = server.url
        kw = server.client_args()
        wait_for(lambda: pooled(url) == 1, timeout=60, what="a full pool")
        waiting = _waiting(server)
        assert len(waiting) == 1
        wait_for(lambda: _all_frozen(waiting), timeout=10, what="the waiting box frozen: it costs no CPU")
        made: list[Any] = []
        creates = [in_background(lambda: made.append(Sandbox.create(name="burst", **kw))) for _ in range(3)]
        try:
            for c in creates:
                c.join(120)
            assert not [e for c in creates for e in c.errors] and len(made) == 3
            assert [sb.commands.run("echo up").stdout for sb in made] == ["up\n"] * 3, "a claimed box was thawed"
            # three creates at once: the pool grows to three once creates are quiet, for the next burst
            wait_for(lambda: pooled(url) == 3, timeout=120, what="the pool to grow to the burst")
            grown = _waiting(server)
            assert len(grown) == 3
            wait_for(lambda: _all_frozen(grown), timeout=10, what="the grown pool's boxes frozen")
            claimed = {r.runtime_id for r in server.store().list_sandboxes(None) if r.runtime_id}
            assert len(claimed) == 3 and all(thawed(r) for r in claimed), "the claimed boxes run"
        finally:
            for sb in made:
                sb.kill()
    finally:
        retire(server)


def test_by_default_the_pool_is_sized_by_memory_and_filled_ahead_of_demand() -> None:
    """No --warm-pool: the pool holds its memory budget (--warm-pool-max, here a small one) booted
    and frozen before any create, and a claim is refilled."""
    server = make_server("--warm-pool-max", "4")
    server.start()
    try:
        wait_for(lambda: pooled(server.url) == 4, timeout=120, what="the pool filled ahead of any create")
        waiting = _waiting(server)
        assert len(waiting) == 4
        wait_for(lambda: _all_frozen(waiting), timeout=10, what="the waiting boxes frozen")
        sb = Sandbox.create(name="ahead", **server.client_args())
        try:
            assert server.record(sb.id).runtime_id in waiting, "the create claimed a booted box"
            assert sb.commands.run("echo up").stdout == "up\n"
            wait_for(lambda: pooled(server.url) == 4, timeout=60, what="the pool to refill")
        finally:
            sb.kill()
    finally:
        retire(server)
