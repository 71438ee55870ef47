"""Input requests on the wire: what ``elicit``, ``elicit_url``, ``sample`` and ``list_roots`` put in
``inputRequests``, the round trip of each through the engine, answers that do not fit their request
(asked again), and what a client must declare for each kind of request (-32021 otherwise; never a
silent drop).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from ext_tasks import elicit, sample
from ext_tasks.engine import Engine
from ext_tasks.protocol.errors import MISSING_REQUIRED_CLIENT_CAPABILITY
from tests.unit.engine_support import call_tool, error_of, result, result_of, text_of

pytestmark = pytest.mark.anyio


# --- the helpers' requests ------------------------------------------------------------------------------


async def test_elicit_with_a_pydantic_model_asks_for_its_schema_without_the_title() -> None:
    class Person(BaseModel):
        name: str = Field(description="Your name")
        age: int

    request = elicit("Who are you?", Person)

    wire = request.to_wire()
    assert wire["method"] == "elicitation/create"
    assert {key: value for key, value in wire["params"].items() if key != "requestedSchema"} == {
        "mode": "form",
        "message": "Who are you?",
    }
    schema = wire["params"]["requestedSchema"]
    assert "title" not in schema
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"name", "age"}
    assert schema["properties"]["name"]["description"] == "Your name"
    assert schema["properties"]["age"]["type"] == "integer"
    assert schema["required"] == ["name", "age"]


async def test_sample_takes_a_message_list_and_a_system_prompt() -> None:
    messages = [{"role": "user", "content": {"type": "text", "text": "hi"}}]

    request = sample(messages, max_tokens=5, system_prompt="Be brief.")

    assert request.to_wire() == {
        "method": "sampling/createMessage",
        "params": {"messages": messages, "maxTokens": 5, "systemPrompt": "Be brief."},
    }


# --- round trips through the engine -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {"action": "accept", "content": {"name": 42}},
        {"action": "accept", "content": {"nickname": "Ada"}},
        {"action": "accept"},
        {"action": "maybe", "content": {"name": "Ada"}},
        {"text": "Ada"},
    ],
    ids=["wrong-type", "missing-required-field", "accept-without-content", "unknown-action", "not-an-elicit-result"],
)
async def test_answer_of_the_wrong_shape_asks_again(engine: Engine, answer: dict[str, Any]) -> None:
    first = result(await call_tool(engine, "greet"))

    again = result(
        await call_tool(engine, "greet", inputResponses={"name": answer}, requestState=first["requestState"])
    )

    assert again["resultType"] == "input_required"
    assert set(again["inputRequests"]) == {"name"}


async def test_sampling_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "haiku", {"topic": "rain"}))

    assert first["inputRequests"] == {
        "haiku": {
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "A haiku about rain"}}],
                "maxTokens": 50,
            },
        }
    }
    sampled = {
        "role": "assistant",
        "content": {"type": "text", "text": "drops on the window"},
        "model": "test-model",
        "stopReason": "endTurn",
    }
    final = result(
        await call_tool(
            engine, "haiku", {"topic": "rain"}, inputResponses={"haiku": sampled}, requestState=first["requestState"]
        )
    )
    assert text_of(final) == "drops on the window"


async def test_roots_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "workspace"))

    assert first["inputRequests"] == {"roots": {"method": "roots/list"}}
    final = result(
        await call_tool(
            engine,
            "workspace",
            inputResponses={"roots": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b", "name": "b"}]}},
            requestState=first["requestState"],
        )
    )
    assert text_of(final) == "file:///a,file:///b"


async def test_url_elicitation_round_trip(engine: Engine) -> None:
    first = result(await call_tool(engine, "login"))

    assert first["inputRequests"] == {
        "login": {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Sign in to continue", "url": "https://login.example.com/x"},
        }
    }
    final = result(
        await call_tool(
            engine, "login", inputResponses={"login": {"action": "accept"}}, requestState=first["requestState"]
        )
    )
    assert text_of(final) == "accept"


# --- what the client must declare, through the engine ---------------------------------------------


async def test_elicitation_for_a_client_that_declared_only_sampling_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "greet", "arguments": {}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={"sampling": {}},
    )

    assert err["data"] == {"requiredCapabilities": {"elicitation": {}}}


async def test_form_elicitation_for_a_client_that_declared_only_url_mode_is_a_missing_capability(
    engine: Engine,
) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "greet", "arguments": {}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={"elicitation": {"url": {}}},
    )

    assert err["data"]["requiredCapabilities"] in ({"elicitation": {}}, {"elicitation": {"form": {}}})


async def test_url_elicitation_without_the_url_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "login", "arguments": {}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={"elicitation": {}},
    )

    assert err["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_sampling_without_the_sampling_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "haiku", "arguments": {"topic": "rain"}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={"elicitation": {}},
    )

    assert err["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_roots_without_the_roots_capability_is_a_missing_capability(engine: Engine) -> None:
    err = await error_of(
        engine,
        "tools/call",
        {"name": "workspace", "arguments": {}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={},
    )

    assert err["data"] == {"requiredCapabilities": {"roots": {}}}


async def test_empty_elicitation_capability_means_form_mode(engine: Engine) -> None:
    found = await result_of(engine, "tools/call", {"name": "greet", "arguments": {}}, capabilities={"elicitation": {}})

    assert found["resultType"] == "input_required"


async def test_capabilities_are_read_from_each_request_never_remembered(engine: Engine) -> None:
    await result_of(engine, "tools/call", {"name": "greet", "arguments": {}}, capabilities={"elicitation": {}})

    await error_of(
        engine,
        "tools/call",
        {"name": "greet", "arguments": {}},
        status=400,
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        capabilities={},
    )
