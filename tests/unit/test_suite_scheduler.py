"""The integration half's parallel workers: a file that asks for the stand-in internet, in any of
the ways pytest allows, is known as one (all such files share one worker: the namespace's fixed
addresses can be held once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import uses_internet


@pytest.mark.parametrize("source", [
    "def test_a(internet):\n    pass\n",
    "import pytest\n\n@pytest.fixture\ndef site(internet):\n    return 1\n\ndef test_b(site):\n    pass\n",
    "import pytest\npytestmark = pytest.mark.usefixtures('internet')\n\ndef test_c():\n    pass\n",
    "def test_d(request):\n    request.getfixturevalue('internet')\n",
])
def test_each_way_of_asking_for_the_internet_is_seen(tmp_path: Path, source: str) -> None:
    file = tmp_path / "test_x.py"
    file.write_text(source)
    assert uses_internet(file)


def test_a_file_that_only_mentions_the_internet_is_not_grouped(tmp_path: Path) -> None:
    file = tmp_path / "test_y.py"
    file.write_text('def test_e(box):\n    """This box reaches nothing of the internet."""\n')
    assert not uses_internet(file)
    assert not uses_internet(tmp_path / "gone.py")


def test_the_suites_egress_tests_are_grouped() -> None:
    root = Path(__file__).parents[2]
    assert uses_internet(root / "tests/integration/test_egress.py")
    assert not uses_internet(root / "tests/integration/test_http_api.py")
