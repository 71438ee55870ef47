"""How the shim relays a task's questions to a 2025-11-25 client (``migration.legacy_tasks``), on its own:
a :class:`Relay` asks each question of a task once on its stream and takes back only the answers to its
own requests; :class:`StreamQuestions` makes each question asked once per *session*, whichever of the
session's streams (the GET stream, a waiting ``tasks/result``, on any instance) takes it first, and hands
it over when that stream ends or goes silent.

The same relay through ``tasks/result`` is in ``test_legacy_tasks.py``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from msgspec import UNSET

from ext_tasks.protocol.result_types import DetailedTask
from migration.questions import Answer, Relay, StreamQuestions
from migration.sessions import MemorySessionStore
from tests.migration.shim_support import ADA, RELATED_TASK, WAIT_S

pytestmark = pytest.mark.anyio


def related(task_id: str) -> dict[str, Any]:
    return {RELATED_TASK: {"taskId": task_id}}


# --- Relay: the questions of one stream -----------------------------------------------------------------


QUESTION = {"method": "elicitation/create", "params": {"mode": "form", "message": "Name?", "requestedSchema": {}}}


def task_in(status: str, task_id: str, updated: str, **questions: dict[str, Any]) -> DetailedTask:
    """A modern DetailedTask as the shim reads it (typed), last updated at ``updated``."""
    return DetailedTask(
        task_id=task_id,
        status=status,
        created_at="2026-01-01T00:00:00Z",
        last_updated_at=updated,
        ttl_ms=60_000,
        input_requests=questions if status == "input_required" else UNSET,
    )


def asking(task_id: str, updated: str, **questions: dict[str, Any]) -> DetailedTask:
    """A modern DetailedTask waiting for input."""
    return task_in("input_required", task_id, updated, **questions)


def test_a_relay_asks_each_question_of_a_task_once_and_ignores_an_older_state_of_the_task() -> None:
    relay = Relay()

    first = relay.questions(asking("t1", "2026-01-01T00:00:02Z", name=QUESTION))
    for key, entry in first.items():
        relay.request(key, entry, "t1")
    again = relay.questions(asking("t1", "2026-01-01T00:00:03Z", name=QUESTION, colour=QUESTION))
    older = relay.questions(asking("t1", "2026-01-01T00:00:01Z", late=QUESTION))
    working = relay.questions(task_in("working", "t1", "2026-01-01T00:00:04Z"))

    assert list(first) == ["name"]
    assert list(again) == ["colour"]
    assert older == working == {}


def test_a_relayed_request_is_a_server_request_carrying_the_related_task() -> None:
    relay = Relay()

    request = relay.request("name", QUESTION, "t1")

    assert request["jsonrpc"] == "2.0" and str(request["id"]).startswith("srv-")
    assert request["method"] == "elicitation/create"
    assert request["params"]["_meta"] == related("t1")
    assert relay.held() == [("t1", "name")]
    assert "_meta" not in Relay().request("name", QUESTION, None)["params"]  # an inline call's question


def test_a_relay_takes_only_responses_to_its_own_requests_each_once() -> None:
    relay = Relay()
    request = relay.request("name", QUESTION, "t1")
    response = {"kind": "response", "message": {"id": request["id"], "result": ADA}}

    assert relay.answer({"kind": "watch", "taskId": "t1"}) is None
    assert relay.answer({"kind": "response", "message": {"id": "srv-someone-else", "result": ADA}}) is None
    assert relay.answer(response) == Answer("name", "elicitation/create", "t1", ADA)
    assert relay.answer(response) is None
    assert relay.held() == []


def test_a_relay_forgets_the_unanswered_questions_of_a_task_that_ended() -> None:
    relay = Relay()
    request = relay.request("name", QUESTION, "t1")
    relay.request("other", QUESTION, "t2")

    assert relay.questions(task_in("cancelled", "t1", "2026-01-01T00:00:09Z")) == {}
    assert relay.held() == [("t2", "other")]
    assert relay.answer({"kind": "response", "message": {"id": request["id"], "result": ADA}}) is None


# --- StreamQuestions: each question once per session ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_question_is_asked_once_per_session_and_handed_over_when_its_stream_ends() -> None:
    sessions = MemorySessionStore()
    task = asking("t1", "2026-01-01T00:00:01Z", name=QUESTION)
    holding, waiting = StreamQuestions(sessions, "s1"), StreamQuestions(sessions, "s1")
    elsewhere = StreamQuestions(sessions, "s2")

    async with sessions.subscribe("s1") as bus:
        asked = await holding.ask(task)
        assert await waiting.ask(task) == []
        assert waiting.deferred == {"t1"}
        assert len(await elsewhere.ask(task)) == 1  # another session asks for itself

        await holding.close()

        with anyio.fail_after(WAIT_S):
            assert await bus.get() == {"kind": "released"}
    taken = await waiting.ask(task)

    assert [request["method"] for request in asked] == ["elicitation/create"]
    assert [request["params"]["_meta"] for request in taken] == [related("t1")]
    assert waiting.deferred == set()


async def test_a_question_held_by_a_stream_that_went_silent_is_taken_over_once_its_hold_lapses() -> None:
    clock = Clock()
    sessions = MemorySessionStore(clock=clock)
    task = asking("t1", "2026-01-01T00:00:01Z", name=QUESTION)
    silent, other = StreamQuestions(sessions, "s1", hold_ms=30_000), StreamQuestions(sessions, "s1")
    assert len(await silent.ask(task)) == 1

    assert await other.ask(task) == []
    clock.now += 31

    assert len(await other.ask(task)) == 1


async def test_closing_a_stream_that_relayed_nothing_tells_no_one() -> None:
    sessions = MemorySessionStore()
    async with sessions.subscribe("s1") as bus:
        await StreamQuestions(sessions, "s1").close()
        await sessions.publish("s1", {"kind": "marker"})
        with anyio.fail_after(WAIT_S):
            assert await bus.get() == {"kind": "marker"}
