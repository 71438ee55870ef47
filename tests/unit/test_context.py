"""The :class:`~ext_tasks.context.Context` on its own, as a tool author uses it: the answers it was given,
asking (``ask``, ``elicit``, ``sample``, ``list_roots``) and the keys it asked, ``supports``/``require``,
when ``report_progress`` and ``log`` emit a notification, and ``set_status``/``start_task``.

What those requests look like on the wire, and what a client must declare for them, is in
``test_input_requests.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ext_tasks import Context, InputRequired, MissingClientCapability, Principal, elicit, elicit_url, list_roots, sample
from ext_tasks.context import StartTask
from ext_tasks.protocol.envelope import Envelope
from ext_tasks.protocol.errors import MISSING_REQUIRED_CLIENT_CAPABILITY
from ext_tasks.protocol.wire import CreateMessageResult, ElicitResult, Root
from tests.unit.engine_support import ALL_CAPABILITIES, NAME_SCHEMA, VERSION

pytestmark = pytest.mark.anyio

ADA = {"action": "accept", "content": {"name": "Ada"}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "drops"}, "model": "m"}


class Emitted:
    """Where a context's notifications go: every ``(method, params)`` it emitted, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, method: str, params: dict[str, Any]) -> None:
        self.sent.append((method, params))


def context(
    *,
    capabilities: Mapping[str, Any] | None = None,
    answers: Mapping[str, dict[str, Any]] | None = None,
    state: Any = None,
    emit: Emitted | None = None,
    progress_token: str | int | None = None,
    log_level: str | None = None,
    **options: Any,
) -> Context:
    envelope = Envelope(
        protocol_version=VERSION,
        client_capabilities=ALL_CAPABILITIES if capabilities is None else capabilities,
        client_info={"name": "client", "version": "1"},
        log_level=log_level,
        progress_token=progress_token,
    )
    return Context(
        principal=Principal("alice"),
        envelope=envelope,
        answers=answers,
        state=state,
        emit=emit or Emitted(),
        **options,
    )


# --- answers and asking -----------------------------------------------------------------------------


async def test_the_request_is_visible_to_the_function() -> None:
    ctx = context(capabilities={"sampling": {}}, answers={"name": ADA}, state={"step": 2})

    assert ctx.principal == Principal("alice")
    assert ctx.client_capabilities == {"sampling": {}}
    assert ctx.client_info == {"name": "client", "version": "1"}
    assert ctx.answers == {"name": ADA}
    assert ctx.state == {"step": 2}
    assert ctx.task_id is None


async def test_ask_returns_typed_answers_once_every_question_is_answered() -> None:
    ctx = context(answers={"name": ADA, "roots": {"roots": [{"uri": "file:///a"}]}})

    answers = ctx.ask({"name": elicit("Name?", NAME_SCHEMA), "roots": list_roots()})

    assert answers["name"] == ElicitResult(action="accept", content={"name": "Ada"})
    assert answers["roots"].roots == [Root(uri="file:///a")]


async def test_ask_raises_input_required_for_the_questions_still_open_with_the_functions_state() -> None:
    ctx = context(answers={"name": ADA}, state={"kept": True})
    questions = {"name": elicit("Name?", NAME_SCHEMA), "haiku": sample("A haiku", max_tokens=10)}

    with pytest.raises(InputRequired) as raised:
        ctx.ask(questions)

    assert raised.value.requests == {"haiku": questions["haiku"]}
    assert raised.value.state == {"kept": True}


async def test_an_answer_that_does_not_fit_its_request_counts_as_not_given() -> None:
    ctx = context(answers={"name": {"action": "accept", "content": {"name": 7}}, "other": ADA})

    assert ctx.answer("name", elicit("Name?", NAME_SCHEMA)) is None
    assert ctx.answer("missing", elicit("Name?", NAME_SCHEMA)) is None
    assert ctx.answer("other", elicit("Name?", NAME_SCHEMA)) == ElicitResult(action="accept", content={"name": "Ada"})


async def test_elicit_sample_and_list_roots_return_the_answer_when_it_was_given() -> None:
    ctx = context(answers={"name": ADA, "haiku": SAMPLED, "roots": {"roots": [{"uri": "file:///a", "name": "a"}]}})

    assert await ctx.elicit("name", "Name?", NAME_SCHEMA) == ElicitResult(action="accept", content={"name": "Ada"})
    sampled = await ctx.sample("haiku", "A haiku", max_tokens=10)
    assert isinstance(sampled, CreateMessageResult)
    assert (sampled.model, sampled.content) == ("m", {"type": "text", "text": "drops"})
    assert await ctx.list_roots("roots") == [Root(uri="file:///a", name="a")]


@pytest.mark.parametrize("helper", ["elicit", "sample", "list_roots"])
async def test_elicit_sample_and_list_roots_end_the_round_when_the_answer_is_missing(helper: str) -> None:
    ctx = context(answers={"unrelated": ADA})

    with pytest.raises(InputRequired) as raised:
        if helper == "elicit":
            await ctx.elicit("key", "Name?", NAME_SCHEMA)
        elif helper == "sample":
            await ctx.sample("key", "A haiku", max_tokens=10)
        else:
            await ctx.list_roots("key")

    assert set(raised.value.requests) == {"key"}


async def test_asked_keys_are_every_key_asked_answered_or_not_but_not_keys_only_read() -> None:
    ctx = context(answers={"name": ADA, "read": ADA})
    assert ctx.answers["read"] == ADA
    ctx.answer("name", elicit("Name?", NAME_SCHEMA))
    with pytest.raises(InputRequired):
        ctx.ask({"colour": elicit("Colour?", {"type": "object"}), "name": elicit("Name?", NAME_SCHEMA)})
    with pytest.raises(InputRequired):
        await ctx.list_roots("roots")

    assert ctx.asked_keys == frozenset({"name", "colour", "roots"})


# --- what the client declared -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("declared", "form", "url", "sampling", "sampling_tools", "roots"),
    [
        ({}, False, False, False, False, False),
        ({"elicitation": {}}, True, False, False, False, False),
        ({"elicitation": {"url": {}}}, False, True, False, False, False),
        ({"elicitation": {"form": {}, "url": {}}, "sampling": {}}, True, True, True, False, False),
        ({"sampling": {"tools": {}}, "roots": {}}, False, False, True, True, True),
    ],
    ids=["nothing", "elicitation-empty", "url-only", "form-url-sampling", "sampling-tools-roots"],
)
async def test_supports_tells_whether_the_client_declared_what_a_request_needs(
    declared: dict[str, Any], form: bool, url: bool, sampling: bool, sampling_tools: bool, roots: bool
) -> None:
    ctx = context(capabilities=declared)
    with_tools = sample("Pick one", max_tokens=5)
    with_tools.params["tools"] = [{"name": "search"}]

    assert ctx.supports(elicit("Name?", NAME_SCHEMA)) is form
    assert ctx.supports(elicit_url("Sign in", "https://login.example.com")) is url
    assert ctx.supports(sample("Hi", max_tokens=5)) is sampling
    assert ctx.supports(with_tools) is sampling_tools
    assert ctx.supports(list_roots()) is roots
    assert ctx.supports({"roots": {}}) is roots


async def test_require_raises_missing_client_capability_naming_what_is_missing() -> None:
    ctx = context(capabilities={"elicitation": {}})
    ctx.require({"elicitation": {}})

    with pytest.raises(MissingClientCapability) as raised:
        ctx.require({"sampling": {}})

    assert raised.value.to_error()["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert raised.value.to_error()["data"] == {"requiredCapabilities": {"sampling": {}}}


# --- notifications: progress and logs ---------------------------------------------------------------


async def test_progress_is_emitted_only_for_a_request_with_a_progress_token() -> None:
    silent, loud = Emitted(), Emitted()

    await context(emit=silent).report_progress(1, 2, "half")
    ctx = context(emit=loud, progress_token="p-1")
    await ctx.report_progress(1, 2, "half")
    await ctx.report_progress(0.5)

    assert silent.sent == []
    assert loud.sent == [
        ("notifications/progress", {"progressToken": "p-1", "progress": 1, "total": 2, "message": "half"}),
        ("notifications/progress", {"progressToken": "p-1", "progress": 0.5}),
    ]


async def test_inside_a_task_a_progress_message_becomes_the_status_and_set_status_publishes_it() -> None:
    statuses: list[str] = []

    async def on_status(message: str) -> None:
        statuses.append(message)

    emitted = Emitted()
    ctx = context(emit=emitted, task_id="task-1", on_status=on_status)
    await ctx.report_progress(1, 3, "collecting")
    await ctx.report_progress(2, 3)
    await ctx.set_status("sending")
    await context().set_status("inline: nowhere to go")

    assert statuses == ["collecting", "sending"]
    assert emitted.sent == []  # no progressToken: tasks have no progress notifications


@pytest.mark.parametrize(
    ("wanted", "sent"),
    [(None, []), ("error", []), ("warning", ["warning"]), ("debug", ["warning"])],
    ids=["no-log-level", "above", "equal", "below"],
)
async def test_a_log_is_emitted_only_at_or_above_the_level_the_request_asked_for(
    wanted: str | None, sent: list[str]
) -> None:
    emitted = Emitted()

    await context(emit=emitted, log_level=wanted).log("warning", {"disk": "full"}, logger="storage")

    assert emitted.sent == [
        ("notifications/message", {"level": level, "data": {"disk": "full"}, "logger": "storage"}) for level in sent
    ]


async def test_a_log_without_a_logger_name_leaves_it_out() -> None:
    emitted = Emitted()

    await context(emit=emitted, log_level="info").log("info", "started")

    assert emitted.sent == [("notifications/message", {"level": "info", "data": "started"})]


# --- starting a task from a preflight -----------------------------------------------------------------


async def test_start_task_hands_over_only_where_a_task_can_start_and_none_runs_yet() -> None:
    with pytest.raises(StartTask):
        await context(can_start_task=True).start_task()

    await context().start_task()  # inline: the whole function runs here
    await context(can_start_task=True, task_id="task-1").start_task()  # already the task: goes on


async def test_a_log_at_an_unknown_level_is_refused_whether_or_not_the_client_asked_for_logs() -> None:
    for wanted in (None, "debug"):
        ctx = Context(
            principal=Principal("alice"),
            envelope=Envelope(
                protocol_version="2026-07-28",
                client_capabilities={},
                client_info=None,
                log_level=wanted,
                progress_token=None,
            ),
        )
        with pytest.raises(ValueError, match="unknown log level 'verbose'"):
            await ctx.log("verbose", "hello")
