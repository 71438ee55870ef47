"""``python -m investigations.instructions``' driver: the requests it counts are the ones it claims to count."""

from __future__ import annotations

import pytest

from investigations import instructions

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", instructions.MODES)
async def test_each_mode_completes_a_resume_before_counting(mode: str) -> None:
    # drive() asserts the first call asks for input and the resume completes, so a count never
    # measures an error reply.
    await instructions.drive(mode, 3)


def test_a_request_count_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        instructions.main(["--requests", "0"])

    assert exited.value.code == 2
    assert "--requests must be at least 1" in capsys.readouterr().err
