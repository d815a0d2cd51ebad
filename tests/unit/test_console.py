"""The console's parts that need no browser: its sessions in the store (a real SQLite file), its
plots of a box's samples, and its volumes page and a box's mounts, rendered by the real app over a
real store (volumes' filesystems stood in for: no loop device, no root)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from starlette.testclient import TestClient

from hutch import console
from hutch.console.pages import TEMPLATES
from hutch.console.plots import HEIGHT, WIDTH, plots
from hutch.node.api import UsageSample
from hutch.node.volumes import VolumeDisks
from hutch.server.state import State
from hutch.services.config import ServerConfig
from hutch.services.models import CreateVolume, MountedVolume, SandboxInfo
from hutch.services.volumes import Volumes
from hutch.store import SandboxRecord, SandboxStatus, Store, hash_secret
from hutch.store.schema import console_sessions

if TYPE_CHECKING:
    import httpx2  # what Starlette's TestClient answers with


def test_a_session_is_kept_as_a_hash_and_ends_at_sign_out_or_expiry(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'hutch.db'}")
    try:
        team = store.create_team("a")
        raw = store.open_session(team, "hutch_abcdefgh", lifetime=3600)
        found = store.console_session(raw)
        assert found is not None and found.team_id == team and found.team_name == "a" and len(found.csrf) >= 40
        with store.engine.begin() as c:
            kept = c.execute(sa.select(console_sessions.c.token_hash)).scalars().all()
        assert kept == [hash_secret(raw)], "only the hash is stored"
        assert store.console_session(raw + "x") is None
        other = store.open_session(team, "hutch_abcdefgh", lifetime=3600)
        second = store.console_session(other)
        assert second is not None and second.csrf != found.csrf, "each session its own CSRF token"
        store.close_session(raw)
        assert store.console_session(raw) is None and store.console_session(other) is not None
        expired = store.open_session(team, "hutch_abcdefgh", lifetime=-1)
        assert store.console_session(expired) is None
        store.open_session(team, "hutch_abcdefgh", lifetime=3600)  # opening one clears the expired
        with store.engine.begin() as c:
            left = c.execute(sa.select(console_sessions.c.token_hash)).scalars().all()
        assert hash_secret(expired) not in left
    finally:
        store.engine.dispose()


def _record() -> SandboxRecord:
    return SandboxRecord(id="b", team_id="t", name="n", template="hutch/base", status="active", memory_mib=1024,
                         vcpu=2, runtime_id="r", disk_mib=100)


def test_plots_scale_each_sample_to_its_ceiling() -> None:
    t = 1_000_000.0
    samples = [UsageSample(t, 0.0, 0, 0, 0), UsageSample(t + 5, 50.0, 512 * 2**20, 0, 50 * 2**20),
               UsageSample(t + 10, 250.0, 2048 * 2**20, 0, 100 * 2**20)]  # over the top: drawn at the top
    cpu, memory, disk = plots(_record(), samples)
    assert cpu.points == f"0.0,{HEIGHT}.0 {WIDTH / 2},{HEIGHT / 2} {WIDTH}.0,0.0"
    assert memory.points == cpu.points and disk.points == cpu.points
    assert (cpu.samples, cpu.span, memory.ceiling, disk.now) == (3, "10 s", "1024 MiB", "100 MiB")
    assert plots(_record(), []) == []
    single = plots(_record(), samples[:1])[0]
    assert single.samples == 1 and single.last == (0.0, float(HEIGHT)), "one sample is a point"


# --- volumes --------------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ORIGIN = "http://testserver"


class _Disks(VolumeDisks):
    """Volumes' filesystems stood in for by directories: what the console shows is the service's."""

    def make(self, volume_id: str, size_mib: int) -> None:
        (self.root / volume_id).mkdir(parents=True)

    def remove(self, volume_id: str) -> None:
        (self.root / volume_id).rmdir()

    def usage(self, volume_id: str) -> tuple[int, int]:
        return 3 * 2**20 + 2**19, 64 * 2**20

    def disk_free(self) -> int:
        return 2**40


@dataclass
class _Console:
    client: TestClient
    store: Store
    volumes: Volumes
    team: str
    csrf: str

    def change(self, path: str, fields: dict[str, str] | None = None, *, token: str | None = None,
               origin: str | None = ORIGIN, htmx: bool = True) -> httpx2.Response:
        headers = {"X-CSRF-Token": self.csrf if token is None else token}
        if origin is not None:
            headers["Origin"] = origin
        if htmx:
            headers["HX-Request"] = "true"
        return self.client.post(path, data=fields or {}, headers=headers, follow_redirects=False)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[_Console]:
    config = ServerConfig(data_dir=tmp_path, public_url=ORIGIN)
    store = Store(f"sqlite:///{tmp_path / 'hutch.db'}")
    volumes = Volumes(config, store, _Disks(tmp_path / "volumes"), lambda: None)
    state = cast(State, SimpleNamespace(config=config, store=store, volumes=volumes))
    parent = FastAPI()
    console.mount(parent, lambda: state)
    team = store.create_team("a")
    raw = store.open_session(team, "hutch_abcdefgh", lifetime=3600)
    found = store.console_session(raw)
    assert found is not None
    try:
        with TestClient(parent) as client:
            client.cookies.set("hutch_console", raw)
            yield _Console(client, store, volumes, team, found.csrf)
    finally:
        volumes.close()
        store.engine.dispose()


def _mount(site: _Console, volume_id: str, name: str) -> SandboxRecord:
    box = SandboxRecord(id=str(uuid.uuid4()), team_id=site.team, name="mounting", template="hutch/base",
                        status=SandboxStatus.ACTIVE, memory_mib=512, vcpu=1,
                        volumes=[{"volume_id": volume_id, "name": name, "path": "/mnt/v", "read_only": False}])
    assert site.store.insert_sandbox(box)
    return box


def test_the_volumes_page_lists_creates_and_deletes_through_the_service(site: _Console) -> None:
    # metadata is anything (the API takes it): it is shown as text, never as markup
    noted = asyncio.run(site.volumes.create(site.team, CreateVolume(name="noted", size_mib=64,
                                                                    metadata={HOSTILE: HOSTILE})))
    page = site.client.get("/console/volumes")
    assert page.status_code == 200 and 'href="/console/volumes"' in page.text, "the page, in the navigation"
    assert "<script>alert" not in page.text and "<img src=x" not in page.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page.text
    assert noted.id in page.text and "64 MiB" in page.text and "3.5 MiB" in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'; script-src 'self'")

    # every change: the session's token and the console's own Origin
    assert site.change("/console/volumes", {"name": "data"}, token="wrong").status_code == 403
    assert site.change("/console/volumes", {"name": "data"}, origin="http://elsewhere.example").status_code == 403
    assert site.change("/console/volumes", {"name": "data"}, origin=None).status_code == 403
    refused = site.change("/console/volumes", {"name": "<b>x</b>"})
    assert refused.status_code == 400 and "letters, digits" in refused.text and "<b>x" not in refused.text
    assert site.change("/console/volumes", {"name": "data", "size_mib": "lots"}).status_code == 400
    for size in ("8", "²", "9" * 5000, "-20", "2e9"):
        assert site.change("/console/volumes", {"name": "data", "size_mib": size}).status_code == 400, size
    assert [v.name for v in site.store.list_volumes(site.team)] == ["noted"], "nothing made by a refused change"

    made = site.change("/console/volumes", {"name": "data", "size_mib": "64"})
    assert made.status_code == 204 and made.headers["HX-Trigger"] == "volumes-changed"
    again = site.change("/console/volumes", {"name": "data"})
    assert again.status_code == 409 and "volume_exists" in again.text
    form = site.change("/console/volumes", {"name": "plain", "csrf": site.csrf}, token="", htmx=False)
    assert form.status_code == 303 and form.headers["location"] == "/console/volumes", "a form without htmx too"
    data = site.volumes.get(site.team, "data")
    assert (data.size_mib, site.volumes.get(site.team, "plain").size_mib) == (64, 1024)

    # a live box mounts it: listed in its row, and the delete is refused with the reason
    box = _mount(site, data.id, "data")
    rows = site.client.get("/console/volumes/rows").text
    assert f'href="/console/boxes/{box.id}"' in rows and f'id="volume-{data.id}"' in rows
    busy = site.change(f"/console/volumes/{data.id}/delete")
    assert busy.status_code == 409 and 'id="error-message"' in busy.text
    assert f"is mounted by sandbox(es) {box.id}" in busy.text
    assert site.store.get_volume(data.id) is not None

    # another team sees nothing of it and deletes nothing
    other = site.store.create_team("b")
    theirs = site.store.open_session(other, "hutch_ijklmnop", lifetime=3600)
    their = site.store.console_session(theirs)
    assert their is not None
    mine = site.client.cookies.get("hutch_console")
    site.client.cookies.set("hutch_console", theirs)
    try:
        assert data.id not in site.client.get("/console/volumes").text
        assert site.change(f"/console/volumes/{data.id}/delete", token=their.csrf).status_code == 404
    finally:
        site.client.cookies.set("hutch_console", str(mine))

    site.store.update_sandbox(box.id, status=SandboxStatus.DELETED)  # the box is gone
    gone = site.change(f"/console/volumes/{data.id}/delete")
    assert gone.status_code == 204 and gone.headers["HX-Trigger"] == "volumes-changed"
    assert site.store.get_volume(data.id) is None
    rows = site.client.get("/console/volumes/rows").text
    assert data.id not in rows and noted.id in rows
    site.client.cookies.set("hutch_console", "not-a-session")
    assert site.client.get("/console/volumes", follow_redirects=False).headers["location"] == "/console/sign-in"
    assert site.change("/console/volumes", {"name": "late"}).headers["HX-Redirect"] == "/console/sign-in"


def test_a_boxs_mounts_on_its_page_are_text_with_a_link_to_the_volume() -> None:
    now = datetime.now(UTC)
    box = SandboxInfo(id="b1", name="n", status=SandboxStatus.ACTIVE, template="hutch/base", metadata={},
                      timeout_seconds=None, auto_delete_seconds=None, vcpu_count=1, memory_mib=512,
                      created_at=now, updated_at=now,
                      volumes=[MountedVolume(volume_id="v1", name="data", path="/mnt/<i>x</i>", read_only=True),
                               MountedVolume(volume_id="v2", name="other", path="/srv", read_only=False)])
    html = TEMPLATES.get_template("_box_info.html").render(box=box, now=time.time())
    assert "/mnt/&lt;i&gt;x&lt;/i&gt;" in html and "<i>" not in html
    assert '<a href="/console/volumes#volume-v1">data</a> (read-only)' in html
    assert '<a href="/console/volumes#volume-v2">other</a> (read-write)' in html
