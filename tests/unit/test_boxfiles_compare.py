"""A box's list of paths against its template's (hutch.node.boxfiles._compare), streamed from a file."""

from __future__ import annotations

from pathlib import Path

from hutch.node import boxfiles


def test_what_changed_and_what_was_removed_as_the_list_streams(tmp_path: Path) -> None:
    template = {"/": 1.0, "/etc": 1.0, "/etc/kept": 1.0, "/etc/touched": 1.0, "/etc/gone": 1.0, "/srv/vol/x": 1.0}
    entries = [b"1.0 /", b"1.0 /etc", b"1.0 /etc/kept", b"2.5 /etc/touched", b"9.0 /etc/new", b"9.0 /tmp/scratch",
               b"bad /etc/odd-stamp", b"1.0 relative", b"9.0 /srv/vol/y", b"9.0 /na\xefve"]
    listing = tmp_path / "list"
    listing.write_bytes(b"\0".join(entries))
    changed = boxfiles._compare(listing, template, ("/srv/vol",), tmp_path / "removed", tmp_path / "changed")
    assert (tmp_path / "changed").read_bytes().split(b"\0")[:-1] == [b"/etc/touched", b"/etc/new", b"/etc/odd-stamp",
                                                                       b"/na\xefve"]
    assert changed == 4
    assert (tmp_path / "removed").read_bytes().split(b"\0") == [b"/etc/gone"]  # not /srv/vol/x: a volume's


def test_a_path_split_across_reads_is_read_whole(tmp_path: Path) -> None:
    template = {"/": 1.0}
    long = b"/" + b"a" * (3 << 20)  # longer than a read
    listing = tmp_path / "list"
    listing.write_bytes(b"9.0 " + long + b"\0" + b"9.0 /b")
    assert boxfiles._compare(listing, template, (), tmp_path / "removed", tmp_path / "changed") == 2
    assert (tmp_path / "changed").read_bytes() == long + b"\0/b\0"
