"""The accuracy guard: is a candidate's validation metric within tolerance of the baseline's?

Short-budget metrics are noisy, so the guard first measures the baseline's own run-to-run spread
over several data-order seeds. A candidate is rejected only for a drop larger than both the
tolerance and what that spread can resolve; when the spread is wider than the tolerance the guard
says so plainly (``reliable`` is False, and ``advice`` says what to change) instead of passing or
failing candidates on noise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

__all__ = ["AccuracyGuard"]

CONFIDENCE = 0.95


def _t_quantile(q: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, dof))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccuracyGuard:
    metric_name: str
    higher_is_better: bool
    tolerance: float
    baseline_runs: tuple[float, ...]
    accuracy_samples: int

    @property
    def baseline_metric(self) -> float:
        return statistics.fmean(self.baseline_runs)

    @property
    def spread(self) -> float:
        """Sample standard deviation of the baseline's metric across data-order seeds."""
        return statistics.stdev(self.baseline_runs) if len(self.baseline_runs) > 1 else 0.0

    @property
    def noise_margin(self) -> float:
        """The smallest drop of one candidate run below the baseline mean that is not noise
        (one-sided, 95%): t * s * sqrt(1 + 1/k) over k baseline runs."""
        k = len(self.baseline_runs)
        if k < 2:
            return 0.0
        return _t_quantile(CONFIDENCE, k - 1) * self.spread * math.sqrt(1 + 1 / k)

    @property
    def margin(self) -> float:
        """The drop a candidate may show and still pass."""
        return max(self.tolerance, self.noise_margin)

    @property
    def reliable(self) -> bool:
        """Whether the guard can resolve a drop of ``tolerance`` at all."""
        return len(self.baseline_runs) > 1 and self.noise_margin <= self.tolerance

    def drop(self, metric: float) -> float:
        """How much worse than the baseline mean ``metric`` is (negative: better)."""
        diff = self.baseline_metric - metric
        return diff if self.higher_is_better else -diff

    def violation(self, metric: float) -> float:
        """Optuna constraint value: <= 0 means within tolerance."""
        if not math.isfinite(metric):
            return math.inf
        return self.drop(metric) - self.margin

    def advice(self) -> str | None:
        if self.reliable:
            return None
        if len(self.baseline_runs) < 2:
            return (
                "The baseline was trained with one data-order seed, so its run-to-run noise is "
                "unknown; use accuracy_repeats >= 2 for an honest accuracy guard."
            )
        return (
            f"The baseline's {self.metric_name} varies by ±{self.spread:.4f} (std) across "
            f"{len(self.baseline_runs)} data-order seeds, so a single run cannot resolve a drop "
            f"of {self.tolerance:g}: candidates were rejected only for drops above "
            f"{self.margin:.4f}. For a guard at {self.tolerance:g}, give the accuracy check a "
            f"longer budget (accuracy_samples > {self.accuracy_samples}) or accept a tolerance "
            f">= {self.margin:.3f}."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric_name,
            "higher_is_better": self.higher_is_better,
            "tolerance": self.tolerance,
            "baseline_runs": list(self.baseline_runs),
            "baseline_metric": self.baseline_metric,
            "baseline_spread": self.spread,
            "noise_margin": self.noise_margin,
            "effective_margin": self.margin,
            "reliable": self.reliable,
            "accuracy_samples": self.accuracy_samples,
            "advice": self.advice(),
        }
