"""What a Valkey server ran, by command, for the tests that hold the hot path to a command budget.

``INFO commandstats`` counts every command, those run inside scripts included. What a test measures is
steady work: the counter's own commands (``INFO``, ``CONFIG RESETSTAT``) are left out, and so is what a
connection costs once (a pool opening one mid-window: its handshake and health check; a script loaded on
first use), which is not a request's cost.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Final

from valkey import Valkey

#: The counter's own commands.
COUNTER_COMMANDS: Final = ("info", "config|resetstat")
#: What a connection costs once.
CONNECTION_SETUP: Final = ("client|setinfo", "client|setname", "hello", "select", "auth", "ping", "script|load")


def commands(client: Valkey) -> Counter[str]:
    """Commands run since the last reset, but the counter's own and a connection's setup."""
    stats: dict[str, dict[str, int]] = client.info("commandstats")  # type: ignore[assignment]  # sync client
    calls = Counter({name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()})
    return calls - Counter({name: calls[name] for name in (*COUNTER_COMMANDS, *CONNECTION_SETUP)})


def wait_until_quiet(client: Valkey, within_s: float, checks: int = 3, every_s: float = 0.05) -> None:
    """Until Valkey runs nothing for ``checks`` readings in a row (a finished task's last steps done)."""
    deadline, last, quiet = time.monotonic() + within_s, sum(commands(client).values()), 0
    while quiet < checks:
        assert time.monotonic() < deadline, "Valkey kept running commands with nothing asked of the server"
        time.sleep(every_s)
        now = sum(commands(client).values())
        quiet, last = (quiet + 1 if now == last else 0), now
