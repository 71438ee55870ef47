"""Request params are decoded once into their Structs; what is wrong is one -32602 that says where."""

from __future__ import annotations

from typing import Any

import pytest

from ext_tasks.protocol.errors import INVALID_PARAMS, InvalidParams
from ext_tasks.protocol.params import (
    MAX_WATCHED_ID_CHARS,
    CompleteParams,
    GetPromptParams,
    ListenParams,
    ListParams,
    ReadResourceParams,
    decode_params,
)


@pytest.mark.parametrize(
    ("kind", "params", "said"),
    [
        (GetPromptParams, {}, "Object missing required field `name`"),
        (GetPromptParams, {"name": "p", "arguments": {"a": 1}}, "Expected `str`, got `int` - at `$.arguments[...]`"),
        (ReadResourceParams, {"uri": None}, "Expected `str`, got `null` - at `$.uri`"),
        (ListParams, {"cursor": 5}, "Expected `str | null`, got `int` - at `$.cursor`"),
        (
            CompleteParams,
            {"ref": {"type": "ref/tool"}, "argument": {"name": "a", "value": "b"}},
            "Invalid enum value 'ref/tool' - at `$.ref.type`",
        ),
        (
            ListenParams,
            {"notifications": {"taskIds": ["x" * (MAX_WATCHED_ID_CHARS + 1)]}},
            f"Expected `str` of length <= {MAX_WATCHED_ID_CHARS} - at `$.notifications.taskIds[0]`",
        ),
        (
            ListenParams,
            {"notifications": {"toolsListChanged": "yes"}},
            "Expected `bool`, got `str` - at `$.notifications.toolsListChanged`",
        ),
    ],
)
def test_malformed_params_are_one_invalid_params_error_naming_where(
    kind: type[Any], params: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidParams) as refused:
        decode_params(kind, params)
    assert refused.value.code == INVALID_PARAMS
    assert refused.value.message == f"Invalid params: {said}"


def test_members_this_server_does_not_know_are_ignored_and_camel_case_is_read() -> None:
    listen = decode_params(ListenParams, {"notifications": {"taskIds": ["t1"], "futureFlag": True}, "extra": 1})
    prompt = decode_params(GetPromptParams, {"name": "greet", "arguments": None})
    assert listen.notifications.task_ids == ["t1"] and listen.notifications.tools_list_changed is False
    assert (prompt.name, prompt.arguments) == ("greet", None)
