"""What tool, prompt and resource functions may return, and the wire shape each becomes
(``ext_tasks.results``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel, Field

from ext_tasks import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    PromptMessage,
    PromptResult,
    ResourceContents,
    ResourceLink,
    ResourceResult,
    TextContent,
    ToolResult,
)
from ext_tasks.protocol.result_types import Complete
from ext_tasks.results import prompt_result, resource_contents, tool_error_result, tool_result


class Forecast(BaseModel):
    city: str
    high_c: int = Field(alias="highC")


# --- tools ----------------------------------------------------------------------------------------------


def fields(result: Complete) -> dict[str, Any]:
    """The result's members as sent, but ``resultType``, which each of these results has (checked here)."""
    wire: dict[str, Any] = msgspec.to_builtins(result)
    assert wire.pop("resultType") == "complete"
    return wire


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("5 °C", [{"type": "text", "text": "5 °C"}]),
        (None, []),
        (TextContent(text="hi"), [{"type": "text", "text": "hi"}]),
        (
            ImageContent(data="aW1n", mime_type="image/png"),
            [{"type": "image", "data": "aW1n", "mimeType": "image/png"}],
        ),
        (
            AudioContent(data="YXU=", mime_type="audio/wav"),
            [{"type": "audio", "data": "YXU=", "mimeType": "audio/wav"}],
        ),
        (
            ResourceLink(uri="file:///a.txt", name="a"),
            [{"type": "resource_link", "uri": "file:///a.txt", "name": "a"}],
        ),
        (
            EmbeddedResource(resource=ResourceContents(uri="file:///a.txt", text="A")),
            [{"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}}],
        ),
        (
            ["one", TextContent(text="two")],
            [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        ),
        (("one",), [{"type": "text", "text": "one"}]),
        (42, [{"type": "text", "text": "42"}]),
    ],
    ids=["string", "none", "text-block", "image", "audio", "link", "embedded", "list", "tuple", "int"],
)
def test_a_tool_value_becomes_its_content(value: Any, content: list[dict[str, Any]]) -> None:
    assert fields(tool_result(value)) == {"content": content, "isError": False}


def test_a_dict_is_structured_content_with_a_json_text_copy() -> None:
    value = {"city": "Lyon", "high": 21, "tags": ["sunny"]}

    found = fields(tool_result(value))

    assert found["structuredContent"] == value
    assert found["isError"] is False
    assert [block["type"] for block in found["content"]] == ["text"]
    assert json.loads(found["content"][0]["text"]) == value


def test_a_pydantic_model_is_structured_content_under_its_aliases() -> None:
    found = fields(tool_result(Forecast(city="Lyon", highC=21)))

    assert found["structuredContent"] == {"city": "Lyon", "highC": 21}
    assert json.loads(found["content"][0]["text"]) == {"city": "Lyon", "highC": 21}


def test_a_tool_result_sets_content_structured_content_and_the_error_flag_itself() -> None:
    value = ToolResult(content=["done", ImageContent(data="aW1n", mime_type="image/png")], structured={"n": 1})

    assert fields(tool_result(value)) == {
        "content": [{"type": "text", "text": "done"}, {"type": "image", "data": "aW1n", "mimeType": "image/png"}],
        "structuredContent": {"n": 1},
        "isError": False,
    }
    assert fields(tool_result(ToolResult(content=["no"], is_error=True))) == {
        "content": [{"type": "text", "text": "no"}],
        "isError": True,
    }
    assert fields(tool_result(ToolResult())) == {"content": [], "isError": False}


def test_a_tool_error_is_an_error_result_with_its_text() -> None:
    expected = {"content": [{"type": "text", "text": "disk full"}], "isError": True}
    assert fields(tool_error_result("disk full")) == expected


def prompt_fields(value: Any, description: str) -> dict[str, Any]:
    return fields(prompt_result(value, description))


def resource_result_of(uri: str, mime_type: str | None, value: Any) -> dict[str, Any]:
    """What a resource's value is read as (the handler adds how long it may be cached)."""
    return {"contents": resource_contents(uri, mime_type, value)}


# --- prompts --------------------------------------------------------------------------------------------


def test_a_prompt_string_is_one_user_message_under_the_prompts_description() -> None:
    assert prompt_fields("Say hello.", "A greeting") == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello."}}],
        "description": "A greeting",
    }


def test_a_prompt_without_a_description_leaves_it_out() -> None:
    assert prompt_fields("Say hello.", "") == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello."}}]
    }


def test_prompt_messages_keep_their_roles_and_strings_among_them_are_user_messages() -> None:
    assistant = PromptMessage(role="assistant", content=TextContent(text="Hello!"))

    assert prompt_fields(assistant, "d")["messages"] == [
        {"role": "assistant", "content": {"type": "text", "text": "Hello!"}}
    ]
    assert prompt_fields(["Hi", assistant], "d")["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Hi"}},
        {"role": "assistant", "content": {"type": "text", "text": "Hello!"}},
    ]


def test_a_prompt_result_may_replace_the_description() -> None:
    assert prompt_fields(PromptResult(["Hi"], description="Chosen"), "Declared")["description"] == "Chosen"
    assert prompt_fields(PromptResult(["Hi"]), "Declared")["description"] == "Declared"


# --- resources ------------------------------------------------------------------------------------------


def test_resource_text_is_text_contents_of_its_uri_plain_text_unless_declared() -> None:
    assert resource_result_of("file:///a.md", "text/markdown", "# A") == {
        "contents": [{"uri": "file:///a.md", "mimeType": "text/markdown", "text": "# A"}]
    }
    assert resource_result_of("file:///a.txt", None, "A") == {
        "contents": [{"uri": "file:///a.txt", "mimeType": "text/plain", "text": "A"}]
    }
    assert resource_result_of("file:///n", None, 7) == {
        "contents": [{"uri": "file:///n", "mimeType": "text/plain", "text": "7"}]
    }


def test_resource_bytes_are_a_base64_blob() -> None:
    data = bytes(range(256))

    found = resource_result_of("file:///a.bin", "application/octet-stream", data)

    assert found == {
        "contents": [
            {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": base64.b64encode(data).decode()}
        ]
    }
    assert resource_result_of("file:///b.bin", None, b"x") == {"contents": [{"uri": "file:///b.bin", "blob": "eA=="}]}


def test_resource_contents_and_results_are_sent_as_given() -> None:
    one = ResourceContents(uri="file:///other", mime_type="text/csv", text="a,b")
    two = ResourceContents(uri="file:///more", blob="eA==")

    assert resource_result_of("file:///asked", None, one) == {
        "contents": [{"uri": "file:///other", "mimeType": "text/csv", "text": "a,b"}]
    }
    assert resource_result_of("file:///asked", None, ResourceResult([one, two])) == {
        "contents": [
            {"uri": "file:///other", "mimeType": "text/csv", "text": "a,b"},
            {"uri": "file:///more", "blob": "eA=="},
        ]
    }
