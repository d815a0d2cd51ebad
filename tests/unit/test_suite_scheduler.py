"""The integration half's parallel workers: a test that asks for the stand-in internet, in any of
the ways pytest allows, is known as one (all such tests share one worker: the namespace's fixed
addresses can be held once), and the other tests of its file are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import uses_internet


@pytest.mark.parametrize(("source", "test"), [
    ("def test_a(internet):\n    pass\n", "test_a"),
    ("import pytest\n\n@pytest.fixture\ndef site(internet):\n    return 1\n\n@pytest.fixture\ndef page(site):\n"
     "    return 2\n\ndef test_b(page):\n    pass\n", "test_b"),
    ("import pytest\npytestmark = pytest.mark.usefixtures('internet')\n\ndef test_c():\n    pass\n", "test_c"),
    ("def test_d(request):\n    request.getfixturevalue('internet')\n", "test_d"),
    ("import pytest\n\n@pytest.mark.usefixtures('internet')\ndef test_e():\n    pass\n", "test_e"),
    ("class TestF:\n    def test_f(self, internet):\n        pass\n", "test_f"),
])
def test_each_way_of_asking_for_the_internet_is_seen(tmp_path: Path, source: str, test: str) -> None:
    file = tmp_path / "test_x.py"
    file.write_text(source + "\ndef test_other(box):\n    pass\n")
    assert uses_internet(file) and uses_internet(file, test)
    assert uses_internet(file, "test_other") is ("pytestmark" in source), "a module-wide mark counts for all"


def test_a_file_that_only_mentions_the_internet_is_not_grouped(tmp_path: Path) -> None:
    file = tmp_path / "test_y.py"
    file.write_text('def test_e(box):\n    """This box reaches nothing of the internet."""\n')
    assert not uses_internet(file)
    assert not uses_internet(tmp_path / "gone.py")


def test_the_suites_egress_tests_are_grouped() -> None:
    root = Path(__file__).parents[2]
    assert uses_internet(root / "tests/integration/test_egress.py")
    assert not uses_internet(root / "tests/integration/test_http_api.py")
    snapshots = root / "tests/integration/test_snapshots.py"
    assert uses_internet(snapshots, "test_a_fork_has_its_own_token_and_stand_ins_and_its_secrets_and_rules_apply")
    assert not uses_internet(snapshots, "test_boxes_from_a_snapshot_continue_its_processes_and_files_and_go_their_own_ways")
