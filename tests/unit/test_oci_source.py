"""What an image source string parses to, and what it may not be (hutch.templates.oci.parse_source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hutch.templates import oci


@pytest.mark.parametrize("text", [
    "oci-archive:image.tar", "docker-archive:./image.tar", "oci:layout:tag", "oci-archive:-rf",
    "docker-archive:--src-creds=x", "oci:/layout:--tag", "oci-archive:/a\x00b.tar", "oci:/a\nb",
    "docker://-x", "docker://registry.example/a b", "docker://", "docker:registry.example/a", "oci:/l:",
    "oci-archive:" + "/a" * 3000,
])
def test_parse_source_refuses_what_could_become_an_option_or_a_surprise(text: str) -> None:
    with pytest.raises(ValueError):
        oci.parse_source(text)


def test_parse_source_reads_each_form_and_leaves_template_names_alone(tmp_path: Path) -> None:
    assert oci.parse_source("python") is None and oci.parse_source("my-template:v2") is None
    s = oci.parse_source("oci:/srv/layouts/app:v1")
    assert s == oci.ImageSource("oci", "/srv/layouts/app", "v1") and str(s) == "oci:/srv/layouts/app:v1"
    assert oci.parse_source("docker-archive:/x/img.tar") == oci.ImageSource("docker-archive", "/x/img.tar")
    assert oci.parse_source("docker-archive:/x/img.tar:app:1") == oci.ImageSource("docker-archive", "/x/img.tar", "app:1")
    remote = oci.parse_source("docker://registry.example:5000/team/app:1.2")
    assert remote is not None and remote.remote and remote.path is None
    assert remote.skopeo_name() == "docker://registry.example:5000/team/app:1.2"
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed/escape").symlink_to("/etc")
    assert oci.parse_source(f"oci-archive:{tmp_path}/allowed/a.tar", allowed_dirs=[tmp_path / "allowed"]) is not None
    for outside in (f"oci-archive:{tmp_path}/a.tar", f"oci:{tmp_path}/allowed/escape", f"oci:{tmp_path}/allowed/../a"):
        with pytest.raises(ValueError):
            oci.parse_source(outside, allowed_dirs=[tmp_path / "allowed"])

