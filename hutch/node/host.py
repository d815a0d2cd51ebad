"""What this host's /proc says of memory: the host's own, and a box's sandbox process's."""

from __future__ import annotations

from pathlib import Path


def meminfo() -> dict[str, int]:
    """The host's /proc/meminfo, in bytes (empty if it cannot be read)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            found[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return found


def resident_bytes(pid_file: Path) -> int:
    """The resident memory of the process whose pid `pid_file` holds (0 if it cannot be read)."""
    try:
        status = Path(f"/proc/{int(pid_file.read_text())}/status").read_text()
        return 1024 * int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    except (OSError, ValueError, StopIteration):
        return 0
