"""The shim reads the 2026-07-28 results typed: the engine's Structs as they are, a remote server's JSON
decoded into the same Structs by the method it answers, and a wrong shape refused at that edge."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ext_tasks.protocol.result_types import (
    CreateTaskResult,
    GetTaskResult,
    InputRequiredResult,
    ListToolsResult,
    ToolCallResult,
)
from migration.modern_results import detailed_task, typed_response, typed_result
from migration.remote import UpstreamFailed
from tests.migration.shim_support import MODERN_TASK

TASK = {key: value for key, value in MODERN_TASK.items() if key != "pollIntervalMs"}


def test_the_engines_typed_result_is_read_as_it_is() -> None:
    result = ToolCallResult(content=[], is_error=False)
    assert typed_result("tools/call", result) is result


@pytest.mark.parametrize(
    ("wire", "kind"),
    [
        ({"resultType": "complete", "content": [{"type": "text", "text": "hi"}]}, ToolCallResult),
        ({"resultType": "task", **TASK}, CreateTaskResult),
        ({"resultType": "input_required", "inputRequests": {}}, InputRequiredResult),
    ],
)
def test_a_remote_tools_call_answer_is_decoded_by_its_result_type(wire: dict[str, Any], kind: type) -> None:
    assert isinstance(typed_result("tools/call", wire), kind)


def test_what_the_wire_leaves_optional_may_be_left_out_by_a_remote_server() -> None:
    # isError, requestState and pollIntervalMs are optional in 2026-07-28; this server always writes them.
    call = typed_result("tools/call", {"resultType": "complete", "content": []})
    asking = typed_result("tools/call", {"resultType": "input_required", "inputRequests": {}})
    task = typed_result("tasks/get", {"resultType": "complete", **TASK})
    assert isinstance(call, ToolCallResult) and call.is_error is False
    assert isinstance(asking, InputRequiredResult) and asking.request_state is msgspec.UNSET
    assert isinstance(task, GetTaskResult) and task.poll_interval_ms is msgspec.UNSET


def test_this_servers_own_results_still_write_what_the_wire_requires() -> None:
    written = msgspec.to_builtins(ToolCallResult(content=[]))
    assert written == {"resultType": "complete", "content": [], "isError": False}


@pytest.mark.parametrize(
    ("method", "wire", "why"),
    [
        ("tools/call", {"resultType": "complete", "content": "text"}, "Expected `array`, got `str`"),
        ("tools/call", {"resultType": "nonsense"}, "Invalid value 'nonsense'"),
        ("tasks/get", {"resultType": "complete", "taskId": "t1"}, "missing required field"),
        ("tools/list", {"tools": []}, "missing required field `ttlMs`"),
        ("tools/call", [], "Expected `object`, got `array`"),
    ],
)
def test_a_remote_answer_that_is_not_its_methods_result_is_a_502(method: str, wire: object, why: str) -> None:
    with pytest.raises(UpstreamFailed, match=f"Upstream answered {method} with a malformed result") as failed:
        typed_result(method, wire)
    assert why in str(failed.value) and failed.value.http_status == 502


def test_a_remote_listing_may_page() -> None:
    listing = typed_result("tools/list", {"tools": [], "ttlMs": 0, "cacheScope": "private", "nextCursor": "p2"})
    assert isinstance(listing, ListToolsResult) and listing.next_cursor == "p2"


def test_only_a_response_is_typed() -> None:
    notification = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    response = {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "task", **TASK}}
    assert typed_response("tools/call", notification) is notification
    assert isinstance(typed_response("tools/call", response)["result"], CreateTaskResult)


def test_a_task_notification_is_read_as_a_detailed_task_or_skipped() -> None:
    task = detailed_task({**TASK, "status": "input_required", "inputRequests": {"q": {"method": "roots/list"}}})
    assert task is not None and task.input_requests == {"q": {"method": "roots/list"}}
    assert detailed_task({"taskId": "t1"}) is None
    assert detailed_task(None) is None
