"""The requestState codec: a state verifies only for the request, caller, server and time it was made for.

Every test runs twice, once with signed (``v1.``) and once with encrypted (``v1e.``) tokens. Every
rejection is the same :class:`InvalidRequestState` on the wire; the ``reason`` (log only) says why.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import string
from typing import Any

import pytest
from itsdangerous import Signer
from msgspec.structs import replace

from ext_tasks.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, InvalidRequestState, RequestStateTooLarge
from ext_tasks.protocol.resume import (
    CLOCK_SKEW_S,
    MAX_TOKEN_CHARS,
    Binding,
    ResumeClaims,
    ResumeCodec,
    _hkdf,
    _HmacSha256,
    digest_arguments,
    generate_key,
    parse_key,
)

KEY = b"k" * 32
OLD_KEY = b"o" * 32
NEW_KEY = b"n" * 32
OTHER_KEY = b"x" * 32
AUDIENCE = "ext-tasks-test"
TTL_S = 600
T0 = 1_800_000_000.0
B64URL = string.ascii_letters + string.digits + "-_"

ARGUMENTS: dict[str, Any] = {"service": "billing", "ref": "v1.2", "options": {"fast": True, "regions": ["eu", "us"]}}
BINDING = Binding(method="tools/call", target="deploy", arguments_digest=digest_arguments(ARGUMENTS), principal="alice")
STATE = {"step": 2, "note": "héllo"}
RESPONSES = {"confirm": {"action": "accept", "content": {"confirm": True}}}


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=[False, True], ids=["signed", "encrypted"])
def encrypt(request: pytest.FixtureRequest) -> bool:
    mode: bool = request.param
    return mode


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def codec(encrypt: bool, clock: FakeClock) -> ResumeCodec:
    return make_codec(encrypt, clock)


def make_codec(
    encrypt: bool, clock: FakeClock, keys: tuple[bytes, ...] = (KEY,), audience: str = AUDIENCE
) -> ResumeCodec:
    return ResumeCodec(keys, audience=audience, ttl_s=TTL_S, encrypt=encrypt, clock=clock)


def seal(codec: ResumeCodec, binding: Binding = BINDING) -> str:
    return codec.seal(binding, state=STATE, responses=RESPONSES)


def rejection(codec: ResumeCodec, token: object, binding: Binding = BINDING) -> str:
    """Unseal ``token``, expect the fixed rejection, and return its (log-only) reason."""
    with pytest.raises(InvalidRequestState) as caught:
        codec.unseal(token, binding)
    error = caught.value
    assert error.code == INVALID_PARAMS
    assert error.message == InvalidRequestState.WIRE_MESSAGE == "Invalid or expired requestState"
    assert error.to_error() == {
        "code": INVALID_PARAMS,
        "message": "Invalid or expired requestState",
        "data": {"reason": "invalid_request_state"},
    }
    return error.reason


# --- round trip -------------------------------------------------------------------------------------


def test_round_trip_returns_the_state_and_the_responses(codec: ResumeCodec) -> None:
    claims = codec.unseal(seal(codec), BINDING)

    assert isinstance(claims, ResumeClaims)
    assert claims.state == STATE
    assert claims.responses == RESPONSES
    assert claims.expires_at == int(T0) + TTL_S


def test_round_trip_without_state_or_responses_gives_none_and_empty(codec: ResumeCodec) -> None:
    claims = codec.unseal(codec.seal(BINDING), BINDING)

    assert claims.state is None
    assert claims.responses == {}


def test_signed_and_encrypted_tokens_carry_their_format_prefix(codec: ResumeCodec, encrypt: bool) -> None:
    token = seal(codec)

    assert token.startswith("v1e." if encrypt else "v1.")
    assert token.startswith("v1e.") == encrypt


def test_encrypted_token_does_not_reveal_the_state(clock: FakeClock) -> None:
    codec = make_codec(True, clock)
    token = codec.seal(BINDING, state={"secret": "hunter2-plaintext"})
    body = token.removeprefix("v1e.")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))

    assert b"hunter2-plaintext" not in raw
    assert b"alice" not in raw


def test_signed_token_does_not_reveal_the_principal(clock: FakeClock) -> None:
    codec = make_codec(False, clock)
    payload = seal(codec).removeprefix("v1.").split(".")[0]
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))

    assert b"alice" not in raw


def test_each_seal_gives_a_new_state_id(codec: ResumeCodec) -> None:
    first = codec.unseal(seal(codec), BINDING)
    second = codec.unseal(seal(codec), BINDING)

    assert first.state_id != second.state_id


def test_state_verifies_on_another_codec_with_the_same_key_and_audience(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock))

    assert make_codec(encrypt, clock).unseal(token, BINDING).state == STATE


@pytest.mark.parametrize("length", [32, 64, 65, 200])
def test_the_signing_algorithm_is_hmac_sha256_for_any_key_length(length: int) -> None:
    key = bytes(range(256))[:length]
    value = b"eyJ2IjoxfQ"

    assert _HmacSha256(key).get_signature(key, value) == hmac.digest(key, value, "sha256")
    assert _HmacSha256(key).get_signature(b"another key", value) == hmac.digest(b"another key", value, "sha256")


def test_signed_state_is_itsdangerous_hmac_sha256_under_the_derived_key(clock: FakeClock) -> None:
    # The v1. format is a stock itsdangerous signature (so instances of earlier releases, which signed
    # with hmac.digest, and of later ones take each other's states): a plain Signer checks ours, and
    # a payload it signs verifies here.
    stock = Signer(_hkdf(KEY, "request-state/hmac-sha256"), key_derivation="none", digest_method=hashlib.sha256)
    codec = make_codec(False, clock)
    token = seal(codec)

    assert stock.validate(token.removeprefix("v1."))
    payload = token.removeprefix("v1.").rpartition(".")[0]
    assert codec.unseal("v1." + stock.sign(payload).decode(), BINDING).state == STATE


# --- tampering --------------------------------------------------------------------------------------


def test_changing_any_single_character_of_the_token_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)
    accepted = []
    for index, original in enumerate(token):
        for replacement in B64URL + ".":
            if replacement == original:
                continue
            tampered = token[:index] + replacement + token[index + 1 :]
            try:
                codec.unseal(tampered, BINDING)
            except InvalidRequestState:
                continue
            accepted.append((index, original, replacement))

    assert accepted == [], f"{len(accepted)} altered tokens verified, e.g. (index, was, now) {accepted[:3]}"


def test_flipping_a_character_of_the_token_gives_the_fixed_rejection(codec: ResumeCodec) -> None:
    token = seal(codec)
    middle = len(token) // 2
    tampered = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1 :]

    assert rejection(codec, tampered)


@pytest.mark.parametrize("suffix", ["A", "x", "AAAA", ".", "=", "==", "!!!!", " "])
def test_token_with_text_appended_is_rejected(codec: ResumeCodec, suffix: str) -> None:
    assert rejection(codec, seal(codec) + suffix)


def test_truncated_token_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)

    for length in (0, 3, 4, 10, len(token) // 2, len(token) - 1):
        assert rejection(codec, token[:length])


@pytest.mark.parametrize("token", ["", "v1", "v2.abc.def", "garbage", "v1.", "v1e.", "v1e.AAAA"])
def test_tokens_that_were_never_sealed_are_rejected(codec: ResumeCodec, token: str) -> None:
    assert rejection(codec, token)


def test_token_of_another_format_version_prefix_is_rejected_as_unknown_format(codec: ResumeCodec) -> None:
    token = seal(codec)

    assert rejection(codec, "v2" + token[2:]) == "unknown format"


# --- keys -------------------------------------------------------------------------------------------


def test_state_sealed_under_another_key_is_rejected(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock, keys=(OTHER_KEY,)))

    reason = rejection(make_codec(encrypt, clock), token)

    assert reason == ("unknown key" if encrypt else "bad signature or unknown key")


def test_state_signed_under_previous_key_verifies_after_rotation(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock, keys=(OLD_KEY,)))

    rotated = make_codec(encrypt, clock, keys=(NEW_KEY, OLD_KEY))

    assert rotated.unseal(token, BINDING).state == STATE


def test_after_rotation_new_states_are_sealed_with_the_newest_key(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock, keys=(NEW_KEY, OLD_KEY)))

    assert make_codec(encrypt, clock, keys=(NEW_KEY,)).unseal(token, BINDING).state == STATE
    assert rejection(make_codec(encrypt, clock, keys=(OLD_KEY,)), token)


def test_state_signed_under_a_retired_key_is_rejected(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock, keys=(OLD_KEY,)))

    reason = rejection(make_codec(encrypt, clock, keys=(NEW_KEY,)), token)

    assert reason == ("unknown key" if encrypt else "bad signature or unknown key")


@pytest.mark.parametrize("length", [0, 1, 16, 31])
def test_keys_shorter_than_32_bytes_are_refused(length: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        ResumeCodec([b"k" * length], audience=AUDIENCE)


def test_a_short_key_anywhere_in_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        ResumeCodec([KEY, b"short"], audience=AUDIENCE)


def test_a_codec_without_keys_is_refused() -> None:
    with pytest.raises(ValueError):
        ResumeCodec([], audience=AUDIENCE)


@pytest.mark.parametrize("ttl_s", [0, -1])
def test_a_codec_with_a_non_positive_lifetime_is_refused(ttl_s: int) -> None:
    with pytest.raises(ValueError):
        ResumeCodec([KEY], audience=AUDIENCE, ttl_s=ttl_s)


def test_generated_key_parses_back_to_32_random_bytes() -> None:
    text = generate_key()

    key = parse_key(text)

    assert len(key) == 32
    assert base64.urlsafe_b64encode(key).rstrip(b"=").decode() == text
    assert parse_key(generate_key()) != key


def test_parse_key_ignores_surrounding_whitespace() -> None:
    text = generate_key()

    assert parse_key(f"  {text}\n") == parse_key(text)


def test_a_parsed_generated_key_seals_and_unseals(encrypt: bool, clock: FakeClock) -> None:
    codec = ResumeCodec([parse_key(generate_key())], audience=AUDIENCE, encrypt=encrypt, clock=clock)

    assert codec.unseal(seal(codec), BINDING).responses == RESPONSES


@pytest.mark.parametrize(
    "text",
    [base64.urlsafe_b64encode(b"k" * 31).decode(), "", "c2hvcnQ", "a"],
    ids=["31-bytes", "empty", "short", "one-char"],
)
def test_parse_key_refuses_keys_that_decode_to_fewer_than_32_bytes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_key(text)


# --- time -------------------------------------------------------------------------------------------


def test_state_is_still_valid_at_the_end_of_its_lifetime(codec: ResumeCodec, clock: FakeClock) -> None:
    token = seal(codec)
    clock.now = T0 + TTL_S

    assert codec.unseal(token, BINDING).state == STATE


def test_expired_state_is_rejected(codec: ResumeCodec, clock: FakeClock) -> None:
    token = seal(codec)
    clock.now = T0 + TTL_S + 1

    assert rejection(codec, token) == "expired"


def test_state_issued_in_the_future_beyond_the_clock_skew_is_rejected(encrypt: bool) -> None:
    ahead = make_codec(encrypt, FakeClock(T0 + CLOCK_SKEW_S + 1))
    token = seal(ahead)

    assert rejection(make_codec(encrypt, FakeClock(T0)), token) == "issued in the future"


def test_state_issued_slightly_in_the_future_within_the_clock_skew_verifies(encrypt: bool) -> None:
    ahead = make_codec(encrypt, FakeClock(T0 + CLOCK_SKEW_S))
    token = seal(ahead)

    assert make_codec(encrypt, FakeClock(T0)).unseal(token, BINDING).state == STATE


# --- binding ----------------------------------------------------------------------------------------


def test_state_replayed_by_another_principal_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)

    assert rejection(codec, token, replace(BINDING, principal="mallory")) == "principal"


def test_state_replayed_with_other_arguments_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)
    other = replace(BINDING, arguments_digest=digest_arguments({**ARGUMENTS, "ref": "v9.9"}))

    assert rejection(codec, token, other) == "arguments"


def test_state_replayed_with_an_extra_argument_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)
    other = replace(BINDING, arguments_digest=digest_arguments({**ARGUMENTS, "force": True}))

    assert rejection(codec, token, other) == "arguments"


def test_same_arguments_in_another_key_order_still_verify(codec: ResumeCodec) -> None:
    token = seal(codec)
    reordered = {
        "options": {"regions": ["eu", "us"], "fast": True},
        "ref": "v1.2",
        "service": "billing",
    }

    assert codec.unseal(token, replace(BINDING, arguments_digest=digest_arguments(reordered))).state == STATE


def test_list_order_of_arguments_still_matters() -> None:
    swapped = {**ARGUMENTS, "options": {"fast": True, "regions": ["us", "eu"]}}

    assert digest_arguments(swapped) != digest_arguments(ARGUMENTS)


def test_no_arguments_and_empty_arguments_have_the_same_digest() -> None:
    assert digest_arguments(None) == digest_arguments({})


def test_state_replayed_for_another_method_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)

    assert rejection(codec, token, replace(BINDING, method="prompts/get")) == "method"


def test_state_replayed_for_another_target_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)

    assert rejection(codec, token, replace(BINDING, target="rollback")) == "target"


def test_state_from_a_server_with_another_audience_is_rejected(encrypt: bool, clock: FakeClock) -> None:
    token = seal(make_codec(encrypt, clock, audience="another-server"))

    assert rejection(make_codec(encrypt, clock), token) == "audience"


# --- format mixing and hostile input ----------------------------------------------------------------


def test_signed_token_is_refused_by_an_encrypting_codec(clock: FakeClock) -> None:
    token = seal(make_codec(False, clock))

    assert rejection(make_codec(True, clock), token) == "signed state where sealed state is configured"


def test_encrypted_token_is_refused_by_a_signing_codec(clock: FakeClock) -> None:
    token = seal(make_codec(True, clock))

    assert rejection(make_codec(False, clock), token) == "sealed state where signed state is configured"


@pytest.mark.parametrize("token", [None, 42, 1.5, True, b"v1.abc", ["v1.abc"], {"v": 1}])
def test_non_string_token_is_rejected(codec: ResumeCodec, token: object) -> None:
    assert rejection(codec, token) == "not a string"


def test_huge_token_is_rejected_before_decoding(codec: ResumeCodec) -> None:
    token = seal(codec)
    huge = token + "A" * (MAX_TOKEN_CHARS + 1 - len(token))

    assert rejection(codec, huge) == "too large"


def test_token_with_non_ascii_characters_is_rejected(codec: ResumeCodec) -> None:
    token = seal(codec)

    assert rejection(codec, token[:10] + "é" + token[11:])


# --- what a state carries, and how large it may be ----------------------------------------------------


def test_the_asked_keys_come_back_with_the_state(codec: ResumeCodec) -> None:
    token = codec.seal(BINDING, state=STATE, responses=RESPONSES, asked=["later", "confirm"])

    claims = codec.unseal(token, BINDING)

    assert claims.asked == frozenset({"confirm", "later"})
    assert claims.responses == RESPONSES


def test_a_state_sealed_without_asked_keys_has_none(codec: ResumeCodec) -> None:
    assert codec.unseal(seal(codec), BINDING).asked == frozenset()


def padded(size: int) -> dict[str, dict[str, Any]]:
    return {"big": {"action": "accept", "content": {"text": "x" * size}}}


def test_a_state_longer_than_unseal_accepts_is_never_sealed(codec: ResumeCodec) -> None:
    with pytest.raises(RequestStateTooLarge) as caught:
        codec.seal(BINDING, state=STATE, responses=padded(MAX_TOKEN_CHARS))

    error = caught.value
    assert error.code == INTERNAL_ERROR
    assert error.limit == MAX_TOKEN_CHARS
    assert error.size > MAX_TOKEN_CHARS
    assert error.to_error()["data"] == {"stateChars": error.size, "maxStateChars": MAX_TOKEN_CHARS}
    assert f"{error.size} characters" in error.message
    assert str(MAX_TOKEN_CHARS) in error.message
    assert "x" * 20 not in error.message


def test_a_large_tool_state_is_refused_like_large_answers(codec: ResumeCodec) -> None:
    with pytest.raises(RequestStateTooLarge):
        codec.seal(BINDING, state="s" * MAX_TOKEN_CHARS)


def test_the_largest_state_that_seals_is_accepted_back(codec: ResumeCodec) -> None:
    fits, too_large = 0, MAX_TOKEN_CHARS
    while too_large - fits > 1:
        size = (fits + too_large) // 2
        try:
            codec.seal(BINDING, responses=padded(size))
        except RequestStateTooLarge:
            too_large = size
        else:
            fits = size

    token = codec.seal(BINDING, responses=padded(fits))

    assert MAX_TOKEN_CHARS - 4 <= len(token) <= MAX_TOKEN_CHARS
    assert codec.unseal(token, BINDING).responses == padded(fits)
