"""The stage policy, the guesses and the deadline, tested alone: no search runs here."""

from __future__ import annotations

import dataclasses
import types

from test_ledger import _base, _candidate, _study_with, measurement, settings

from autotune import Budget, TrainingConfig, load_space
from autotune._search.bench import Bench
from autotune._search.deadline import Deadline
from autotune._search.ledger import Ledger
from autotune._search.policy import Stage, StagePolicy, fast_guesses, late_variants
from autotune._search.record import Record
from autotune._search.state import LoopState
from autotune._trial.outcome import TrialOutcome

BASE = TrainingConfig()
SPACE = load_space(
    {
        "knobs": {
            "batch_size": [32, 64, 128],
            "num_workers": [0, 1, 2],
            "precision": ["fp32", "bf16"],
            "channels_last": [False, True],
            "compile_mode": ["none", "default"],
            "compile_dynamic": [False, True],
            "checkpointing": [0, 1],
            "lr_schedule": ["constant", "cosine"],
        }
    }
)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ledger(*records: Record, accuracy: bool = False):
    study = _study_with(list(records))
    if accuracy:
        from test_ledger import runs

        from autotune._search import storage
        from autotune._search.record import BaselineAccuracy

        storage.write_baseline_accuracy(
            study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
        )
    return Ledger.read(study, settings(space=SPACE))


def _configs(step) -> list[TrainingConfig]:
    return [SPACE.build(p, BASE) for p in step.enqueue]


def test_the_safe_stage_tries_each_knob_on_the_baseline_then_on_the_best_safe_config() -> None:
    policy = StagePolicy(SPACE, BASE, guided=True, cpus=2)
    step = policy.next(_ledger(_base()), used=0.0, checks=None)
    assert step.stage is Stage.SAFE
    assert [c.num_workers for c in _configs(step)] == [1, 2]
    # Should the sampler propose one, the numerics and the late knobs stay the baseline's.
    assert step.pinned == {
        "batch_size": 32,
        "precision": "fp32",
        "lr_schedule": "constant",
        "compile_mode": "none",
        "checkpointing": 0,
    }
    # Workers measured, two workers the faster: channels_last next, on the baseline first (a
    # first win within the noise must not become the base of every later knob), then on top
    # of the best safe config.
    two = BASE.replace(num_workers=2, persistent_workers=True)
    measured = [
        _base(),
        _candidate(BASE.replace(num_workers=1, persistent_workers=True), 190.0),
        _candidate(two, 150.0),
    ]
    step = policy.next(_ledger(*measured), used=0.1, checks=None)
    assert step.stage is Stage.SAFE and _configs(step) == [BASE.replace(channels_last=True)]
    cl = BASE.replace(channels_last=True)
    measured.append(_candidate(cl, 170.0))
    # Before building on two workers (one draw), it is drawn a second time: channels_last is
    # within the screening noise of it.
    step = policy.next(_ledger(*measured), used=0.1, checks=None)
    assert step.stage is Stage.SAFE and step.again and _configs(step) == [two]
    measured.append(_candidate(two, 160.0))
    # Then the pairs of the fastest single changes of different knobs (one worker, 1.05x,
    # is one too), the pair of the two fastest first.
    one = BASE.replace(num_workers=1, persistent_workers=True)
    step = policy.next(_ledger(*measured), used=0.1, checks=None)
    assert step.stage is Stage.SAFE and not step.again
    assert _configs(step) == [two.replace(channels_last=True), one.replace(channels_last=True)]


def test_changes_of_the_numerics_wait_for_the_baselines_accuracy_runs() -> None:
    policy = StagePolicy(SPACE.without({"num_workers", "channels_last"}), BASE, guided=True, cpus=2)
    step = policy.next(_ledger(_base()), used=0.1, checks=None)
    assert step.stage is Stage.FAST and step.needs_checks and not step.enqueue
    fast = policy.next(_ledger(_base(), accuracy=True), used=0.1, checks=True)
    assert fast.stage is Stage.FAST and not fast.needs_checks
    guesses = _configs(fast)
    assert guesses[0] == BASE.replace(precision="bf16")  # the safe guess: same steps
    bold = guesses[1]
    assert (bold.batch_size, bold.precision.value, bold.lr_schedule.kind.value) == (
        128,
        "bf16",
        "cosine",
    )
    # No accuracy checks possible: past the safe knobs, compile on the best, then explore.
    late = policy.next(_ledger(_base()), used=0.1, checks=False)
    assert late.stage is Stage.LATE
    assert [c.compile_mode.value for c in _configs(late)] == ["default"]


def test_after_the_fast_share_compile_then_the_whole_space() -> None:
    policy = StagePolicy(SPACE.without({"num_workers", "channels_last"}), BASE, guided=True, cpus=2)
    ledger = _ledger(_base(), accuracy=True)
    late = policy.next(ledger, used=0.8, checks=True)
    assert late.stage is Stage.LATE
    # A small space (96 configs): then each listed value no trial has measured, on the best.
    cover = policy.next(ledger, used=0.8, checks=True)  # compile already queued (tried)
    assert cover.stage is Stage.LATE
    assert _configs(cover) == [
        BASE.replace(batch_size=64),
        BASE.replace(batch_size=128),
        BASE.replace(precision="bf16"),
        BASE.replace(checkpointing=1),
        BASE.replace(lr_schedule={"kind": "cosine"}),
    ]
    explore = policy.next(ledger, used=0.8, checks=True)
    assert explore.stage is Stage.EXPLORE
    assert explore.pinned == {"compile_mode": "none", "checkpointing": 0}


def test_unguided_is_the_sampler_over_the_whole_space_throughout() -> None:
    policy = StagePolicy(SPACE, BASE, guided=False, cpus=2)
    for used in (0.0, 0.5, 0.9):
        step = policy.next(_ledger(_base()), used=used, checks=True)
        assert step.stage is Stage.SAMPLING and not step.pinned and not step.enqueue


def test_late_variants_compile_then_dynamic_where_shapes_changed_then_checkpointing() -> None:
    cfg = BASE.replace(batch_size=64, precision="bf16")
    compiled = BASE.replace(compile_mode="default")
    recompiled = Record(
        role=_candidate(compiled, 90.0).role,
        config=compiled,
        measurement=__import__("dataclasses").replace(measurement(0.01), recompiles=3),
        projected_time=90.0,
        fingerprint="aaa",
    )
    ledger = _ledger(_base(), _candidate(cfg, 80.0), recompiled, _failed_at(128))
    best = next(e for e in ledger.entries if e.config == cfg)
    variants = late_variants(SPACE, best, ledger)
    assert variants == [
        cfg.replace(compile_mode="default"),
        compiled.replace(compile_dynamic=True),  # it recompiled: batch shapes change
        cfg.replace(checkpointing=1, batch_size=128),  # 128 ran out of memory without it
    ]


def _failed_at(batch: int) -> Record:
    from autotune._search.record import Role
    from autotune._trial.failures import FailureReason

    return Record(
        role=Role.CANDIDATE,
        config=BASE.replace(batch_size=batch),
        failure=FailureReason.OOM,
        message="out of memory",
        fingerprint="aaa",
    )


def test_fast_guesses_keep_the_best_safe_knobs() -> None:
    safe = BASE.replace(num_workers=1, persistent_workers=True, channels_last=True)
    guesses = fast_guesses(SPACE, BASE, safe, memory=None)
    assert all(g.num_workers == 1 and g.channels_last for g in guesses)
    assert guesses[0] == safe.replace(precision="bf16")


def test_the_deadline_keeps_a_grace_for_the_last_steps() -> None:
    """Confirming and re-measuring may pass the deadline by 5% of the budget (at least 2 s)."""
    clock = Clock()
    d = Deadline(start=900.0, end=996.0, clock=clock)  # a 96 s budget: grace 4.8 s
    clock.now = 1000.0  # 4 s past
    assert not d.past() and d.left() == 0.0 and not d.fits(0.1)
    clock.now = 1001.0  # 5 s past
    assert d.past()
    short = Deadline(start=989.0, end=998.5, clock=Clock())  # 9.5 s budget: grace 2 s
    assert not short.past()
    d = Deadline(start=900.0, end=1001.0, clock=Clock())  # 1 s left, grace 5.05 s
    assert not d.past(expected=5.0)  # would end 4 s past: within the grace
    assert d.past(expected=7.0)  # a step of ~7 s would overrun: not started
    assert d.fits(1.0) and not d.fits(1.5)
    assert not Deadline(start=0.0, end=None, clock=Clock()).past(expected=1e9)


def test_shares_of_the_budget_are_asked_of_the_deadline() -> None:
    clock = Clock()
    clock.now = 1_700_000_000.0 + 150.0  # a wall clock: 150 s of a 600 s budget spent
    d = Deadline.of(1_700_000_000.0, 600.0, clock)
    # The timeout as given, not the difference of two wall-clock times.
    assert d.budget == 600.0 and d.share(0.25) == 150.0 and d.share(0.01) == 0.01 * 600.0
    assert d.used() == 0.25 and d.grace == 30.0
    untimed = Deadline.of(0.0, None, clock)
    assert untimed.end is None and untimed.budget is None and untimed.share(0.25) is None
    assert untimed.used() is None and untimed.grace == 0.0
    assert Deadline(start=900.0, end=996.0).budget == 96.0  # without seconds: end - start


def test_a_trial_is_stopped_not_far_past_the_deadline() -> None:
    clock = Clock()
    d = Deadline(start=910.0, end=1010.0, clock=clock)  # 10 s left of 100: grace 5 s
    assert d.trial_limit(None) == 15.0  # 10 s + the grace
    assert d.trial_limit(12.0) == 12.0
    assert d.trial_limit(None, keep=4.0) == 11.0  # never into the time kept for pending work
    assert d.trial_limit(1.0) == 5.0  # never below 5 s where the deadline allows
    clock.now = 1013.0  # 3 s past the deadline: 2 s of grace left
    assert d.trial_limit(15.0) == 2.0  # the floor does not reach past the grace
    clock.now = 1100.0
    assert d.trial_limit(15.0) == 1.0  # a run started after the grace: cut short
    assert Deadline(start=0.0, end=None, clock=clock).trial_limit(None) is None
    assert Deadline(start=0.0, end=None, clock=clock).describe() == "no time limit"
    assert d.describe() == "0 s left"


def test_a_stage_with_every_config_measured_hands_over_and_the_last_one_ends() -> None:
    """batch 32/64 x compile none/default: once both batch sizes are measured the fast stage
    has nothing left (compile comes next, not the end); once compile is measured too, there is
    no next step at all."""
    space = load_space({"knobs": {"batch_size": [32, 64], "compile_mode": ["none", "default"]}})
    policy = StagePolicy(space, BASE, guided=True, cpus=2)
    big = BASE.replace(batch_size=64)
    ledger = _ledger(_base(), _candidate(big, 150.0), accuracy=True)
    late = policy.next(ledger, used=0.1, checks=True)
    assert late is not None and late.stage is Stage.LATE
    assert [c.compile_mode.value for c in _configs(late)] == ["default"]
    compiled = _configs(late)[0]
    done = _ledger(_base(), _candidate(big, 150.0), _candidate(compiled, 260.0), accuracy=True)
    assert StagePolicy(space, BASE, guided=True, cpus=2).next(done, used=0.2, checks=True) is None
    # A sampler that kept proposing measured configs ends its stage, not the search.
    fresh = StagePolicy(space, BASE, guided=True, cpus=2)
    fresh.exhausted.add(Stage.FAST)
    step = fresh.next(_ledger(_base(), accuracy=True), used=0.1, checks=True)
    assert step is not None and step.stage is Stage.LATE


class _Limits:
    """An executor that records each run's wall-clock limit."""

    isolated = True

    def __init__(self) -> None:
        self.limits: list[float | None] = []

    def run(self, cfg, budget, *, accuracy=None, measured=None, time_limit=None, progress=None):
        self.limits.append(time_limit)
        return TrialOutcome(config=cfg)

    def close(self) -> None:
        pass


def test_a_compiled_run_gets_a_compile_allowance_beyond_its_steady_state_limit() -> None:
    """5x a 20 s trial would stop a max-autotune compile half-way (nothing cached, compile
    'never helps'): the steady-state part is limited, the compile gets its own allowance."""
    executor = _Limits()
    state = LoopState(
        settings=types.SimpleNamespace(trial_timeout=None, budget=Budget()),
        deadline=Deadline(start=0.0, end=None),
    )
    bench = Bench(
        study=None, state=state, executor=executor, report=lambda line: None, fingerprint=""
    )
    bench.execute(BASE, expected=20.0)
    bench.execute(BASE.replace(compile_mode="default"), expected=20.0)
    bench.execute(BASE.replace(compile_mode="max-autotune"), expected=20.0)
    assert executor.limits == [100.0, 100.0 + 300.0, 100.0 + 1200.0]


def test_a_run_stopped_at_the_searchs_time_left_says_that_set_its_limit() -> None:
    """A compile started with 10 s left is stopped there: its failure says the search's time
    left set the limit (the run's own was 400 s), so it does not read as a hang; a run stopped
    at its own limit says nothing more."""
    from autotune._trial.failures import FailureReason

    class _TimesOut(_Limits):
        def run(self, cfg, budget, *, accuracy=None, measured=None, time_limit=None, progress=None):
            self.limits.append(time_limit)
            return TrialOutcome(
                config=cfg,
                failure=FailureReason.TIMEOUT,
                message=f"timeout: the trial ran past its {time_limit:.0f} s limit and was stopped",
            )

    executor = _TimesOut()
    clock = Clock(1000.0)
    state = LoopState(
        settings=types.SimpleNamespace(trial_timeout=None, budget=Budget()),
        deadline=Deadline(start=0.0, end=1010.0, clock=clock),  # 10 s left of 1,010
    )
    bench = Bench(
        study=None, state=state, executor=executor, report=lambda line: None, fingerprint=""
    )
    compiled = bench.execute(BASE.replace(compile_mode="default"), expected=20.0)
    assert executor.limits[0] < 400.0
    assert compiled.message == (
        f"timeout: the trial ran past its {executor.limits[0]:.0f} s limit and was stopped; "
        "the search's time left set that limit (the run's own: 400 s)"
    )
    own = bench.execute(BASE, expected=20.0, limit=5.0)
    assert executor.limits[1] == 5.0
    assert own.message == "timeout: the trial ran past its 5 s limit and was stopped"


def test_the_time_kept_for_the_question_makes_its_first_check_past_the_fast_share() -> None:
    """Past the fast stage's share of the budget the policy hands over to the late stage; but
    where the time kept for the accuracy question has only just come (a long safe stage, cheap
    accuracy runs), that time still makes the study's first check, and it goes before the
    safe variants left."""
    policy = StagePolicy(SPACE, BASE, guided=True, cpus=2)
    ledger = _ledger(_base())
    assert policy.next(ledger, used=0.8, checks=None).stage is Stage.SAFE
    step = policy.next(ledger, used=0.8, checks=None, fast_first=True)
    assert step.stage is Stage.FAST and step.needs_checks
    fast = policy.next(_ledger(_base(), accuracy=True), used=0.8, checks=True, fast_first=True)
    assert fast.stage is Stage.FAST and _configs(fast)[0] == BASE.replace(precision="bf16")


def test_a_cut_in_the_epochs_that_fails_at_the_horizon_is_tried_next_at_a_milder_one() -> None:
    """Half the epochs failed its screening (0.80 against 0.90): the next candidate is the same
    config at 80% of them (the listed share nearest halfway to the whole run), not the
    sampler's; once a shorter run holds, the sampler goes on from there."""
    from test_ledger import runs

    from autotune._search import storage
    from autotune._search.record import BaselineAccuracy

    space = load_space(
        {"knobs": {"lr_schedule": ["constant", "one_cycle"], "train_fraction": [1, 0.8, 0.6, 0.5]}}
    )
    half = space.build({"train_fraction": 0.5, "lr_schedule": "one_cycle"}, BASE)

    def ledger(*records: Record) -> Ledger:
        study = _study_with([_base(), *records])
        storage.write_baseline_accuracy(
            study, BaselineAccuracy(runs=runs(0.90, 0.91, 0.89), samples=256, initial_metric=0.3)
        )
        return Ledger.read(study, settings(space=space))

    def screened(cfg: TrainingConfig, metric: float) -> Record:
        return dataclasses.replace(
            _candidate(cfg, 100.0 * cfg.train_fraction), accuracy=runs(metric)
        )

    policy = StagePolicy(space, BASE, guided=True, cpus=2)
    policy.tried.add(half)  # the first guesses were made
    step = policy.next(ledger(screened(half, 0.80)), used=0.3, checks=True)
    assert step is not None and step.stage is Stage.FAST
    assert [space.build(p, BASE) for p in step.enqueue] == [half.replace(train_fraction=0.8)]
    # 80% held at the horizon: nothing more is retried.
    held = ledger(screened(half, 0.80), screened(half.replace(train_fraction=0.8), 0.90))
    fresh = StagePolicy(space, BASE, guided=True, cpus=2)
    fresh.tried.add(half)
    assert not fresh.next(held, used=0.4, checks=True).enqueue
