"""The search loop's state, tested alone: every change it makes, and what the bench reads from
it. No search runs here."""

from __future__ import annotations

import math

import optuna
import pytest
from test_ledger import BASE, _base, _study_with, measurement, settings

from autotune import Budget, load_space
from autotune._search.bench import PENALTY, Bench
from autotune._search.policy import Stage, Step
from autotune._search.record import Record, Role
from autotune._search.state import LoopState, fitting_batch_sizes
from autotune._trial.failures import FailureReason
from autotune._trial.probe import MemoryLimits

SPACE = load_space({"knobs": {"batch_size": [32, 64, 128], "num_workers": [0, 1]}})
KEPT = load_space({"knobs": {"batch_size": [16, 32, 64]}, "global_batch_size": 64})


def limits(**by_key: int) -> MemoryLimits:
    return MemoryLimits(capacity=2**30, limits=dict(by_key), points={})


def state() -> LoopState:
    return LoopState.start(settings(space=SPACE))


def test_a_new_state_takes_its_deadline_from_the_settings_and_starts_at_sampling() -> None:
    s = settings(space=SPACE, timeout=60.0)
    st = LoopState.start(s, clock=lambda: s.started + 15.0)
    assert (st.deadline.start, st.deadline.end) == (s.started, s.started + 60.0)
    assert st.deadline.left() == 45.0
    assert st.space is s.space
    assert (st.memory, st.baseline, st.no_checks) == (None, None, False)
    assert (st.step, st.repeats, st.waited) == (Step(Stage.SAMPLING), 0, 0.0)


def test_memory_limits_drop_the_batches_that_cannot_fit_and_add_the_largest_that_does() -> None:
    st = state()
    st.use_memory(limits(**{"fp32/ckpt0": 100, "bf16/ckpt0": 96}))
    assert st.memory is not None and st.memory.limits["fp32/ckpt0"] == 100
    assert st.space.knobs["batch_size"].values == (32, 64, 96, 100)
    assert st.settings.space is st.space  # one space: the one the settings publish


def test_the_baseline_batch_stays_in_the_space_even_where_it_does_not_fit() -> None:
    out = fitting_batch_sizes(SPACE, limits(**{"fp32/ckpt0": 48}), keep=128)
    assert out.knobs["batch_size"].values == (32, 128, 48)


def test_with_the_global_batch_kept_no_batch_between_listed_sizes_is_added() -> None:
    out = fitting_batch_sizes(KEPT, limits(**{"fp32/ckpt0": 40}), keep=64)
    assert out.knobs["batch_size"].values == (16, 32, 64)
    out = fitting_batch_sizes(KEPT, limits(**{"fp32/ckpt0": 40}), keep=16)
    assert out.knobs["batch_size"].values == (16, 32)


@pytest.mark.parametrize("memory", [None, limits(), limits(**{"fp32/ckpt0": 128})])
def test_memory_that_changes_nothing_leaves_the_same_space(memory) -> None:
    st = state()
    before = st.settings
    st.use_memory(memory)
    assert st.settings is before


def test_a_resumed_study_takes_the_stored_budget_baseline_and_space_then_the_memory_limits() -> (
    None
):
    st = state()
    st.use_memory(limits(**{"fp32/ckpt0": 64}))
    stored_space = load_space({"knobs": {"batch_size": [32, 64, 128, 256]}})
    stored = settings(
        space=stored_space,
        budget=Budget(timed_samples=999),
        baseline=BASE.replace(batch_size=64),
        calibrate=True,
    )
    st.resume(stored)
    s = st.settings
    assert s.budget.timed_samples == 999
    assert s.baseline == BASE.replace(batch_size=64)
    assert s.calibrate is False  # the stored budget is the one every trial is measured with
    assert s.space.knobs["batch_size"].values == (32, 64)  # the stored space, less what cannot fit
    assert s.tolerance == 0.01 and s.n_trials == 8  # the rest as asked


def test_the_set_up_changes_each_say_what_they_change() -> None:
    st = state()
    split = BASE.replace(batch_size=16, gradient_accumulation_steps=2)
    st.split_baseline(split)
    assert st.settings.baseline == split
    narrowed = SPACE.with_choice("batch_size", (32,), "batch_size: dropped 64, 128")
    st.calibrated(Budget(timed_samples=123), narrowed)
    assert st.settings.budget.timed_samples == 123
    assert st.space is narrowed
    st.note("baseline: measured as 16 x 2")
    assert st.space.notes == ("batch_size: dropped 64, 128", "baseline: measured as 16 x 2")
    assert st.settings.baseline == split  # each change leaves the others' results alone


def test_repeats_count_in_a_row_and_a_new_stage_starts_from_none() -> None:
    st = state()
    seen = []
    for repeated in (True, True, False, True, True, True):
        st.count(repeated=repeated)
        seen.append(st.repeats)
    assert seen == [1, 2, 0, 1, 2, 3]
    st.next_stage()
    assert st.repeats == 0


def test_steps_waits_and_checks() -> None:
    st = state()
    step = Step(Stage.FAST, pinned={"precision": "bf16"}, needs_checks=True)
    st.take(step)
    assert st.step is step
    st.wait(1.0)
    st.wait(1.0)
    assert st.waited == 2.0
    st.drop_checks()
    st.drop_checks()
    assert st.no_checks is True


def test_the_bench_reads_the_settings_and_deadline_from_the_state_and_cannot_change_them() -> None:
    st = state()
    bench = Bench(
        study=optuna.create_study(), state=st, executor=None, report=lambda line: None,
        fingerprint="aaa",
    )  # fmt: skip
    split = BASE.replace(batch_size=16, gradient_accumulation_steps=2)
    st.split_baseline(split)
    assert bench.settings.baseline == split
    assert bench.deadline is st.deadline
    with pytest.raises(AttributeError):
        bench.settings = settings()  # type: ignore[misc]


def _failed() -> Record:
    return Record(
        role=Role.CANDIDATE,
        config=BASE.replace(batch_size=64),
        failure=FailureReason.OOM,
        message="out of memory",
    )


@pytest.mark.parametrize(
    ("baseline_time", "value"),
    [(200.0, PENALTY * 200.0), (None, PENALTY), (math.inf, PENALTY)],
)
def test_a_failed_trial_never_looks_fast_to_the_sampler(baseline_time, value) -> None:
    """Its objective is a penalty over the baseline's time; without that time, a fixed one
    (it used to be 0 s: the fastest value a trial could have)."""
    study = _study_with([_base()])
    bench = Bench(
        study=study, state=state(), executor=None, report=lambda line: None, fingerprint="aaa"
    )
    trial = study.ask()
    bench.tell(trial, _failed(), None, baseline_time)
    assert study.trials[trial.number].value == value


def test_a_trial_without_a_projected_time_ranks_last() -> None:
    from autotune._search.ledger import Ledger

    unmeasured = Record(role=Role.CANDIDATE, config=BASE.replace(num_workers=1))
    measured = Record(
        role=Role.CANDIDATE,
        config=BASE.replace(num_workers=2),
        measurement=measurement(0.01),
        projected_time=150.0,
        fingerprint="aaa",
    )
    ledger = Ledger.read(_study_with([_base(), unmeasured, measured]), settings())
    times = [ledger.rank_time(e) for e in ledger.entries]
    assert times == [200.0, math.inf, 150.0]
    assert ledger.best() is not None and ledger.best().number == 2


def test_a_value_skipped_twice_is_said_not_measured_for_the_last_reason() -> None:
    """A worker count set aside for the accuracy question (trial 5) and later not started
    for want of time (trial 20) ends "not measured" for the second reason, which is why it
    was never measured; a trial that ran with it and failed says more than either."""
    from autotune._search.coverage import Skipped, unmeasured
    from autotune._search.ledger import Ledger

    ledger = Ledger.read(_study_with([_base()]), settings(space=SPACE))
    skipped = [
        Skipped(5, {"num_workers": 1}, "not started: set aside for the accuracy question"),
        Skipped(20, {"num_workers": 1}, "expected to take ~30 s, more than was left"),
    ]
    missing = {(m.knob, m.value): m.why for m in unmeasured(ledger, SPACE, BASE, skipped)}
    assert missing[("num_workers", 1)] == "trial #20: expected to take ~30 s, more than was left"
