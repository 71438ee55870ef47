"""Properties of the ``requestState`` codec (``ext_tasks.protocol.resume``), for any content and any damage.

``test_resume.py`` checks chosen cases; here hypothesis draws the state, the answers, the request it
is bound to, and what happens to the token on its way back: any single bit flipped, any truncation,
another key, any time past the lifetime. Every refusal is the documented one, :class:`InvalidRequestState`
with the fixed wire message; both token formats (signed ``v1.``, encrypted ``v1e.``) are drawn.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ext_tasks.protocol.errors import INVALID_PARAMS, InvalidRequestState
from ext_tasks.protocol.resume import Binding, ResumeCodec, digest_arguments
from tests.unit.properties import JSON_OBJECTS, JSON_VALUES, quick

KEY = b"k" * 32
AUDIENCE = "ext-tasks-properties"
TTL_S = 600
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def make_codec(encrypt: bool, clock: Clock | None = None, key: bytes = KEY) -> ResumeCodec:
    return ResumeCodec([key], audience=AUDIENCE, ttl_s=TTL_S, encrypt=encrypt, clock=clock or Clock())


BINDINGS = st.builds(
    Binding,
    method=st.sampled_from(["tools/call", "prompts/get", "resources/read"]),
    target=st.text(min_size=1, max_size=20),
    arguments_digest=JSON_OBJECTS.map(digest_arguments),
    principal=st.text(max_size=20),
)
ANSWERS = st.dictionaries(st.text(max_size=8), JSON_OBJECTS, max_size=3)
ASKED = st.lists(st.text(max_size=8), max_size=4)


def sealed_by(encrypt: bool, binding: Binding, state: Any) -> tuple[ResumeCodec, Binding, str]:
    codec = make_codec(encrypt)
    return codec, binding, codec.seal(binding, state=state)


#: A token as ``seal`` writes it, with the codec that wrote it and what it is bound to.
SEALED = st.builds(sealed_by, encrypt=st.booleans(), binding=BINDINGS, state=JSON_VALUES)


def refusal(codec: ResumeCodec, token: object, binding: Binding) -> str:
    """Unseal ``token``, expect the documented refusal, and return its (log-only) reason."""
    with pytest.raises(InvalidRequestState) as caught:
        codec.unseal(token, binding)
    assert caught.value.code == INVALID_PARAMS
    assert caught.value.to_error() == {
        "code": INVALID_PARAMS,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }
    return caught.value.reason


@quick(60)
@given(encrypt=st.booleans(), binding=BINDINGS, state=JSON_VALUES, answers=ANSWERS, asked=ASKED)
def test_what_is_sealed_unseals_unchanged(
    encrypt: bool, binding: Binding, state: Any, answers: dict[str, dict[str, Any]], asked: list[str]
) -> None:
    codec = make_codec(encrypt)
    token = codec.seal(binding, state=state, responses=answers, asked=asked)
    claims = codec.unseal(token, binding)
    assert (claims.state, claims.responses, claims.asked) == (state, answers, frozenset(asked))
    assert claims.expires_at == int(T0) + TTL_S
    assert token.startswith("v1e." if encrypt else "v1.")


@quick(100)
@given(sealed=SEALED, data=st.data())
def test_any_bit_flipped_anywhere_in_the_token_is_refused(
    sealed: tuple[ResumeCodec, Binding, str], data: st.DataObject
) -> None:
    codec, binding, token = sealed
    index = data.draw(st.integers(0, len(token) - 1), label="index")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = token[:index] + chr(ord(token[index]) ^ (1 << bit)) + token[index + 1 :]
    assert refusal(codec, flipped, binding)


@quick(60)
@given(sealed=SEALED, data=st.data())
def test_any_truncation_of_the_token_is_refused(sealed: tuple[ResumeCodec, Binding, str], data: st.DataObject) -> None:
    codec, binding, token = sealed
    length = data.draw(st.integers(0, len(token) - 1), label="length")
    assert refusal(codec, token[:length], binding)


@quick(40)
@given(sealed=SEALED, other=st.binary(min_size=32, max_size=64).filter(lambda key: key != KEY))
def test_a_token_sealed_under_another_key_is_refused(sealed: tuple[ResumeCodec, Binding, str], other: bytes) -> None:
    codec, binding, token = sealed
    encrypt = token.startswith("v1e.")
    assert refusal(make_codec(encrypt, key=other), token, binding)
    assert codec.unseal(token, binding).state_id  # still good where it was sealed


@quick(60)
@given(encrypt=st.booleans(), binding=BINDINGS, elapsed_s=st.integers(0, 10 * TTL_S))
def test_a_token_is_good_for_its_lifetime_and_refused_as_expired_after_it(
    encrypt: bool, binding: Binding, elapsed_s: int
) -> None:
    clock = Clock()
    codec = make_codec(encrypt, clock)
    token = codec.seal(binding, state={"step": 1})
    clock.now = T0 + elapsed_s
    if elapsed_s <= TTL_S:
        assert codec.unseal(token, binding).state == {"step": 1}
    else:
        assert refusal(codec, token, binding) == "expired"
