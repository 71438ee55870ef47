"""``--plot FILE.png``: throughput and latency per step (matplotlib, imported only when asked for)."""

from __future__ import annotations

from pathlib import Path

from .steps import BenchError, Plan, StepResult


def plot(plan: Plan, results: list[StepResult], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("--plot needs matplotlib (pip install matplotlib)") from None
    levels = [result.level for result in results]
    summaries = [result.merged.summary() for result in results]
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4))
    axis = "rate (operations/s)" if plan.open_loop else "concurrency (virtual users)"
    throughput.plot(levels, [s["ops_per_s"] for s in summaries], marker="o")
    throughput.set(xlabel=axis, ylabel="operations/s", title=f"{plan.workload}: throughput")
    for key in ("p50", "p99", "p99.9"):
        latency.plot(levels, [s["latency_ms"].get(key, 0.0) for s in summaries], marker="o", label=key)
    latency.set(xlabel=axis, ylabel="ms", title="latency", yscale="log")
    latency.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
