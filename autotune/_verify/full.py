"""``verify --full``: time to accuracy measured, not projected.

The baseline and the chosen config each train the user's whole planned run (the chosen one its
share of it, where it trains a share of the epochs, its LR schedule over its own run) from the
initial weights, over a few paired data-order seeds, and are validated at the end. Each run's
wall time, from its first step to its final validation, is the end-to-end time; the two
configs' times give the speedup to the accuracy each reached, and their final metrics, paired
by seed, say whether the chosen config reached the baseline's within the tolerance.

A run is a trial like any other (through the verify's executor, so it is stopped at its
limit); every finished run is written to the ``resume`` file at once, and a verification run
again with that file takes up where it stopped (the file names the two configs and the planned
samples: a file of another verification is refused, not mixed in).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from scipy import stats

from autotune._errors import ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._result.files import write_text_atomic
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome
from autotune._trial.runner import run_samples

__all__ = ["FULL_SEEDS", "FullReport", "FullRun", "run_full"]

FULL_SEEDS = 3  # paired seeds of the whole run, by default
LEVEL = 0.95  # two-sided, for the intervals the report shows
ARMS = ("baseline", "winner")


class _Executor(Protocol):
    def run(self, cfg: TrainingConfig, budget: Budget, **kwargs: Any) -> TrialOutcome: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class FullRun:
    """One config's whole run with one data-order seed."""

    arm: str  # "baseline" or "winner"
    seed: int
    metric: float
    seconds: float  # first step to final validation
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FullRun:
        return cls(
            arm=str(data["arm"]),
            seed=int(data["seed"]),
            metric=float(data["metric"]),
            seconds=float(data["seconds"]),
            samples=int(data["samples"]),
        )


def _interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the two-sided :data:`LEVEL` t-interval of the mean; None for
    fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1)) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclasses.dataclass(frozen=True, kw_only=True)
class FullReport:
    """The whole runs of both configs: end-to-end times, final metrics, and what they say."""

    planned_samples: int  # the baseline's whole run
    planned_epochs: float
    metric_name: str
    higher_is_better: bool
    tolerance: float | None
    runs: tuple[FullRun, ...]
    failures: Mapping[str, str] = dataclasses.field(default_factory=dict)
    resumed: int = 0  # runs read back from the resume file

    def of(self, arm: str) -> list[FullRun]:
        return sorted((r for r in self.runs if r.arm == arm), key=lambda r: r.seed)

    @property
    def pairs(self) -> list[tuple[FullRun, FullRun]]:
        """(baseline, winner) runs of the same seed."""
        winner = {r.seed: r for r in self.of("winner")}
        return [(b, winner[b.seed]) for b in self.of("baseline") if b.seed in winner]

    @property
    def time_ratio(self) -> float | None:
        """The baseline's mean end-to-end time over the winner's, over the pairs."""
        pairs = self.pairs
        if not pairs:
            return None
        base = statistics.fmean(b.seconds for b, _ in pairs)
        won = statistics.fmean(w.seconds for _, w in pairs)
        return base / won if won > 0 else None

    def drops(self) -> list[float]:
        """Per pair, how much worse the winner's final metric is (negative: better)."""
        sign = 1.0 if self.higher_is_better else -1.0
        return [sign * (b.metric - w.metric) for b, w in self.pairs]

    @property
    def verdict(self) -> str:
        """ "within" (the drop's upper bound is within the tolerance), "beyond" (its lower
        bound is past it) or "unclear"; "failed" where a run failed."""
        if self.failures:
            return "failed"
        interval = _interval(self.drops())
        if interval is None or self.tolerance is None:
            return "unclear"
        _, low, high = interval
        if high <= self.tolerance:
            return "within"
        return "beyond" if low > self.tolerance else "unclear"

    def to_dict(self) -> dict[str, Any]:
        drop = _interval(self.drops())
        return {
            "planned_samples": self.planned_samples,
            "planned_epochs": self.planned_epochs,
            "metric": self.metric_name,
            "higher_is_better": self.higher_is_better,
            "tolerance": self.tolerance,
            "runs": [r.to_dict() for r in self.runs],
            "time_ratio": self.time_ratio,
            "drop": None if drop is None else {"mean": drop[0], "low": drop[1], "high": drop[2]},
            "verdict": self.verdict,
            "failures": dict(self.failures),
            "resumed": self.resumed,
        }

    def lines(self) -> list[str]:
        out = [
            f"  the whole run ({self.planned_epochs:g} planned epochs, {len(self.pairs)} paired "
            "seeds; end-to-end time from the first step to the final validation):"
        ]
        for arm in ARMS:
            runs = self.of(arm)
            if not runs:
                continue
            seconds = [r.seconds for r in runs]
            metric = _interval([r.metric for r in runs])
            shown = (
                f"{runs[0].metric:.4f}"
                if metric is None
                else f"{metric[0]:.4f} [{metric[1]:.4f}, {metric[2]:.4f}]"
            )
            out.append(
                f"    {arm:8} {runs[0].samples:,} samples: {statistics.fmean(seconds):.1f} s "
                f"(runs {', '.join(f'{s:.1f}' for s in seconds)}); final {self.metric_name} "
                f"{shown}"
            )
        ratio = self.time_ratio
        if ratio is not None:
            out.append(f"    time to accuracy: the winner {ratio:.2f}x faster end to end")
        drop = _interval(self.drops())
        if drop is not None:
            tol = "" if self.tolerance is None else f" against tolerance {self.tolerance:g}"
            out.append(
                f"    paired drop of the final {self.metric_name} {drop[0]:+.4f} "
                f"[{drop[1]:+.4f}, {drop[2]:+.4f}] ({LEVEL:.0%} two-sided){tol}: "
                f"{self.verdict}"
            )
        for arm, message in self.failures.items():
            out.append(f"    ! the {arm}'s whole run failed: {message}")
        if self.resumed:
            out.append(f"    ({self.resumed} runs read back from the resume file)")
        return out


def _identity(pair: Mapping[str, TrainingConfig], planned_samples: int) -> dict[str, Any]:
    return {
        "baseline": pair["baseline"].to_dict(),
        "winner": pair["winner"].to_dict(),
        "planned_samples": planned_samples,
    }


def _read_state(path: Path | None, identity: dict[str, Any]) -> list[FullRun]:
    if path is None or not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read the resume file {str(path)!r}: {exc}.") from None
    if not isinstance(data, dict) or data.get("identity") != identity:
        raise ConfigError(
            f"The resume file {str(path)!r} is of another verification (other configs or "
            "another planned run): remove it, or pass another resume path."
        )
    return [FullRun.from_dict(r) for r in data.get("runs") or []]


def _write_state(path: Path | None, identity: dict[str, Any], runs: list[FullRun]) -> None:
    if path is not None:
        text = json.dumps({"identity": identity, "runs": [r.to_dict() for r in runs]}, indent=1)
        write_text_atomic(path, text)


def run_full(
    pair: Mapping[str, TrainingConfig],
    executor: _Executor,
    budget: Budget,
    *,
    measured: Mapping[str, Measurement | None],
    planned_samples: int,
    planned_epochs: float,
    seeds: int,
    metric_name: str,
    higher_is_better: bool,
    tolerance: float | None,
    resume: str | os.PathLike[str] | None,
    report: Callable[[str], None],
) -> FullReport:
    """Both configs' whole runs over ``seeds`` paired data-order seeds, alternating which
    goes first; each finished run kept in ``resume`` (and read back from it)."""
    path = None if resume is None else Path(resume)
    identity = _identity(pair, planned_samples)
    runs = _read_state(path, identity)
    resumed = len(runs)
    done = {(r.arm, r.seed) for r in runs}
    failures: dict[str, str] = {}
    for seed in range(seeds):
        order = ARMS if seed % 2 == 0 else ARMS[::-1]
        for arm in order:
            if (arm, seed) in done:
                continue
            cfg = pair[arm]
            samples = run_samples(cfg, planned_samples)
            report(f"whole run: {arm}, seed {seed}, {samples:,} samples")
            outcome = executor.run(
                cfg,
                budget,
                accuracy=AccuracyCheck(samples=planned_samples, seeds=(seed,)),
                measured=measured.get(arm),
            )
            if not outcome.ok or not outcome.accuracy:
                failures[arm] = f"seed {seed}: {outcome.failure}: {outcome.message}"
                break
            run = outcome.accuracy[0]
            runs.append(
                FullRun(
                    arm=arm, seed=seed, metric=run.metric, seconds=run.seconds, samples=run.samples
                )
            )
            _write_state(path, identity, runs)
            report(f"whole run: {arm}, seed {seed}: {run.metric:.4f} in {run.seconds:.1f} s")
        if failures:
            break
    return FullReport(
        planned_samples=planned_samples,
        planned_epochs=planned_epochs,
        metric_name=metric_name,
        higher_is_better=higher_is_better,
        tolerance=tolerance,
        runs=tuple(runs),
        failures=failures,
        resumed=resumed,
    )
