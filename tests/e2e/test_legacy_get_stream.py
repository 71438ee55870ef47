"""A 2025-11-25 session's task questions on its GET stream, for clients that never wait in ``tasks/result``.

The official TypeScript tasks client follows a legacy task with ``tasks/get`` only and calls
``tasks/result`` once the task is terminal; it takes a task's questions from the session's GET stream.
These tests drive the wire by hand against real servers (one, and three behind nginx):

* a question is relayed on the GET stream, with the ``related-task`` ``_meta``, once; the answer POSTed
  to any instance reaches the task;
* a GET stream opened while a task already waits for input relays the outstanding question;
* with a GET stream and a waiting ``tasks/result`` both open, the question is asked once in all;
* a question relayed on a stream that goes away unanswered is taken over by the other stream.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, running_cluster, wait_for
from tests.support.legacy import WAIT_S, Session, Stream
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

RELATED_TASK = "io.modelcontextprotocol/related-task"
TOOLS = "ext_tasks.examples.conformance"
#: Streams send a keep-alive every half second, so a reader thread the test stops sees its stop flag at
#: once (a blocked httpx read cannot be interrupted from another thread) and drops the connection.
QUICK_TICKS = {"EXT_TASKS_KEEPALIVE_S": "0.5"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("get-stream"), tools=TOOLS, env=QUICK_TICKS) as running:
        yield running


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("get-stream-fleet"), tools=TOOLS, env=QUICK_TICKS) as cluster:
        yield cluster


def tasks_result(session: Session, task_id: str) -> Stream:
    body = {"jsonrpc": "2.0", "id": "wait-1", "method": "tasks/result", "params": {"taskId": task_id}}
    return Stream(session, "POST", body)


def assert_question_of(request: dict[str, Any], task_id: str, filename: str) -> None:
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == f"Delete {filename}?"
    assert request["params"]["_meta"][RELATED_TASK] == {"taskId": task_id}


def test_a_task_question_is_relayed_on_the_get_stream_once_and_its_answer_completes_the_task(
    server: ServerProcess,
) -> None:
    session = Session(server.url)
    stream = Stream(session)
    task_id = session.start_confirm_delete("a.log")
    question = stream.next_request()
    assert_question_of(question, task_id, "a.log")
    session.answer(question)
    wait_for(lambda: session.status(task_id) == "completed", WAIT_S)
    assert stream.no_request_within(1.0)  # asked once, also across the task's later changes
    stream.close()
    done = tasks_result(session, task_id)
    assert done.final.get(timeout=WAIT_S)["result"]["content"][0]["text"] == "Deleted a.log."
    done.close()


def test_a_get_stream_opened_while_the_task_waits_relays_the_outstanding_question(server: ServerProcess) -> None:
    session = Session(server.url)
    task_id = session.start_confirm_delete("b.log")
    wait_for(lambda: session.status(task_id) == "input_required", WAIT_S)
    stream = Stream(session)
    question = stream.next_request()
    assert_question_of(question, task_id, "b.log")
    # The stream read the waiting task afresh: it says the task waits before it relays the question
    # (the reader queues what it reads in order, so the notification is already in).
    told = [stream.notifications.get_nowait() for _ in range(stream.notifications.qsize())]
    statuses = [note["params"]["status"] for note in told if note["method"] == "notifications/tasks/status"]
    assert "input_required" in statuses
    session.answer(question, confirm=False)
    wait_for(lambda: session.status(task_id) == "completed", WAIT_S)
    assert stream.no_request_within(1.0)
    stream.close()


def test_with_a_get_stream_and_a_waiting_tasks_result_the_question_is_asked_once(server: ServerProcess) -> None:
    session = Session(server.url)
    stream = Stream(session)
    task_id = session.start_confirm_delete("c.log")
    waiting = tasks_result(session, task_id)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + WAIT_S
    while not seen and time.monotonic() < deadline:
        for source in (stream, waiting):
            with contextlib.suppress(queue.Empty):
                seen.append(source.requests.get(timeout=0.1))
    assert len(seen) == 1, seen
    assert_question_of(seen[0], task_id, "c.log")
    session.answer(seen[0])
    assert waiting.final.get(timeout=WAIT_S)["result"]["content"][0]["text"] == "Deleted c.log."
    assert stream.no_request_within(0.5) and waiting.no_request_within(0.1)
    stream.close()
    waiting.close()


def test_a_question_left_unanswered_by_a_stream_that_went_away_is_asked_on_the_other(server: ServerProcess) -> None:
    session = Session(server.url)
    stream = Stream(session)
    task_id = session.start_confirm_delete("d.log")
    assert_question_of(stream.next_request(), task_id, "d.log")
    waiting = tasks_result(session, task_id)
    assert waiting.no_request_within(1.0)  # the GET stream holds the question
    stream.close()  # ... and goes away without an answer: the waiting tasks/result takes it over
    question = waiting.next_request()
    assert_question_of(question, task_id, "d.log")
    session.answer(question)
    assert waiting.final.get(timeout=WAIT_S)["result"]["content"][0]["text"] == "Deleted d.log."
    waiting.close()


def test_across_instances_the_get_stream_relays_and_an_answer_to_another_instance_completes(
    fleet: Cluster,
) -> None:
    urls = [instance.url for instance in fleet.servers]
    session = Session(*urls)
    stream = Stream(session)  # on one instance; the task is created and answered through the others
    task_id = session.start_confirm_delete("e.log")
    question = stream.next_request()
    assert_question_of(question, task_id, "e.log")
    session.answer(question)
    wait_for(lambda: session.status(task_id) == "completed", WAIT_S)
    assert stream.no_request_within(1.0)
    stream.close()
