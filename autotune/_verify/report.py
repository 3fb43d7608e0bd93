"""What a verify run found: the rounds' figures beside the result's, where this machine or the
model differs from the search's, and the warnings and verdict written from them."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from typing import Any

from torch import nn

from autotune._device import environment
from autotune._knobs.config import TrainingConfig
from autotune._progress import Report
from autotune._search.derived import round_interval, round_speedup, speedup
from autotune._speed import words as speed_words
from autotune._speed.stats import Interval
from autotune._trial.fingerprint import (
    data_changes,
    data_fingerprint,
    measured_on,
    model_changes,
    model_fingerprint,
)
from autotune._trial.measure import Measurement
from autotune._verify.full import FullReport

__all__ = ["VerifyReport", "compare_environments", "compared", "other_model"]


# Fields of a result's `environment` that decide timings, and how to name them.
_ENV_FIELDS = (
    ("device_name", "device"),
    ("cpu_model", "CPU model"),
    ("cpu_count", "CPU count"),
    ("torch", "torch version"),
    ("cuda", "CUDA version"),
    ("cudnn", "cuDNN version"),
    ("driver", "GPU driver"),
)


def compare_environments(
    recorded: Mapping[str, Any] | None, current: Mapping[str, Any]
) -> list[str]:
    """One warning per timing-relevant difference between where a result was measured and
    here; empty when they match."""
    if not recorded:
        return [
            "the result has no `environment` record, so it cannot be told whether it was "
            "measured on this machine"
        ]
    out = []
    for key, label in _ENV_FIELDS:
        if key not in recorded:
            continue
        old, new = recorded.get(key), current.get(key)
        if old != new:
            out.append(f"{label} differs: the result was measured with {old!r}, here it is {new!r}")
    old_fp, new_fp = recorded.get("fingerprint"), current.get("fingerprint")
    if not out and old_fp is not None and old_fp != new_fp:
        out.append(
            f"environment fingerprint differs ({old_fp} recorded, {new_fp} here) although the "
            "listed fields match: the result may have been edited or measured elsewhere"
        )
    return out


def compared(
    data: Mapping[str, Any], here: str, model: Any, train: Any, val: Any, report: Report
) -> list[str]:
    """The warnings where the result was measured elsewhere, or on another model or data
    (its fingerprints, named in a line first), each said."""
    search = data.get("search") or {}
    warnings = compare_environments(data.get("environment"), environment(here))
    warnings += other_model(search, model, train, val)
    named = measured_on(search)
    if named:
        report(f"the result was measured on {named.removeprefix('fingerprints: ')}")
    for line in warnings:
        report(f"warning: {line}")
    return warnings


def other_model(search: Mapping[str, Any], model: Any, train: Any, val: Any) -> list[str]:
    """A warning where the model or data given differ from those the result was measured on
    (its fingerprints): its speed-up and accuracy verdict are of those; empty where they match
    or the result names none (written before fingerprints were, or a trainer's)."""
    if not isinstance(model, nn.Module) or not search.get("model_fingerprint"):
        return []
    try:
        changes = model_changes(search.get("model_fingerprint"), model_fingerprint(model))
        if train is not None and search.get("data_fingerprint"):
            changes += data_changes(search["data_fingerprint"], data_fingerprint(train, val))
    except Exception as exc:  # a fingerprint that cannot be read is no failure
        return [f"the model and data could not be compared with the result's ({exc})"]
    if not changes:
        return []
    return [
        f"the model or data differ from those the result was measured on ({'; '.join(changes)}): "
        "its figures and accuracy verdict are of those; search this one to know its own"
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The winner against its baseline, re-measured here. Ratios are winner over baseline
    (higher is better for the winner), paired round by round."""

    winner: TrainingConfig
    baseline: TrainingConfig
    device: str
    baseline_measurements: tuple[Measurement, ...]
    winner_measurements: tuple[Measurement, ...]
    recorded_speedup: float | None
    recorded_throughput_ratio: float | None
    planned_samples: int
    planned_epochs: float
    environment_warnings: tuple[str, ...]
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    metric_name: str = "metric"
    tolerance: float | None = None
    accuracy: dict[str, Any] | None = None  # {"samples", "baseline": [...], "winner": [...]}
    seconds: float = 0.0
    full: FullReport | None = None  # the whole planned run of both (verify --full)
    recorded_interval: tuple[float, float] | None = None  # the search's 95% interval

    @property
    def same_config(self) -> bool:
        return self.winner == self.baseline

    @property
    def throughput_ratios(self) -> list[float]:
        return [
            w.throughput / b.throughput
            for b, w in zip(self.baseline_measurements, self.winner_measurements, strict=False)
        ]

    @property
    def speedups(self) -> list[float]:
        """Projected-training-time speedup of each round, one-time costs amortised as the
        search ranked them."""
        out = []
        for b, w in zip(self.baseline_measurements, self.winner_measurements, strict=False):
            bt = self._projected(self.baseline, b)
            wt = self._projected(self.winner, w)
            ratio = speedup(bt, wt)
            if ratio is not None:
                out.append(ratio)
        return out

    def _projected(self, cfg: TrainingConfig, m: Measurement) -> float:
        """``cfg``'s planned run at ``m``'s speed: its share of the planned epochs."""
        samples = round(self.planned_samples * cfg.train_fraction)
        return m.projected_time(samples, cfg.epochs(self.planned_epochs))

    @property
    def median_speedup(self) -> float | None:
        """The rounds' speedup as the search computes it (:func:`derived.round_speedup`)."""
        return round_speedup(self.speedups)

    @property
    def interval(self) -> Interval | None:
        """The speedup here with its 95% interval, as the search computes it
        (:func:`derived.round_interval`, over this run's fixed number of rounds)."""
        return round_interval(self.speedups, looks=1)

    @property
    def agreement(self) -> str | None:
        """Whether this run's interval overlaps the search's: "agrees", "slower here" (this
        run's interval wholly below the search's) or "faster here"; None where either is
        missing."""
        here, there = self.interval, self.recorded_interval
        if here is None or there is None or self.same_config:
            return None
        if here.high < there[0]:
            return "slower here"
        if here.low > there[1]:
            return "faster here"
        return "agrees"

    @property
    def median_throughput_ratio(self) -> float | None:
        return round_speedup(self.throughput_ratios)

    @property
    def faster_here(self) -> bool:
        """Whether the winner still beats the baseline here beyond the noise (its interval's
        lower bound above 1; from one round, that round's ratio above 1)."""
        if self.same_config:
            return True
        if "winner" in self.failures:
            return False
        figure = self.interval
        if figure is None:  # one round is one draw: its ratio is all there is
            median = self.median_speedup
            return median is not None and median > 1.0
        return figure.above_one

    @property
    def warnings(self) -> list[str]:
        out = list(self.environment_warnings)
        for name, message in self.failures.items():
            out.append(f"the {name} config failed here: {message}")
        figure = self.interval
        if figure is not None and not self.same_config:
            if not figure.above_one:
                out.append(
                    "the winner is not faster than the baseline here beyond the noise: "
                    f"{speed_words.interval(figure)}"
                )
            if self.agreement in ("slower here", "faster here") and self.recorded_interval:
                low, high = self.recorded_interval
                out.append(
                    f"{self.agreement} than at search time: {speed_words.interval(figure)} "
                    f"against the search's {self.recorded_speedup or 0:.2f}x "
                    f"(95% interval {low:.2f}-{high:.2f}x)"
                )
        for name, ms in (
            ("baseline", self.baseline_measurements),
            ("winner", self.winner_measurements),
        ):
            noisy = [m for m in ms if m.spread > 0.10]
            if len(noisy) > len(ms) // 2:
                out.append(
                    f"{name} timings are noisy ({len(noisy)} of {len(ms)} rounds spread > 10%): "
                    "close other programs or use more rounds / --timed-samples"
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "winner": self.winner.to_dict(),
            "baseline": self.baseline.to_dict(),
            "device": self.device,
            "rounds": len(self.speedups),
            "baseline_throughput": [m.throughput for m in self.baseline_measurements],
            "winner_throughput": [m.throughput for m in self.winner_measurements],
            "throughput_ratios": self.throughput_ratios,
            "speedups": self.speedups,
            "median_speedup": self.median_speedup,
            "speedup_interval": (
                None if self.interval is None else [self.interval.low, self.interval.high]
            ),
            "recorded_interval": (
                None if self.recorded_interval is None else list(self.recorded_interval)
            ),
            "agreement": self.agreement,
            "median_throughput_ratio": self.median_throughput_ratio,
            "recorded_speedup": self.recorded_speedup,
            "recorded_throughput_ratio": self.recorded_throughput_ratio,
            "faster_here": self.faster_here,
            "failures": dict(self.failures),
            "accuracy": self.accuracy,
            "full": None if self.full is None else self.full.to_dict(),
            "warnings": self.warnings,
            "seconds": self.seconds,
        }

    def summary(self) -> str:
        lines = [f"autotune verify on {self.device}"]
        lines.append(f"  winner:   {self.winner.describe()}")
        lines.append(f"  baseline: {self.baseline.describe()}")
        if self.same_config:
            lines.append(
                "  the winner is the baseline itself (nothing beat it): nothing to compare"
            )
        speedups, ratios = self.speedups, self.throughput_ratios
        if speedups:
            lines.append("")
            lines.append(f"  {'':28}{'middle':>10}{'min':>10}{'max':>10}{'recorded':>10}")
            for label, values, recorded in (
                ("speedup (projected time)", speedups, self.recorded_speedup),
                ("throughput ratio", ratios, self.recorded_throughput_ratio),
            ):
                rec = "n/a" if recorded is None else f"{recorded:.2f}x"
                lines.append(
                    f"  {label:28}{round_speedup(values) or 0.0:>9.2f}x{min(values):>9.2f}x"
                    f"{max(values):>9.2f}x{rec:>10}"
                )
            for name, ms in (
                ("baseline samples/s", self.baseline_measurements),
                ("winner samples/s", self.winner_measurements),
            ):
                tp = [m.throughput for m in ms]
                lines.append(
                    f"  {name:28}{statistics.median(tp):>10,.0f}{min(tp):>10,.0f}{max(tp):>10,.0f}"
                )
            lines.append(
                f"  ({len(speedups)} paired rounds, each in an order drawn afresh; projected "
                f"for {self.planned_samples:,} samples over {self.planned_epochs:g} epochs; "
                "middle: the ratios' geometric mean, the samples/s' median)"
            )
            figure = self.interval
            if figure is not None:
                lines.append(f"  speed-up here: {speed_words.interval(figure)}")
            if figure is not None and self.recorded_interval is not None:
                low, high = self.recorded_interval
                lines.append(
                    f"  the search's: {self.recorded_speedup or 0:.2f}x (95% interval "
                    f"{low:.2f}-{high:.2f}x): {self.agreement}"
                )
        if self.accuracy:
            b, w = self.accuracy["baseline"], self.accuracy["winner"]
            diff = statistics.fmean(w) - statistics.fmean(b)
            tol = "" if self.tolerance is None else f" (tolerance {self.tolerance:g})"
            lines.append(
                f"  val {self.metric_name} on {self.accuracy['samples']:,} samples over {len(b)} "
                f"seeds: baseline {statistics.fmean(b):.4f}, winner {statistics.fmean(w):.4f}, "
                f"difference {diff:+.4f}{tol}"
            )
        if self.full is not None:
            lines.extend(self.full.lines())
        lines.append("")
        if self.same_config:
            verdict = "the winner is the baseline: keep the baseline's settings"
        else:
            verdict = "the winner is " + ("faster here" if self.faster_here else "NOT faster here")
        lines.append(f"  verdict: {verdict}")
        lines.extend(f"  ! {w}" for w in self.warnings)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()
