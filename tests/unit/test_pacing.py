"""The per-principal budget of costly requests (``ext_tasks.pacing``): the bucket's arithmetic on a
hand-moved clock, its bound, and what a client sees at ``POST /mcp`` (in-process, over ASGI): a large
body or a listen naming many ids past the budget answers 429 with ``Retry-After`` and -31429, after a
hold, while another principal is served."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ext_tasks import ToolRegistry
from ext_tasks.auth import BearerTokenAuthenticator
from ext_tasks.config import Settings
from ext_tasks.engine import Engine
from ext_tasks.http import App, create_app
from ext_tasks.options import EngineOptions
from ext_tasks.pacing import BODY_BYTES_PER_UNIT, FREE_BODY_BYTES, MAX_BUCKETS, MAX_HOLD_S, Pacing, body_cost
from ext_tasks.protocol.errors import LIMIT_EXCEEDED, LimitExceeded
from ext_tasks.protocol.resume import ResumeCodec
from ext_tasks.replies import JsonReply, StreamReply
from ext_tasks.store.memory import MemoryTaskStore
from ext_tasks.task_methods import TaskMethods
from tests.unit.engine_support import ALICE, BOB, message
from tests.unit.test_http import connect, json_rpc_error, post


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal(pacing: Pacing, principal: str, cost: int) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as raised:
        pacing.charge(principal, cost, kind="listen")
    return raised.value


# --- the bucket --------------------------------------------------------------------------------------


def test_a_principal_spends_its_burst_then_is_refused_until_the_rate_refills_it() -> None:
    clock = Clock()
    pacing = Pacing(rate=100, burst=500, clock=clock)
    for _ in range(5):
        pacing.charge("alice", 100, kind="listen")
    refused = refusal(pacing, "alice", 100)
    assert refused.code == LIMIT_EXCEEDED and refused.http_status == 429
    assert refused.data == {"limit": "pacing", "retryAfterSeconds": 1}
    # 100 units at 100 a second: the whole second is held, and then it may be sent again at once.
    assert refused.hold_s == pytest.approx(1.0)
    clock.now += 0.5
    assert refusal(pacing, "alice", 100).hold_s == pytest.approx(0.5)  # a refusal takes nothing
    clock.now += 0.5
    pacing.charge("alice", 100, kind="listen")
    pacing.charge("bob", 500, kind="listen")  # every principal has a budget of its own


def test_a_long_wait_is_held_at_most_a_second_and_the_rest_is_retry_after() -> None:
    clock = Clock()
    pacing = Pacing(rate=10, burst=1000, clock=clock)
    pacing.charge("alice", 1000, kind="body")
    refused = refusal(pacing, "alice", 1000)  # 100 s of budget away
    assert refused.hold_s == MAX_HOLD_S
    assert refused.retry_after_s == 99
    assert refused.http_headers() == {"Retry-After": "99"}


def test_a_request_costing_more_than_the_burst_passes_on_a_full_bucket_and_empties_it() -> None:
    clock = Clock()
    pacing = Pacing(rate=100, burst=500, clock=clock)
    pacing.charge("alice", 5000, kind="body")
    assert refusal(pacing, "alice", 1).hold_s == pytest.approx(0.01)
    clock.now += 5.0
    pacing.charge("alice", 5000, kind="body")


def test_free_requests_and_a_disabled_budget_never_refuse() -> None:
    pacing = Pacing(rate=1, burst=1, clock=Clock())
    for _ in range(1000):
        pacing.charge("alice", 0, kind="body")
    assert len(pacing) == 0  # a request that costs nothing keeps no bucket
    off = Pacing(rate=0, burst=1, clock=Clock())
    for _ in range(100):
        off.charge("alice", 10_000, kind="listen")


def test_bodies_cost_nothing_up_to_the_free_size_then_a_unit_per_4_kib() -> None:
    assert body_cost(0) == body_cost(FREE_BODY_BYTES) == 0
    assert body_cost(FREE_BODY_BYTES + 1) == 1
    assert body_cost(FREE_BODY_BYTES + BODY_BYTES_PER_UNIT) == 1
    assert body_cost(FREE_BODY_BYTES + BODY_BYTES_PER_UNIT + 1) == 2
    assert body_cost(4 * 1024 * 1024) == 1020


def test_the_buckets_are_bounded_forgetting_full_ones_first() -> None:
    clock = Clock()
    pacing = Pacing(rate=1, burst=10, clock=clock)
    pacing.charge("spender", 10, kind="listen")  # empty: worth remembering
    for index in range(MAX_BUCKETS + 500):
        pacing.charge(f"p{index}", 1, kind="listen")
        clock.now += 0.001
    assert len(pacing) <= MAX_BUCKETS
    # The principals that spent least recently were forgotten (a forgotten bucket starts full again),
    # the most recent ones are remembered.
    assert refusal(pacing, f"p{MAX_BUCKETS + 499}", 10).hold_s > 0


# --- at POST /mcp ------------------------------------------------------------------------------------

TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
TOKENS = BearerTokenAuthenticator({"ta": "alice", "tb": "bob"})


def paced_engine(rate: float = 10.0, burst: int = 20) -> Engine:
    registry = ToolRegistry("pacing-test", version="1.0.0")

    @registry.tool()
    async def echo(text: str) -> str:
        return text[:10]

    options = EngineOptions(pacing_rate=rate, pacing_burst=burst)
    return Engine(
        registry, ResumeCodec([b"p" * 32], audience="pacing-test"), options, tasks=TaskMethods(MemoryTaskStore())
    )


def paced_app() -> App:
    engine = paced_engine()
    return create_app(engine, Settings(engine=engine.options), TOKENS, pacing=engine.pacing)


@pytest.mark.anyio
async def test_large_bodies_past_the_budget_answer_429_after_a_hold_and_others_are_served() -> None:
    big = "x" * (FREE_BODY_BYTES + 20 * BODY_BYTES_PER_UNIT)  # 21 units: the whole burst of 20
    async with connect(paced_app()) as http:
        alice = {"Authorization": "Bearer ta"}
        ok = await post(http, "tools/call", {"name": "echo", "arguments": {"text": big}}, extra_headers=alice)
        assert ok.status_code == 200 and ok.json()["result"]["content"][0]["text"] == "x" * 10
        started = time.monotonic()
        refused = await post(http, "tools/call", {"name": "echo", "arguments": {"text": big}}, extra_headers=alice)
        held = time.monotonic() - started
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = json_rpc_error(refused)
        assert error["code"] == LIMIT_EXCEEDED and error["data"]["limit"] == "pacing"
        assert held >= 0.9  # 20 units at 10 a second are 2 s away: the answer was held for 1 s
        # Small requests cost nothing, and another principal has its own budget.
        assert (await post(http, "tools/list", extra_headers=alice)).status_code == 200
        bob = {"Authorization": "Bearer tb"}
        other = await post(http, "tools/call", {"name": "echo", "arguments": {"text": big}}, extra_headers=bob)
        assert other.status_code == 200


@pytest.mark.anyio
async def test_a_listen_is_charged_per_id_it_names_and_refused_before_the_ids_are_checked() -> None:
    engine = paced_engine()
    ids = [f"t{n}" for n in range(15)]
    body, headers = message("subscriptions/listen", {"notifications": {"taskIds": ids}}, capabilities=TASKS)

    first = await engine.handle(body, headers, ALICE)  # 15 of the 20 units
    assert isinstance(first, StreamReply)
    await first.items.aclose()  # type: ignore[attr-defined]
    for _ in range(2):  # 5 left, 15 asked: refused, and a refusal takes nothing
        refused = await engine.handle(body, headers, ALICE)
        assert isinstance(refused, JsonReply) and refused.status == 429 and refused.message is not None
        assert refused.wire["error"]["data"] == {"limit": "pacing", "retryAfterSeconds": 1}
        assert refused.hold_s == pytest.approx(1.0, abs=0.05)  # 10 units at 10 a second
    other = await engine.handle(body, headers, BOB)
    assert isinstance(other, StreamReply)
    await other.items.aclose()  # type: ignore[attr-defined]
