from __future__ import annotations

import math

import pytest

from autotune import AccuracyGuard
from autotune.data import make_task, split_dataset
from autotune.examples import tiny_data


def guard(runs, tolerance=0.01, higher=True):
    return AccuracyGuard(
        metric_name="accuracy",
        higher_is_better=higher,
        tolerance=tolerance,
        baseline_runs=tuple(runs),
        accuracy_samples=1000,
    )


def test_noise_margin_from_the_baselines_own_spread() -> None:
    g = guard([0.90, 0.91, 0.89])
    assert g.baseline_metric == pytest.approx(0.90)
    assert g.spread == pytest.approx(0.01)
    # one-sided 95% t quantile with 2 dof is 2.919986; sqrt(1 + 1/3) for one run vs a mean of 3
    assert g.noise_margin() == pytest.approx(2.919986 * 0.01 * math.sqrt(4 / 3), rel=1e-5)
    assert g.screening_margin == g.noise_margin()
    assert g.violation(0.87) < 0  # a 0.03 drop is within one run's noise: not rejected on noise
    assert g.violation(0.85) > 0  # a 0.05 drop is real
    # Three runs against three (4 dof, t = 2.131847): still wider than 0.01.
    assert g.confirmation_resolution == pytest.approx(2.131847 * 0.01 * math.sqrt(2 / 3), rel=1e-5)
    assert not g.reliable
    assert "accuracy_samples > 1000" in g.advice()


def test_confirmation_compares_means_at_the_baselines_spread() -> None:
    g = guard([0.900, 0.902, 0.898])  # std 0.002: three runs resolve ~0.0035 < 0.01
    assert g.reliable
    ok = g.confirm([0.895, 0.893, 0.894])
    assert ok["passed"] and ok["drop"] == pytest.approx(0.006) and ok["margin"] == 0.01
    bad = g.confirm([0.888, 0.886, 0.887])
    assert not bad["passed"] and bad["drop"] == pytest.approx(0.013)
    # An unstable candidate (one lucky seed) does not widen its own margin.
    unstable = g.confirm([0.95, 0.60, 0.62])
    assert not unstable["passed"] and unstable["margin"] == 0.01


def test_quiet_baseline_uses_the_tolerance() -> None:
    g = guard([0.900, 0.901, 0.900])
    assert g.reliable and g.advice() is None
    assert g.screening_margin == 0.01
    assert g.violation(0.895) < 0 < g.violation(0.885)


def test_lower_is_better_metrics() -> None:
    g = guard([1.0, 1.0, 1.0], tolerance=0.1, higher=False)
    assert g.violation(1.05) < 0 < g.violation(1.2)
    assert g.violation(float("nan")) == math.inf


def test_split_is_stratified() -> None:
    data = tiny_data(300)
    task = make_task(
        forward=None, loss_fn=None, metric="accuracy", higher_is_better=None, collate_fn=None
    )
    train, val, stratified = split_dataset(data, task, val_fraction=0.2, seed=0)
    assert stratified and len(val) == 60 and len(train) == 240
    labels = data.targets.tolist()
    full = [labels.count(c) / 300 for c in range(3)]
    held = [sum(1 for i in val.indices if labels[i] == c) / 60 for c in range(3)]
    assert held == pytest.approx(full, abs=0.02)
