"""Multi round-trip requests through the engine, as a client drives them: a first round that asks, retries
that answer (all at once, some, in several rounds, under the wrong key), and the ``requestState`` that
binds a retry to its request, caller and keys (anything else is refused with one fixed message).

What a state carries between rounds, and its size limit, are in ``test_mrtr.py``; the shapes of the
input requests and what the client must declare for them, in ``test_context.py``.
"""

from __future__ import annotations

import pytest

from ext_tasks import ToolRegistry
from ext_tasks.engine import Engine
from ext_tasks.protocol.errors import INVALID_PARAMS
from ext_tasks.protocol.resume import ResumeCodec
from tests.unit.engine_support import (
    ALICE,
    BOB,
    KEY,
    NAME_ANSWER,
    NAME_SCHEMA,
    SERVER_INFO,
    FakeClock,
    call_tool,
    error,
    make_registry,
    request,
    result,
    result_of,
    text_of,
)

pytestmark = pytest.mark.anyio


# --- multi round-trip requests ----------------------------------------------------------------------


async def test_first_round_asks_for_input_with_a_request_state(engine: Engine) -> None:
    found = result(await call_tool(engine, "greet"))

    assert found["resultType"] == "input_required"
    assert found["inputRequests"] == {
        "name": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Your name?", "requestedSchema": NAME_SCHEMA},
        }
    }
    assert isinstance(found["requestState"], str) and found["requestState"]
    assert found["_meta"][SERVER_INFO]["name"] == "engine-test"


async def test_retry_with_the_answers_and_the_state_completes(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", {"greeting": "Hi"}))

    final = result(
        await call_tool(
            engine,
            "greet",
            {"greeting": "Hi"},
            inputResponses=NAME_ANSWER,
            requestState=first["requestState"],
            request_id=2,
        )
    )

    assert final["resultType"] == "complete"
    assert text_of(final) == "Hi, Ada!"


async def test_declined_elicitation_reaches_the_tool(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    final = result(
        await call_tool(
            engine, "greet", inputResponses={"name": {"action": "decline"}}, requestState=first["requestState"]
        )
    )

    assert text_of(final) == "No name given."


async def test_several_questions_are_asked_in_one_round(engine: Engine) -> None:
    first = result(await call_tool(engine, "survey"))

    assert set(first["inputRequests"]) == {"name", "colour"}
    final = result(
        await call_tool(
            engine,
            "survey",
            inputResponses={**NAME_ANSWER, "colour": {"action": "accept", "content": {"colour": "green"}}},
            requestState=first["requestState"],
        )
    )
    assert text_of(final) == "Ada/green"


async def test_answering_only_some_questions_asks_again_for_the_rest(engine: Engine) -> None:
    first = result(await call_tool(engine, "survey"))

    second = result(await call_tool(engine, "survey", inputResponses=NAME_ANSWER, requestState=first["requestState"]))

    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"colour"}


async def test_multi_round_request_accumulates_earlier_answers(engine: Engine) -> None:
    first = result(await call_tool(engine, "introduce"))
    assert set(first["inputRequests"]) == {"name"}

    second = result(
        await call_tool(
            engine, "introduce", inputResponses=NAME_ANSWER, requestState=first["requestState"], request_id=2
        )
    )
    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"colour"}

    third = result(
        await call_tool(
            engine,
            "introduce",
            inputResponses={"colour": {"action": "accept", "content": {"colour": "green"}}},
            requestState=second["requestState"],
            request_id=3,
        )
    )
    assert third["resultType"] == "complete"
    assert text_of(third) == "Ada likes green."


async def test_tool_state_from_input_required_comes_back_on_the_retry(engine: Engine) -> None:
    first = result(await call_tool(engine, "unlock", {"door": "front"}))

    final = result(
        await call_tool(
            engine,
            "unlock",
            {"door": "front"},
            inputResponses={"token": {"action": "accept", "content": {"token": "t0k"}}},
            requestState=first["requestState"],
        )
    )

    assert text_of(final) == "unlocked front at step 1 with t0k"


async def test_answer_under_the_wrong_key_asks_again(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    again = result(
        await call_tool(
            engine,
            "greet",
            inputResponses={"nom": {"action": "accept", "content": {"name": "Ada"}}},
            requestState=first["requestState"],
        )
    )

    assert again["resultType"] == "input_required"
    assert again["inputRequests"] == first["inputRequests"]
    assert again["requestState"]


@pytest.mark.parametrize(
    "responses",
    [None, 3, "name", [NAME_ANSWER], {"name": None}, {"name": 5}, {"name": ["accept"]}, {"name": "Ada"}],
    ids=["null", "number", "string", "list", "null-value", "number-value", "list-value", "string-value"],
)
async def test_malformed_input_responses_are_invalid_params(engine: Engine, responses: object) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await call_tool(engine, "greet", inputResponses=responses, requestState=first["requestState"])

    assert error(reply)["code"] == INVALID_PARAMS


async def test_unknown_extra_answers_are_ignored(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    final = result(
        await call_tool(
            engine,
            "greet",
            inputResponses={**NAME_ANSWER, "extra": {"action": "accept", "content": {"x": 1}}},
            requestState=first["requestState"],
        )
    )

    assert text_of(final) == "Hello, Ada!"


async def test_tampered_request_state_is_refused_with_the_fixed_message(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))
    state: str = first["requestState"]
    tampered = state[:20] + ("A" if state[20] != "A" else "B") + state[21:]

    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=tampered, request_id="t-1")

    assert reply.message is not None
    assert reply.message["id"] == "t-1"
    assert error(reply)["code"] == INVALID_PARAMS
    assert error(reply)["message"] == "Invalid or expired requestState"


@pytest.mark.parametrize("state", ["", "garbage", "v1.e30.abc", 42, None, {"s": 1}])
async def test_request_state_that_was_never_issued_is_refused(engine: Engine, state: object) -> None:
    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=state)

    assert error(reply)["code"] == INVALID_PARAMS


async def test_expired_request_state_is_refused(engine: Engine, clock: FakeClock) -> None:
    first = result(await call_tool(engine, "greet"))
    clock.now += 601

    reply = await call_tool(engine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply) == {
        "code": INVALID_PARAMS,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }


async def test_request_state_replayed_for_another_tool_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await call_tool(engine, "introduce", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply)["code"] == INVALID_PARAMS
    assert error(reply)["message"] == "Invalid or expired requestState"


async def test_request_state_replayed_with_other_arguments_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", {"greeting": "Hello"}))

    reply = await call_tool(
        engine, "greet", {"greeting": "Goodbye"}, inputResponses=NAME_ANSWER, requestState=first["requestState"]
    )

    assert error(reply)["code"] == INVALID_PARAMS


async def test_request_state_replayed_by_another_principal_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet", principal=ALICE))

    reply = await call_tool(
        engine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"], principal=BOB
    )

    assert error(reply)["code"] == INVALID_PARAMS


async def test_request_state_replayed_on_another_method_is_refused(engine: Engine) -> None:
    first = result(await call_tool(engine, "greet"))

    reply = await request(
        engine,
        "prompts/get",
        {"name": "greeting", "arguments": {"name": "Ada"}, "requestState": first["requestState"]},
    )

    assert error(reply)["code"] == INVALID_PARAMS


async def test_request_state_from_a_server_with_other_keys_is_refused(registry: ToolRegistry, clock: FakeClock) -> None:
    other = Engine(make_registry(), ResumeCodec([b"z" * 32], audience="engine-test", clock=clock))
    mine = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock))
    first = result(await call_tool(other, "greet"))

    reply = await call_tool(mine, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"])

    assert error(reply)["code"] == INVALID_PARAMS


async def test_request_state_verifies_on_another_engine_sharing_the_key(
    registry: ToolRegistry, clock: FakeClock
) -> None:
    one = Engine(make_registry(), ResumeCodec([KEY], audience="engine-test", clock=clock))
    two = Engine(registry, ResumeCodec([KEY], audience="engine-test", clock=clock))
    first = result(await call_tool(one, "greet"))

    final = result(await call_tool(two, "greet", inputResponses=NAME_ANSWER, requestState=first["requestState"]))

    assert text_of(final) == "Hello, Ada!"


async def test_state_only_input_required_carries_a_request_state_and_no_input_requests(engine: Engine) -> None:
    first = result(await call_tool(engine, "shed"))

    assert first["resultType"] == "input_required"
    assert "inputRequests" not in first
    assert first["requestState"]
    final = result(await call_tool(engine, "shed", requestState=first["requestState"]))
    assert text_of(final) == "retried=True"


async def test_prompt_can_ask_for_input_and_complete_on_the_retry(engine: Engine) -> None:
    first = await result_of(engine, "prompts/get", {"name": "trip"})
    assert first["resultType"] == "input_required"

    final = await result_of(
        engine,
        "prompts/get",
        {
            "name": "trip",
            "inputResponses": {"city": {"action": "accept", "content": {"city": "Lyon"}}},
            "requestState": first["requestState"],
        },
    )

    assert final["resultType"] == "complete"
    assert final["messages"] == [{"role": "user", "content": {"type": "text", "text": "Plan a trip to Lyon."}}]
