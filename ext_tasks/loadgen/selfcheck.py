"""``ext-tasks bench --self-check``: how fast the loader itself is, against a trivial local echo, and
how far it is from ``wrk`` (when installed) on the same echo with the same connections. A loader far
below wrk would be measuring itself, not the server.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Final

from .steps import Plan, prepare, run_step

CONNECTIONS: Final = 16
_WRK_SCRIPT: Final = 'wrk.method = "POST"\nwrk.body = \'{"id":1}\'\nwrk.headers["Content-Type"] = "application/json"\n'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def self_check(duration_s: float) -> str:
    port = _free_port()
    echo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ext_tasks.loadgen.echo", str(port), stdout=asyncio.subprocess.PIPE
    )
    assert echo.stdout is not None
    try:
        await asyncio.wait_for(echo.stdout.readline(), 10)
        url = f"http://127.0.0.1:{port}/echo"
        plan = Plan(url=url, workload="echo", concurrency=(CONNECTIONS,), duration_s=duration_s, warmup_s=0.5)
        step = await run_step(plan, await prepare(plan), CONNECTIONS, None)
        ours = step.merged.ops / duration_s
        p50 = step.merged.latency_ms().get("p50", 0.0)
        lines = [
            f"loader against a local echo, {CONNECTIONS} connections, {duration_s:g} s: {ours:,.0f} requests/s, "
            f"p50 {p50:.3f} ms, loader CPU {1e6 * step.loader_cpu_s / max(1, step.merged.ops):.1f} µs per request"
        ]
        wrk = shutil.which("wrk")
        if wrk is None:
            lines.append("wrk is not installed: no second opinion (install wrk to compare)")
        else:
            theirs = await _wrk(wrk, url, duration_s)
            lines.append(f"wrk on the same echo: {theirs:,.0f} requests/s; loader ÷ wrk = {ours / theirs:.2f}")
        return "\n".join(lines)
    finally:
        echo.kill()
        await echo.wait()


async def _wrk(wrk: str, url: str, duration_s: float) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "post.lua"
        script.write_text(_WRK_SCRIPT)
        process = await asyncio.create_subprocess_exec(
            wrk, "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(duration_s))}s", "-s", str(script), url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output = (await process.communicate())[0].decode(errors="replace")
    found = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if found is None:
        raise RuntimeError(f"wrk printed no Requests/sec:\n{output[-1000:]}")
    return float(found.group(1))
