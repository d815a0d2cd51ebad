"""files: write, read, read_text, download_dir; parents made, ownership, bad paths, 100 MB."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hutch import NotFoundError, ValidationError
from tests.integration.support import Env


def test_text_and_binary_round_trip_byte_for_byte(box: Any) -> None:
    box.files.write("/app/data.txt", "content")  # the Superserve quickstart: /app does not exist yet
    assert box.files.read_text("/app/data.txt") == "content"
    every_byte = bytes(range(256)) * 64 + b"\r\n\x00tail"
    box.files.write("/home/user/blob.bin", every_byte)
    assert box.files.read("/home/user/blob.bin") == every_byte
    assert box.commands.run("sha256sum /home/user/blob.bin").stdout.split()[0] == hashlib.sha256(every_byte).hexdigest()
    box.files.write("/home/user/empty", b"")
    assert box.files.read("/home/user/empty") == b""


def test_written_files_and_new_parents_belong_to_the_user(box: Any) -> None:
    box.files.write("/srv/deep/er/file.txt", "x")
    r = box.commands.run("stat -c '%U %a' /srv/deep /srv/deep/er /srv/deep/er/file.txt")
    assert r.stdout.split("\n")[:3] == ["user 755", "user 755", "user 644"]
    assert box.commands.run("echo more >> /srv/deep/er/file.txt && cat /srv/deep/er/file.txt").stdout == "xmore\n"


def test_overwrite_replaces_the_whole_file(box: Any) -> None:
    box.files.write("/tmp/f", "a long first version")
    box.files.write("/tmp/f", "short")
    assert box.files.read_text("/tmp/f") == "short"


def test_files_written_by_commands_can_be_read(box: Any) -> None:
    box.commands.run("mkdir -p /home/user/out && seq 1 5 > /home/user/out/n.txt")
    assert box.files.read_text("/home/user/out/n.txt") == "1\n2\n3\n4\n5\n"


@pytest.mark.parametrize("path", ["relative.txt", "/home/user/../etc/passwd", "/a/../../b", "", "/x\x00y"])
def test_bad_paths_are_refused_before_touching_anything(box: Any, path: str) -> None:
    with pytest.raises(ValidationError) as err:
        box.files.write(path, "x")
    assert err.value.code in ("invalid_path", "invalid_request") and err.value.status_code == 400
    with pytest.raises(ValidationError):
        box.files.read(path)


def test_missing_files_and_directories_give_typed_errors(box: Any) -> None:
    with pytest.raises(NotFoundError) as nf:
        box.files.read("/no/such/file")
    assert nf.value.code == "file_not_found"
    with pytest.raises(ValidationError) as isdir:
        box.files.read("/home/user")
    assert isdir.value.code == "is_a_directory"
    box.commands.run("mkfifo /tmp/fifo")
    for special in ("/dev/zero", "/tmp/fifo"):  # would never end, or never start
        with pytest.raises(ValidationError) as odd:
            box.files.read(special)
        assert odd.value.code == "not_a_regular_file"
    assert "Linux" in box.files.read_text("/proc/version")  # says size 0, has content
    box.files.write("/home/user/plain", "x")
    with pytest.raises(ValidationError) as notdir:
        box.files.write("/home/user/plain/child", "x")
    assert notdir.value.code == "not_a_directory"


def test_download_dir_gives_a_zip_of_the_tree(box: Any) -> None:
    box.files.write("/work/a.txt", "A")
    box.files.write("/work/sub/b.bin", b"\x00\x01")
    box.commands.run("mkdir -p /work/empty && ln -s /etc/passwd /work/link")
    archive = zipfile.ZipFile(io.BytesIO(box.files.download_dir("/work")))
    assert archive.read("a.txt") == b"A" and archive.read("sub/b.bin") == b"\x00\x01"
    assert "empty/" in archive.namelist()
    assert "link" not in archive.namelist()  # links are not followed out of the tree
    with pytest.raises(NotFoundError):
        box.files.download_dir("/no/such/dir")


def test_a_100_mb_file_streams_through_without_filling_server_memory(box: Any, env: Env) -> None:
    data = os.urandom(100 * 2**20)
    assert env.server.proc is not None
    Path(f"/proc/{env.server.proc.pid}/clear_refs").write_text("5")  # restart the peak from now
    before = env.server.memory_kib("VmHWM")
    box.files.write("/home/user/big.bin", data)
    assert box.commands.run("stat -c %s /home/user/big.bin").stdout.strip() == str(len(data))
    back = box.files.read("/home/user/big.bin")
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    grown_mib = (env.server.memory_kib("VmHWM") - before) / 1024
    assert grown_mib < 50, f"the server's peak memory grew by {grown_mib:.0f} MiB for a 100 MiB file"


def test_a_link_the_box_user_planted_does_not_steer_a_write(box: Any) -> None:
    box.commands.run("ln -s /etc /home/user/evil && mkdir -p /home/user/real && ln -s real /home/user/alias")
    with pytest.raises(ValidationError) as err:
        box.files.write("/home/user/evil/planted", "x")
    assert err.value.code == "unsafe_path"
    assert box.commands.run("ls /etc/planted").exit_code != 0
    with pytest.raises(ValidationError):
        box.files.write("/home/user/alias/x", "x")  # even a harmless one: links of the user are not followed
    box.files.write("/lib/hutch-test.txt", "y")  # the template's own links are: /lib -> usr/lib
    assert box.commands.run("cat /usr/lib/hutch-test.txt").stdout == "y"
    box.files.write("/home/user/real/deep/er/f.txt", "z")  # and new directories are made as before
    assert box.files.read_text("/home/user/real/deep/er/f.txt") == "z"
