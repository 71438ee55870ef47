# ruff: noqa: RUF001 - the report is typeset: the multiplication sign and en dash are meant
"""The fairness scenario's section of a run's ``report.md`` (``python -m bench --fairness``), from its
figures alone (:func:`bench.fairness.run`)."""

from __future__ import annotations

from typing import Any

from . import fairness


def render(figures: dict[str, Any], failures: list[str], scenario: fairness.Scenario) -> str:
    """The scenario's section of ``report.md``."""
    lines = [
        "## Fairness: a principal's create-to-start latency while another floods",
        "",
        f"Principal B sends one `stamp` task at a time; principal A floods {scenario.flood:,} `busy` tasks "
        f"({fairness.BUSY_MS:g} ms each) from {fairness.SENDERS} connections. "
        f"Run concurrency {fairness.RUN_CONCURRENCY}; "
        f"`EXT_TASKS_MAX_RUNNING_PER_PRINCIPAL={fairness.CAP}` (cap) or unset (no cap), each on a fresh server. "
        "Create-to-start: from B's `tools/call` sent to the tool's body started, ms; \"create answered\": the "
        "part until B's `tools/call` was answered (request handling, shared with A's requests on one core); "
        '"queued": from then to the start (the run queue\'s part, which fair scheduling governs).',
        "",
        "| stack | scheduling | alone p50 / p95 | during the flood p50 / p95 | flood ÷ alone p50 / p95 "
        "| create answered p50, alone / flood | queued p50, alone / flood (÷) | samples alone / flood "
        "| A's creations/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, settings in figures.items():
        for setting, measured in settings.items():
            alone, flood, ratio = measured["alone"], measured["flood"], measured["ratio"]
            scheduling = f"cap {fairness.CAP}" if setting == "cap" else "no cap"
            lines.append(
                f"| {key} | {scheduling} | {_pair(alone)} | {_pair(flood)} "
                f"| {_times(ratio['p50'])} / {_times(ratio['p95'])} "
                f"| {_one(alone['create_reply'])} / {_one(flood['create_reply'])} "
                f"| {_one(alone['queued'])} / {_one(flood['queued'])} ({_times(measured['queued_ratio']['p50'])}) "
                f"| {alone['samples']} / {flood['samples']} "
                f"| {flood['flood']['per_s']:,.0f} |"
            )
    lines.append("")
    for key, settings in figures.items():
        if "cap" in settings and (p50 := settings["cap"]["ratio"]["p50"]) is not None:
            verdict = "met" if p50 <= 2 else "not met"
            bar = "B's p50 during the flood within 2× of alone, cap on"
            lines.append(f"- {key}: the issue's bar ({bar}): {verdict} ({p50:.2f}×).")
    lines += [f"- FAILED: {failure}" for failure in failures]
    return "\n".join(lines) + "\n"


def _pair(measured: dict[str, Any]) -> str:
    if not measured["samples"]:
        return "–"
    return f"{measured['p50']:.1f} / {measured['p95']:.1f}"


def _one(measured: dict[str, Any]) -> str:
    return "–" if measured["p50"] is None else f"{measured['p50']:.1f}"


def _times(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio:.2f}×"
