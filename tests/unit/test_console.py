"""The console's parts that need no browser: its sessions in the store (a real SQLite file) and its
plots of a box's samples."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from hutch.console.plots import HEIGHT, WIDTH, plots
from hutch.node.api import UsageSample
from hutch.store import SandboxRecord, Store, hash_secret
from hutch.store.schema import console_sessions


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
