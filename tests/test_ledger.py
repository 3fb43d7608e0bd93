"""The typed ledger: one codec per stored record, and one set of rules for the search and for a
result rebuilt from the storage."""

from __future__ import annotations

import dataclasses
import math
import statistics

import optuna
import pytest
from sim import per_example
from test_guard import check

import autotune
from autotune import TrainingConfig
from autotune._choices import LRSchedule, ScheduleKind
from autotune._guard.confirmation import Confirmation, Verdict
from autotune._knobs import registry
from autotune._search import finish, ranking, storage
from autotune._search.ledger import (
    Ledger,
    could_win_bar,
    fastest_verified,
    promise,
    screening_noise,
    step_draws,
    unproven,
)
from autotune._search.record import BaselineAccuracy, BaselineCheck, Record, Role
from autotune._search.settings import SearchSettings
from autotune._space import load_space
from autotune._speed import stats
from autotune._speed import words as speed_words
from autotune._task import TaskRefs
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyRun, Budget

BASE = TrainingConfig()


def measurement(step_time: float, batch: int = 32) -> Measurement:
    return Measurement(
        batch_size=batch,
        chunk_steps=10,
        chunk_times=(10 * step_time,) * 3,
        data_wait=0.0,
        warmup_steps=3,
        warmup_time=3 * step_time,
        first_batch_time=0.01,
    )


def runs(*metrics: float) -> tuple[AccuracyRun, ...]:
    """Accuracy runs of seeds 0, 1, ... with their per-example outcomes (see sim.per_example)."""
    out = []
    for i, m in enumerate(metrics):
        units = per_example(i, m)
        metric = sum(units) / len(units)
        run = AccuracyRun(seed=i, metric=metric, final_loss=0.5, samples=256, seconds=1.0,
                          units=units)  # fmt: skip
        out.append(run)
    return tuple(out)


def settings(**changes) -> SearchSettings:
    values = {
        "tolerance": 0.01,
        "metric_name": "accuracy",
        "higher_is_better": True,
        "hooks": TaskRefs(),
        "seed": 0,
        "val_fraction": 0.1,
        "stratified": True,
        "space": load_space(
            {"knobs": {"batch_size": [32, 64], "compile_mode": ["none", "default"]}}
        ),
        "baseline": BASE,
        "budget": Budget(),
        "calibrate": False,
        "accuracy_repeats": 3,
        "accuracy_samples": None,
        "n_train": 1000,
        "planned_epochs": 10.0,
        "n_trials": 8,
        "timeout": None,
        "started": 1.0e9,
        "environment": {"device": "cpu", "fingerprint": "aaa"},
    }
    return SearchSettings(**(values | changes))


def test_a_record_round_trips_exactly() -> None:
    record = Record(
        role=Role.CANDIDATE,
        config=BASE.replace(batch_size=64, precision="bf16"),
        measurement=measurement(0.01, 64),
        accuracy=runs(0.9),
        failure=None,
        message=None,
        seconds=3.5,
        measure_seconds=1.25,
        projected_time=12.0,
        reused=False,
        pruned=True,
        fingerprint="abc",
        accuracy_samples=256,
    )
    data = record.to_dict()
    assert data["metric"] == 0.9 and data["role"] == "candidate"  # stored for other tools
    assert Record.from_dict(data) == record
    failed = Record(role=Role.CANDIDATE, config=BASE, failure=FailureReason.OOM, message="oom")
    assert Record.from_dict(failed.to_dict()) == failed


def test_settings_and_confirmations_round_trip_exactly() -> None:
    s = settings(hooks=TaskRefs.from_dict({"metric": "loss", "forward": "m:f"}), trial_timeout=30.0)
    assert SearchSettings.from_dict(s.to_dict()) == s
    c = Confirmation(
        runs=(0.9, 0.91), verdict=Verdict.CONFIRMED, mean=0.905, drop=0.001, resolution=0.004,
        trial=4, at=12.5,
    )  # fmt: skip
    assert Confirmation.from_dict(c.to_dict()) == c and c.to_dict()["passed"] is True


def _study_with(records: list[Record], rounds: list[dict[int, float]] | None = None):
    study = optuna.create_study()
    for record in records:
        trial = study.ask()
        storage.store_record(trial, record)
        study.tell(trial, record.projected_time or 1e9)
    for measured in rounds or []:
        storage.add_round(study, measured)
    return study


def _base(**kw) -> Record:
    return Record(
        role=Role.BASELINE,
        config=BASE,
        measurement=measurement(0.02),
        accuracy=runs(0.90, 0.91, 0.89),
        projected_time=200.0,
        fingerprint="aaa",
        accuracy_samples=256,
        **kw,
    )


def _candidate(cfg: TrainingConfig, projected: float, fingerprint: str = "aaa") -> Record:
    return Record(
        role=Role.CANDIDATE,
        config=cfg,
        measurement=measurement(0.01),
        projected_time=projected,
        fingerprint=fingerprint,
    )


def test_a_trial_from_other_hardware_is_never_feasible_nor_ranked(tmp_path) -> None:
    """Trial 1 is the fastest but was measured on other hardware: the search and a report rebuilt
    from the storage both leave it out (the report used to mark it feasible)."""
    study = _study_with(
        [
            _base(),
            _candidate(BASE.replace(num_workers=1, persistent_workers=True), 50.0, "zzz"),
            _candidate(BASE.replace(num_workers=2, persistent_workers=True), 100.0),
        ]
    )
    s = settings()
    ledger = Ledger.read(study, s)
    assert [ledger.feasible(e) for e in ledger.entries] == [True, False, True]
    assert ledger.best().number == 2
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    optuna.copy_study(
        from_study_name=study.study_name,
        from_storage=study._storage,
        to_storage=url,
        to_study_name="copy",
    )
    storage.publish_settings(optuna.load_study(study_name="copy", storage=url), s)
    stored = autotune.SearchResult.from_study(url, "copy")
    assert [t.feasible for t in stored.trials] == [True, False, True]
    assert stored.winner.number == 2
    assert stored.search["not_ranked"]["trials"] == [1]


def test_a_noise_tie_goes_to_the_simpler_config_in_both_readers(tmp_path) -> None:
    """Compiled (trial 1) measures 2% faster than with loader workers (trial 2), within their
    noise: the simpler wins, in the search's ledger and in the result read back from the
    storage (whose fallback used to be a plain minimum)."""
    compiled = BASE.replace(compile_mode="default")
    eager = BASE.replace(num_workers=1, persistent_workers=True)
    study = _study_with(
        [_base(), _candidate(compiled, 98.0), _candidate(eager, 100.0)],
        rounds=[
            {0: 200.0, 1: 102.0, 2: 99.0},
            {0: 200.0, 1: 97.0, 2: 104.0},
            {0: 200.0, 1: 100.0, 2: 101.0},
            {0: 200.0, 1: 99.0, 2: 100.0},
        ],
    )
    s = settings()
    ledger = Ledger.read(study, s)
    # Measured in four rounds: its projected time is theirs (the screening draw of 98 aside).
    assert ledger.projected(ledger.entries[1]) == 99.5  # the median of 102, 97, 100 and 99
    assert ledger.best().number == 2
    url = f"sqlite:///{tmp_path / 'tie.db'}"
    optuna.copy_study(
        from_study_name=study.study_name,
        from_storage=study._storage,
        to_storage=url,
        to_study_name="tie",
    )
    storage.publish_settings(optuna.load_study(study_name="tie", storage=url), s)
    stored = autotune.SearchResult.from_study(url, "tie")
    assert stored.winner.number == 2
    assert stored.round_speedups == pytest.approx((200 / 99, 200 / 104, 200 / 101, 200 / 100))
    # Side by side: the exponent of the rounds' mean log-ratio.
    assert stored.speedup == pytest.approx(200.0 / (99.0 * 104.0 * 101.0 * 100.0) ** 0.25)


def test_a_change_of_the_numerics_wins_only_once_confirmed() -> None:
    """bf16 passed its screening run (paired with seed 0): it is pending, not an answer. A
    passing confirmation makes it the fast answer; a failing one takes it out."""
    bf16 = BASE.replace(precision="bf16")
    candidate = Record(
        role=Role.CANDIDATE,
        config=bf16,
        measurement=measurement(0.01),
        accuracy=runs(0.905),
        projected_time=100.0,
        fingerprint="aaa",
        accuracy_samples=256,
    )
    study = _study_with([_base(), candidate])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    ledger = Ledger.read(study, settings())
    assert ledger.screened(ledger.entries[1]) is True
    assert not ledger.feasible(ledger.entries[1]) and ledger.best().number == 0
    assert ledger.pending().number == 1
    confirmed = check(ledger.guard, [0.905, 0.91, 0.889])
    assert confirmed.passed
    storage.file_confirmation(study, autotune._knobs.registry.numerics_id(bf16), confirmed)
    ledger = Ledger.read(study, settings())
    assert ledger.best_fast().number == 1 and ledger.best().number == 1
    assert ledger.best_safe().number == 0 and ledger.pending() is None
    rejected = Confirmation(runs=(0.905, 0.80, 0.81), verdict=Verdict.REJECTED, mean=0.838)
    storage.file_confirmation(study, autotune._knobs.registry.numerics_id(bf16), rejected)
    ledger = Ledger.read(study, settings())
    assert not ledger.feasible(ledger.entries[1]) and ledger.best().number == 0
    assert ledger.trial_records()[1].confirmed is False


def test_a_change_screened_as_fast_as_the_safe_answer_within_the_noise_is_still_checked() -> None:
    """A busy run's 80% schedule screened 3.67x beside the safe answer's 3.74x (one draw each),
    passed screening, and was never checked: its check is pending, as its screening said it
    could win. The safe answer's figure is one draw, the least of several: a change slower
    within this search's screening noise may still win (before any steps were drawn twice,
    25%: a busy README run's safe answer screened 2.58x, 1.81x side by side); one slower
    beyond it could not. Where the same steps were drawn twice (100 s and 104 s), that
    spread is the noise."""
    safe = _candidate(BASE.replace(channels_last=True), 100.0)
    shorter = dataclasses.replace(
        _candidate(BASE.replace(batch_size=128), 102.0), accuracy=runs(0.905), accuracy_samples=256
    )

    def pending(*records: Record) -> int | None:
        study = _study_with([_base(), *records])
        storage.write_baseline_accuracy(
            study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
        )
        ledger = Ledger.read(study, settings())
        assert ledger.best().number == 1
        found = ledger.pending()
        return None if found is None else found.number

    assert pending(safe, shorter) == 2
    assert pending(safe, dataclasses.replace(shorter, projected_time=124.0)) == 2
    assert pending(safe, dataclasses.replace(shorter, projected_time=126.0)) is None
    # The safe answer's steps drawn again by a change of its learning rate only: 100 s, 104 s.
    again = _candidate(
        BASE.replace(channels_last=True, lr_schedule=LRSchedule(peak_lr=2e-3)), 104.0
    )
    assert pending(safe, again, dataclasses.replace(shorter, projected_time=105.0)) == 3
    assert pending(safe, again, dataclasses.replace(shorter, projected_time=107.0)) is None


def test_a_change_is_checked_by_every_draw_of_its_steps_not_one_high_draw() -> None:
    """An idle README run screened a fused AdamW once at 1.42x (1.15x side by side) and ruled
    out every change of the numerics below it, among them an 80% schedule of the fused steps
    themselves (its own draw 1.19x). Every draw of the same steps, scaled to each one's share
    of the run, is one figure: the fused steps' four draws put the safe config at 0.95x, and
    a fifth fewer of them at 1.19x is a check that could win. The whole run of those steps,
    slower than the baseline by them, is not."""
    fused = BASE.replace(optimizer_impl="fused")
    sched = LRSchedule(kind=ScheduleKind.ONE_CYCLE, peak_lr=2e-3)
    shorter = dataclasses.replace(
        _candidate(fused.replace(lr_schedule=sched, train_fraction=0.8), 168.0),
        accuracy=runs(0.905),
        accuracy_samples=256,
    )
    records = [
        _base(),
        _candidate(fused, 140.0),  # one high draw: 1.43x
        _candidate(fused.replace(lr_schedule=LRSchedule(peak_lr=1.3e-3)), 210.0),
        _candidate(fused.replace(lr_schedule=LRSchedule(kind=ScheduleKind.WSD)), 212.0),
        shorter,
    ]
    study = _study_with(records)
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    ledger = Ledger.read(study, settings())
    assert ledger.best().number == 1  # ranked by its own draws, the safe config still leads
    assert step_draws(ledger, shorter.config) == pytest.approx([112.0, 168.0, 169.6, 168.0])
    assert promise(ledger, ledger.entries[1]) == pytest.approx(210.0)
    assert fastest_verified(ledger)[0].number == 0  # the baseline, 200 s
    assert [e.number for e in ledger.open_checks()] == [4]
    longer = dataclasses.replace(shorter, config=fused.replace(lr_schedule=sched))
    another = _candidate(fused.replace(lr_schedule=LRSchedule(peak_lr=0.7e-3)), 215.0)
    study = _study_with([*records[:4], another, dataclasses.replace(longer, projected_time=150.0)])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    again = Ledger.read(study, settings())
    assert screening_noise(again) == ranking.MAX_NOISE  # the fused steps: 140-215 s
    assert could_win_bar(again)[1] == pytest.approx(250.0)  # the baseline's 200 s, plus 25%
    # 150 s is one draw of steps drawn 140-215 s: it is checked as their median, 210 s.
    assert promise(again, again.entries[5]) == pytest.approx(210.0)


def test_the_pareto_front_keeps_what_nothing_beats_on_both() -> None:
    """Safe configs sit at the baseline's metric; bf16 is faster and as good; batch 64 is
    faster still but worse; trial 3 is slower and no better than the baseline's model."""
    study = _study_with(
        [
            _base(),
            _candidate(BASE.replace(precision="bf16"), 100.0),
            _candidate(BASE.replace(batch_size=64), 50.0),
            _candidate(BASE.replace(num_workers=1, persistent_workers=True), 250.0),
        ]
    )
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256)
    )
    ledger = Ledger.read(study, settings())
    metric = {1: 0.92, 2: 0.80}
    entries = [
        dataclasses.replace(
            e, record=dataclasses.replace(e.record, accuracy=runs(metric[e.number]))
        )
        if e.number in metric
        else e
        for e in ledger.entries
    ]
    ledger = dataclasses.replace(ledger, entries=tuple(entries))
    assert [e.number for e in ledger.pareto()] == [2, 1]


def test_an_empty_study_has_no_baseline_and_no_winner() -> None:
    ledger = Ledger.read(optuna.create_study(), settings())
    assert ledger.baseline is None and ledger.guard is None and ledger.best() is None


def test_ranking_is_pure_median_noise_and_simpler_wins() -> None:
    from autotune._search import ranking

    assert ranking.median_time([10.0, 12.0, 11.0]) == 11.0
    assert ranking.relative_noise([10.0]) == ranking.TIE  # one measurement: the floor
    assert ranking.relative_noise([10.0, 11.0]) == pytest.approx(1 / 10.5)
    assert ranking.relative_noise([10.0, 30.0]) == ranking.MAX_NOISE  # an outlier is capped
    items = {"compiled": (9.8, 0.05, (1,)), "eager": (10.0, 0.03, (0,)), "slow": (20.0, 0.03, (0,))}

    def pick(names):
        return ranking.best(
            names,
            time=lambda n: items[n][0],
            noise=lambda n: items[n][1],
            complexity=lambda n: items[n][2],
        )

    assert pick(["compiled", "eager", "slow"]) == "eager"  # within 5%: the simpler
    items["compiled"] = (9.0, 0.05, (1,))
    assert pick(["compiled", "eager", "slow"]) == "compiled"  # 10% faster: beyond the noise
    assert pick([]) is None


def test_a_config_drawn_twice_ranks_by_both_draws_not_its_luckier_one() -> None:
    """channels_last screened 100 (a lucky draw) and, drawn again, 160; one loader worker
    screened 110 once. channels_last's figure is the median of its draws (130) for both of its
    trials, and one worker ranks first: before, the twin that kept 100 led. Nor does its own
    spread (0.25) make channels_last, the simpler config, as fast as the worker: the fastest's
    noise decides a tie (before, the wider of the two: 130 is within 25% of 110)."""
    cl = BASE.replace(channels_last=True)
    one = BASE.replace(num_workers=1, persistent_workers=True)
    assert autotune._knobs.registry.complexity(cl, BASE) < autotune._knobs.registry.complexity(
        one, BASE
    )
    study = _study_with(
        [_base(), _candidate(cl, 100.0), _candidate(one, 110.0), _candidate(cl, 160.0)]
    )
    ledger = Ledger.read(study, settings())
    first, again = ledger.entries[1], ledger.entries[3]
    assert ledger.projected(first) == ledger.projected(again) == 130.0
    assert ledger.noise(first) == ranking.MAX_NOISE
    best = ledger.best()
    assert best is not None and best.config == one


def test_a_config_remeasured_side_by_side_is_remeasured_for_its_twins() -> None:
    """channels_last measured 140 once (trial 1) and a later proposal of the same config
    reused that measurement (trial 2). The side-by-side rounds measured trial 1 at 160 and 165
    against the baseline's 200: the twin must not keep the lucky 140 and win with a speedup
    'from the trials' measurements' (the CNN benchmark at 60 s reported 1.48x that way)."""
    cl = BASE.replace(channels_last=True)
    twin = dataclasses.replace(_candidate(cl, 140.0), reused=True)
    study = _study_with(
        [_base(), _candidate(cl, 140.0), twin],
        rounds=[
            {0: 200.0, 1: 160.0},
            {0: 200.0, 1: 165.0},
            {0: 200.0, 1: 162.0},
            {0: 200.0, 1: 158.0},
        ],
    )
    ledger = Ledger.read(study, settings())
    assert ledger.remeasured(ledger.entries[2]) == (160.0, 165.0, 162.0, 158.0)
    assert ledger.projected(ledger.entries[1]) == ledger.projected(ledger.entries[2]) == 161.0
    best = ledger.best()
    assert best is not None and best.config == cl
    assert ledger.round_speedups(best) == pytest.approx(
        [200 / 160, 200 / 165, 200 / 162, 200 / 158]
    )


def test_between_equals_the_answer_is_one_measured_side_by_side() -> None:
    """The CNN on a loaded machine: trial 1 (workers=1) led at 50 s and was measured side by
    side at 60-66 s (noisy under load); trial 2 (workers=0, simpler) measured 53 s once. Within
    the noise, the answer is trial 1, whose speedup was measured side by side, not trial 2
    (simpler, but its one figure may have been a lucky draw, and the result then said "NOT
    measured side by side" although rounds had run)."""
    one = BASE.replace(num_workers=1, persistent_workers=True, channels_last=True)
    two = BASE.replace(channels_last=True)
    study = _study_with(
        [_base(), _candidate(one, 50.0), _candidate(two, 53.0)],
        rounds=[{0: 200.0, 1: 60.0}, {0: 210.0, 1: 66.0}, {0: 205.0, 1: 63.0}, {0: 200.0, 1: 61.0}],
    )
    ledger = Ledger.read(study, settings())
    best = ledger.best()
    assert best is not None and best.number == 1
    assert ledger.round_speedups(best) == pytest.approx([200 / 60, 210 / 66, 205 / 63, 200 / 61])
    # Beyond the noise, a faster config the rounds did not measure is not the answer either
    # (issue 56: an unmeasured config answered at 1.07x read 0.87x in a plain loop): it is
    # what the rounds' second pass measures beside the answer.
    study = _study_with(
        [_base(), _candidate(one, 50.0), _candidate(two, 30.0)],
        rounds=[{0: 200.0, 1: 60.0}, {0: 210.0, 1: 66.0}, {0: 205.0, 1: 63.0}, {0: 200.0, 1: 61.0}],
    )
    ledger = Ledger.read(study, settings())
    best = ledger.best()
    assert best is not None and best.number == 1
    assert [e.number for e in finish._challengers(ledger)] == [2]


def test_a_config_the_rounds_measured_slower_than_the_baseline_is_never_the_answer() -> None:
    """The Hugging Face benchmark at 180 s: `optim="adamw_torch"` measured once 9% faster than
    the baseline's fused default, then 0.92-0.99x in three paired rounds; the unpaired medians
    (the baseline's first measurement was slow) still ranked it first, and the result said
    "0.96x faster than the baseline". Paired rounds outweigh one draw: the baseline stays."""
    plain = BASE.replace(optimizer_impl="default")
    base_cfg = BASE.replace(optimizer_impl="fused")
    study = _study_with(
        [
            dataclasses.replace(_base(), config=base_cfg, projected_time=240.0),
            _candidate(plain, 182.0),
        ],
        rounds=[{0: 190.0, 1: 200.0}, {0: 188.0, 1: 192.0}, {0: 185.0, 1: 201.0}],
    )
    ledger = Ledger.read(study, settings(baseline=base_cfg))
    assert [round(s, 3) for s in ledger.round_speedups(ledger.entries[1])] == [0.95, 0.979, 0.92]
    assert ledger.slower_side_by_side(ledger.entries[1])
    best = ledger.best()
    assert best is not None and best.number == 0
    # Faster side by side beyond the noise, it stays the answer.
    study = _study_with(
        [
            dataclasses.replace(_base(), config=base_cfg, projected_time=240.0),
            _candidate(plain, 182.0),
        ],
        rounds=[
            {0: 190.0, 1: 180.0},
            {0: 188.0, 1: 170.0},
            {0: 192.0, 1: 176.0},
            {0: 186.0, 1: 171.0},
        ],
    )
    best = Ledger.read(study, settings(baseline=base_cfg)).best()
    assert best is not None and best.number == 1


def test_baseline_seeds_added_by_two_workers_at_once_are_both_kept() -> None:
    """Two workers extend the baseline's runs at the same time (seeds 3-4 and 5): each files
    its own seeds, so neither overwrites the other's (the whole record used to be rewritten,
    last writer wins, and a candidate seed then paired with the baseline's mean)."""
    study = _study_with([_base()])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    more = runs(0.90, 0.91, 0.89, 0.92, 0.88, 0.905)
    storage.add_baseline_runs(study, more[5:])  # the second worker's, filed first
    storage.add_baseline_runs(study, more[3:5])
    accuracy = storage.read_baseline_accuracy(study)
    assert accuracy is not None
    assert [r.seed for r in accuracy.runs] == [0, 1, 2, 3, 4, 5]
    assert [r.metric for r in accuracy.runs] == [r.metric for r in more]
    assert accuracy.seconds == pytest.approx(3.0)
    guard = Ledger.read(study, settings()).guard
    assert guard is not None and guard.repeats == 6 and guard.baseline_units[5] == more[5].units


def test_each_check_of_a_study_spends_its_own_share_of_the_answers_error_rate() -> None:
    """Two checks filed under one study: re-judged from their runs, the first opened is the
    study's check 1 and the second its check 2 (a stricter level), whatever they stored."""
    study = _study_with([_base()])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    guard = Ledger.read(study, settings()).guard
    first = dataclasses.replace(check(guard, [0.897, 0.904, 0.889], trial=1), order=1)
    second = dataclasses.replace(check(guard, [0.897, 0.904, 0.889], trial=2), order=1)
    storage.file_confirmation(study, "a", first)
    storage.file_confirmation(study, "b", second)
    ledger = Ledger.read(study, settings())
    assert [ledger.confirmations[k].order for k in ("a", "b")] == [1, 2]
    assert ledger.confirmations["a"].bound < ledger.confirmations["b"].bound


def test_later_baseline_seeds_of_another_horizon_are_not_paired() -> None:
    """Seeds bought at one horizon, then the baseline's runs measured again at a longer one
    (a baseline that had not learned): the earlier seeds are not its runs at the new one."""
    study = _study_with([_base()])
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    storage.add_baseline_runs(study, runs(0.9, 0.9, 0.9, 0.92)[3:])
    longer = tuple(dataclasses.replace(r, samples=512) for r in runs(0.95, 0.96, 0.94))
    storage.write_baseline_accuracy(
        study, BaselineAccuracy(runs=longer, samples=512, initial_metric=0.3)
    )
    accuracy = storage.read_baseline_accuracy(study)
    assert accuracy is not None and len(accuracy.runs) == 3


def test_a_safe_win_measured_side_by_side_is_never_lost_to_the_baselines_spread() -> None:
    """The README's CNN on a fresh clone: the baseline's screening measurement had a slow first
    window (300 s projected; 200, 205 and 195 in the rounds), so the range of its measurements
    was capped at 25%, and channels_last, 1.18x faster than it in each of three paired rounds,
    fell "within the noise" of the baseline, which won the tie as the simpler, settled config:
    the search answered "keep the baseline". Paired rounds decide: channels_last is the answer."""
    cl = BASE.replace(channels_last=True)
    study = _study_with(
        [dataclasses.replace(_base(), projected_time=300.0), _candidate(cl, 180.0)],
        rounds=[{0: 200.0, 1: 170.0}, {0: 205.0, 1: 172.0}, {0: 195.0, 1: 165.0}],
    )
    ledger = Ledger.read(study, settings())
    best = ledger.best()
    assert best is not None and best.number == 1
    logs = [math.log(200 / 170), math.log(205 / 172), math.log(195 / 165)]
    assert ledger.side_speedup(best) == pytest.approx(math.exp(statistics.fmean(logs)))
    # Within the tie side by side (2% faster), the baseline stays: a tie goes to the simpler.
    study = _study_with(
        [dataclasses.replace(_base(), projected_time=300.0), _candidate(cl, 180.0)],
        rounds=[{0: 200.0, 1: 196.0}, {0: 205.0, 1: 201.0}, {0: 195.0, 1: 191.0}],
    )
    best = Ledger.read(study, settings()).best()
    assert best is not None and best.number == 0


def test_an_unmeasured_config_is_compared_with_the_rounds_leader_by_screening() -> None:
    """Workers=2 screened at 1.67x and measured 1.10x side by side; channels_last (1.22x in
    screening, never in a round) did not measure as fast as workers=2 did in the same kind of
    draw, so workers=2 stays the answer, with its measured figure; a config whose screening
    beats the leader's screening beyond the tie is what the rounds' second pass measures: it
    is not the answer before they do (issue 56)."""
    workers = BASE.replace(num_workers=2, persistent_workers=True)
    cl = BASE.replace(channels_last=True)
    records = [_base(), _candidate(workers, 120.0), _candidate(cl, 164.0)]
    rounds = [
        {0: 200.0, 1: 182.0},
        {0: 201.0, 1: 180.0},
        {0: 199.0, 1: 185.0},
        {0: 200.0, 1: 181.0},
    ]
    ledger = Ledger.read(_study_with(records, rounds), settings())
    assert ledger.best().number == 1
    records[2] = _candidate(cl, 100.0)
    ledger = Ledger.read(_study_with(records, rounds), settings())
    assert ledger.best().number == 1
    assert [e.number for e in finish._challengers(ledger)] == [2]


def test_a_round_keeps_each_measurements_throughput_and_older_rounds_still_read() -> None:
    study = optuna.create_study()
    storage.add_round(study, {0: 200.0, 1: 160.0})  # filed before throughputs were kept
    storage.add_round(study, {0: 198.0, 1: 150.0}, {0: 1000.0, 1: 1320.0})
    assert storage.read_rounds(study) == [{0: 200.0, 1: 160.0}, {0: 198.0, 1: 150.0}]
    assert storage.read_round_throughputs(study) == [{}, {0: 1000.0, 1: 1320.0}]


def test_configs_measured_in_the_same_rounds_rank_by_those_rounds() -> None:
    """channels_last (A) was measured in twenty rounds, eighteen of them a second pass in which
    it ran 1.50x; channels_last + a loader worker (B) only in the first two, 11% faster than A
    in each. Their figures against the baseline come from different rounds (A 1.50x, B 1.48x):
    the rounds both were in decide (by the noise of all twenty, pooled), and B is the
    answer."""
    a = BASE.replace(channels_last=True)
    b = BASE.replace(channels_last=True, num_workers=1, persistent_workers=True)
    rounds = [
        {0: 200.0, 1: 150.0, 2: 135.0},
        {0: 202.0, 1: 151.0, 2: 137.0},
        *({0: 200.0 + (i % 3), 1: 133.0 - (i % 2)} for i in range(18)),
    ]
    study = _study_with([_base(), _candidate(a, 150.0), _candidate(b, 140.0)], rounds=rounds)
    ledger = Ledger.read(study, settings())
    ratios = [r[0] / r[1] for r in rounds]
    assert ledger.side_speedup(ledger.entries[1]) == pytest.approx(
        statistics.geometric_mean(ratios)
    )
    assert ledger.side_speedup(ledger.entries[2]) == pytest.approx((200 / 135 * 202 / 137) ** 0.5)
    best = ledger.best()
    assert best is not None and best.number == 2


def test_the_tables_baseline_figures_come_from_the_headlines_rounds() -> None:
    """The winner (#1) was measured beside the baseline in four rounds, 1.30x in each; a second
    pass measured a challenger (#2) beside the baseline in three more, in a fast window. The
    table's baseline throughput and projected time come from the winner's four rounds, so
    that its throughputs divide to the headline's 1.30x (over all seven rounds the
    baseline's median throughput is 1,250, and the table said 1.04x beside a 1.30x headline);
    each config's speedup is the median of its own paired rounds (the challenger's 1.04x, not
    1.45x against the baseline's figures from the winner's rounds)."""
    from autotune._result.result import SearchResult

    cl = BASE.replace(channels_last=True)
    workers = BASE.replace(num_workers=1, persistent_workers=True)
    study = _study_with([_base(), _candidate(cl, 154.0), _candidate(workers, 190.0)])
    samples = 200_000.0  # projected time = samples / throughput
    for base, rates in [(1000.0, {1: 1300.0}), (1000.0, {1: 1300.0}), (1100.0, {1: 1430.0}),
                        (1000.0, {1: 1300.0}), (1400.0, {2: 1450.0}), (1400.0, {2: 1450.0}),
                        (1400.0, {2: 1450.0})]:  # fmt: skip
        rates = {0: base, **rates}
        storage.add_round(study, {n: samples / r for n, r in rates.items()}, rates)
    ledger = Ledger.read(study, settings())
    result = SearchResult.from_ledger(
        ledger, settings(), study_name="s", storage=None, seconds=60.0, interrupted=False,
        memory=None,
    )  # fmt: skip
    data = result.to_dict()
    m, b = data["metrics"], data["baseline"]["metrics"]
    assert result.winner.number == 1 and data["speedup"] == pytest.approx(1.3)
    assert b["throughput"] == 1000.0 and m["throughput"] == 1300.0
    assert b["projected_training_time"] == pytest.approx(200.0)
    assert b["measured_as"] == m["measured_as"] == "side by side over 4 rounds"
    rows = next(x for x in result.summary(detail=True).splitlines() if "rows: " in x)
    assert "side by side over 4 rounds" in rows and "the baseline's" not in rows
    # The study's own record of the baseline still counts every round it was measured in.
    assert ledger.trial_record(ledger.entries[0]).side_rounds == 7
    challenger = next(t for t in result.trials if t.number == 2)
    assert result.speedup_of(challenger) == pytest.approx(1450 / 1400)
    assert result.speedup_of(result.winner) == pytest.approx(data["speedup"])


def test_accuracy_runs_train_with_the_safe_answers_loader_and_memory_knobs() -> None:
    """Before the baseline's accuracy runs, the settings they (and both arms of every pair)
    train with are the baseline's with the fastest safe config's shared knobs, never its
    cuDNN benchmark or compile, at that config's throughput; once filed with the runs, a later
    look, a worker and a resumed search read the same, and a run's expected seconds follow
    that throughput. A study filed before they were kept pairs at the baseline's own."""
    from autotune._search.baseline import SLACK, Baseline, pair_settings

    safe = BASE.replace(
        num_workers=1, persistent_workers=True, channels_last=True, cudnn_benchmark=True
    )
    study = _study_with([_base(), _candidate(safe, 100.0)])
    ledger = Ledger.read(study, settings())
    baseline = Baseline.of(ledger)
    assert baseline is not None and ledger.best_safe().number == 1
    pair, throughput = pair_settings(ledger, baseline)
    assert pair == BASE.replace(channels_last=True)  # not its workers, nor cuDNN benchmark
    # Not measured itself: the baseline's throughput, not the safe answer's (3,200).
    assert throughput == pytest.approx(1600.0) == baseline.throughput
    alone = dataclasses.replace(
        _candidate(pair, 110.0), measurement=measurement(0.0125)
    )  # 2,560 samples/s
    study = _study_with([_base(), _candidate(safe, 100.0), alone])
    ledger = Ledger.read(study, settings())
    assert ledger.best_safe().number == 1
    pair, throughput = pair_settings(ledger, Baseline.of(ledger))
    assert pair == BASE.replace(channels_last=True)
    assert throughput == pytest.approx(2560.0)
    throughput = 3200.0  # as if it ran as fast as the safe answer, for the pricing below

    storage.write_baseline_accuracy(study, BaselineAccuracy(runs=runs(0.9, 0.91), samples=256))
    old = Baseline.of(Ledger.read(study, settings()))
    assert old is not None and old.pair_config == BASE and old.pair_throughput == 1600.0
    bf16 = BASE.replace(precision="bf16")
    assert old.check_of(bf16, (1,)).config == bf16

    storage.write_baseline_accuracy(
        study,
        BaselineAccuracy(runs=runs(0.9, 0.91), samples=256, config=pair, throughput=throughput),
    )
    ledger = Ledger.read(study, settings())
    filed = Baseline.of(ledger)
    assert filed is not None and filed.pair_config == pair
    assert pair_settings(ledger, filed) == (pair, pytest.approx(3200.0))
    assert filed.check_of(bf16, (1,)).config == pair.replace(precision="bf16")
    # A candidate measured at the pair's throughput trains its arm as fast as the baseline's
    # runs did (1 s each): priced at the pair's throughput, not the baseline's (0.5 s).
    assert filed.run_seconds(ledger.entries[1].record) == pytest.approx(SLACK * 1.0)
    assert old.run_seconds(ledger.entries[1].record) == pytest.approx(SLACK * 0.5)


def test_verify_and_the_search_compute_one_speedup_from_the_same_round_draws() -> None:
    """Four rounds: verify's figure was the mean of the two middle ratios (statistics.median),
    the search's the lower middle one, so on the same draws the two printed different
    speed-ups. One function computes both now (the exponent of the mean log-ratio)."""
    from autotune._verify import VerifyReport

    s = settings()
    winner = BASE.replace(batch_size=64)
    step_times = [(0.020, 0.0133), (0.021, 0.0131), (0.019, 0.0119), (0.020, 0.0125)]
    base_ms = [measurement(b) for b, _ in step_times]
    win_ms = [measurement(w, 64) for _, w in step_times]
    rounds = [
        {0: s.projected_time(b, BASE), 1: s.projected_time(w, winner)}
        for b, w in zip(base_ms, win_ms, strict=True)
    ]
    ledger = Ledger.read(_study_with([_base(), _candidate(winner, 100.0)], rounds), s)
    report = VerifyReport(
        winner=winner, baseline=BASE, device="cpu", baseline_measurements=tuple(base_ms),
        winner_measurements=tuple(win_ms), recorded_speedup=None,
        recorded_throughput_ratio=None, planned_samples=round(s.planned_epochs * s.n_train),
        planned_epochs=s.planned_epochs, environment_warnings=(),
    )  # fmt: skip
    search = ledger.side_speedup(ledger.entries[1])
    assert search is not None and report.speedups == pytest.approx(
        ledger.round_speedups(ledger.entries[1])
    )
    assert report.median_speedup == search
    logs = [math.log(x) for x in report.speedups]
    assert search == pytest.approx(math.exp(statistics.fmean(logs)))


def _decisions(ledger: Ledger) -> tuple[object, ...]:
    """What the search decides from a snapshot: the answer, the pending check, every trial's
    verdicts and figures."""
    best, pending = ledger.best(), ledger.pending(unresolved=True)
    return (
        best.number if best else None,
        pending.number if pending else None,
        ledger.trial_records(),
        ledger.confirmations,
        ledger.guard,
        ledger.rounds,
        ledger.baseline_checks,
    )


def test_a_read_after_another_process_wrote_reads_what_changed_and_decides_the_same(
    tmp_path,
) -> None:
    """The search keeps its last read and asks the study only what changed since: another
    process's finished trial, a confirmation it filed and a baseline seed it bought are all
    seen, and every decision equals a fresh read's; where nothing changed, the same snapshot
    (and what it computed) comes back."""
    url = f"sqlite:///{tmp_path / 'two.db'}"
    s = settings()
    bf16 = BASE.replace(precision="bf16")
    mine = optuna.create_study(storage=url, study_name="two")
    theirs = optuna.load_study(storage=url, study_name="two")  # another worker's handle
    for record in [_base(), _candidate(BASE.replace(channels_last=True), 120.0)]:
        trial = mine.ask()
        storage.store_record(trial, record)
        mine.tell(trial, record.projected_time)
    storage.write_baseline_accuracy(
        mine, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
    )
    first = Ledger.read(mine, s)
    assert Ledger.read(mine, s, previous=first) is first  # nothing changed
    assert first.best().number == 1 and first.pending() is None

    trial = theirs.ask()  # their candidate: bf16, faster, passed screening
    storage.store_record(
        trial,
        dataclasses.replace(_candidate(bf16, 100.0), accuracy=runs(0.905), accuracy_samples=256),
    )
    theirs.tell(trial, 100.0)
    second = Ledger.read(mine, s, previous=first)
    assert second is not first and second.pending().number == 2
    assert _decisions(second) == _decisions(Ledger.read(mine, s))

    storage.file_confirmation(  # their check of it, and a seed of the baseline's they bought
        theirs, autotune._knobs.registry.numerics_id(bf16),
        check(second.guard, [0.905, 0.91, 0.889]),
    )  # fmt: skip
    storage.add_baseline_runs(theirs, runs(0.90, 0.91, 0.89, 0.90)[3:])
    storage.add_round(theirs, {0: 200.0, 1: 121.0, 2: 99.0})
    third = Ledger.read(mine, s, previous=second)
    assert len(third.baseline_accuracy.runs) == 4 and third.guard != second.guard
    assert third.best().number == 2 and third.pending() is None
    assert _decisions(third) == _decisions(Ledger.read(mine, s))
    # Other settings judge the same evidence anew (a tolerance the study republished).
    looser = settings(tolerance=0.05)
    assert Ledger.read(mine, looser, previous=third).guard == Ledger.read(mine, looser).guard


def test_another_process_s_attributes_are_read_within_a_second(tmp_path, monkeypatch) -> None:
    """A question asked right after a read reuses its study attributes (decoding every
    check's per-example sums took 19 ms a read at 157 checks, and the search asks many a
    second); another process's write (not this one's, which is counted) is seen once
    storage.ATTRS_FRESH has passed, or at once when a trial finished."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    s = settings()
    mine = optuna.create_study(storage=url, study_name="fresh")
    theirs = optuna.load_study(storage=url, study_name="fresh")
    trial = mine.ask()
    storage.store_record(trial, _base())
    mine.tell(trial, 200.0)
    clock = [100.0]
    monkeypatch.setattr("autotune._search.ledger.time.monotonic", lambda: clock[0])
    first = Ledger.read(mine, s)
    check_ = BaselineCheck(at=5.0, projected_time=180.0, throughput=1000.0)
    theirs.set_user_attr(f"{storage.BASELINE_CHECK}5.0:other", check_.to_dict())  # elsewhere
    clock[0] += 0.5
    assert Ledger.read(mine, s, previous=first) is first
    clock[0] += storage.ATTRS_FRESH
    later = Ledger.read(mine, s, previous=first)
    assert later.baseline_checks == (check_,)
    storage.add_note(mine, "a note of this process's")  # its own write: read at once
    assert Ledger.read(mine, s, previous=later).notes == ("a note of this process's",)


def test_verify_says_whether_its_interval_agrees_with_the_searchs() -> None:
    """verify's rounds measured the winner at about 3.2x (its batch of 64 takes half the
    steps): against a search that said 3.20x (95% 3.10-3.30x) it agrees; against one that said
    4.20x (4.00-4.40x) it is slower here, and says so with both intervals; with one round it
    has no interval and says nothing."""
    from autotune._verify import VerifyReport

    s = settings()
    winner = BASE.replace(batch_size=64)
    pairs = [(0.020, 0.0124), (0.021, 0.0133), (0.019, 0.0118), (0.020, 0.0126), (0.020, 0.0125)]

    def report(interval: tuple[float, float] | None, rounds: int = 5) -> VerifyReport:
        return VerifyReport(
            winner=winner, baseline=BASE, device="cpu",
            baseline_measurements=tuple(measurement(b) for b, _ in pairs[:rounds]),
            winner_measurements=tuple(measurement(w, 64) for _, w in pairs[:rounds]),
            recorded_speedup=None if interval is None else sum(interval) / 2,
            recorded_throughput_ratio=None, planned_samples=round(s.planned_epochs * s.n_train),
            planned_epochs=s.planned_epochs, environment_warnings=(), recorded_interval=interval,
        )  # fmt: skip

    here = report((3.1, 3.3))
    assert here.interval is not None and 3.1 < here.interval.estimate < 3.3
    assert here.agreement == "agrees" and here.faster_here
    assert "the search's: 3.20x (95% interval 3.10-3.30x): agrees" in here.summary()
    slower = report((4.0, 4.4))
    assert slower.agreement == "slower here"
    assert any(w.startswith("slower here than at search time: 3.2") for w in slower.warnings)
    assert report((3.1, 3.3), rounds=1).agreement is None  # one round: no interval
    assert report(None).agreement is None  # a result written before intervals


def test_a_simpler_runner_up_not_shown_faster_than_the_baseline_is_said_so() -> None:
    """channels_last (simpler) ran 1.20x in two rounds, too few to clear the baseline beyond
    the noise; channels_last + a larger batch ran 1.57x in six, not separated from it in the
    two both were in: the more complex is the answer, and the sentence says why, not that
    the simpler was answered."""
    simple = BASE.replace(channels_last=True)
    more = BASE.replace(channels_last=True, batch_size=128)
    rounds = [
        {BASE: 200.0, simple: 140.0, more: 130.0},
        {BASE: 180.0, simple: 180.0, more: 125.0},
        {BASE: 210.0, more: 120.0},
        {BASE: 190.0, more: 135.0},
        {BASE: 200.0, more: 110.0},
        {BASE: 195.0, more: 130.0},
    ]
    decided = stats.race(rounds, BASE, [BASE, simple, more], lambda c: registry.complexity(c, BASE))
    assert decided is not None and decided.answer == more
    assert decided.decision is stats.Decision.NOT_SEPARATED
    assert not decided.beats_baseline(simple) and not decided.separated(simple)
    assert unproven(decided, simple, more)
    assert not unproven(decided, BASE, more)
    line = speed_words.decision(decided.decision, "trial #6", unproven=True)
    assert line == (
        "not separated from trial #6, which was not shown faster than your settings beyond "
        "the noise"
    )
