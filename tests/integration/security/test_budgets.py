"""Checkpoint budgets: a team that pauses box after box cannot fill the server's disk. A pause past
the team's count or bytes of paused boxes, or past the server's budget for every checkpoint, is a
429 `checkpoint_budget` and the box runs on untouched; at its timeout, a box refused its pause
runs on for a grace, and is then stopped with a failure that says why."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from hutch import RateLimitError, Sandbox
from tests.integration.support import Server, make_server, retire, wait_for


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    server = make_server("--warm-pool", "0", *request.param)
    server.start()
    try:
        yield server
    finally:
        retire(server)


def _refused(sb: Sandbox, budget: str) -> None:
    """Pausing `sb` is refused by `budget`, and the box runs on with what it held."""
    sb.files.write("/home/user/work.txt", "unsaved work")
    with pytest.raises(RateLimitError) as refused:
        sb.pause()
    assert refused.value.status_code == 429 and refused.value.code == "checkpoint_budget", refused.value
    assert budget in str(refused.value) and "runs on" in str(refused.value)
    assert sb.get_info().status == "active"
    assert sb.commands.run("cat /home/user/work.txt").stdout == "unsaved work"


@pytest.mark.parametrize("server", [("--team-max-paused", "2")], indirect=True)
def test_a_team_pauses_at_most_its_count_and_a_kill_makes_room(server: Server) -> None:
    kw = server.client_args()
    first, second, third = (Sandbox.create(name=f"box-{i}", **kw) for i in range(3))
    first.pause()
    second.pause()
    _refused(third, "team_max_paused=2")
    e2b = httpx.post(f"{server.url}/e2b/sandboxes/{third.id}/pause", headers={"X-API-Key": server.e2b_key()}, timeout=60)
    assert e2b.status_code == 429 and "team_max_paused" in e2b.json()["message"], e2b.text  # E2B's documented refusal
    assert third.get_info().status == "active"
    other = Sandbox.create(name="other-team", api_key=server.new_team("other"), base_url=server.url)
    other.pause()  # the count is the team's own
    first.kill()
    third.pause()
    assert third.get_info().status == "paused"
    second.resume()  # a resume frees a place too
    second.kill()
    assert third.commands.run("cat /home/user/work.txt").stdout == "unsaved work"


@pytest.mark.parametrize("server", [("--team-max-paused-bytes", "16M")], indirect=True)
def test_a_teams_bytes_smaller_than_one_checkpoint_refuse_the_first_pause(server: Server) -> None:
    sb = Sandbox.create(name="big", **server.client_args())
    _refused(sb, "team_max_paused_bytes")
    assert server.record(sb.id).checkpoint_bytes is None, "nothing held for a pause that was not made"


@pytest.mark.parametrize("server", [("--team-max-paused-bytes", "1G", "--checkpoint-budget-bytes", "16M")], indirect=True)
def test_the_servers_budget_for_every_checkpoint_refuses_a_pause_past_it(server: Server) -> None:
    sb = Sandbox.create(name="big", **server.client_args())
    _refused(sb, "checkpoint_budget_bytes")


@pytest.mark.parametrize("server", [()], indirect=True)
def test_a_paused_box_records_its_checkpoints_real_size(server: Server) -> None:
    sb = Sandbox.create(name="measured", **server.client_args())
    sb.pause()
    image = server.data_dir / "checkpoints" / sb.id
    on_disk = sum(f.stat().st_blocks * 512 for f in image.rglob("*") if f.is_file() and not f.is_symlink())
    assert server.record(sb.id).checkpoint_bytes == on_disk > 0
    sb.resume()
    assert server.record(sb.id).checkpoint_bytes is None


@pytest.mark.parametrize("server", [("--team-max-paused", "0", "--over-budget-grace", "8")], indirect=True)
def test_a_box_refused_its_timeouts_pause_runs_on_then_is_stopped_saying_why(server: Server) -> None:
    sb = Sandbox.create(name="timed", timeout_seconds=1, **server.client_args())
    wait_for(lambda: server.record(sb.id).pause_refused_at is not None, timeout=30, what="the timeout's pause refused")
    assert sb.get_info().status == "active", "refused, it runs on"
    assert sb.commands.run("echo still here").stdout == "still here\n"
    wait_for(lambda: sb.get_info().status == "failed", timeout=60, what="the box stopped after the grace")
    failure = sb.get_info().failure or ""
    assert "refused" in failure and "team_max_paused=0" in failure and "without a checkpoint" in failure, failure


@pytest.mark.parametrize("server", [("--audit-retention-days", "0.0002")], indirect=True)  # 17 s: a pass every 1.7 s
def test_the_servers_lifetimes_task_prunes_audit_rows_past_their_retention(server: Server) -> None:
    kw = server.client_args()
    sb = Sandbox.create(name="audited", **kw)
    sb.commands.run("echo audited")

    def audited() -> list[str]:
        r = httpx.get(f"{server.url}/v1/sandboxes/{sb.id}/audit", headers={"Authorization": f"Bearer {kw['api_key']}"})
        assert r.status_code == 200, r.text
        return [e["op"] for e in r.json()["entries"]]

    assert "exec" in audited()
    wait_for(lambda: audited() == [], timeout=150, what="the command's audit rows pruned")  # a pass a minute
    sb.commands.run("echo again")
    assert "exec" in audited(), "a new row is kept"
