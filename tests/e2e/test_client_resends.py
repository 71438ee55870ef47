"""The client's resends: a lost answer is sent again under the same idempotency key, so the task is
created once and run once; a limit answered 429 is waited out as ``Retry-After`` says, and reported as
:class:`LimitExceeded` once the resends are spent."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ext_tasks.client import Client, LimitExceeded, RetryPolicy
from tests.e2e.conftest import TASK_TOOLS
from tests.support.cluster import running_cluster
from tests.support.lossy_proxy import LossyProxy, first_with
from tests.support.processes import running_server

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_lost_creation_answer_is_resent_and_names_the_same_task(tmp_path: Path) -> None:
    """Three instances behind nginx on one Valkey; the first ``tools/call`` is served (the task is created
    and starts) but its answer is dropped. The client resends with the call's idempotency key, possibly
    to another instance: one task, one run."""
    journal = tmp_path / "journal.txt"
    with running_cluster(tmp_path, tools=TASK_TOOLS, env={"E2E_TASK_JOURNAL": str(journal)}) as cluster:
        async with LossyProxy(cluster.url, drop=first_with(b'"tools/call"')) as proxy, Client(proxy.url) as client:
            handle = await client.start_tool("journaled", {"seconds": 0.5})
            result = await handle.wait()
        assert proxy.dropped == 1
        assert result["content"][0]["text"].startswith("slept 0.5s")
        runs = [line.split() for line in journal.read_text().splitlines() if line.startswith("start ")]
        assert [run[1] for run in runs] == [handle.task_id], runs


async def test_a_limit_is_waited_out_as_retry_after_says(tmp_path: Path) -> None:
    """One unfinished task per principal; ``Retry-After`` is the slowest poll interval (1 s here)."""
    env = {"EXT_TASKS_MAX_ACTIVE_TASKS": "1", "EXT_TASKS_POLL_INTERVAL_MAX_MS": "1000"}
    with running_server(tmp_path, tools="ext_tasks.examples.conformance", env=env) as server:
        async with Client(server.url) as client:
            first = await client.start_tool("slow_compute", {"seconds": 2, "label": "first"})
            started = time.monotonic()
            second = await client.start_tool("slow_compute", {"seconds": 0.1, "label": "second"})
            waited = time.monotonic() - started
            assert first.task_id is not None and second.task_id is not None
            assert waited >= 1.0, f"resent after {waited:.2f}s, sooner than Retry-After"
            assert (await second.wait())["content"][0]["text"] == "second: computed after 0.1s"
            assert (await first.wait())["content"][0]["text"] == "first: computed after 2s"

            blocker = await client.start_tool("slow_compute", {"seconds": 30, "label": "blocker"})
            async with Client(server.url, retry=RetryPolicy(attempts=2)) as impatient:
                with pytest.raises(LimitExceeded) as refused:
                    await impatient.start_tool("slow_compute", {"seconds": 0.1})
            assert refused.value.http_status == 429 and refused.value.data["limit"] == "max_active_tasks"
            await blocker.cancel()
