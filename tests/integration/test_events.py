"""A team's events: every change of its boxes' and snapshots' state, in the order it happened, by
cursor and as a stream that a reconnect picks up where it left off; no other team's."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any

import httpx

from hutch import Sandbox, Snapshot
from tests.integration.support import HUTCH, Env, wait_for


def _events(env: Env, key: str, **params: Any) -> dict[str, Any]:
    with env.api(key) as api:
        r = api.get("/v1/events", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _now(env: Env, key: str) -> int:
    """The cursor past every event there is now (the team's)."""
    cursor = 0
    while page := _events(env, key, after=cursor, limit=1000)["events"]:
        cursor = page[-1]["id"]
    return cursor


def test_a_boxs_life_is_its_events_in_order_and_no_other_teams(env: Env) -> None:
    start = _now(env, env.key_a)
    sb = Sandbox.create(name="lived", api_key=env.key_a, base_url=env.url)
    sb.update(timeout_seconds=600)
    sb.pause()
    sb.commands.run("true")  # resumes it
    snap = sb.snapshot(name="evented")
    Snapshot.delete_by_id(snap.id, api_key=env.key_a, base_url=env.url)
    sb.kill()
    page = _events(env, env.key_a, after=start, sandbox_id=sb.id)
    assert [e["type"] for e in page["events"]] == [
        "sandbox.created", "sandbox.updated", "sandbox.paused", "sandbox.resumed", "snapshot.created",
        "snapshot.deleted", "sandbox.killed"]
    ids = [e["id"] for e in page["events"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and page["next"] == ids[-1]
    by_type = {e["type"]: e for e in page["events"]}
    assert by_type["sandbox.paused"]["data"] == {"memory": True, "reason": "asked"}
    assert by_type["sandbox.killed"]["data"] == {"reason": "asked"}
    assert by_type["sandbox.updated"]["data"]["timeout_seconds"] == 600
    assert by_type["snapshot.created"]["data"]["snapshot_id"] == snap.id
    # the cursor pages, and a filter by type
    assert [e["id"] for e in _events(env, env.key_a, after=ids[2], sandbox_id=sb.id, limit=2)["events"]] == ids[3:5]
    only = _events(env, env.key_a, after=start, sandbox_id=sb.id, types="sandbox.paused,sandbox.killed")
    assert [e["type"] for e in only["events"]] == ["sandbox.paused", "sandbox.killed"]
    # another team sees none of it
    assert _events(env, env.key_b, after=start, sandbox_id=sb.id)["events"] == []


def test_a_timeouts_pause_says_so(env: Env) -> None:
    start = _now(env, env.key_a)
    sb = Sandbox.create(name="times-out", timeout_seconds=1, api_key=env.key_a, base_url=env.url)
    try:
        wait_for(lambda: any(e["type"] == "sandbox.paused" for e in _events(env, env.key_a, after=start,
                                                                             sandbox_id=sb.id)["events"]),
                 60, "the timeout's pause event")
        paused = [e for e in _events(env, env.key_a, after=start, sandbox_id=sb.id)["events"]
                  if e["type"] == "sandbox.paused"]
        assert paused[0]["data"]["reason"] == "timeout"
    finally:
        sb.kill()


def _read(stream: httpx.Response, n: int) -> list[dict[str, Any]]:
    """The next `n` events of a server-sent event stream (comments skipped)."""
    got: list[dict[str, Any]] = []
    event: dict[str, str] = {}
    for line in stream.iter_lines():
        if line.startswith(":"):
            continue
        if line == "":
            if event:
                got.append({"id": int(event["id"]), "type": event["event"], **json.loads(event["data"])})
                event = {}
                if len(got) == n:
                    return got
            continue
        name, _, value = line.partition(": ")
        event[name] = value
    return got


def test_a_stream_picks_up_after_a_reconnect_with_nothing_missed_or_repeated(env: Env) -> None:
    start = _now(env, env.key_a)
    headers = {"Authorization": f"Bearer {env.key_a}"}
    boxes = [Sandbox.create(name=f"streamed-{i}", api_key=env.key_a, base_url=env.url) for i in range(2)]
    for sb in boxes:
        sb.kill()
    expected = [(e["id"], e["type"]) for e in _events(env, env.key_a, after=start)["events"]]
    assert len(expected) == 4
    with httpx.Client(base_url=env.url, headers=headers, timeout=30) as client:
        with client.stream("GET", "/v1/events/stream", params={"after": start}) as first:
            assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
            seen = _read(first, 2)
        with client.stream("GET", "/v1/events/stream", headers={"Last-Event-ID": str(seen[-1]["id"])}) as again:
            seen += _read(again, 2)
    assert [(e["id"], e["type"]) for e in seen] == expected
    with env.api(env.key_a) as api:
        for params in ({"after": "not-a-cursor"}, {"after": str(2**64)}, {"types": "sandbox.exploded"}):
            bad = api.get("/v1/events/stream", params=params)
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request", params
        for params in ({"after": str(2**64)}, {"types": "sandbox.paused,nonsense"}):
            bad = api.get("/v1/events", params=params)
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request", params


def test_a_stream_from_now_gets_what_happens_next(env: Env) -> None:
    headers = {"Authorization": f"Bearer {env.key_b}"}
    with httpx.Client(base_url=env.url, headers=headers, timeout=60) as client, \
            client.stream("GET", "/v1/events/stream", params={"types": "sandbox.created"}) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith(":")  # open: it says so at once
        sb = Sandbox.create(name="seen-live", api_key=env.key_b, base_url=env.url)
        try:
            event: dict[str, str] = {}
            for line in lines:
                if line.startswith(":"):
                    continue
                if line == "" and event:
                    break
                name, _, value = line.partition(": ")
                event[name] = value
            assert event["event"] == "sandbox.created" and json.loads(event["data"])["sandbox_id"] == sb.id
        finally:
            sb.kill()


def test_the_sdk_and_the_cli_page_the_same_events(env: Env) -> None:
    from hutch import Events
    from tests.integration.test_cli import hutch

    start = _now(env, env.key_a)
    sb = Sandbox.create(name="listed", api_key=env.key_a, base_url=env.url)
    sb.kill()
    page = Events.list(after=start, sandbox_id=sb.id, api_key=env.key_a, base_url=env.url)
    assert [e.type for e in page.events] == ["sandbox.created", "sandbox.killed"]
    assert page.next == page.events[-1].id and page.events[0].data["source"] in ("boot", "warm_pool")
    again = Events.list(after=page.next, sandbox_id=sb.id, api_key=env.key_a, base_url=env.url)
    assert again.events == [] and again.next == page.next
    out = hutch(env, "--json", "events", "--after", str(start), "--sandbox", sb.id)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert [(e["id"], e["type"]) for e in lines] == [(e.id, e.type) for e in page.events]
    # --follow: the same from the stream, and it goes on until stopped
    environ = {**os.environ, "HUTCH_API_KEY": env.key_a, "HUTCH_BASE_URL": env.url}
    follow = subprocess.Popen([*HUTCH, "--json", "events", "--follow", "--after", str(start), "--sandbox", sb.id],
                              stdout=subprocess.PIPE, env=environ)
    try:
        assert follow.stdout is not None
        followed = [json.loads(follow.stdout.readline()) for _ in page.events]
        assert [(e["id"], e["type"]) for e in followed] == [(e.id, e.type) for e in page.events]
        assert follow.poll() is None, "it follows on"
    finally:
        follow.terminate()
        follow.wait(30)


def test_e2bs_lifecycle_events_api_serves_a_boxs_life_in_its_shapes(env: Env) -> None:
    key = {"X-API-KEY": env.server.e2b_key()}
    with httpx.Client(base_url=f"{env.url}/e2b", headers=key, timeout=120) as e2b:
        made = e2b.post("/sandboxes", json={"templateID": "base", "timeout": 120})
        assert made.status_code == 201, made.text
        box = made.json()["sandboxID"]
        assert e2b.post(f"/sandboxes/{box}/timeout", json={"timeout": 300}).status_code == 204
        assert e2b.post(f"/sandboxes/{box}/pause").status_code == 204
        assert e2b.post(f"/sandboxes/{box}/connect", json={"timeout": 60}).status_code in (200, 201)
        assert e2b.delete(f"/sandboxes/{box}").status_code == 204
        oldest_first = e2b.get(f"/events/sandboxes/{box}", params={"orderAsc": "true"}).json()
        # (a connect with a timeout sets it: E2B's SDK's connect does)
        assert [e["type"] for e in oldest_first] == [f"sandbox.lifecycle.{t}" for t in
                                                     ("created", "updated", "paused", "resumed", "updated", "killed")]
        first = oldest_first[0]
        assert first["sandboxId"] == box and first["version"] == "v1" and first["eventCategory"] == "lifecycle"
        assert first["sandboxTemplateId"] and first["sandboxTeamId"] and first["timestamp"].endswith("Z")
        assert str(uuid.UUID(first["id"])) == first["id"]
        assert oldest_first[-1]["eventData"] == {"kill_reason": "asked"}
        assert "set_timeout" in oldest_first[1]["eventData"]
        newest = e2b.get(f"/events/sandboxes/{box}", params={"limit": 2}).json()
        assert [e["id"] for e in newest] == [e["id"] for e in reversed(oldest_first)][:2]
        paged = e2b.get(f"/events/sandboxes/{box}", params={"limit": 2, "offset": 2}).json()
        assert [e["id"] for e in paged] == [e["id"] for e in reversed(oldest_first)][2:4]
        only = e2b.get(f"/events/sandboxes/{box}", params=[("types", "sandbox.lifecycle.paused"),
                                                             ("types", "sandbox.lifecycle.killed")]).json()
        assert [e["type"] for e in only] == ["sandbox.lifecycle.killed", "sandbox.lifecycle.paused"]
        assert box in {e["sandboxId"] for e in e2b.get("/events/sandboxes", params={"limit": 100}).json()}
        bad = e2b.get("/events/sandboxes", params={"types": "sandbox.lifecycle.exploded"})
        assert bad.status_code == 400
        assert e2b.get("/events/sandboxes", params={"limit": 0}).status_code == 400


def test_a_team_holds_a_bounded_number_of_streams_and_a_closed_one_gives_its_place_back(env: Env) -> None:
    from hutch.services.events import MAX_STREAMS

    headers = {"Authorization": f"Bearer {env.key_b}"}
    limits = httpx.Limits(max_connections=MAX_STREAMS + 4)
    with httpx.Client(base_url=env.url, headers=headers, timeout=30, limits=limits) as client:
        opened = []
        try:
            for _ in range(MAX_STREAMS):
                stream = client.send(client.build_request("GET", "/v1/events/stream"), stream=True)
                assert stream.status_code == 200
                lines = stream.iter_lines()  # (kept: a dropped iterator closes its response)
                next(lines)  # its first line: it is open, and counted
                opened.append((stream, lines))
            refused = client.get("/v1/events/stream")
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
            with env.api(env.key_a) as api, api.stream("GET", "/v1/events/stream") as other:
                assert other.status_code == 200  # another team's are its own
            opened.pop()[0].close()

            def one_more() -> bool:
                with client.stream("GET", "/v1/events/stream") as again:
                    return again.status_code == 200
            wait_for(one_more, 20, "a closed stream's place to come back")
        finally:
            for stream, _ in opened:
                stream.close()


def test_a_volumes_creation_and_deletion_are_events(env: Env) -> None:
    from hutch import Volume

    start = _now(env, env.key_a)
    vol = Volume.create(f"evented-{uuid.uuid4().hex[:8]}", size_mib=16, api_key=env.key_a, base_url=env.url)
    vol.delete()
    page = _events(env, env.key_a, after=start, types="volume.created,volume.deleted")
    mine = [e for e in page["events"] if e["data"].get("volume_id") == vol.id]
    assert [e["type"] for e in mine] == ["volume.created", "volume.deleted"]
    assert mine[0]["data"] == {"volume_id": vol.id, "name": vol.name, "size_mib": 16} and mine[0]["sandbox_id"] is None
    assert _events(env, env.key_b, after=start, types="volume.created")["events"] == []


def test_the_sdk_streams_events_from_a_cursor_sync_and_async(env: Env) -> None:
    import asyncio
    import itertools

    from hutch import Events

    start = _now(env, env.key_a)
    sb = Sandbox.create(name="streamed", api_key=env.key_a, base_url=env.url)
    sb.kill()
    stream = Events.stream(after=start, sandbox_id=sb.id, api_key=env.key_a, base_url=env.url)
    try:
        got = list(itertools.islice(stream, 2))
    finally:
        stream.close()
    assert [(e.type, e.sandbox_id) for e in got] == [("sandbox.created", sb.id), ("sandbox.killed", sb.id)]

    async def two() -> list[str]:
        seen = []
        async for e in Events.stream_async(after=got[0].id, types=["sandbox.killed"], api_key=env.key_a,
                                           base_url=env.url):
            seen.append(f"{e.id}:{e.type}")
            break
        return seen

    assert asyncio.run(two()) == [f"{got[1].id}:sandbox.killed"]


def test_a_fork_says_which_box_it_was_forked_from(env: Env) -> None:
    source = Sandbox.create(name="forked-from", api_key=env.key_a, base_url=env.url)
    try:
        start = _now(env, env.key_a)
        (fork,) = source.fork()
        try:
            made = _events(env, env.key_a, after=start, sandbox_id=fork.id, types="sandbox.created")["events"]
            assert len(made) == 1 and made[0]["data"]["from_sandbox_id"] == source.id
            assert made[0]["data"]["snapshot_id"]
        finally:
            fork.kill()
    finally:
        source.kill()
