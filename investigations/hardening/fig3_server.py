"""Launcher of figure 3, run as a script (``python investigations/hardening/fig3_server.py serve ...``, never imported):
``ext_tasks.cli.main`` of whichever checkout is first on PYTHONPATH, with two measurement hooks that work on
both checkouts (no code of theirs is changed):

* every MemoryTaskStore / MemorySessionStore constructed is recorded, and a thread writes the length of
  each of their container attributes (dicts, sets, lists, queues; dicts of containers as keys + entries)
  and the process RSS to $FIG_SIZES_FILE every second;
* MemorySessionStore is constructed with ttl_s=$FIG_SESSION_TTL_S (both versions hard-code 3600 s and
  have no setting for it), so sessions can lapse within the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ext_tasks.store import memory as task_memory
from migration import sessions as session_memory

STORES: dict[str, object] = {}
SESSION_TTL_S = float(os.environ.get("FIG_SESSION_TTL_S", "3600"))


def _record(cls: type[Any], name: str, force_ttl: bool) -> None:
    """Wrap ``cls.__init__`` so each instance is kept in STORES[name] (with ``ttl_s`` forced if asked)."""
    original: Callable[..., None] = cls.__init__

    def init(self: object, *args: Any, **kwargs: Any) -> None:
        if force_ttl:
            args = ()
            kwargs["ttl_s"] = SESSION_TTL_S
        original(self, *args, **kwargs)
        STORES[name] = self

    cls.__init__ = init


_record(task_memory.MemoryTaskStore, "task_store", False)
_record(session_memory.MemorySessionStore, "session_store", True)


def _size(value: object) -> object:
    if isinstance(value, asyncio.Queue):
        return value.qsize()
    if isinstance(value, dict):
        inner = [v for v in list(value.values()) if isinstance(v, dict | set | list)]
        if inner and len(inner) == len(value):
            return {"keys": len(value), "entries": sum(len(v) for v in inner)}
        return len(value)
    if isinstance(value, set | list):
        return len(value)
    return None


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _sizes(store: object) -> dict[str, object]:
    sizes: dict[str, object] = {}
    for attr, value in list(vars(store).items()):
        size = None
        for _ in range(3):
            try:
                size = _size(value)
                break
            except RuntimeError:  # changed size during iteration: try again
                size = None
        if size is not None:
            sizes[attr] = size
    return sizes


def _report(path: str) -> None:
    while True:
        snapshot: dict[str, object] = {"t": time.time(), "rss_mib": round(_rss_mib(), 1)}
        for name, store in list(STORES.items()):
            snapshot[name] = _sizes(store)
        tmp = path + ".tmp"
        with open(tmp, "w") as out:
            json.dump(snapshot, out)
        os.replace(tmp, path)
        time.sleep(1.0)


if __name__ == "__main__":
    threading.Thread(target=_report, args=(os.environ["FIG_SIZES_FILE"],), daemon=True).start()

    from ext_tasks.cli import main

    sys.exit(main(sys.argv[1:]))
