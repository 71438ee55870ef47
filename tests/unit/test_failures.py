"""The one mapping from an exception to a reply (``ext_tasks.failures``): what a client is told, what is
logged, and which HTTP status each era's rule gives."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from ext_tasks.failures import OWN_STATUS, Guard, StatusRule
from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, LIMIT_EXCEEDED, InvalidParams, LimitExceeded
from ext_tasks.replies import StreamItem, wire_of

SECRET = "/srv/keys/prod.pem"
LEGACY_METHOD_STATUS = StatusRule(fixed=200, kept=(LimitExceeded,))


@pytest.fixture
def guard() -> Guard:
    return Guard(logging.getLogger("tests.failures"), "handling %s failed")


def test_a_protocol_error_keeps_its_code_status_headers_and_data(guard: Guard) -> None:
    reply = guard.reply(7, LimitExceeded("too many", limit="tasks", retry_after_s=3))
    assert reply.status == 429
    assert reply.headers == {"Retry-After": "3"}
    assert reply.wire == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": LIMIT_EXCEEDED, "message": "too many", "data": {"limit": "tasks", "retryAfterSeconds": 3}},
    }


def test_anything_else_is_an_internal_error_logged_once_and_never_told(
    guard: Guard, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="tests.failures"):
        reply = guard.reply(1, KeyError(SECRET), "tools/call")
    assert reply.status == 500
    assert reply.wire == {"jsonrpc": "2.0", "id": 1, "error": {"code": INTERNAL_ERROR, "message": "Internal error"}}
    assert SECRET not in str(reply.message)
    [logged] = caplog.records
    assert logged.getMessage() == "handling tools/call failed"
    assert logged.exc_info is not None and logged.exc_info[0] is KeyError


def test_the_legacy_rule_answers_200_except_for_what_means_retry_later(guard: Guard) -> None:
    refused = guard.reply(1, InvalidParams("no such task"), rule=LEGACY_METHOD_STATUS)
    limited = guard.reply(2, LimitExceeded("slow down", limit="rate", retry_after_s=1), rule=LEGACY_METHOD_STATUS)
    assert (refused.status, refused.message and refused.wire["error"]["code"]) == (200, INVALID_PARAMS)
    assert limited.status == 429
    assert guard.reply(3, InvalidParams("no such task"), rule=OWN_STATUS).status == InvalidParams.http_status


def test_a_guarded_block_answers_its_failure_and_lets_cancellation_through(guard: Guard) -> None:
    with (failure := guard.catching(5, "tasks/get")):
        raise InvalidParams("bad id")
    assert failure.failed
    assert failure.reply.message is not None and failure.reply.wire["error"]["message"] == "bad id"

    with (quiet := guard.catching(6)):
        pass
    assert not quiet.failed

    with pytest.raises(asyncio.CancelledError), guard.catching(7):
        raise asyncio.CancelledError


@pytest.mark.anyio
async def test_a_stream_that_breaks_off_ends_with_its_error_as_the_response(guard: Guard) -> None:
    async def breaking() -> AsyncIterator[StreamItem]:
        yield {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
        raise RuntimeError(SECRET)

    items = [item async for item in guard.stream(9, "tools/call", breaking())]
    assert items[0] == {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    assert items[1] is not None
    internal = {"code": INTERNAL_ERROR, "message": "Internal error"}
    assert wire_of(items[1]) == {"jsonrpc": "2.0", "id": 9, "error": internal}
    assert len(items) == 2
