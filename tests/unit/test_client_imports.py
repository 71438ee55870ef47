"""``import ext_tasks.client`` loads nothing of the server, at run time (import-linter checks the imports
the client's modules write; this checks what Python loads, the package's ``__init__`` included): a fresh
interpreter imports the client and its OAuth package, and lists the modules it holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ext_tasks

REPO = Path(__file__).resolve().parents[2]

#: What the client may load of ext_tasks: the package itself, the protocol core, reading SSE and another
#: server's answers, and tracing (its spans and the context it sends in ``_meta``), as
#: docs/architecture.md says of the client.
CLIENT_SIDE = (
    "ext_tasks",
    "ext_tasks.client",
    "ext_tasks.protocol",
    "ext_tasks.sse",
    "ext_tasks.answers",
    "ext_tasks.tracing",
    "ext_tasks.tracing_setup",
)
#: Libraries only the server uses.
SERVER_LIBRARIES = ("migration", "litestar", "hypercorn", "granian", "valkey", "prometheus_client", "pydantic")


def _loaded_after(*imports: str) -> list[str]:
    code = f"import json, sys\nimport {', '.join(imports)}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def _server_modules(loaded: list[str]) -> list[str]:
    def ours(name: str) -> bool:
        return name == "ext_tasks" or name.startswith("ext_tasks.")

    def client_side(name: str) -> bool:
        return any(name == allowed or name.startswith(allowed + ".") for allowed in CLIENT_SIDE[1:])

    return [
        name
        for name in loaded
        if (ours(name) and name != "ext_tasks" and not client_side(name)) or name.split(".")[0] in SERVER_LIBRARIES
    ]


def test_the_client_loads_no_server_module() -> None:
    loaded = _loaded_after("ext_tasks.client")
    assert "ext_tasks.client.client" in loaded
    assert _server_modules(loaded) == []


def test_the_client_oauth_loads_no_server_module() -> None:
    loaded = _loaded_after("ext_tasks.client.oauth")
    assert "ext_tasks.client.oauth.auth" in loaded
    assert _server_modules(loaded) == []


def test_the_check_sees_a_server_module() -> None:
    # The same check after importing the tool-author API: the server's modules are there, so an empty
    # list above means something.
    found = _server_modules(_loaded_after("ext_tasks.client", "ext_tasks.tools"))
    assert "ext_tasks.tools" in found
    assert "pydantic" in found


def test_the_tool_author_api_is_every_name_of_the_package() -> None:
    # Loaded on first use (PEP 562): every name of __all__ resolves, to the object its module defines.
    for name in ext_tasks.__all__:
        value = getattr(ext_tasks, name)
        assert getattr(value, "__module__", "").startswith("ext_tasks"), name
    assert set(ext_tasks.__all__) == set(ext_tasks._HOMES)
    assert set(ext_tasks.__all__) <= set(dir(ext_tasks))
