"""How fast is the requestState codec? seal + unseal per second, on one core, against a stdlib floor.

Every multi round-trip request seals a state on one round and unseals it on the next, so one
"operation" here is one ``seal`` followed by one ``unseal`` of a typical MRTR state (the tool's small
state plus one elicitation answer). Three variants are measured:

* ``baseline``: ``hmac.digest`` (HMAC-SHA256) over the very claims bytes the codec signs, then a
  constant-time verify: what any integrity-protected state must pay at least;
* ``signed``: ``ResumeCodec`` in ``v1.`` form (itsdangerous signer, claims checks);
* ``encrypted``: ``ResumeCodec(encrypt=True)`` in ``v1e.`` form (AES-256-GCM).

Variants run interleaved, in a rotating order, for several rounds; the table shows the median and
the spread over rounds, and each variant's cost relative to the baseline measured in the same run,
so the ratio stays meaningful on a noisy or slower machine.

Run::

    python -m investigations.state_codec                 # 5 rounds of 1 s per variant
    python -m investigations.state_codec --seconds 2 --rounds 7
    python -m investigations.state_codec --smoke         # about one second, for CI
"""

from __future__ import annotations

import argparse
import base64
import gc
import hmac
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ext_tasks.protocol.resume import Binding, ResumeCodec, digest_arguments

KEY = bytes(range(32))
AUDIENCE = "bench-server"
BINDING = Binding(
    method="tools/call",
    target="deploy",
    arguments_digest=digest_arguments({"service": "billing", "ref": "v1.42.0", "environment": "production"}),
    principal="client-7f3a@issuer.example",
)
STATE = {"step": 1, "service": "billing"}
RESPONSES = {"confirm": {"action": "accept", "content": {"confirm": True}}}
#: Operations between two clock reads, so reading the clock costs nothing measurable.
BATCH = 100

Operation = Callable[[], None]


@dataclass(frozen=True)
class Variant:
    name: str
    operation: Operation


@dataclass(frozen=True)
class Summary:
    name: str
    median: float
    low: float
    high: float


def _codec_operation(encrypt: bool) -> Operation:
    codec = ResumeCodec([KEY], audience=AUDIENCE, encrypt=encrypt)

    def operation() -> None:
        codec.unseal(codec.seal(BINDING, state=STATE, responses=RESPONSES), BINDING)

    # Refuse to time a path that does not work.
    claims = codec.unseal(codec.seal(BINDING, state=STATE, responses=RESPONSES), BINDING)
    if claims.state != STATE or dict(claims.responses) != RESPONSES:
        raise SystemExit(f"state codec round trip is broken (encrypt={encrypt})")
    return operation


def claims_bytes() -> bytes:
    """The exact bytes the codec signs for this state: the payload of a signed token."""
    token = ResumeCodec([KEY], audience=AUDIENCE).seal(BINDING, state=STATE, responses=RESPONSES)
    payload = token.removeprefix("v1.").rsplit(".", 1)[0]
    return base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))


def _baseline_operation() -> Operation:
    payload = claims_bytes()

    def operation() -> None:
        sealed = payload + hmac.digest(KEY, payload, "sha256")
        body, tag = sealed[:-32], sealed[-32:]
        if not hmac.compare_digest(hmac.digest(KEY, body, "sha256"), tag):
            raise AssertionError("baseline verify failed")

    operation()
    return operation


def variants() -> list[Variant]:
    return [
        Variant("baseline (hmac.digest)", _baseline_operation()),
        Variant("signed (v1.)", _codec_operation(encrypt=False)),
        Variant("encrypted (v1e.)", _codec_operation(encrypt=True)),
    ]


def measure(operation: Operation, seconds: float) -> float:
    """Operations per second of ``operation`` over about ``seconds``."""
    gc.collect()
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    while now < deadline:
        for _ in range(BATCH):
            operation()
        done += BATCH
        now = time.perf_counter()
    return done / (now - start)


def run(candidates: Sequence[Variant], *, seconds: float, rounds: int) -> list[Summary]:
    rates: dict[str, list[float]] = {variant.name: [] for variant in candidates}
    for variant in candidates:  # warm up caches and the allocator
        measure(variant.operation, min(0.05, seconds))
    for index in range(rounds):
        shift = index % len(candidates)
        for variant in [*candidates[shift:], *candidates[:shift]]:
            rates[variant.name].append(measure(variant.operation, seconds))
    return [Summary(name, statistics.median(values), min(values), max(values)) for name, values in rates.items()]


def pin_to_one_core() -> str:
    """Pin this process to one CPU where the OS allows it; say what was done."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity on this platform)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


def table(summaries: Sequence[Summary]) -> str:
    baseline = summaries[0].median
    lines = [
        "| variant | median ops/s | min ops/s | max ops/s | µs/op | cost vs baseline | % of baseline rate |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for summary in summaries:
        lines.append(
            f"| {summary.name} | {summary.median:,.0f} | {summary.low:,.0f} | {summary.high:,.0f} "
            f"| {1e6 / summary.median:.2f} | {baseline / summary.median:.2f} | {100 * summary.median / baseline:.1f}% |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m investigations.state_codec",
        description="requestState seal+unseal throughput against a stdlib HMAC floor",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="time per variant per round (default 1.0)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--smoke", action="store_true", help="a quick run of about one second")
    args = parser.parse_args(argv)
    seconds, rounds = (0.1, 3) if args.smoke else (args.seconds, args.rounds)
    if seconds <= 0 or rounds < 1:
        parser.error("--seconds must be positive and --rounds at least 1")

    pinning = pin_to_one_core()
    summaries = run(variants(), seconds=seconds, rounds=rounds)
    print(
        f"requestState seal+unseal, {rounds} rounds x {seconds:g} s per variant, {len(claims_bytes())}-byte claims; "
        f"Python {platform.python_version()} on {platform.machine()}, {pinning}"
    )
    print()
    print(table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
