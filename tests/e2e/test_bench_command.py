"""``ext-tasks bench --url``: each workload against this server (in memory, and on Valkey) and against
FastMCP 4, in runs of about a second per step; what it counts when things fail; and the open loop
showing a stall that the closed loop hides.

Every run writes ``--json``, which the tests read: the table is for people, the JSON for checks.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hdrh.histogram import HdrHistogram

from tests.e2e.test_legacy_client_fastmcp import SERVER as FASTMCP_SERVER
from tests.e2e.test_legacy_client_fastmcp import _process, fastmcp4_python
from tests.support.cluster import keygen
from tests.support.lossy_proxy import LossyProxy, every
from tests.support.processes import REPO, ServerProcess, free_port, running_server
from tests.support.valkey import running_valkey

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.bench_tools"
SHORT = ("--duration", "0.5", "--warmup", "0.2")
#: Long enough for a rate of 200/s to be told from the server's own pace.
RATED = ("--duration", "1", "--warmup", "0.3")
TIMEOUT_S = 120
__all__ = ["fastmcp4_python"]  # a fixture, used by name below


@pytest.fixture(scope="module", params=["memory", "valkey"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory = tmp_path_factory.mktemp(f"bench-{request.param}")
    if request.param == "memory":
        with running_server(directory, tools=TOOLS) as served:
            yield served
        return
    with (
        running_valkey(directory / "valkey") as valkey,
        running_server(
            directory, tools=TOOLS, env={"EXT_TASKS_VALKEY_URL": valkey.url, "EXT_TASKS_STATE_KEYS": keygen()}
        ) as served,
    ):
        yield served


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """For the tests about the command itself (the store does not matter to them)."""
    with running_server(tmp_path_factory.mktemp("bench-memory-only"), tools=TOOLS) as served:
        yield served


def bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``ext-tasks bench``; its exit, and the ``--json`` report (empty if none was written)."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    done = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "bench", *args, "--json", str(report)],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO, check=False,
    )  # fmt: skip
    return done, json.loads(report.read_text()) if report.exists() else {}


def assert_clean_steps(report: dict[str, Any], steps: int) -> None:
    """Every step measured something, nothing failed, and the histogram holds exactly the ops counted."""
    assert len(report["steps"]) == steps, report
    for step in report["steps"]:
        assert step["ops"] > 0 and step["errors"] == {}, step
        assert step["requests"] >= step["ops"]
        histogram = HdrHistogram.decode(step["histogram"].encode())
        assert histogram.get_total_count() == step["ops"]
        latency = step["latency_ms"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]


@pytest.mark.parametrize(
    ("workload", "extra"),
    [
        ("mrtr", ("--tool", "ask")),
        ("replay", ("--tool", "ask")),
        ("call", ("--tool", "ask", "--args", '{"item": "y"}')),
        ("tasks-get", ("--tool", "quick_task", "--population", "20")),
        ("lifecycle", ("--tool", "quick_task", "--poll-ms", "5")),
        ("lifecycle", ("--tool", "ask_in_task")),
    ],
    ids=["mrtr", "replay", "call", "tasks-get", "lifecycle", "lifecycle-with-input"],
)
def test_each_workload(server: ServerProcess, tmp_path: Path, workload: str, extra: tuple[str, ...]) -> None:
    done, report = bench(tmp_path, "--url", server.url, workload, *extra, "--concurrency", "1,4", *SHORT)
    assert done.returncode == 0, done.stderr
    if workload == "call":  # a plain call to a multi round-trip tool answers input_required: still a result
        assert report["steps"][0]["ops"] > 0
    else:
        assert_clean_steps(report, 2)
    assert report["workload"] == workload and report["loop"] == "closed"
    header = "step      ops/s      req/s   p50 ms   p90 ms   p99 ms  p99.9 ms   max ms  errors"
    assert header in done.stdout and "c=1" in done.stdout and "c=4" in done.stdout
    if workload == "mrtr":
        assert all(step["requests"] == 2 * step["ops"] for step in report["steps"])  # call + completing retry


def test_several_loader_processes_merge_exactly(memory_server: ServerProcess, tmp_path: Path) -> None:
    done, report = bench(tmp_path, "--url", memory_server.url, "replay", "--tool", "ask", "--concurrency", "4",
                         "--processes", "2", *SHORT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert_clean_steps(report, 1)
    assert report["processes"] == 2


def test_open_loop_holds_its_rate(memory_server: ServerProcess, tmp_path: Path) -> None:
    done, report = bench(tmp_path, "--url", memory_server.url, "replay", "--tool", "ask", "--rate", "200", *RATED)
    assert done.returncode == 0, done.stderr
    assert_clean_steps(report, 1)
    assert report["loop"] == "open"
    assert 180 <= report["steps"][0]["ops_per_s"] <= 210, report["steps"][0]  # the schedule, not the server


def test_failures_are_counted_by_what_came_back(memory_server: ServerProcess, tmp_path: Path) -> None:
    done, report = bench(tmp_path, "--url", memory_server.url, "call", "--tool", "fails", "--concurrency", "2", *SHORT)
    assert done.returncode == 0, done.stderr
    step = report["steps"][0]
    assert step["ops"] == 0 and step["errors"]["isError"] > 0
    assert step["error_samples"]["isError"] == ["this tool always fails"] * len(step["error_samples"]["isError"])
    assert "x isError: this tool always fails" in done.stdout


@pytest.mark.anyio
async def test_a_server_answering_503_part_of_the_time(memory_server: ServerProcess, tmp_path: Path) -> None:
    async with LossyProxy(memory_server.url, drop=lambda _: False, refuse=every(4)) as proxy:
        report_path = tmp_path / "503.json"
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ext_tasks", "bench", "--url", proxy.url, "replay", "--tool", "ask",
            "--concurrency", "2", *SHORT, "--json", str(report_path), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode == 0, err
    step = json.loads(report_path.read_text())["steps"][0]
    # Served and refused both counted, the refusals by status; the proxy also refused during the warm-up.
    assert step["ops"] > 0 and set(step["errors"]) == {"HTTP 503"}, step
    assert 0 < step["errors"]["HTTP 503"] <= proxy.refused
    assert b"HTTP 503" in out


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_open_loop_shows_a_stall_the_closed_loop_hides(tmp_path: Path) -> None:
    """Every tenth call blocks the server for 200 ms. Closed loop (one user): only the stalled call is
    slow, the others wait for nothing, so the median stays at the fast path. Open loop at about the same
    throughput: every request scheduled during the stall waits for it, so the stall shows in the bulk of
    the distribution, not only in its tail."""
    with running_server(tmp_path, tools=TOOLS) as served:
        args = ("--url", served.url, "call", "--tool", "stall_every_tenth", "--duration", "3", "--warmup", "0.5")
        done, closed = bench(tmp_path, *args, "--concurrency", "1")
        assert done.returncode == 0, done.stderr
        rate = closed["steps"][0]["ops_per_s"]
        done, opened = bench(tmp_path, *args, "--rate", f"{0.9 * rate:.1f}")
        assert done.returncode == 0, done.stderr
    closed_ms, open_ms = closed["steps"][0]["latency_ms"], opened["steps"][0]["latency_ms"]
    assert closed["steps"][0]["errors"] == {} and opened["steps"][0]["errors"] == {}
    assert closed_ms["p99"] >= 150  # the stalled call itself
    assert closed_ms["p50"] < 20, closed_ms
    assert open_ms["p50"] >= 40 and open_ms["p99"] >= 150, (open_ms, closed_ms)


def test_against_fastmcp(fastmcp4_python: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [str(fastmcp4_python), str(FASTMCP_SERVER), "--host", "127.0.0.1", "--port", str(port)]
    with _process(command, tmp_path / "fastmcp4.log", url):
        polled = ("tasks-get", "--tool", "slow_compute", "--args", '{"seconds": 0.5}', "--population", "10")
        done, report = bench(tmp_path, "--url", url, *polled, "--concurrency", "1,4", *SHORT)
        assert done.returncode == 0, done.stderr
        assert_clean_steps(report, 2)
        asked = ("lifecycle", "--tool", "confirm_delete", "--args", '{"filename": "x.log"}')
        done, report = bench(tmp_path, "--url", url, *asked, "--concurrency", "2", *SHORT)
        assert done.returncode == 0, done.stderr
        assert_clean_steps(report, 1)
        assert all(step["requests"] >= 3 * step["ops"] for step in report["steps"])  # create, update, polls


def test_usage_errors(memory_server: ServerProcess, tmp_path: Path) -> None:
    for args, says in (
        (("--url", memory_server.url, "mrtr"), "mrtr needs --tool NAME"),
        (("--url", memory_server.url, "mrtr", "--tool", "nope"), "the server has no tool 'nope'"),
        (("--url", "https://example.com/mcp", "call", "--tool", "x"), "must be an http:// URL"),
        (("--url", memory_server.url, "call", "--tool", "ask", "--args", "[1]"), "--args must be a JSON object"),
        (("--url", memory_server.url, "tasks-get", "--tool", "fails", "--population", "2"), "answered inline"),
    ):
        done, report = bench(tmp_path, *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
        assert report == {}


def test_self_check_and_plot(memory_server: ServerProcess, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "ext_tasks", "bench", "--self-check", "--duration", "1"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "loader against a local echo, 16 connections" in done.stdout
    if shutil.which("wrk") is None:  # the test command installs it; elsewhere the check says so
        assert "wrk is not installed" in done.stdout
    else:
        ratio = re.search(r"loader ÷ wrk = ([\d.]+)", done.stdout)
        assert ratio is not None, done.stdout
        assert float(ratio.group(1)) >= 0.3, done.stdout  # the loader is not what a benchmark would measure
    plot = tmp_path / "plot.png"
    done, _ = bench(tmp_path, "--url", memory_server.url, "replay", "--tool", "ask", "--concurrency", "1,2", *SHORT,
                    "--plot", str(plot))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("stack", ["ext-hc-mem", "ext-hc-vk"])
def test_the_bench_fairness_scenario_runs_and_reports(stack: str, tmp_path: Path) -> None:
    """``python -m bench --fairness`` with a small flood: both settings (the principal cap and none) measured
    alone and during the flood, the flood all created, and flood ÷ alone computed from the figures it
    reports (their values are the full run's business, not a test's: this box is small and shared)."""
    out = tmp_path / "fairness"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--fairness", "--stacks", stack, "--flood", "200", "--samples", "5",
         "--out", str(out)],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    saved = json.loads((out / "results.json").read_text())
    assert saved["meta"]["failures"] == [] and saved["meta"]["scenario"]["flood"] == 200
    settings = saved["fairness"][stack]
    assert set(settings) == {"cap", "no_cap"}
    for measured in settings.values():
        alone, flood = measured["alone"], measured["flood"]
        assert alone["samples"] == 5 and 1 <= flood["samples"] <= 5
        assert flood["flood"]["created"] == 200 and flood["flood"]["errors"] == {}
        for phase in (alone, flood):
            assert len(phase["latencies_ms"]) == phase["samples"]
            assert 0 < phase["p50"] <= phase["p95"] <= phase["max"]
            assert phase["create_reply"]["p50"] is not None and phase["queued"]["samples"] == phase["samples"]
        assert measured["ratio"]["p50"] == round(flood["p50"] / alone["p50"], 2)
        assert measured["ratio"]["p95"] == round(flood["p95"] / alone["p95"], 2)
    report = (out / "report.md").read_text()
    assert "## Fairness: a principal's create-to-start latency while another floods" in report
    assert f"| {stack} | cap 4 |" in report and f"| {stack} | no cap |" in report
    assert "the issue's bar" in report
