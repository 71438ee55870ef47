"""Figure 2: server CPU and wall time for one oversized subscriptions/listen (2026-07-28, tasks extension).

    python -m investigations.hardening fig2 --store valkey|memory [--body-bytes 1000000]
                                   [--before REV|DIR] [--after REV|DIR] [--versions before after]

notifications.taskIds holds as many random 36-char ids (uuid4) as fit in a --body-bytes body (1,000,000
bytes: 24,990 ids; 4,190,000, near the 4 MiB body limit of 3320622: 104,740 ids). The server's CPU
(utime+stime of its PID, /proc) is read before sending and once the answer is in (+1 s to let the
request's teardown finish); wall time to the first response byte and to the first complete message (the
JSON answer, or the SSE acknowledgement, after which we close). Bounded at 120 s. The server's idle CPU
rate (3 s before sending) and the valkey-server's CPU meanwhile are reported beside it.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procs

from .figlib import Checkout, check_shadowing, checkouts, cpu_s, modern_request, parser, running_server, say
from .figlib import running_valkey as valkey_server
from .figlib import work_dir as make_work_dir

TIMEOUT_S = 120.0


def oversized_body(limit: int) -> tuple[dict[str, str], bytes, int]:
    ids: list[str] = []
    notifications = {"toolsListChanged": True, "taskIds": ids}
    headers, body = modern_request("subscriptions/listen", {"notifications": notifications})
    base = len(json.dumps(body).encode())
    n = (limit - base) // 40  # '"<36>", ' is 40 bytes with json.dumps' default separators
    ids.extend(str(uuid.uuid4()) for _ in range(n))
    raw = json.dumps(body).encode()
    if len(raw) > limit:
        raise AssertionError(f"body of {len(raw)} bytes over {limit}")
    return headers, raw, n


def _complete(data: bytes) -> dict[str, Any] | None:
    """The outcome once ``data`` (the response so far) holds a whole JSON answer or a first SSE message."""
    head_text, _, rest = data.partition(b"\r\n\r\n")
    lines = head_text.decode().split("\r\n")
    fields = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines[1:] if ":" in line}
    length = fields.get("content-length")
    if length is not None and len(rest) >= int(length):
        return {"status": lines[0], "answer": json.loads(rest[: int(length)])}
    if fields.get("content-type", "").startswith("text/event-stream"):
        message = [line for line in rest.decode(errors="replace").splitlines() if line.startswith("data:")]
        if message:
            parsed = json.loads(message[0][5:])
            honored = parsed.get("params", {}).get("notifications", {}).get("taskIds")
            return {
                "status": lines[0],
                "sse_first": parsed.get("method") or parsed.get("error"),
                "honored_task_ids": None if honored is None else len(honored),
            }
    return None


def send(port: int, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
    fields = {**headers, "Host": f"127.0.0.1:{port}", "Content-Length": str(len(raw))}
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    conn = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    t0 = time.monotonic()
    conn.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + raw)
    outcome: dict[str, Any] = {"sent_s": round(time.monotonic() - t0, 3)}
    data = b""
    first: float | None = None
    conn.settimeout(1.0)
    while time.monotonic() - t0 < TIMEOUT_S:
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        if first is None:
            first = time.monotonic() - t0
        data += chunk
        done = _complete(data) if b"\r\n\r\n" in data else None
        if done is not None:
            outcome.update(done)
            break
    else:
        outcome["timeout"] = f">{TIMEOUT_S:.0f} s"
    outcome["first_byte_s"] = None if first is None else round(first, 3)
    outcome["answer_s"] = round(time.monotonic() - t0, 3)
    conn.close()
    return outcome


def measure(checkout: Checkout, work: Path, store: str, body_bytes: int, valkey: procs.Proc | None) -> None:
    tag = f"[{checkout.label}/{store}]"
    headers, raw, n = oversized_body(body_bytes)
    say(f"{tag} body {len(raw):,} bytes, {n:,} task ids")
    env = {"EXT_TASKS_LOG_LEVEL": "warning", "EXT_TASKS_KEEPALIVE_S": "5"}
    with running_server(checkout, work, valkey=valkey, env=env) as server:
        time.sleep(2.0)
        idle0 = cpu_s(server.pid)
        time.sleep(3.0)
        idle = (cpu_s(server.pid) - idle0) / 3.0
        v0 = cpu_s(valkey.pid) if valkey else 0.0
        c0 = cpu_s(server.pid)
        outcome = send(server.port, headers, raw)
        c_answer = cpu_s(server.pid)
        time.sleep(1.0)
        c1 = cpu_s(server.pid)
        v1 = cpu_s(valkey.pid) if valkey else 0.0
        answer = outcome.pop("answer", None)
        if isinstance(answer, dict):
            error = answer.get("error") or {}
            outcome["jsonrpc_error"] = {
                "code": error.get("code"),
                "message": str(error.get("message"))[:160],
                "data": str(error.get("data"))[:200],
            }
        say(f"{tag} {outcome}")
        say(
            f"{tag} server CPU: {c_answer - c0:.2f} s to the answer, {c1 - c0:.2f} s incl. 1 s after "
            f"(idle rate {idle:.3f} CPU-s/s); valkey-server CPU meanwhile: {v1 - v0:.2f} s"
        )


def run(checkout: Checkout, root: Path, store: str, body_bytes: int) -> None:
    work = root / f"fig2-{checkout.label}-{store}-{body_bytes}"
    work.mkdir(parents=True, exist_ok=True)
    say(checkout.label, "imports:", check_shadowing(checkout, work))
    if store == "valkey":
        with valkey_server(work / "valkey") as valkey:
            measure(checkout, work, store, body_bytes, valkey)
    else:
        measure(checkout, work, store, body_bytes, None)


def build_parser() -> argparse.ArgumentParser:
    p = parser("fig2", __doc__ or "")
    p.add_argument("--store", choices=("valkey", "memory"), default="valkey", help="default %(default)s")
    p.add_argument("--body-bytes", type=int, default=1_000_000, help="size of the body (default %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with checkouts(args) as found:
        root = make_work_dir(args)
        for checkout in found:
            run(checkout, root, args.store, args.body_bytes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
