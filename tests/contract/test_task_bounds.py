"""What one task keeps is bounded on every store (memory, one Valkey, a Valkey Cluster, and through
Sentinel), each bound at its edge: arguments and answers exactly at their limit are kept and one byte
more is refused before anything is stored, and a status message comes back from the store cut to 1,024
characters. The engine checks sizes before the store is asked, so these tests show that what a store
keeps and hands back is what the engine let through (the byte budget of a principal, the store's own
part, is in ``test_byte_budget.py``)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from ext_tasks.engine import Engine
from ext_tasks.options import TaskOptions
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.protocol.states import TaskStatus
from ext_tasks.protocol.tasks import MAX_STATUS_CHARS, TaskRecord, encoded_size
from ext_tasks.replies import JsonReply
from ext_tasks.store.base import TaskStore
from ext_tasks.task_methods import TaskMethods
from ext_tasks.worker import Worker
from tests.support.mcp_http import modern_request
from tests.unit.test_task_sizes import ALICE, DECLARING, KEY, blob_of, refused_as_too_large, tools

pytestmark = pytest.mark.anyio

LIMIT = 2048


class On:
    """The engine and a worker over one store of the contract."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        options = TaskOptions(max_task_argument_bytes=LIMIT, max_answer_bytes=LIMIT)
        self.engine = Engine(tools(), ResumeCodec([KEY], audience="task-bounds"), tasks=TaskMethods(store, options))
        self.worker = Worker(store, self.engine.registry)

    async def send(self, method: str, params: dict[str, Any]) -> JsonReply:
        headers, body = modern_request(method, params, capabilities=DECLARING)
        lowered = {name.lower(): [value] for name, value in headers.items()}
        with anyio.fail_after(10):
            reply = await self.engine.handle(json.dumps(body).encode(), lowered, ALICE)
        assert isinstance(reply, JsonReply) and reply.message is not None, reply
        return reply

    async def start(self, tool: str, arguments: dict[str, Any]) -> str:
        reply = await self.send("tools/call", {"name": tool, "arguments": arguments})
        assert reply.message is not None and reply.wire["result"]["resultType"] == "task", reply.message
        task_id: str = reply.wire["result"]["taskId"]
        return task_id

    async def record(self, task_id: str) -> TaskRecord:
        found = await self.store.lookup(task_id)
        assert isinstance(found, TaskRecord), found
        return found


async def test_arguments_at_the_limit_are_kept_and_one_byte_more_is_refused(store: TaskStore) -> None:
    on = On(store)
    task_id = await on.start("keep", blob_of(LIMIT))
    assert (await on.record(task_id)).arguments == blob_of(LIMIT)
    charged = await store.places.charged("alice")

    refused = await on.send("tools/call", {"name": "keep", "arguments": blob_of(LIMIT + 1)})

    refused_as_too_large(refused, "argument", LIMIT + 1, LIMIT)
    assert await store.places.charged("alice") == charged  # nothing was stored, nothing charged


def answer(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": text}}


async def test_answers_at_the_limit_are_merged_and_one_byte_more_is_refused(store: TaskStore) -> None:
    on = On(store)
    task_id = await on.start("interview", {})
    await on.worker.execute(task_id)
    asked = await on.record(task_id)
    assert asked.status is TaskStatus.INPUT_REQUIRED and set(asked.input_requests) == {"a", "b"}
    # "a" takes all the room that an empty answer to "b" leaves: the two are then exactly at the limit.
    room = LIMIT - encoded_size({"a": answer(""), "b": answer("")})
    merged = await on.send("tasks/update", {"taskId": task_id, "inputResponses": {"a": answer("x" * room)}})
    assert merged.status == 200, merged.message
    kept = await on.record(task_id)
    assert kept.answers == {"a": answer("x" * room)}

    refused = await on.send("tasks/update", {"taskId": task_id, "inputResponses": {"b": answer("y")}})

    refused_as_too_large(refused, "answer", LIMIT + 1, LIMIT)
    after = await on.record(task_id)
    assert after.answers == kept.answers and after.version == kept.version  # nothing was merged
    exactly = await on.send("tasks/update", {"taskId": task_id, "inputResponses": {"b": answer("")}})
    assert exactly.status == 200, exactly.message
    assert encoded_size((await on.record(task_id)).answers) == LIMIT


async def test_a_status_message_comes_back_from_the_store_cut(store: TaskStore) -> None:
    on = On(store)
    task_id = await on.start("chatty", {"size": 100_000})

    await on.worker.execute(task_id)

    shown = (await on.record(task_id)).status_message
    assert shown is not None and len(shown) == MAX_STATUS_CHARS and shown.endswith("…")
