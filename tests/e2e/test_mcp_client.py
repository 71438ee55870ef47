"""The real ``mcp==2.3.0`` client resolves our MRTR results on its own (elicitation, sampling, prompts).

The client runs in its own interpreter (``EXT_TASKS_MCP2_PYTHON``, default ``.venvs/mcp2/bin/python``)
so that mcp 2.x never shares an environment with the dev tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import mcp2_python, run_json_client
from tests.support.processes import ServerProcess, running_server

pytestmark = pytest.mark.e2e

CLIENT_SCRIPT = Path(__file__).parent / "clients" / "mcp2_client.py"
CLIENT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("mcp2"), tools="tests.e2e.mrtr_tools") as process:
        yield process


def run_client(python: Path, server: ServerProcess, mode: str) -> dict[str, Any]:
    return run_json_client(python, CLIENT_SCRIPT, server.url, mode, timeout_s=CLIENT_TIMEOUT_S, context=server.log)


@pytest.mark.parametrize("mode", ["auto", "2026-07-28"])
def test_mcp2_client_resolves_mrtr(server: ServerProcess, mode: str) -> None:
    observed = run_client(mcp2_python(), server, mode)

    assert observed["protocolVersion"] == "2026-07-28"
    assert observed["tools"] == ["haiku", "introduce"]
    assert observed["prompts"] == ["trip_plan"]

    # Two rounds, one question each: the second question is built from the first answer.
    introduce = observed["introduce"]
    assert introduce["isError"] is False
    assert introduce["texts"] == ["Welcome, Ada! Your favourite colour is teal."]
    assert introduce["elicitations"] == 2
    asked = [(entry["key"], entry["message"], entry["answer"]) for entry in observed["elicitations"][:2]]
    assert asked == [
        ("name", "What is your name?", {"name": "Ada"}),
        ("colour", "What is your favourite colour, Ada?", {"colour": "teal"}),
    ]

    haiku = observed["haiku"]
    assert haiku["isError"] is False
    assert haiku["samplings"] == 1
    assert haiku["texts"] == ["Haiku from fake-model-1: Old pond, a frog jumps in, the sound of water"]
    assert observed["samplings"] == [{"key": "haiku", "texts": ["Write a haiku about ponds."], "maxTokens": 64}]

    trip = observed["trip_plan"]
    assert trip["elicitations"] == 1
    assert trip["description"] == "A trip to Lisbon"
    assert trip["messages"][0] == {"role": "user", "text": "Plan a 2-day trip to Lisbon."}
    assert all("Lisbon" in message["text"] for message in trip["messages"])

    assert observed["callbacks"] == {"elicitation": 3, "sampling": 1}
