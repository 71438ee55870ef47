"""The tool-author API of ``ext_tasks.tools`` (with ``ext_tasks.signatures``): the input schema generated
from type hints, ``Header()``, hand-written schemas, how arguments are validated and bound, the
registration options, the change notifications of the registry, and how a resource URI finds its
resource or template.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from ext_tasks import Context, Header, Principal, ToolRegistry
from ext_tasks.protocol.envelope import Envelope
from ext_tasks.protocol.errors import INVALID_PARAMS, InvalidParams
from ext_tasks.tools import ChangeKind

VERSION = "2026-07-28"


def a_context() -> Context:
    envelope = Envelope(VERSION, {}, None, None, None)
    return Context(principal=Principal("alice"), envelope=envelope)


class Changes:
    """A registry listener: every ``(kind, uri)`` it was told, in order."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.seen: list[tuple[ChangeKind, str | None]] = []
        registry.on_change(lambda kind, uri: self.seen.append((kind, uri)))


# --- the input schema, from type hints ------------------------------------------------------------------


def test_the_schema_describes_each_parameter_and_requires_those_without_a_default() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def forecast(
        ctx: Context,
        city: Annotated[str, Field(description="City name")],
        days: int = 3,
        unit: Literal["c", "f"] = "c",
        tags: list[str] | None = None,
    ) -> str:
        """Forecast for a city."""
        return city

    schema = registry.tools["forecast"].input_schema

    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"city", "days", "unit", "tags"}  # the Context is not an argument
    assert schema["required"] == ["city"]
    assert schema["properties"]["city"] == {"type": "string", "description": "City name"}
    assert schema["properties"]["days"] == {"type": "integer", "default": 3}
    assert schema["properties"]["unit"]["enum"] == ["c", "f"]
    assert "title" not in str(schema)  # pydantic's generated titles are left out at every level


def test_a_tool_without_parameters_has_an_empty_object_schema() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def ping(ctx: Context) -> str:
        return "pong"

    assert registry.tools["ping"].input_schema == {"type": "object", "properties": {}}


class Address(BaseModel):
    street: str
    number: int


def test_a_pydantic_model_parameter_is_described_in_the_schema_and_arrives_as_the_model() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def ship(to: Address) -> str:
        return to.street

    schema = registry.tools["ship"].input_schema
    assert schema["required"] == ["to"]
    address = schema["$defs"]["Address"]
    assert address["properties"] == {"street": {"type": "string"}, "number": {"type": "integer"}}
    assert address["required"] == ["street", "number"]
    bound = registry.tools["ship"].bind({"to": {"street": "Main", "number": 1}}, a_context())
    assert bound == {"to": Address(street="Main", number=1)}


def test_the_description_is_the_docstring_unless_given_and_names_titles_and_annotations_are_published() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def documented() -> str:
        """Does a documented thing."""
        return ""

    @registry.tool("renamed", description="Given.", title="Renamed tool", annotations={"readOnlyHint": True})
    async def original() -> str:
        """Not this."""
        return ""

    assert registry.tools["documented"].describe() == {
        "name": "documented",
        "description": "Does a documented thing.",
        "inputSchema": {"type": "object", "properties": {}},
    }
    assert "original" not in registry.tools
    assert registry.tools["renamed"].describe() == {
        "name": "renamed",
        "description": "Given.",
        "inputSchema": {"type": "object", "properties": {}},
        "title": "Renamed tool",
        "annotations": {"readOnlyHint": True},
    }


@pytest.mark.parametrize("kind", ["args", "kwargs"])
def test_star_args_and_kwargs_cannot_be_described_without_a_schema(kind: str) -> None:
    registry = ToolRegistry("tools-test")

    async def with_args(*items: str) -> str:
        return ""

    async def with_kwargs(**items: str) -> str:
        return ""

    with pytest.raises(TypeError, match="cannot be described as an input schema"):
        registry.tool()(with_args if kind == "args" else with_kwargs)


def test_header_marks_a_parameter_as_mirrored_in_its_mcp_param_header() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def deploy(region: Annotated[str, Header("Region", "Where to deploy")], ref: str) -> str:
        return region

    tool = registry.tools["deploy"]
    assert tool.input_schema["properties"]["region"] == {
        "type": "string",
        "description": "Where to deploy",
        "x-mcp-header": "Region",
    }
    assert tool.header_params == {"Region": "region"}


def test_prompt_arguments_are_described_with_their_required_flag_and_description() -> None:
    registry = ToolRegistry("tools-test")

    @registry.prompt(title="Greeting")
    async def greeting(name: Annotated[str, Field(description="Who")], tone: str = "warm") -> str:
        """A greeting prompt."""
        return name

    assert registry.prompts["greeting"].describe() == {
        "name": "greeting",
        "description": "A greeting prompt.",
        "arguments": [
            {"name": "name", "required": True, "description": "Who"},
            {"name": "tone", "required": False},
        ],
        "title": "Greeting",
    }


# --- a hand-written schema ------------------------------------------------------------------------------


RAW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}


def test_a_hand_written_schema_is_published_as_is_and_its_arguments_are_not_validated() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool(input_schema=RAW_SCHEMA)
    async def search(ctx: Context, query: Any = None, limit: Any = None) -> str:
        return ""

    tool = registry.tools["search"]
    ctx = a_context()
    assert tool.describe()["inputSchema"] == RAW_SCHEMA
    tool.check_arguments({"limit": "many"})  # the schema is the author's to enforce
    kwargs = tool.bind({"limit": "many", "unknown": 1}, ctx)
    assert kwargs == {"limit": "many", "ctx": ctx}  # names the function does not take are left out


def test_a_hand_written_schema_hands_every_argument_to_a_function_taking_kwargs() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool(input_schema=RAW_SCHEMA)
    async def search(**arguments: Any) -> str:
        return ""

    assert registry.tools["search"].bind({"query": "q", "extra": [1]}, a_context()) == {"query": "q", "extra": [1]}


# --- validating and binding arguments -------------------------------------------------------------------


def test_bind_validates_fills_defaults_ignores_unknown_names_and_hands_over_the_context() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def forecast(ctx: Context, city: str, days: int = 3) -> str:
        return city

    ctx = a_context()
    assert registry.tools["forecast"].bind({"city": "Lyon", "colour": "red"}, ctx) == {
        "city": "Lyon",
        "days": 3,
        "ctx": ctx,
    }


@pytest.mark.parametrize(
    ("arguments", "named"),
    [({}, "city"), ({"city": "Lyon", "days": "many"}, "days"), ({"city": ["Lyon"]}, "city")],
    ids=["missing", "wrong-type", "list-for-string"],
)
def test_invalid_arguments_raise_invalid_params_naming_the_argument(arguments: dict[str, Any], named: str) -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool()
    async def forecast(city: str, days: int = 3) -> str:
        return city

    tool = registry.tools["forecast"]
    for attempt in (lambda: tool.check_arguments(arguments), lambda: tool.bind(arguments, a_context())):
        with pytest.raises(InvalidParams) as raised:
            attempt()
        assert raised.value.to_error()["code"] == INVALID_PARAMS
        assert raised.value.message.startswith("Invalid arguments: ")
        assert named in raised.value.message


# --- registration options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"task": "sometimes"}, {"ttl_ms": 0}, {"ttl_ms": -5}, {"poll_max_ms": 0}, {"poll_max_ms": 2.5}],
    ids=["task", "ttl-zero", "ttl-negative", "poll-zero", "poll-float"],
)
def test_an_invalid_task_option_is_refused_when_the_tool_is_declared(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"task must be|positive integer"):
        ToolRegistry("tools-test").tool(**options)


def test_task_options_are_kept_on_the_tool() -> None:
    registry = ToolRegistry("tools-test")

    @registry.tool(task="optional", preflight=True, ttl_ms=7_200_000, poll_max_ms=1_000, sensitive=True)
    async def report() -> str:
        return ""

    @registry.tool()
    async def plain() -> str:
        return ""

    tool = registry.tools["report"]
    assert (tool.task, tool.preflight, tool.ttl_ms, tool.poll_max_ms, tool.sensitive) == (
        "optional",
        True,
        7_200_000,
        1_000,
        True,
    )
    assert registry.tools["plain"].task == "forbidden"


# --- change notifications -------------------------------------------------------------------------------


def test_registering_and_removing_tools_and_prompts_tells_every_listener() -> None:
    registry = ToolRegistry("tools-test")
    first, second = Changes(registry), Changes(registry)

    @registry.tool()
    async def job() -> str:
        return ""

    @registry.prompt()
    async def hint() -> str:
        return ""

    removed = registry.remove_tool("job")
    assert registry.remove_tool("job") is None  # nothing removed: nothing to tell
    assert registry.remove_prompt("hint") is not None
    assert registry.remove_prompt("hint") is None

    assert removed is not None and removed.name == "job"
    assert "job" not in registry.tools
    assert first.seen == [("tools", None), ("prompts", None), ("tools", None), ("prompts", None)]
    assert second.seen == first.seen


def test_resources_and_templates_change_the_resource_list_and_an_update_names_its_uri() -> None:
    registry = ToolRegistry("tools-test")
    changes = Changes(registry)

    @registry.resource("file:///readme.md")
    async def readme() -> str:
        return ""

    @registry.resource_template("file:///notes/{slug}.txt")
    async def note(slug: str) -> str:
        return slug

    registry.resource_updated("file:///readme.md")

    assert changes.seen == [("resources", None), ("resources", None), ("resource", "file:///readme.md")]


# --- finding a resource by URI --------------------------------------------------------------------------


@pytest.fixture
def resources() -> ToolRegistry:
    registry = ToolRegistry("tools-test")

    @registry.resource("test://fixed/data.json", mime_type="application/json")
    async def fixed() -> str:
        return "{}"

    @registry.resource_template("test://{owner}/{id}/data.json")
    async def owned(owner: str, id: str) -> str:
        return f"{owner}/{id}"

    @registry.resource_template("test://{id}/data.json")
    async def single(id: str) -> str:
        return id

    return registry


@pytest.mark.parametrize(
    ("uri", "found", "variables"),
    [
        ("test://fixed/data.json", "fixed", {}),
        ("test://7/data.json", "single", {"id": "7"}),
        ("test://ada/7/data.json", "owned", {"owner": "ada", "id": "7"}),
        ("test://7/dataXjson", None, None),
        ("test://7/data.json.bak", None, None),
        ("prefix-test://7/data.json", None, None),
        ("test:///data.json", None, None),
    ],
    ids=["exact-resource", "one-variable", "two-variables", "dot-is-literal", "whole-uri", "no-prefix", "empty"],
)
def test_a_uri_finds_its_resource_or_the_template_matching_it_whole_one_segment_per_variable(
    resources: ToolRegistry, uri: str, found: str | None, variables: dict[str, str] | None
) -> None:
    match = resources.find_resource(uri)

    if found is None:
        assert match is None
    else:
        assert match is not None
        resource, bound = match
        assert (resource.name, bound) == (found, variables)


def test_resources_and_templates_describe_themselves_for_their_lists(resources: ToolRegistry) -> None:
    assert resources.resources["test://fixed/data.json"].describe() == {
        "uri": "test://fixed/data.json",
        "name": "fixed",
        "description": "",
        "mimeType": "application/json",
    }
    assert resources.templates["test://{id}/data.json"].describe() == {
        "uriTemplate": "test://{id}/data.json",
        "name": "single",
        "description": "",
    }
