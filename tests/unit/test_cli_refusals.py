"""``ext-tasks worker`` refuses, at once and in one line, a configuration in which it could do nothing:
no shared store to take runs from, or task workers turned off (``EXT_TASKS_NO_WORKERS=true``, which
before this made it idle silently). Nothing is contacted: the refusal comes before any store is opened."""

from __future__ import annotations

import pytest

from ext_tasks.cli import main
from ext_tasks.protocol.resume import generate_key

UNUSED_STORE = "valkey://127.0.0.1:9/0"  # never contacted: the settings are refused first


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["worker"], {}, "`ext-tasks worker` serves a shared task store"),
        (["worker", "--valkey-url", UNUSED_STORE], {"EXT_TASKS_NO_WORKERS": "true"}, "EXT_TASKS_NO_WORKERS=true"),
    ],
    ids=["no-store", "no-workers"],
)
def test_a_worker_that_could_do_nothing_refuses_to_start(
    argv: list[str], env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("EXT_TASKS_VALKEY_URL", raising=False)
    monkeypatch.setenv("EXT_TASKS_STATE_KEYS", generate_key())
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    status = main([*argv, "--tools", "ext_tasks.examples.demo"])

    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("ext-tasks: configuration error: ") and says in lines[0], lines
