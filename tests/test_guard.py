from __future__ import annotations

import dataclasses
import math

import pytest

from autotune import AccuracyGuard
from autotune._search.guard import AccuracyPlan, plan_accuracy_budget, worth_growing
from autotune._trial.task import make_task, split_dataset
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
    assert ok.passed and ok.drop == pytest.approx(0.006) and ok.margin == 0.01
    bad = g.confirm([0.888, 0.886, 0.887])
    assert not bad.passed and bad.drop == pytest.approx(0.013)
    # An unstable candidate (one lucky seed) does not widen its own margin.
    unstable = g.confirm([0.95, 0.60, 0.62])
    assert not unstable.passed and unstable.margin == 0.01


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


def test_accuracy_budget_without_a_deadline_is_three_epochs() -> None:
    plan = plan_accuracy_budget(
        n_train=4096, batch_size=32, throughput=1900.0, repeats=3, seconds_left=None
    )
    assert plan == AccuracyPlan(first=12288, most=12288, floor=4096)


def test_accuracy_budget_may_grow_up_to_the_planned_run() -> None:
    # A small dataset (digits: 1,437 training samples) whose baseline is still noisy after
    # three epochs may be checked on up to the ten epochs the user plans to train.
    plan = plan_accuracy_budget(
        n_train=1437,
        batch_size=32,
        throughput=30000.0,
        repeats=3,
        seconds_left=None,
        planned_epochs=10,
    )
    assert plan == AccuracyPlan(first=4311, most=14370, floor=1437)
    assert [plan.grown(4311), plan.grown(8622)] == [8622, 14370]


def test_accuracy_budget_takes_its_share_of_a_long_deadline() -> None:
    # 15% of 100 s at 1,000 samples/s over 3 runs: 5,000 samples, between floor and target.
    plan = plan_accuracy_budget(
        n_train=4096, batch_size=32, throughput=1000.0, repeats=3, seconds_left=100.0
    )
    assert (plan.first, plan.most, plan.floor, plan.note) == (5000, 12288, 4096, None)


def test_a_short_deadline_keeps_the_floor_and_says_so_up_front() -> None:
    # 15% of 16 s at 1,900 samples/s over 3 runs is 1,520 samples: below one epoch (4,096),
    # where large batches get a handful of steps and any of them looks as good as the baseline.
    plan = plan_accuracy_budget(
        n_train=4096, batch_size=32, throughput=1900.0, repeats=3, seconds_left=16.0
    )
    assert (plan.first, plan.floor) == (4096, 4096)
    assert plan.note is not None
    assert "at least 4096 samples (one epoch), about 6 s in all" in plan.note
    assert "a timeout of 43 s or more" in plan.note


def test_a_large_dataset_floors_at_baseline_steps_not_an_epoch() -> None:
    plan = plan_accuracy_budget(
        n_train=1_000_000, batch_size=32, throughput=1000.0, repeats=3, seconds_left=60.0
    )
    assert (plan.first, plan.floor, plan.most) == (4096, 4096, 3_000_000)
    assert plan.note is not None and "(128 baseline steps)" in plan.note


def test_the_budget_grows_only_while_it_helps_and_fits() -> None:
    plan = AccuracyPlan(first=1000, most=4000, floor=1000)
    noisy = guard([0.90, 0.91, 0.89])  # not reliable at 1000 samples
    assert worth_growing(noisy, plan, run_seconds=2.0, seconds_left=100.0)  # ~4 s <= 30 s
    assert not worth_growing(noisy, plan, run_seconds=2.0, seconds_left=10.0)  # 4 s > 3 s
    assert worth_growing(noisy, plan, run_seconds=2.0, seconds_left=None)
    assert not worth_growing(guard([0.900, 0.901, 0.900]), plan, run_seconds=2.0, seconds_left=None)
    at_most = dataclasses.replace(noisy, accuracy_samples=4000)
    assert not worth_growing(at_most, plan, run_seconds=2.0, seconds_left=None)
    assert plan.grown(1000) == 2000 and plan.grown(3000) == 4000
