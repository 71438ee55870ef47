"""The cost of one MRTR resume, counted (issue 27's "done when"): a resume reads the tool's ``name`` once,
looks the tool up once, and builds its result once; and the request metric takes the outcome from the
reply as it was made, not from its message.

Counted with real parts: a registry subclass that counts its lookups, and params that count reads of
``name`` (a ``dict`` subclass, as the decoder's params are dicts). A result built once is the typed
result the tool's value became, sent as it is: any later rebuild (a ``{**result, ...}`` spread) would
leave a dict in the reply instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ext_tasks import ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.metrics import REQUEST_STATS
from ext_tasks.protocol.errors import INVALID_PARAMS
from ext_tasks.protocol.jsonrpc import Request
from ext_tasks.protocol.result_types import InputRequiredResult, ToolCallResult
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply
from ext_tasks.tools import Tool
from tests.unit.engine_support import ALICE, KEY, NAME_ANSWER, SERVER_INFO, FakeClock, greet, message

pytestmark = pytest.mark.anyio


class CountingRegistry(ToolRegistry):
    def __init__(self) -> None:
        super().__init__("counting", version="1.0.0")
        self.lookups = 0

    def find_tool(self, name: str) -> Tool | None:
        self.lookups += 1
        return super().find_tool(name)


class CountingParams(dict[str, Any]):
    """Request params that count every read of ``name``."""

    name_reads = 0

    def _count(self, key: object) -> None:
        if key == "name":
            self.name_reads += 1

    def get(self, key: str, default: Any = None) -> Any:
        self._count(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._count(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._count(key)
        return super().__contains__(key)


@pytest.fixture
def counting() -> Iterator[tuple[Engine, CountingRegistry]]:
    registry = CountingRegistry()
    registry.tool()(greet)
    engine = Engine(registry, ResumeCodec([KEY], audience="counting", ttl_s=600, clock=FakeClock()))
    yield engine, registry
    engine.close()


async def _send(engine: Engine, params: dict[str, Any]) -> JsonReply:
    """A ``tools/call`` with its conforming headers; ``params`` are handed to the engine as they are."""
    _, headers = message("tools/call", dict(params))
    with anyio.fail_after(5):
        reply = await engine.handle_message(Request(id=1, method="tools/call", params=params), headers, ALICE)
    assert isinstance(reply, JsonReply) and reply.message is not None
    return reply


def _params(**fields: Any) -> CountingParams:
    body_meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }
    return CountingParams({"name": "greet", "arguments": {}, "_meta": body_meta, **fields})


async def test_a_resume_reads_the_name_once_looks_the_tool_up_once_and_builds_its_result_once(
    counting: tuple[Engine, CountingRegistry],
) -> None:
    engine, registry = counting
    first = await _send(engine, _params())
    asked = first.message["result"]  # type: ignore[index]
    assert isinstance(asked, InputRequiredResult)
    registry.lookups = 0

    resume = _params(inputResponses=NAME_ANSWER, requestState=asked.request_state)
    reply = await _send(engine, resume)

    assert (resume.name_reads, registry.lookups) == (1, 1)
    result = reply.message["result"]  # type: ignore[index]
    assert type(result) is ToolCallResult, result  # the tool's value became it, and it is sent as it is
    assert result.content == [{"type": "text", "text": "Hello, Ada!"}]
    assert reply.wire["result"]["resultType"] == "complete"
    assert reply.wire["result"]["_meta"] == {SERVER_INFO: {"name": "counting", "version": "1.0.0"}}


async def test_a_first_round_also_reads_the_name_once_and_looks_the_tool_up_once(
    counting: tuple[Engine, CountingRegistry],
) -> None:
    engine, registry = counting
    params = _params()

    reply = await _send(engine, params)

    assert (params.name_reads, registry.lookups) == (1, 1)
    assert type(reply.message["result"]) is InputRequiredResult  # type: ignore[index]
    assert reply.wire["result"]["resultType"] == "input_required"


async def test_the_request_metric_counts_the_outcome_the_reply_was_made_with(
    counting: tuple[Engine, CountingRegistry],
) -> None:
    engine, _ = counting
    before = dict(REQUEST_STATS.counts)

    refused = await _send(engine, _params(name="no-such-tool"))
    answered = await _send(engine, _params())

    assert refused.error_code == INVALID_PARAMS and answered.error_code is None
    grown = {key: count - before.get(key, 0) for key, count in REQUEST_STATS.counts.items()}
    assert grown[("tools/call", str(INVALID_PARAMS))] == 1
    assert grown[("tools/call", "ok")] == 1
