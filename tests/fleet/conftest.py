"""The fleet's tests run only when asked: they are not in pyproject's testpaths, and a run that does
not name tests/fleet (or a file in it) skips them. A failed test gets every member's log tail."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from tests.fleet.cluster import Fleet

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fleet: needs a whole fleet on this machine (scripts/test --fleet)")


def _named(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(str(arg).split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _named(config):
        return
    skip = pytest.mark.skip(reason="the fleet's tests run when named: scripts/test --fleet, or pytest tests/fleet")
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                          pytest.TestReport]:
    report = yield
    if report.failed:
        fleet = getattr(item, "funcargs", {}).get("fleet")
        if isinstance(fleet, Fleet):
            report.sections.append(("the fleet's logs", fleet.logs()))
    return report
