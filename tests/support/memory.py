"""A process's memory as Linux reports it (``/proc/<pid>/status``), for tests that bound it."""

from __future__ import annotations

from pathlib import Path


def _status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} for process {pid}")


def rss_mib(pid: int) -> float:
    """Resident memory now."""
    return _status_mib(pid, "VmRSS")


def peak_rss_mib(pid: int) -> float:
    """The highest resident memory since the process started (its high-water mark)."""
    return _status_mib(pid, "VmHWM")
