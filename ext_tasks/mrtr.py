"""The multi round-trip driver: run a function once per round, and seal what the next round needs.

One round of ``tools/call``, ``prompts/get`` or ``resources/read``:

1. (``inputResponses`` were checked when the request was decoded) if present, unseal ``requestState``
   for this exact request and caller (-32602 with a fixed message on any failure);
2. run the function with every answer so far and its own state;
3. if it raised :class:`InputRequired`, check that the client declared what each question needs
   (-32021 otherwise, never a silent drop) and answer ``input_required`` with a freshly sealed state
   that carries the answers collected so far.

What a state carries is bounded. Only answers under keys the function asked (in this round or an
earlier one of the same call) are sealed, so answers a client sends under other keys never ride along;
and a state longer than the codec accepts back is refused with -32603 when it would be sealed (and
logged for the tool author), instead of failing the next round as "Invalid or expired requestState".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import msgspec

from .auth import Principal
from .context import Context, Emit, InputRequest, InputRequired, StartTask, missing_capabilities
from .metrics import STATE_REJECTIONS
from .protocol.envelope import Envelope
from .protocol.errors import InvalidParams, InvalidRequestState, MissingClientCapability, RequestStateTooLarge
from .protocol.requests import Round
from .protocol.result_types import InputRequiredResult, TypedResult
from .protocol.resume import Binding, ResumeCodec, digest_arguments

logger = logging.getLogger("ext_tasks.mrtr")

Outcome = TypedResult
StartTaskHook = Callable[[dict[str, Any], Any], Awaitable[Outcome]]
#: ``claim(key, ttl_ms) -> bool`` of a shared store: ``True`` only the first time a key is claimed.
ClaimOnce = Callable[[str, int], Awaitable[bool]]


def binding_for(method: str, target: str, arguments: Mapping[str, Any] | None, principal: Principal) -> Binding:
    return Binding(method=method, target=target, arguments_digest=digest_arguments(arguments), principal=principal.id)


async def run_round(
    codec: ResumeCodec,
    *,
    binding: Binding,
    round: Round,
    envelope: Envelope,
    principal: Principal,
    emit: Emit,
    body: Callable[[Context], Awaitable[Outcome]],
    start_task: StartTaskHook | None = None,
    claim_once: ClaimOnce | None = None,
) -> Outcome:
    """Run ``body`` for one round and return the result object: the body's own (``complete``, as it
    built it), or ``input_required``.

    With ``start_task``, the function may call ``ctx.start_task()``; the round then ends with whatever
    the hook returns (a ``CreateTaskResult``), handing it every answer so far and the function's state.
    """
    answers, state, asked_before = await _restore(codec, binding, round, claim_once)
    ctx = Context(
        principal=principal,
        envelope=envelope,
        answers=answers,
        state=state,
        emit=emit,
        can_start_task=start_task is not None,
    )
    try:
        return await body(ctx)
    except StartTask:
        assert start_task is not None  # only raised when a hook was given
        return await start_task(answers, ctx.state)
    except InputRequired as asked:
        return input_required_result(
            codec,
            binding,
            asked.requests,
            asked.state if asked.state is not None else ctx.state,
            answers,
            envelope,
            asked=asked_before.union(ctx.asked_keys, asked.requests),
        )


async def _restore(
    codec: ResumeCodec, binding: Binding, round: Round, claim_once: ClaimOnce | None
) -> tuple[dict[str, Any], Any, frozenset[str]]:
    """Every answer so far, the function's state, and the keys asked in earlier rounds."""
    if not round.resumed:
        return round.answers, None, frozenset()
    try:
        claims = codec.unseal(round.state, binding)
        # Single use: the state's id is remembered (in the shared store) until the state would expire
        # anyway, so a replayed retry is refused like any other bad state.
        if claim_once is not None and not await claim_once(f"state:{claims.state_id}", codec.ttl_s * 1000):
            raise InvalidRequestState("replayed")
    except InvalidRequestState as exc:
        # The reason is for operators only; the client gets one fixed message whatever went wrong.
        STATE_REJECTIONS.labels(exc.reason).inc()
        logger.warning(
            "requestState rejected",
            extra={"reason": exc.reason, "method": binding.method, "target": binding.target},
        )
        raise
    # Answers of this round win over earlier ones under the same key. The keys of earlier answers
    # count as asked too: a state only ever carries answers to asked keys, and this keeps the answers
    # of states sealed before the asked keys were recorded (``q``).
    return {**claims.responses, **round.answers}, claims.state, claims.asked.union(claims.responses)


def input_required_result(
    codec: ResumeCodec,
    binding: Binding,
    requests: Mapping[str, InputRequest],
    state: Any,
    answers: Mapping[str, Any],
    envelope: Envelope,
    *,
    asked: Iterable[object],
) -> InputRequiredResult:
    """The ``input_required`` result asking ``requests``, with a state carrying ``state`` and the
    ``answers`` under the ``asked`` keys (this round's questions, the keys the function looked up, and
    every key asked in earlier rounds); answers under any other key are dropped."""
    missing = missing_capabilities(requests.values(), envelope.client_capabilities)
    if missing:
        raise MissingClientCapability(missing)
    for key in requests:
        if not isinstance(key, str) or not key:
            raise InvalidParams("input request keys must be non-empty strings")
    # Answers are keyed by strings (JSON object keys): a key of another type can match none of them.
    asked_keys = {key for key in asked if isinstance(key, str)}
    kept = {key: answer for key, answer in answers.items() if key in asked_keys}
    try:
        sealed = codec.seal(binding, state=state, responses=kept, asked=asked_keys)
    except RequestStateTooLarge as exc:
        # Logged here, once, for the tool author; the engine sends the error without logging it. What
        # made it large is told in sizes only: never the state or the answers themselves.
        logger.error(
            "requestState of %s %r not sealed: %d characters, over the limit of %d "
            "(the function's own state is %d bytes of JSON; %d answers carried are %d bytes)",
            binding.method,
            binding.target,
            exc.size,
            exc.limit,
            len(msgspec.json.encode(state)),
            len(kept),
            len(msgspec.json.encode(kept)),
            extra={"method": binding.method, "target": binding.target, "state_chars": exc.size},
        )
        raise
    if not requests:  # a state-only round: nothing to ask, just run again with the state
        return InputRequiredResult(request_state=sealed)
    wire = {key: request.to_wire() for key, request in requests.items()}
    return InputRequiredResult(request_state=sealed, input_requests=wire)
