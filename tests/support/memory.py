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


#: ``python -c MEASURED_CLI args...``: ``ext-tasks args...``, then its own peak RSS as the last line of stderr
#: (``peak-mib N``, see :func:`split_peak`): VmHWM, since ``ru_maxrss`` keeps the forking parent's across exec.
MEASURED_CLI = """
import atexit, sys

def peak() -> None:
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("peak-mib", int(hwm.split()[1]) / 1024, file=sys.stderr)

atexit.register(peak)
from ext_tasks.cli import main
sys.exit(main(sys.argv[1:]))
"""


def split_peak(stderr: str) -> tuple[str, float]:
    """The stderr of a :data:`MEASURED_CLI` run without its last line, and the peak RSS (MiB) that line says."""
    *rest, last = stderr.rstrip("\n").split("\n")
    if not last.startswith("peak-mib "):
        raise ValueError(f"no peak-mib line at the end of: {stderr[-2000:]}")
    return "\n".join(rest), float(last.split()[1])
