"""What authenticating one request costs with OAuth on, in-process, through the real code path
(``OAuthAuthenticator.from_options`` with the keys fetched from a local issuer, ``bench.issuer``, before
any timing):

* ``first-seen RS256`` / ``first-seen ES256``: a JWT never seen before (parse, key lookup, PyJWT's
  signature and claims checks, the verdict cached), one fresh token per call;
* ``cached JWT``: a token seen before (SHA-256 of the token, a dict lookup, the scope check): what every
  request after a client's first costs;
* ``static token``: an ``EXT_TASKS_TOKENS`` token beside OAuth (matched in constant time before the
  cache), and ``static only``: the same token with OAuth off (``BearerTokenAuthenticator``), for reference.

Each variant's median µs per call over ``--calls`` calls, per round; the table shows the median over
rounds and the spread. Cheap variants are timed in batches of 100 calls (a clock read costs about as
much as the call).

Run::

    python -m investigations.auth_cost                    # 3 rounds of 1000 calls per variant (~15 s)
    python -m investigations.auth_cost --out auth-cost.json
    python -m investigations.auth_cost --smoke            # about one second, for CI
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.issuer import SCOPE, IssuerThread, SigningKey, jwks
from ext_tasks.auth.oauth import OAuthAuthenticator
from ext_tasks.auth.principals import BearerTokenAuthenticator, Principal
from ext_tasks.options import AuthOptions
from investigations.state_codec import pin_to_one_core

RESOURCE = "http://127.0.0.1:8000/mcp"
STATIC_TOKEN = "static-bench-token-0123456789abcdef"
#: Calls between two clock reads for the cheap variants.
BATCH = 100

Headers = dict[str, list[str]]


@dataclass(frozen=True)
class Summary:
    name: str
    median_us: float
    low_us: float
    high_us: float
    calls: int
    rounds: list[float]


def _headers(token: str) -> Headers:
    return {"authorization": [f"Bearer {token}"]}


async def _each(authenticate: Any, headers: list[Headers]) -> list[float]:
    """µs per call, one clock pair per call (a fresh token each)."""
    times = []
    for header in headers:
        started = time.perf_counter()
        result = authenticate(header)
        if inspect.isawaitable(result):
            result = await result
        times.append((time.perf_counter() - started) * 1e6)
        assert isinstance(result, Principal)
    return times


def _batched(authenticate: Any, header: Headers, calls: int) -> list[float]:
    """µs per call, from batches of ``BATCH`` calls with the same headers (answered without awaiting)."""
    times = []
    for _ in range(max(1, calls // BATCH)):
        started = time.perf_counter()
        for _ in range(BATCH):
            authenticate(header)
        times.append((time.perf_counter() - started) * 1e6 / BATCH)
    assert isinstance(authenticate(header), Principal)
    return times


async def measure(calls: int, rounds: int) -> tuple[list[Summary], dict[str, Any]]:
    keys = {algorithm: SigningKey.generate(algorithm) for algorithm in ("RS256", "ES256")}
    issuer = IssuerThread(jwks(list(keys.values())))
    options = AuthOptions(auth_issuers=(issuer.url,), auth_resource=RESOURCE, auth_scopes=(SCOPE,))
    oauth = OAuthAuthenticator.from_options(options, {STATIC_TOKEN: "static-client"})
    static_only = BearerTokenAuthenticator({STATIC_TOKEN: "static-client"})
    try:
        # The keys fetched (discovery + JWKS) and every code path warmed up before any timing.
        for key in keys.values():
            await _each(oauth.authenticate, [_headers(key.mint(issuer.url, RESOURCE)) for _ in range(20)])
        cached = _headers(keys["RS256"].mint(issuer.url, RESOURCE))
        await _each(oauth.authenticate, [cached])
        fetches = sum(k.fetches for k in oauth.verifier.keys.values()) if oauth.verifier else 0
        per_round: dict[str, list[float]] = {}
        for _ in range(rounds):
            fresh = {
                name: [_headers(key.mint(issuer.url, RESOURCE)) for _ in range(calls)] for name, key in keys.items()
            }
            for name, headers in fresh.items():
                gc.collect()
                before = oauth.verifications
                times = await _each(oauth.authenticate, headers)
                assert oauth.verifications - before == calls, "every fresh token is verified once"
                per_round.setdefault(f"first-seen {name}", []).append(statistics.median(times))
            for name, authenticate, header in (
                ("cached JWT", oauth.authenticate, cached),
                ("static token (beside OAuth)", oauth.authenticate, _headers(STATIC_TOKEN)),
                ("static only (OAuth off)", static_only.authenticate, _headers(STATIC_TOKEN)),
            ):
                gc.collect()
                per_round.setdefault(name, []).append(statistics.median(_batched(authenticate, header, calls)))
        after = sum(k.fetches for k in oauth.verifier.keys.values()) if oauth.verifier else 0
        meta = {"key_fetches_during_timing": after - fetches, "cache_entries": len(oauth.cache)}
    finally:
        await oauth.aclose()
        issuer.close()
    summaries = [
        Summary(name, statistics.median(values), min(values), max(values), calls, values)
        for name, values in per_round.items()
    ]
    return summaries, meta


def table(summaries: Sequence[Summary]) -> str:
    cached = next((s.median_us for s in summaries if s.name == "cached JWT"), None)
    lines = ["| variant | median us/call | min-max over rounds | x cached JWT |", "|---|---:|---:|---:|"]
    for s in summaries:
        ratio = f"{s.median_us / cached:.1f}x" if cached else "-"
        lines.append(f"| {s.name} | {s.median_us:.2f} | {s.low_us:.2f}-{s.high_us:.2f} | {ratio} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m investigations.auth_cost",
        description="the cost of authenticating one request with OAuth: first-seen JWT, cached JWT, static token",
    )
    parser.add_argument("--calls", type=int, default=1000, help="calls per variant per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--smoke", action="store_true", help="a quick run of about one second")
    args = parser.parse_args(argv)
    calls, rounds = (100, 1) if args.smoke else (args.calls, args.rounds)
    if calls < 1 or rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    pinning = pin_to_one_core()
    summaries, meta = asyncio.run(measure(calls, rounds))
    print(f"authentication per request, {rounds} round(s) x {calls} calls per variant; "
          f"Python {platform.python_version()} on {platform.machine()}, {pinning}")  # fmt: skip
    print()
    print(table(summaries))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "calls": calls,
            "rounds": rounds,
            "python": platform.python_version(),
            "pinning": pinning,
            **meta,
            "results": [asdict(s) for s in summaries],
        }
        args.out.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
