"""The accuracy runs' horizon (autotune/_guard/plan.py): lengthened where a longer one
settles checks sooner or where only there can a check that moves training settle; kept where
it settles them as soon; on plain numbers and on the simulated machine of tests/sim.py."""

from __future__ import annotations

import math
import re

from sim import Model, noise, result_of, search

from autotune._guard import words
from autotune._guard.confirmation import Verdict
from autotune._guard.plan import Longer, pairs_to_confirm, plan_horizon
from autotune._search.baseline import accuracy_words
from autotune._trial.outcome import AccuracyRun

DIGITS = {"batch_size": [32, 64], "precision": ["fp32"]}


def digits(**accuracy) -> Model:
    """The digits MLP's speeds (1-s accuracy runs; batch 64 at 1.73x), its accuracy given."""
    return Model(
        throughput=1000.0,
        overhead=0.2,
        speed=lambda cfg: 1.73 if cfg.batch_size == 64 else 1.0,
        **accuracy,
    )


def runs(
    metrics: list[float], halves: list[float] | None, samples: int = 2048
) -> list[AccuracyRun]:
    return [
        AccuracyRun(
            seed=i,
            metric=m,
            final_loss=0.5,
            samples=samples,
            seconds=2.0,
            midpoint=None if halves is None else halves[i],
        )
        for i, m in enumerate(metrics)
    ]


def test_pairs_to_confirm_follow_the_spread() -> None:
    assert pairs_to_confirm(0.0, 0.01, 3) == 3
    assert pairs_to_confirm(0.002, 0.01, 3) == 3
    few, many = pairs_to_confirm(0.01, 0.01, 3), pairs_to_confirm(0.02, 0.01, 3)
    assert few is not None and many is not None and 3 < few < many
    assert pairs_to_confirm(10.0, 0.01, 3) is None  # beyond any practical number


def test_a_spread_that_falls_faster_than_the_cost_rises_lengthens_the_horizon() -> None:
    """Halfway the baseline's runs vary by ±0.04, at the horizon by ±0.02: the variance
    quarters when the horizon doubles, so twice as long a check needs a quarter of the pairs
    at twice the cost each: half the seconds, the baseline's new runs included."""
    plan = plan_horizon(
        runs([0.90, 0.92, 0.94], [0.80, 0.84, 0.88]),
        samples=2048,
        limit=40_000,
        tolerance=0.01,
        run_seconds=2.0,
    )
    assert math.isclose(plan.spread, 0.02) and math.isclose(plan.half_spread or 0, 0.04)
    assert plan.longer == 4096 and math.isclose(plan.longer_spread or 0, 0.01)
    assert plan.longer_seconds < plan.seconds
    assert plan.lengthen and plan.reason is Longer.SOONER
    assert "settle sooner" in (words.horizon_reason(plan) or "")
    assert "lengthen" in words.horizon(plan) and "4,096 samples" in words.horizon(plan)


def test_a_spread_that_does_not_fall_keeps_the_horizon() -> None:
    """The same spread halfway and at the horizon (noise that training does not average
    away): a longer horizon costs twice as much per pair for nothing."""
    plan = plan_horizon(
        runs([0.90, 0.92, 0.94], [0.80, 0.82, 0.84]),
        samples=2048,
        limit=40_000,
        tolerance=0.01,
        run_seconds=2.0,
        left=1e6,
    )
    assert not plan.lengthen and words.horizon(plan).endswith("keep it")
    # Nor where the planned run is reached, however the spread falls.
    capped = plan_horizon(
        runs([0.90, 0.92, 0.94], [0.50, 0.70, 0.90]),
        samples=4000,
        limit=4000,
        tolerance=0.01,
        run_seconds=2.0,
    )
    assert not capped.lengthen and "no longer horizon" in words.horizon(capped)


def test_where_no_check_fits_here_but_one_fits_there_the_horizon_is_lengthened() -> None:
    """No halfway spread (a trainer's loop, an annealed schedule): nothing is projected; but
    at ±0.1 a check that moves training needs thousands of seconds, 60 are left, and the
    least check twice as long (3 pairs, 2 x 3 runs of 4 s) fits: only there can it settle."""
    spread = runs([0.97, 0.70, 0.97], None)
    plan = plan_horizon(spread, samples=2048, limit=40_000, tolerance=0.01, run_seconds=2.0)
    assert plan.longer_spread is None and not plan.lengthen  # no time budget: nothing to force
    timed = plan_horizon(
        spread, samples=2048, limit=40_000, tolerance=0.01, run_seconds=2.0, left=60.0
    )
    assert timed.lengthen and timed.reason is Longer.ONLY_THERE
    assert "cannot be settled here" in (words.horizon_reason(timed) or "")
    short = plan_horizon(
        spread, samples=2048, limit=40_000, tolerance=0.01, run_seconds=2.0, left=20.0
    )
    assert not short.lengthen  # the least check there (24 s) does not fit either


def _took_off(cfg, seed: int, samples: int) -> bool:
    """Whether this config's run of this seed has taken off by ``samples``: between 1,000
    and 3,500 samples, drawn per seed and per batch size (a larger batch consumes the data
    order differently); at 4,000 every run has."""
    jitter = math.sin(12.9898 * seed + 78.233 * (cfg.batch_size == 64)) * 43758.5453
    return samples >= 1000 + 2500 * (jitter - math.floor(jitter))


def test_a_horizon_where_some_runs_have_not_taken_off_is_lengthened_and_checks_settle() -> None:
    """The README's CNN at its planned horizon: some data orders have taken off (0.97) and
    others not yet (0.70), for the baseline and for batch 64 alike, so pairs vary by ±0.2 and
    no check of batch 64 could settle. The search doubles the horizon to the planned run,
    where every run has taken off, says why, stores the plans, and confirms batch 64 (it
    changes nothing but the take-off lottery) within the budget."""

    def metric_at(cfg, seed: int, samples: int) -> float:
        base = 0.97 if _took_off(cfg, seed, samples) else 0.70
        own = 0.001 * math.sin(2.3 * seed + 1.0) if cfg.batch_size == 64 else 0.0
        return base + noise(seed, 0.003) - own

    model = digits(metric_at=metric_at)
    run, clock, lines = search(model, knobs=DIGITS, timeout=60.0, n_train=400)
    ledger = run.ledger()
    text = "\n".join(lines)
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and accuracy.samples == 4000, text
    assert len(accuracy.horizons) == 2, text
    assert any("had not taken off" in line and "trying 4,000" in line for line in lines), text
    assert any("horizon: runs of 2,048 samples" in line for line in lines), text
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.verdict is Verdict.CONFIRMED, text
    best = ledger.best()
    assert best is not None and best.config.batch_size == 64, text
    assert clock.now - run.settings.started <= 1.05 * 60, text


def test_a_horizon_that_settles_checks_as_soon_is_kept() -> None:
    """Runs that vary as much halfway as at the horizon (the digits MLP's noise): the
    baseline's runs stay at the planned horizon, and the plan says so."""

    def metric(cfg, seed: int) -> float:
        own = 0.002 * math.sin(2.3 * seed + 1.0) if cfg.batch_size == 64 else 0.0
        return 0.90 + noise(seed, 0.03) - own

    model = digits(metric=metric)
    run, _, lines = search(model, knobs=DIGITS, timeout=60.0, n_train=400)
    accuracy = run.ledger().baseline_accuracy
    assert accuracy is not None and accuracy.samples == 2048, "\n".join(lines)
    assert len(accuracy.horizons) == 1, "\n".join(lines)
    assert words.horizon(accuracy.horizons[0]).endswith("keep it"), "\n".join(lines)


def test_seeds_that_have_not_taken_off_where_another_has_are_counted() -> None:
    from test_guard import guard

    assert guard([0.97, 0.70, 0.97], initial=0.10).lagging == 0  # 0.60 of 0.87: taken off
    assert guard([0.97, 0.30, 0.96], initial=0.10).lagging == 1  # 0.20 of 0.87: not yet
    assert guard([0.105, 0.10, 0.104], initial=0.10).lagging == 0  # none learned: not lagging


def test_the_reason_to_lengthen_says_which_rule_holds() -> None:
    from test_guard import guard

    from autotune._guard.plan import longer_reason

    flat = plan_horizon(
        runs([0.90, 0.92, 0.94], [0.80, 0.82, 0.84]),
        samples=2048,
        limit=40_000,
        tolerance=0.01,
        run_seconds=2.0,
    )
    assert longer_reason(guard([0.90, 0.92, 0.94], initial=0.10), flat) is None
    still = guard([0.101, 0.10, 0.102], initial=0.10)
    untrained = longer_reason(still, flat)
    assert untrained is Longer.NOT_LEARNED
    assert "barely moved" in (words.longer_words(untrained, still, flat) or "")
    lagging = guard([0.97, 0.30, 0.96], initial=0.10)
    lag = longer_reason(lagging, flat)
    assert lag is Longer.LAGGING
    said = words.longer_words(lag, lagging, flat) or ""
    assert "1 of the baseline's 3 seeds had not taken off" in said
    # A metric that got worse as it trained: no horizon fixes it.
    assert longer_reason(guard([0.05, 0.051, 0.049], initial=0.50), flat) is None
    capped = plan_horizon(runs([0.97, 0.30, 0.96], None), samples=4000, limit=4000,
                          tolerance=0.01, run_seconds=2.0)  # fmt: skip
    assert longer_reason(guard([0.97, 0.30, 0.96], initial=0.10), capped) is None


def test_validating_halfway_leaves_the_run_as_it_was() -> None:
    """The baseline's runs validate halfway; its pairs are runs that do not. With dropout
    drawing from the global RNG after the halfway validation, the run must still end exactly
    as one without it: same metric, same per-example outcomes. Halfway it scores what a run
    of half the samples scores (a constant rate without warm-up)."""
    import torch
    from torch import nn

    import autotune
    from autotune._trial.runner import train_for_accuracy
    from autotune._trial.task import default_optimizer, make_task
    from autotune._trial.workload import Workload
    from autotune.examples import tiny_data

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    work = Workload(
        model=model,
        train=tiny_data(),
        val=tiny_data(96),
        task=make_task(autotune.Task(metric="accuracy")),
        optimizer=default_optimizer,
    )
    cfg = autotune.TrainingConfig(batch_size=16)
    plain = train_for_accuracy(cfg, work, 320, seed=3)
    halfway = train_for_accuracy(cfg, work, 320, seed=3, midpoint=True)
    assert plain.midpoint is None and halfway.midpoint is not None
    assert halfway.metric == plain.metric and halfway.units == plain.units
    assert halfway.final_loss == plain.final_loss
    assert halfway.midpoint == train_for_accuracy(cfg, work, 160, seed=3).metric
    # An annealed schedule is still at a high rate halfway: no midpoint is taken.
    cosine = cfg.replace(lr_schedule=autotune.LRSchedule(kind="cosine"))
    assert train_for_accuracy(cosine, work, 320, seed=3, midpoint=True).midpoint is None


def test_a_budget_too_short_for_a_check_says_so_and_which_timeout_would_hold_one() -> None:
    """Runs of 2 s that vary by ±0.02: a harmless change's check needs tens of pairs, far
    more than the 60 s left; the plan says which changes can still be confirmed, and the
    timeout that would hold one check (the shortfall added to the user's timeout, 10% more for
    the screening before a check, rounded up to 10 s). Where the check fits, or with no time
    budget, nothing is said."""
    base = runs([0.90, 0.92, 0.94], None)
    plan = plan_horizon(base, samples=2048, limit=2048, tolerance=0.01, run_seconds=2.0, left=60.0)
    assert plan.pairs is not None and plan.seconds > 60.0
    short = plan.short_by
    assert short == plan.seconds - 60.0
    note = words.budget_words(plan, timeout=240.0)
    assert note is not None
    assert f"needs ~{plan.seconds:.0f} s of accuracy runs here, and ~60 s are left" in note
    assert f"a timeout of about {10 * math.ceil(1.1 * (240.0 + short) / 10)} s would" in note
    roomy = plan_horizon(base, samples=2048, limit=2048, tolerance=0.01, run_seconds=2.0, left=1e5)
    assert roomy.short_by is None and words.budget_words(roomy, timeout=1e5) is None
    untimed = plan_horizon(base, samples=2048, limit=2048, tolerance=0.01, run_seconds=2.0)
    assert untimed.short_by is None and words.budget_words(untimed, timeout=None) is None
    wild = plan_horizon(
        runs([0.1, 0.9, 0.5], None), samples=2048, limit=2048, tolerance=0.01, run_seconds=2.0,
        left=60.0,
    )  # fmt: skip
    assert wild.pairs is None
    assert "no timeout would hold one at this horizon" in (
        words.budget_words(wild, timeout=240.0) or ""
    )


def test_the_search_says_up_front_when_its_budget_holds_no_check_that_moves_training() -> None:
    """The digits MLP's noise (±0.03 a run) at 60 s: the progress line and the result's
    accuracy note say that only a change whose pairs barely vary can be confirmed here."""

    def metric(cfg, seed: int) -> float:
        return 0.90 + noise(seed, 0.03)

    run, _, lines = search(digits(metric=metric), knobs=DIGITS, timeout=60.0, n_train=400)
    said = [line for line in lines if "can be confirmed; a timeout of about" in line]
    assert len(said) == 1, "\n".join(lines)
    ledger = run.ledger()
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and ledger.guard is not None
    assert accuracy.budget == 60.0 and accuracy.horizons  # the facts the note is written from
    said = accuracy_words(accuracy, ledger.guard) or ""
    assert "only a change whose pairs vary much less" in said


def test_a_longer_horizon_that_does_not_fit_says_which_timeout_would_hold_it() -> None:
    """The same take-off lottery with a 32-s budget: runs of twice the samples do not fit, so
    the search says which timeout would hold them, in the progress and the result's accuracy
    note, and not the astronomical timeout a check among runs that have and have not taken off
    would need at this horizon."""

    def metric_at(cfg, seed: int, samples: int) -> float:
        base = 0.97 if _took_off(cfg, seed, samples) else 0.70
        return base + noise(seed, 0.003)

    run, _, lines = search(digits(metric_at=metric_at), knobs=DIGITS, timeout=32.0, n_train=400)
    text = "\n".join(lines)
    said = [line for line in lines if "do not fit in the time left: a timeout of about" in line]
    assert len(said) == 1 and "had not taken off" in said[0], text
    assert not any("can be confirmed; a timeout of about" in line for line in lines), text
    ledger = run.ledger()
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and accuracy.samples == 2048 and ledger.guard is not None, text
    assert accuracy.longer is not None and accuracy.longer.reason is Longer.LAGGING
    said = accuracy_words(accuracy, ledger.guard) or ""
    assert "The horizon: 1 of the baseline's" in said
    assert f"a timeout of about {accuracy.longer.timeout} s would hold them" in said


def test_a_budget_figure_is_one_number_in_every_output(tmp_path) -> None:
    """ "A timeout of about N s would hold one" check: the progress line, the result's JSON,
    the detail and the report say the same N, the one ``plan.check_timeout`` computes, and
    the flag they name exists."""

    def metric(cfg, seed: int) -> float:
        return 0.90 + noise(seed, 0.03)

    run, _, lines = search(digits(metric=metric), knobs=DIGITS, timeout=60.0, n_train=400)
    said = [m for line in lines for m in re.findall(r"a timeout of about (\d+) s would", line)]
    assert len(set(said)) == 1, "\n".join(lines)
    phrase = f"a timeout of about {said[0]} s would hold one"
    result = result_of(run, 60.0)
    data = result.to_dict()
    from autotune._result.facts import accuracy_note
    from autotune._result.summary import render_summary

    assert data["search"]["accuracy_plan"]["budget"] == 60.0  # the JSON holds the facts
    assert phrase in (accuracy_note(data) or "")
    assert phrase in render_summary(data, detail=True)
    assert phrase in result.report(tmp_path / "report.html").read_text()
