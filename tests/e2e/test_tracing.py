"""Tracing across instances: three instances behind nginx on one Valkey export OTLP/HTTP to a receiver
this test runs (:mod:`tests.support.otlp_receiver`), and the spans they send are read back.

* A ``tools/call`` carrying ``_meta.traceparent`` creates a task; the instance running it is SIGKILLed
  mid-run; the run is reclaimed by a survivor and finishes. The exported spans are one trace: the
  request's ``SERVER`` span, child of the client's context, and the surviving run attempt's
  ``execute_tool`` span, child of the request span and linked to it, with its attempt number, the
  reclaim and the outcome as events; ``tasks/get`` spans (traces of their own) link to it. (The killed
  attempt's span never ended, so it was never exported: a SIGKILL loses what the process had not sent.)
* ``ext-tasks proxy`` passes the context upstream (modern requests and legacy sessions), and
  ``ext-tasks call`` sends its own ``CLIENT`` span's context in ``_meta``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from ext_tasks import tracing
from tests.e2e.test_balancer import pid_in, result_text
from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.legacy import Session
from tests.support.mcp_http import post
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.processes import REPO, free_port, stop

pytestmark = pytest.mark.e2e

TOOLS = "tests.e2e.task_tools"
CAPABILITIES: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TERMINAL = ("completed", "failed", "cancelled")
#: The client's context: a trace and the span the server's request span must name as its parent.
TRACE_ID = "5b8efff798038103d269b633813fc60c"
CLIENT_SPAN = "eee19b7ec3c1b174"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
#: A run long enough to be killed in, short enough for the test.
SLEEP_S = 4.0
SPAN_WAIT_S = 30.0


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    """What turns tracing on in a child process, exporting to ``receiver`` within 100 ms of a span's end."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def fleet(tmp_path: Path, receiver: OtlpReceiver) -> Any:
    env = {**otel_env(receiver), "EXT_TASKS_LEASE_S": "2", "EXT_TASKS_SHUTDOWN_GRACE_S": "1"}
    return running_cluster(tmp_path, tools=TOOLS, env=env)


def task_get(client: httpx.Client, url: str, task_id: str) -> dict[str, Any]:
    _, message = post(client, url, "tasks/get", {"taskId": task_id}, capabilities=CAPABILITIES)
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


def test_a_task_that_survives_an_instance_kill_is_one_trace(tmp_path: Path, receiver: OtlpReceiver) -> None:
    with fleet(tmp_path, receiver) as cluster, httpx.Client(timeout=10.0) as client:
        params = {"name": "sleepy", "arguments": {"seconds": SLEEP_S}}
        _, created = post(
            client,
            cluster.url,
            "tools/call",
            params,
            capabilities=CAPABILITIES,
            extra_meta={"traceparent": TRACEPARENT},
        )
        task_id = created["result"]["taskId"]
        request = receiver.wait_for_span(
            lambda span: span.trace_id == TRACE_ID and span.name == "tools/call sleepy", SPAN_WAIT_S
        )

        # The instance running it (named by the tool's status message) dies mid-run.
        def running_pid() -> int | None:
            return pid_in(task_get(client, cluster.url, task_id).get("statusMessage"))

        victim = wait_for(running_pid, 30, message="the task reporting the pid that runs it")
        os.kill(victim, signal.SIGKILL)
        cluster.by_pid(victim).process.wait(timeout=10)
        survivors = cluster.alive()
        assert len(survivors) == 2

        def finished() -> dict[str, Any] | None:
            task = task_get(client, survivors[0].url, task_id)
            return task if task["status"] in TERMINAL else None

        task = wait_for(finished, 60, interval_s=0.2, message=lambda: f"the rerun to finish\n{cluster.logs()[-4000:]}")
        assert task["status"] == "completed", task
        finisher = pid_in(result_text(task))
        assert finisher is not None and finisher != victim
        assert task["_meta"]["dev.ext-tasks/runAttempts"] == 2

        run = receiver.wait_for_span(
            lambda span: (
                span.trace_id == TRACE_ID
                and span.name == "execute_tool sleepy"
                and span.attributes.get("ext_tasks.run.outcome") == "completed"
            ),
            SPAN_WAIT_S,
        )
        # A tasks/get read after the end, in a trace of its own, links to the task's trace.
        read_trace = "a" * 32
        _, read = post(
            client,
            survivors[1].url,
            "tasks/get",
            {"taskId": task_id},
            capabilities=CAPABILITIES,
            extra_meta={"traceparent": f"00-{read_trace}-{'b' * 16}-01"},
        )
        assert "result" in read, read
        get = receiver.wait_for_span(lambda span: span.trace_id == read_trace and span.name == "tasks/get", SPAN_WAIT_S)
        tree = receiver.tree(TRACE_ID)
        print(f"\nvictim pid {victim}, rerun finished by pid {finisher}, request served by pid {request.pid}\n{tree}")
        (tmp_path / "trace.txt").write_text(tree)

        check_request_span(request, task_id)
        check_run_span(run, request, task_id, finisher)
        assert get.attributes[tracing.TASK_ID] == task_id
        assert [(link.trace_id, link.span_id) for link in get.links] == [(TRACE_ID, request.span_id)]
        # One trace: every span of it has the request span as its root under the client's context.
        in_trace = receiver.in_trace(TRACE_ID)
        assert {span.parent_span_id for span in in_trace if span.span_id != request.span_id} == {request.span_id}
        assert all(span.pid != victim for span in in_trace if span.name.startswith("execute_tool"))


def check_request_span(request: ReceivedSpan, task_id: str) -> None:
    assert request.kind == "SERVER"
    assert request.parent_span_id == CLIENT_SPAN
    assert request.service == "ext-tasks"
    attributes = request.attributes
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["mcp.protocol.version"] == "2026-07-28"
    assert attributes["gen_ai.tool.name"] == "sleepy"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["network.transport"] == "tcp"
    assert isinstance(attributes["jsonrpc.request.id"], str)
    assert attributes[tracing.TASK_ID] == task_id
    assert "mcp.session.id" not in attributes  # 2026-07-28 has no sessions
    assert request.status == "UNSET"


def check_run_span(run: ReceivedSpan, request: ReceivedSpan, task_id: str, finisher: int) -> None:
    assert run.kind == "INTERNAL"
    assert run.parent_span_id == request.span_id
    assert [(link.trace_id, link.span_id) for link in run.links] == [(TRACE_ID, request.span_id)]
    assert run.pid == finisher
    assert run.attributes[tracing.TASK_ID] == task_id
    assert run.attributes["gen_ai.tool.name"] == "sleepy"
    assert run.attributes[tracing.RUN_ATTEMPT] == 2
    events = [event.name for event in run.events]
    assert events == [tracing.EVENT_RUN_STARTED, tracing.EVENT_RECLAIMED, tracing.EVENT_OUTCOME], events
    assert run.events[1].attributes["ext_tasks.run.interrupted_attempts"] == 1
    assert run.events[2].attributes == {"ext_tasks.run.outcome": "completed", tracing.RUN_ATTEMPT: 2}


# --- the proxy and the client propagate the context -------------------------------------------------------


def running_proxy(tmp_path: Path, upstream: str, env: Mapping[str, str]) -> Any:
    import contextlib

    @contextlib.contextmanager
    def proxy() -> Iterator[str]:
        port = free_port()
        log = tmp_path / "proxy.log"
        command = [sys.executable, "-m", "ext_tasks", "proxy", "--upstream", upstream, "--port", str(port)]
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("EXT_TASKS_", "OTEL_"))}
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env={**child_env, **env}, cwd=REPO
            )
        url = f"http://127.0.0.1:{port}/mcp"
        try:

            def listening() -> bool:
                try:
                    httpx.get(url, timeout=0.5)
                except httpx.TransportError:
                    return False
                return True

            wait_for(listening, 30, message=lambda: f"the proxy to listen: {log.read_text()}")
            yield url
        finally:
            stop(process)

    return proxy()


def test_the_proxy_and_the_client_pass_the_context_on(tmp_path: Path, receiver: OtlpReceiver) -> None:
    env = otel_env(receiver)
    with fleet(tmp_path, receiver) as cluster, running_proxy(tmp_path, cluster.url, env) as proxy_url:
        modern_through_proxy(receiver, proxy_url)
        legacy_through_proxy(receiver, proxy_url)
        from_the_cli(receiver, cluster, env)


def modern_through_proxy(receiver: OtlpReceiver, proxy_url: str) -> None:
    trace_id, client_span = "c" * 32, "d" * 16
    with httpx.Client(timeout=10.0) as client:
        params = {"name": "sleepy", "arguments": {"seconds": 0.1}}
        extra = {"traceparent": f"00-{trace_id}-{client_span}-01"}
        _, created = post(client, proxy_url, "tools/call", params, capabilities=CAPABILITIES, extra_meta=extra)
    assert created["result"]["resultType"] == "task", created
    at_proxy = receiver.wait_for_span(
        lambda span: span.trace_id == trace_id and span.service == "ext-tasks-proxy", SPAN_WAIT_S
    )
    assert (at_proxy.name, at_proxy.kind, at_proxy.parent_span_id) == ("tools/call sleepy", "SERVER", client_span)
    upstream = receiver.wait_for_span(
        lambda span: span.trace_id == trace_id and span.service == "ext-tasks", SPAN_WAIT_S
    )
    assert (upstream.name, upstream.parent_span_id) == ("tools/call sleepy", at_proxy.span_id)
    assert upstream.links == []  # the W3C headers name the same context as _meta: no link to itself
    print(f"\nmodern request through the proxy:\n{receiver.tree(trace_id)}")


def legacy_through_proxy(receiver: OtlpReceiver, proxy_url: str) -> None:
    trace_id, client_span = "e" * 32, "f" * 16
    session = Session(proxy_url)
    try:
        params = {
            "name": "sleepy",
            "arguments": {"seconds": 0.1},
            "task": {},
            "_meta": {"traceparent": f"00-{trace_id}-{client_span}-01"},
        }
        created = session.call("tools/call", params)
        assert "result" in created, created
    finally:
        session.client.close()
    at_proxy = receiver.wait_for_span(
        lambda span: span.trace_id == trace_id and span.service == "ext-tasks-proxy", SPAN_WAIT_S
    )
    assert (at_proxy.name, at_proxy.parent_span_id) == ("tools/call sleepy", client_span)
    assert at_proxy.attributes["mcp.session.id"] == session.session_id
    assert at_proxy.attributes["mcp.protocol.version"] == "2025-11-25"
    upstream = receiver.wait_for_span(
        lambda span: span.trace_id == trace_id and span.service == "ext-tasks" and span.name == "tools/call sleepy",
        SPAN_WAIT_S,
    )
    assert upstream.parent_span_id == at_proxy.span_id
    print(f"\nlegacy session through the proxy:\n{receiver.tree(trace_id)}")


def from_the_cli(receiver: OtlpReceiver, cluster: Cluster, env: Mapping[str, str]) -> None:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("EXT_TASKS_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "ext_tasks", "call", "sleepy", "seconds:=0.2", "--url", cluster.url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**inherited, **env, "HOME": str(cluster.balancer.directory)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "slept" in done.stdout, done.stdout
    command = receiver.wait_for_span(lambda span: span.name == "ext-tasks call sleepy", SPAN_WAIT_S)
    assert command.service == "ext-tasks-client"
    call = receiver.wait_for_span(
        lambda span: span.trace_id == command.trace_id and span.kind == "CLIENT" and span.name == "tools/call sleepy",
        SPAN_WAIT_S,
    )
    assert call.parent_span_id == command.span_id
    served = receiver.wait_for_span(
        lambda span: span.trace_id == command.trace_id and span.kind == "SERVER" and span.name == "tools/call sleepy",
        SPAN_WAIT_S,
    )
    assert served.parent_span_id == call.span_id and served.service == "ext-tasks"
    print(f"\next-tasks call:\n{receiver.tree(command.trace_id, linked=False)}")
