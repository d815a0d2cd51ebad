"""Work the host does on a box's behalf, paced by programs the box controls (a files-only save
runs the box's own `find` and `tar`, and its resume lays the box's own programs back before it
runs them): one box that stalls it holds back no other box's lifetime, and its own team's kill cuts
it short rather than waiting for it."""

from __future__ import annotations

import threading

import httpx
import pytest

from hutch import NotFoundError, Sandbox
from tests.integration.support import Env, Server, wait_for

STALLING_TAR = "printf '#!/bin/sh\\nexec sleep 3600\\n' > /usr/bin/tar"  # the box's root rewrites its tar




def stalling_rm(pattern: str) -> str:
    """The box's root rewrites its rm: as it was, but for a path that matches `pattern` (a shell
    case pattern): that one stalls."""
    return ("cp /usr/bin/rm /usr/bin/rm.real && printf '#!/bin/sh\\ncase \"$2\" in %s) exec sleep 3600;; esac\\n"
            f"exec /usr/bin/rm.real \"$@\"\\n' '{pattern}' > /usr/bin/rm")


# a save's scratch directory, which a save cut short leaves to be cleared (never waited for)
SAVE_SCRATCH = "/var/tmp/.hutch-snapshot/*"
# the resume's last step (removing its scratch directory, once the box's files are back)
RESUME_SCRATCH = "/var/tmp/.hutch-snapshot"


def _status(env: Env, key: str, sandbox_id: str) -> str:
    with env.api(key) as api:
        return str(api.get(f"/v1/sandboxes/{sandbox_id}").json()["status"])


def test_a_box_stalling_its_files_only_pause_holds_back_no_other_box_and_its_kill_cuts_it_short(env: Env) -> None:
    with env.api(env.key_a) as api:
        made = api.post("/v1/sandboxes", json={"name": "stalls-its-save", "pause_memory": False}, timeout=120)
        assert made.status_code == 201, made.text
        stalling = Sandbox.connect(made.json()["id"], api_key=env.key_a, base_url=env.url)
    stalling.commands.run(STALLING_TAR, user="root")
    assert stalling.commands.run(stalling_rm(SAVE_SCRATCH), user="root").exit_code == 0
    stalling.update(timeout_seconds=1)  # its timeout's pause saves its files: through the tar it stalls
    wait_for(lambda: _status(env, env.key_a, stalling.id) == "pausing", 30, "the stalling box's pause to begin")

    other = Sandbox.create(name="another-team", timeout_seconds=2, api_key=env.key_b, base_url=env.url)
    try:
        # another team's timeout is kept while the first box's save hangs on
        wait_for(lambda: other.get_info().status == "paused", 60, "the other team's box to be paused at its timeout")
        assert _status(env, env.key_a, stalling.id) == "pausing"
        with env.api(env.key_b) as api:  # only the box's own team may cut its save short
            assert api.delete(f"/v1/sandboxes/{stalling.id}").status_code == 404
        assert _status(env, env.key_a, stalling.id) == "pausing"
    finally:
        other.kill()

    with env.api(env.key_a) as api:  # the owner's kill waits out neither the save the box paces nor its rm
        killed = api.delete(f"/v1/sandboxes/{stalling.id}", timeout=httpx.Timeout(20))
    assert killed.status_code == 204, killed.text
    with pytest.raises(NotFoundError):
        stalling.get_info()


def test_a_box_stalling_its_files_only_resume_is_killed_at_once(env: Env) -> None:
    box = Sandbox.create(name="stalls-its-resume", api_key=env.key_a, base_url=env.url)
    assert box.commands.run(stalling_rm(RESUME_SCRATCH), user="root").exit_code == 0
    assert box.commands.run("rm -rf /home/user/gone-already && echo rm works").stdout.strip() == "rm works"
    box.pause(memory=False)  # its resume lays its files back, the stalling rm among them
    assert _status(env, env.key_a, box.id) == "paused"

    answers: list[httpx.Response] = []

    def resume() -> None:
        with env.api(env.key_a) as api:
            answers.append(api.post(f"/v1/sandboxes/{box.id}/resume", timeout=httpx.Timeout(120)))

    resuming = threading.Thread(target=resume)
    resuming.start()
    try:
        wait_for(lambda: _status(env, env.key_a, box.id) == "resuming", 30, "the resume to begin")
        with env.api(env.key_b) as api:  # only the box's own team may cut its resume short
            assert api.delete(f"/v1/sandboxes/{box.id}").status_code == 404
        with env.api(env.key_a) as api:  # the owner's kill does not wait out the resume the box's files pace
            killed = api.delete(f"/v1/sandboxes/{box.id}", timeout=httpx.Timeout(60))
        assert killed.status_code == 204, killed.text
    finally:
        resuming.join(120)
    assert [a.status_code for a in answers] == [404]
    assert answers[0].json()["error"]["code"] == "not_found"
    with pytest.raises(NotFoundError):
        box.get_info()


def test_a_server_stopped_while_a_box_stalls_its_timeouts_pause_keeps_the_box(own_server: Server) -> None:
    kw = own_server.client_args()
    with httpx.Client(base_url=own_server.url, headers={"Authorization": f"Bearer {own_server.admin_key()}"}) as api:
        made = api.post("/v1/sandboxes", json={"name": "stalls-at-stop", "pause_memory": False}, timeout=120)
        assert made.status_code == 201, made.text
    box = Sandbox.connect(made.json()["id"], **kw)
    box.commands.run(STALLING_TAR, user="root")
    box.update(timeout_seconds=1)
    wait_for(lambda: box.get_info().status == "pausing", 30, "its timeout's pause to begin")
    own_server.stop()  # the pause under way ends with the server: the box is not failed for it
    own_server.start()
    again = Sandbox.connect(box.id, **kw)
    # taken back as it was, running (and its timeout, due, pauses it again: the stall goes on)
    assert again.get_info().status in ("active", "pausing")
    again.kill()
