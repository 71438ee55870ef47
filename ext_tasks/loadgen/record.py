"""What a loader counts in a timed window: operations, requests, latencies in an HDR histogram, and
failures by what came back (HTTP status and JSON-RPC code) with a few samples each. An operation may
also report named durations of its own (the lifecycle: its create request, and the server's
``lastUpdatedAt - createdAt``), each kept in a histogram of that name.

Histograms travel between processes in HdrHistogram's own compressed encoding and are added exactly
(every recorded value, not an average of percentiles), so several loader processes give one
distribution.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hdrh.histogram import HdrHistogram

#: Latencies are recorded in microseconds, from 1 µs to 10 minutes, to 3 significant digits.
_LOWEST_US: Final = 1
_HIGHEST_US: Final = 600_000_000
_DIGITS: Final = 3
PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)
_SAMPLES_PER_KEY: Final = 3


def new_histogram() -> HdrHistogram:
    return HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)


@dataclass
class Counts:
    """What one loader, or several merged, counted in the timed window."""

    ops: int = 0
    requests: int = 0
    latency: HdrHistogram = field(default_factory=new_histogram)
    #: The operations' own named durations (``Vu.marks``), one histogram per name.
    extra: dict[str, HdrHistogram] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Recorder(Counts):
    window: tuple[float, float] = (0.0, 0.0)
    #: Every op and error, timed or not (the live progress display counts these).
    seen_ops: int = 0
    seen_errors: int = 0

    def timed(self, at: float) -> bool:
        return self.window[0] <= at < self.window[1]

    def op(
        self, finished: float, latency_s: float, requests: int = 1, marks: Mapping[str, float] | None = None
    ) -> None:
        self.seen_ops += 1
        if not self.timed(finished):
            return
        self.ops += 1
        self.requests += requests
        _record(self.latency, latency_s)
        for name, seconds in (marks or {}).items():
            if name not in self.extra:  # not setdefault: a histogram is costly to allocate, once per op
                self.extra[name] = new_histogram()
            _record(self.extra[name], seconds)

    def error(self, at: float, key: str, sample: str) -> None:
        self.seen_errors += 1
        if not self.timed(at):
            return
        self.errors[key] += 1
        samples = self.error_samples.setdefault(key, [])
        if len(samples) < _SAMPLES_PER_KEY:
            samples.append(sample)

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "requests": self.requests,
            "errors": dict(self.errors),
            "error_samples": self.error_samples,
            "histogram": self.latency.encode().decode("ascii"),
            "extra_histograms": {name: histogram.encode().decode("ascii") for name, histogram in self.extra.items()},
        }


def _record(histogram: HdrHistogram, seconds: float) -> None:
    histogram.record_value(min(_HIGHEST_US, max(_LOWEST_US, round(seconds * 1_000_000))))


def figures_ms(histogram: HdrHistogram) -> dict[str, float]:
    """Percentiles, max and mean of ``histogram`` in milliseconds (empty when nothing was recorded)."""
    if histogram.get_total_count() == 0:
        return {}
    figures = {f"p{p:g}": histogram.get_value_at_percentile(p) / 1000.0 for p in PERCENTILES}
    figures["max"] = histogram.get_max_value() / 1000.0
    figures["mean"] = histogram.get_mean_value() / 1000.0
    return figures


class Merged(Counts):
    """Several loaders' counts over the same window."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def add(self, part: dict[str, Any]) -> None:
        self.ops += int(part["ops"])
        self.requests += int(part["requests"])
        self.latency.add(HdrHistogram.decode(part["histogram"].encode("ascii")))
        for name, encoded in part.get("extra_histograms", {}).items():
            self.extra.setdefault(name, new_histogram()).add(HdrHistogram.decode(encoded.encode("ascii")))
        self.errors.update(part["errors"])
        for key, samples in part["error_samples"].items():
            kept = self.error_samples.setdefault(key, [])
            kept += samples[: _SAMPLES_PER_KEY - len(kept)]

    def latency_ms(self) -> dict[str, float]:
        return figures_ms(self.latency)

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "ops": self.ops,
            "ops_per_s": self.ops / self.seconds if self.seconds else 0.0,
            "requests": self.requests,
            "requests_per_s": self.requests / self.seconds if self.seconds else 0.0,
            "latency_ms": self.latency_ms(),
            "extra_latency_ms": {name: figures_ms(histogram) for name, histogram in self.extra.items()},
            "errors": dict(self.errors),
            "error_samples": self.error_samples,
            "histogram": self.latency.encode().decode("ascii"),
        }
