"""Evidence bought from the budget (autotune/_search/evidence.py): an unresolved accuracy
check that would change the answer gets more paired seeds, look by look, as long as they fit;
on the simulated machine of tests/sim.py, with the budget checked against a fake clock."""

from __future__ import annotations

import dataclasses
import math

import pytest
from sim import Model, noise, search

from autotune._guard.confirmation import RunFailed, Verdict
from autotune._guard.words import describe
from autotune._search.evidence import UNTIMED_SEEDS, evidence_value, next_target

DIGITS = {"batch_size": [32, 64], "precision": ["fp32"]}


def digits_like(shift: float, spread: float) -> Model:
    """The issue's digits MLP (1-s accuracy runs): batch 64 runs 1.73x the baseline's speed;
    its paired drop (whose mean is ``shift``) varies from seed to seed by about ``spread``, on
    top of the noise every config shares, so three seeds cannot bound it."""

    def metric(cfg, seed: int) -> float:
        own = shift + spread * math.sin(2.3 * seed + 1.0) if cfg.batch_size == 64 else 0.0
        return 0.90 + noise(seed, 0.03) - own

    return Model(
        throughput=1000.0,
        overhead=0.2,
        speed=lambda cfg: 1.73 if cfg.batch_size == 64 else 1.0,
        metric=metric,
    )


def test_an_unresolved_leader_gets_the_seeds_that_settle_it() -> None:
    """The digits case with timeout=60: batch 64 is not resolved by the baseline's 3 seeds;
    the search buys more instead of ending early, and settles it within the budget."""
    run, clock, lines = search(
        digits_like(shift=-0.002, spread=0.012), knobs=DIGITS, timeout=60.0, n_train=400
    )
    ledger = run.ledger()
    used = clock.now - run.settings.started
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and len(c.runs) > 3 and c.looks >= 2, "\n".join(lines)
    assert c.verdict is Verdict.CONFIRMED, "\n".join(lines)
    assert ledger.best() is not None and ledger.best().config.batch_size == 64
    assert used <= 1.05 * 60, "\n".join(lines)


def test_a_check_that_cannot_settle_uses_the_budget_trying_and_says_so() -> None:
    """A mean paired drop right at the tolerance never settles: the search spends at least
    90% of its budget on it (and the answers' side-by-side rounds), keeps the safe answer, and
    the result shows the bound it got."""
    run, clock, lines = search(
        digits_like(shift=0.008, spread=0.03), knobs=DIGITS, timeout=60.0, n_train=400
    )
    ledger = run.ledger()
    used = clock.now - run.settings.started
    assert 0.9 * 60 <= used <= 1.05 * 60, "\n".join(lines)
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.verdict is Verdict.UNRESOLVED and len(c.runs) > 3, "\n".join(lines)
    assert c.bound is not None and c.bound > 0.01 and c.lower is not None and c.lower <= 0.01
    assert ledger.best() is not None and ledger.safe(ledger.best())
    assert ledger.pending(unresolved=True) == b64


def test_a_look_goes_to_the_seeds_that_would_settle_it_where_they_fit() -> None:
    assert next_target(3, 9, cost=2.0, left=100.0) == 9
    assert next_target(3, 40, cost=2.0, left=100.0) == 12  # at most 4x the seeds at a look
    # 9 seeds need 12 s more, and 10 s are left: the check waits while candidates remain ...
    assert next_target(3, 9, cost=2.0, left=10.0) is None
    # ... and, as the search's last use of its time, takes the 4 seeds that 9 spare s allow.
    assert next_target(3, 9, cost=2.0, left=10.0, spare=9.0) == 7
    assert next_target(3, 9, cost=2.0, left=1.0, spare=1.0) is None  # not one more fits
    assert next_target(3, None, cost=2.0, left=100.0) is None  # never settles: it waits ...
    assert next_target(3, None, cost=2.0, left=100.0, spare=100.0) == 12  # or uses what is left
    assert next_target(30, 100, cost=1.0, left=None) == UNTIMED_SEEDS
    assert next_target(UNTIMED_SEEDS, 100, cost=1.0, left=None) is None


def test_evidence_goes_first_where_it_buys_the_most_gain_per_second() -> None:
    likely_big = evidence_value(1.7, 0.8, 10.0)
    likely_small = evidence_value(1.1, 0.8, 10.0)
    unlikely_big = evidence_value(1.7, 0.05, 10.0)
    assert likely_big > likely_small > unlikely_big > 0
    assert evidence_value(0.9, 0.9, 1.0) == 0.0  # slower than the answer: worth nothing


def test_a_baseline_that_did_not_learn_gets_a_longer_horizon_where_it_fits() -> None:
    """At the planned horizon the baseline's metric does not move from the untrained model's;
    twice as long, it learns. The search lengthens the baseline's runs instead of giving up on
    every change of the numerics, and then confirms one."""
    model = digits_like(shift=0.0, spread=0.001)
    model.learns_after = 3000
    run, clock, lines = search(model, knobs=DIGITS, timeout=120.0, n_train=400)
    ledger = run.ledger()
    assert any("barely moved" in line and "trying 4,000" in line for line in lines), "\n".join(
        lines
    )
    assert ledger.guard is not None and ledger.guard.learned
    assert ledger.baseline_accuracy is not None and ledger.baseline_accuracy.samples == 4000
    best = ledger.best()
    assert best is not None and best.config.batch_size == 64, "\n".join(lines)
    assert clock.now - run.settings.started <= 1.05 * 120


def stalling_check() -> Model:
    """The digits case where batch 64's first look never ends (its screening run does)."""
    return dataclasses.replace(
        digits_like(shift=-0.002, spread=0.001),
        stalls=lambda cfg, seeds: cfg.batch_size == 64 and 0 not in seeds,
    )


def test_a_check_stopped_by_the_deadline_is_unresolved_not_rejected() -> None:
    """Batch 64's first look is stopped where the search's deadline (its grace spent) stops
    it: that says nothing of its accuracy, so the check is unresolved (it was filed as
    rejected), not tried again, and batch 64 is not the answer."""
    run, clock, lines = search(stalling_check(), knobs=DIGITS, timeout=60.0, n_train=400)
    ledger = run.ledger()
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.verdict is Verdict.UNRESOLVED, "\n".join(lines)
    assert c.failed is RunFailed.STOPPED and not c.tested
    assert c.failure == "timeout; the search's time left set that limit (the run's own: 60 s)"
    assert describe(c) == (
        f"its accuracy runs were stopped before they ended ({c.failure}): no verdict on its "
        "accuracy"
    )
    assert not c.confirmable and not c.runs
    assert "rejected" not in "\n".join(line for line in lines if "confirmation of" in line)
    best = ledger.best()
    assert best is not None and best.config.batch_size == 32
    assert clock.now - run.settings.started <= 1.05 * 60, "\n".join(lines)


def test_a_check_whose_runs_hang_past_their_own_limit_is_rejected() -> None:
    """With time to spare (600 s), the same first look is stopped at its own limit (a few
    times what it should take), long before the deadline: a config whose accuracy runs hang
    is rejected, and the search goes on within its budget."""
    run, clock, lines = search(stalling_check(), knobs=DIGITS, timeout=600.0, n_train=400)
    ledger = run.ledger()
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.verdict is Verdict.REJECTED and c.failure == "timeout"
    assert c.failed is RunFailed.FAILED and describe(c) == "timeout"
    assert clock.now - run.settings.started <= 1.05 * 600, "\n".join(lines)


def test_the_screening_run_that_chose_a_candidate_is_not_one_of_its_pairs() -> None:
    """Batch 64's screening run (seed 0) is a lucky one, 0.05 better than the baseline's; its
    other seeds are 0.004 worse. The run that passed screening selected the candidate, so the
    check pairs the seeds after it (the baseline buying its run of the fourth seed): the mean
    paired drop is the other seeds' +0.004, not the -0.014 that counting the lucky run gave."""

    def metric(cfg, seed: int) -> float:
        own = -0.05 if seed == 0 else 0.004 + 0.001 * math.sin(seed)
        return 0.90 + noise(seed, 0.03) - (own if cfg.batch_size == 64 else 0.0)

    model = Model(throughput=1000.0, overhead=0.2, speed=digits_like(0, 0).speed, metric=metric)
    run, _, lines = search(model, knobs=DIGITS, timeout=60.0, n_train=400)
    ledger = run.ledger()
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.first_seed == 1 and len(c.runs) >= 3, "\n".join(lines)
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and [r.seed for r in accuracy.runs][:4] == [0, 1, 2, 3]
    base = [r.metric for r in accuracy.runs]
    pairs = [base[1 + i] - run for i, run in enumerate(c.runs)]  # seed 1, 2, ...
    assert c.drop == pytest.approx(sum(pairs) / len(pairs), abs=1e-12)
    assert c.drop == pytest.approx(0.004, abs=0.002), "\n".join(lines)


def test_a_task_whose_runs_barely_vary_checks_with_the_two_pairs_it_has() -> None:
    """The baseline's runs agree example by example and vary by ±0.0005 (GPT-2's validation
    loss does, against a tolerance of 0.01): a check's first look pairs the two seeds after
    the screening run that the baseline already has runs of, and settles there; the
    baseline buys no run of a fourth seed, and the candidate trains two runs, not three.
    Where the runs vary by ±0.03 the first look keeps its three pairs."""

    def model(spread: float) -> Model:
        def metric(cfg, seed: int) -> float:
            return 0.90 + noise(seed, spread) - (0.001 if cfg.batch_size == 64 else 0.0)

        return Model(
            throughput=1000.0,
            overhead=0.2,
            speed=digits_like(0, 0).speed,
            metric=metric,
            one_order=True,
        )

    run, _, lines = search(model(0.0005), knobs=DIGITS, timeout=60.0, n_train=400)
    ledger = run.ledger()
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and c.verdict is Verdict.CONFIRMED, "\n".join(lines)
    assert (c.first_seed, len(c.runs), c.looks) == (1, 2, 1), "\n".join(lines)
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and [r.seed for r in accuracy.runs] == [0, 1, 2]
    assert "2 paired seeds" in "\n".join(lines)

    run, _, lines = search(model(0.03), knobs=DIGITS, timeout=60.0, n_train=400)
    ledger = run.ledger()
    b64 = next(e for e in ledger.candidates if e.config.batch_size == 64)
    c = ledger.confirmation(b64)
    assert c is not None and len(c.runs) >= 3, "\n".join(lines)
    accuracy = ledger.baseline_accuracy
    assert accuracy is not None and [r.seed for r in accuracy.runs][:4] == [0, 1, 2, 3]


def test_a_validation_set_too_small_for_the_tolerance_is_said_once_and_checks_nothing() -> None:
    """128 validation examples against a tolerance of 0.01 (the tiny BERT's): the sample's
    own noise, ±0.026 at the most lenient look whatever the seeds, is more than twice the
    tolerance, so no change can be confirmed. The search says so with the baseline's runs,
    with the examples that would do, and makes no check (the tiny BERT made four, each
    unresolved at a mean paired drop of 0.0000)."""
    model = Model(
        throughput=1000.0,
        overhead=0.2,
        speed=digits_like(0, 0).speed,
        metric=lambda cfg, seed: 0.99 + noise(seed, 0.005),
        one_order=True,
        val_items=128,
    )
    run, _, lines = search(model, knobs=DIGITS, timeout=60.0, n_train=400)
    text = "\n".join(lines)
    ledger = run.ledger()
    assert ledger.confirmations == {}, text
    assert "the validation set's 128 examples are too few for the tolerance 0.01" in text
    assert "no change of the numerics can be confirmed" in text
    assert "takes at least 331 validation examples" in text
    assert text.count("the validation set is too small for the tolerance, given") == 1, text
    # No check is priced that the line before says cannot be made.
    assert "a harmless change's check" not in text, text
    assert "would hold one" not in text, text
    # Nor is a change of the numerics said to be left for want of time (the tiny BERT's
    # batch sizes read "not tried: the search ended before it came up").
    from autotune._search.coverage import UNGUARDED, unmeasured

    missing = unmeasured(ledger, run.settings.space, run.settings.baseline)
    numerics = set(run.settings.space.numerics_knobs(split_free=ledger.split_free))
    assert missing and all(m.why == UNGUARDED for m in missing if m.knob in numerics), missing


def test_a_last_check_needs_only_the_fewest_rounds_of_the_answers_beside_it(monkeypatch) -> None:
    """At the end of a search, a candidate that passed screening and would beat the safe answer
    is checked where its first look fits beside the fewest side-by-side rounds (two) of the
    answers; a second pass of rounds only sharpens a figure, a check may make an answer. A fresh
    clone's README run left its 80% schedule (1.47x at screening, the safe answer 1.10x)
    unchecked for want of ~82 s, then spent them on six rounds. Where the search's first check
    fits only without those rounds, it still comes first (an idle README run refused a ~106-s
    check with 107 s left, and ended 35 s early); where it does not fit at all, it is said."""
    import types

    from test_guard import check
    from test_ledger import BASE, _base, _candidate, _study_with, runs, settings

    from autotune._guard.confirmation import Confirmation
    from autotune._search import evidence, finish, storage
    from autotune._search.baseline import Baseline
    from autotune._search.ledger import Ledger
    from autotune._search.record import BaselineAccuracy

    def timed(record, seconds: float = 5.0):
        return dataclasses.replace(record, measure_seconds=seconds)

    safe = [  # three safe configs faster than the baseline: a second pass would be kept
        timed(_candidate(BASE.replace(channels_last=True), 150.0)),
        timed(_candidate(BASE.replace(optimizer_impl="foreach"), 160.0)),
        timed(_candidate(BASE.replace(num_workers=1), 170.0)),
    ]
    shorter = dataclasses.replace(
        timed(_candidate(BASE.replace(batch_size=128), 110.0)),
        accuracy=runs(0.905),
        accuracy_samples=256,
    )
    study = _study_with([timed(_base()), *safe, shorter])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    ledger = Ledger.read(study, settings())
    entry = ledger.pending()
    assert entry is not None and entry.number == 4
    baseline = Baseline.of(ledger)
    assert baseline is not None
    cost = baseline.confirm_seconds(entry.record)
    least = finish.least_rounds_seconds(ledger, baseline)
    before = finish.MIN_ROUNDS / finish.ROUNDS * finish.side_by_side_seconds(ledger, baseline)
    assert least < before  # the second pass's share, which the check no longer waits for
    checked: list[tuple[int, float]] = []
    monkeypatch.setattr(
        finish, "confirm", lambda bench, base, e, **kw: checked.append((e.number, kw["keep"]))
    )

    def bench(left: float):
        lines: list[str] = []
        return types.SimpleNamespace(
            ledger=lambda: ledger,
            deadline=types.SimpleNamespace(past=lambda seconds: seconds > left),
            report=lines.append,
            detail=lines.append,  # the tests read the detail's lines beside the story's
            lines=lines,
        )

    finish.confirm_pending(bench(cost + (least + before) / 2), baseline)
    after = finish.least_rounds_seconds(ledger, baseline, entry)
    assert checked == [(4, after)]  # the fewest rounds, with it among them, kept after it
    # Where it fits only with the fewest rounds of it beside the baseline, it still comes
    # first (1.36x the safe answer at screening): the rounds take what it leaves, and an
    # answer it makes is still measured side by side (issue 56).
    pair = finish._pair_rounds(ledger, baseline, entry)
    assert pair < least
    alone = bench(cost + pair)
    finish.confirm_pending(alone, baseline)
    assert checked[1:] == [(4, 0.0)] and alone.lines == [
        f"trial #4's check (~{cost:.0f} s) fits only before the side-by-side rounds' time: it "
        "comes first, the rounds take what it leaves"
    ]
    # Where it fits alone but the rounds could then not measure it, it is not made: the
    # answer would go unmeasured (a JPEG search's first check took the rounds' whole time).
    unmeasured = bench(cost + pair / 2)
    finish.confirm_pending(unmeasured, baseline)
    assert len(checked) == 2 and unmeasured.lines[0].startswith("no time left to check trial #4")
    short = bench(cost * 0.9)  # not even alone
    finish.confirm_pending(short, baseline)
    assert len(checked) == 2 and short.lines == [
        f"no time left to check trial #4's accuracy (~{cost:.0f} s) beside the side-by-side "
        f"rounds (~{least:.0f} s)"
    ]
    # Once the search made a check, the rounds keep their time (a busy run checked two
    # half-length schedules alone, both unresolved, and left its answer unmeasured).
    storage.file_confirmation(
        study, "other", Confirmation(runs=(0.9,), verdict=Verdict.UNRESOLVED, mean=0.9)
    )
    ledger = Ledger.read(study, settings())
    later = bench(cost + least / 2)
    finish.confirm_pending(later, baseline)
    kept = finish.least_rounds_seconds(ledger, baseline)
    assert len(checked) == 2 and later.lines == [
        f"no time left to check trial #4's accuracy (~{cost:.0f} s) beside the side-by-side "
        f"rounds (~{kept:.0f} s)"
    ]
    # Its own check made and unresolved, the time left holds no more seeds: said as such (an
    # idle README run ended on "no time left to check" a check it had made).
    made = check(ledger.guard, [0.90, 0.87, 0.915], trial=4)
    assert made.verdict is Verdict.UNRESOLVED and made.confirmable
    storage.file_confirmation(study, ledger.numerics_id(entry.config), made)
    ledger = Ledger.read(study, settings())
    seed = evidence.seed_seconds(baseline, entry, made.first_seed + len(made.runs))
    resumed = bench(seed / 2)
    finish.confirm_pending(resumed, baseline)
    kept = finish.least_rounds_seconds(ledger, baseline)
    assert len(checked) == 2 and resumed.lines == [
        f"no time left for another seed of trial #4's check (~{seed:.0f} s) beside the "
        f"side-by-side rounds (~{kept:.0f} s)"
    ]


def test_the_rounds_of_a_safe_config_nearly_as_fast_run_in_the_grace_the_rounds_have(
    monkeypatch,
) -> None:
    """No safe config screened faster than the baseline (its own draw is one, and may run
    fast), so the fewest rounds of one nearly as fast are kept. An idle README run kept 17 s
    for them, a last trial overran its limit by a little, and they were dropped by a test
    stricter than the rounds' own (which may end within the deadline's grace): the answer was
    "keep the baseline's settings", unmeasured side by side."""
    import types

    from test_ledger import BASE, _base, _candidate, _study_with, settings

    from autotune._search import finish
    from autotune._search.baseline import Baseline
    from autotune._search.deadline import Deadline
    from autotune._search.ledger import Ledger

    near = dataclasses.replace(
        _candidate(BASE.replace(channels_last=True), 215.0), measure_seconds=4.0
    )
    study = _study_with([dataclasses.replace(_base(), measure_seconds=4.0), near])
    ledger = Ledger.read(study, settings())
    baseline = Baseline.of(ledger)
    assert baseline is not None
    need = finish.least_rounds_seconds(ledger, baseline)
    assert need > 0
    measured: list[list[int]] = []

    def rounds(bench, base, contenders, *, keep: float, fewest: int = 2) -> finish._Pass:
        measured.append([e.number for e in contenders])
        return finish._Pass(0, contenders, decided=False)

    monkeypatch.setattr(finish, "_rounds", rounds)
    clock = types.SimpleNamespace(now=1000.0)
    deadline = Deadline.of(0.0, 300.0, clock=lambda: clock.now)
    clock.now = 300.0 - 0.9 * need  # a little less than they need; well within the grace
    lines: list[str] = []
    bench = types.SimpleNamespace(ledger=lambda: ledger, deadline=deadline, report=lines.append)
    finish.side_by_side(bench, baseline)
    assert measured == [[0, 1]], lines


def test_a_look_that_overran_its_estimate_prices_the_next_look_by_it() -> None:
    """Seeds are priced from screening throughput; a busy README run's check bought 36 seeds
    expected to fit, they took 150 s, and the side-by-side rounds had no time left. The next
    look is priced by how many times its estimate the last one took, never below it."""
    from autotune._search.evidence import _overran

    assert _overran(150.0, 100.0) == pytest.approx(1.5)
    assert _overran(60.0, 100.0) == 1.0
    assert _overran(10.0, 0.0) == 1.0
    # Priced so, the 36 more seeds no longer fit in the 100 s left: no look is bought.
    assert next_target(12, 48, 3.0 * _overran(20.0, 12 * 1.2), 100.0) is None
