from __future__ import annotations

import math

import pytest

from autotune import AccuracyGuard
from autotune._search.guard import AccuracyPlan, Verdict, plan_accuracy_budget
from autotune._trial.task import make_task, split_dataset
from autotune.examples import tiny_data


def guard(runs, tolerance=0.01, higher=True, initial=None):
    return AccuracyGuard(
        metric_name="accuracy",
        higher_is_better=higher,
        tolerance=tolerance,
        baseline_runs=tuple(runs),
        accuracy_samples=1000,
        initial_metric=initial,
    )


def test_screening_is_paired_with_the_baselines_run_of_the_same_seed() -> None:
    g = guard([0.90, 0.91, 0.89])  # spread 0.01
    # One pair varies by up to t(2 dof) * s * sqrt(2): 2.92 * 0.01 * 1.414 = 0.0413.
    assert g.screening_margin == pytest.approx(2.919986 * 0.01 * math.sqrt(2), rel=1e-5)
    assert g.violation(0.87) < 0  # a 0.03 drop from seed 0's 0.90: within one pair's noise
    assert g.violation(0.85) > 0  # 0.05: real
    assert g.violation(0.86, seed=1) == pytest.approx(0.05 - g.screening_margin)
    assert g.violation(float("nan")) == math.inf


def test_a_paired_check_resolves_what_independent_runs_cannot() -> None:
    """The baseline's seeds spread by 0.02, far wider than the tolerance, yet a candidate that
    tracks each seed's run within 0.001 is confirmed: the shared noise cancels in the pairs."""
    g = guard([0.90, 0.93, 0.87])
    c = g.confirm([0.899, 0.930, 0.868], trial=4)
    assert c.verdict is Verdict.CONFIRMED and c.passed and c.trial == 4
    assert c.drop == pytest.approx(0.001)
    # t(2 dof) * stdev([0.001, 0.0, 0.002]) / sqrt(3)
    assert c.resolution == pytest.approx(2.919986 * 0.001 / math.sqrt(3), rel=1e-4)


def test_a_clear_drop_is_rejected_and_a_noisy_one_left_unresolved() -> None:
    g = guard([0.90, 0.93, 0.87])
    rejected = g.confirm([0.87, 0.90, 0.84])  # 0.03 below, every seed
    assert rejected.verdict is Verdict.REJECTED and not rejected.passed
    noisy = g.confirm([0.95, 0.88, 0.87])  # -0.05, +0.05, 0.0: cannot tell
    assert noisy.verdict is Verdict.UNRESOLVED and not noisy.passed
    assert noisy.need is not None and noisy.need > 3
    assert f"about {noisy.need} seeds" in (noisy.settle or "")


def test_a_baseline_that_did_not_learn_confirms_nothing() -> None:
    g = guard([0.501, 0.502, 0.500], initial=0.50)  # 0.001 above the untrained model, within
    assert not g.learned  # twice its own spread (0.001): the seeds alone move it that much
    c = g.confirm([0.501, 0.502, 0.500])
    assert c.verdict is Verdict.UNRESOLVED
    assert "barely moved from the untrained model's" in (c.settle or "")
    assert "barely moved" in (g.advice() or "")
    learned = guard([0.80, 0.81, 0.79], initial=0.50)
    assert learned.learned and learned.advice() is None


def test_lower_is_better_metrics() -> None:
    g = guard([1.0, 1.0, 1.0], tolerance=0.1, higher=False, initial=2.0)
    assert g.learned
    assert g.violation(1.05) < 0 < g.violation(1.2)
    assert g.confirm([1.02, 1.03, 1.01]).passed  # mean paired drop 0.02 <= 0.1
    assert g.confirm([1.5, 1.5, 1.5]).verdict is Verdict.REJECTED


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
        n_train=4096, batch_size=32, throughput=1900.0, repeats=3, seconds=None
    )
    assert plan == AccuracyPlan(samples=12288)


def test_accuracy_budget_takes_at_most_a_quarter_of_the_budget() -> None:
    # 25% of 100 s at 1,000 samples/s over 3 runs: 8,333 samples, less than three epochs.
    plan = plan_accuracy_budget(
        n_train=4096, batch_size=32, throughput=1000.0, repeats=3, seconds=100.0
    )
    assert plan.samples == 8333 and plan.note is None


def test_less_than_an_epoch_is_said_up_front_never_the_whole_budget() -> None:
    """A slow real model: 100 samples/s, 4,000 samples, 240 s. The baseline's runs take a
    quarter of the budget (2,000 samples each, half an epoch) and the result says so."""
    plan = plan_accuracy_budget(
        n_train=4000, batch_size=32, throughput=100.0, repeats=3, seconds=240.0
    )
    assert plan.samples == 2000
    assert plan.note is not None and "50% of an epoch" in plan.note
    assert "A timeout of 480 s or more gives it a full epoch" in plan.note
    tiny = plan_accuracy_budget(n_train=4000, batch_size=32, throughput=10.0, repeats=3, seconds=60)
    assert tiny.samples == 8 * 32  # a few steps at the least


def test_the_budget_never_exceeds_the_planned_run() -> None:
    plan = plan_accuracy_budget(
        n_train=4096, batch_size=32, throughput=1e6, repeats=3, seconds=1e6, planned_epochs=2
    )
    assert plan.samples == 2 * 4096
