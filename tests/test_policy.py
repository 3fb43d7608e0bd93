"""The stage policy, the first guesses and the deadline, tested alone: no search runs here."""

from __future__ import annotations

from test_ledger import _base, _candidate, _study_with, settings

from autotune import TrainingConfig, load_space
from autotune._search.deadline import Deadline
from autotune._search.ledger import Ledger
from autotune._search.policy import Stage, StagePolicy, first_guesses, late_variants
from autotune._search.record import Record

BASE = TrainingConfig()
SPACE = load_space(
    {
        "knobs": {
            "batch_size": [32, 64, 128],
            "num_workers": [0, 1, 2],
            "precision": ["fp32", "bf16"],
            "channels_last": [False, True],
            "compile_mode": ["none", "default"],
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


def _ledger(*records: Record) -> Ledger:
    return Ledger.read(_study_with(list(records)), settings(space=SPACE))


def test_stage_one_samples_without_the_late_knobs_until_its_share_is_spent() -> None:
    split = {"reached": False}
    policy = StagePolicy(SPACE, BASE, guided=True, split=lambda: split["reached"])
    ledger = _ledger(_base())
    step = policy.next(ledger, waiting=False)
    assert step.stage is Stage.FIRST and not step.enqueue
    assert "compile_mode" not in step.space.knobs and "checkpointing" not in step.space.knobs
    assert "batch_size" in step.space.knobs


def test_stage_two_refines_the_best_then_stage_three_takes_the_whole_space() -> None:
    best = BASE.replace(batch_size=64, num_workers=1, persistent_workers=True)
    ledger = _ledger(
        _base(), _candidate(best, 50.0), _candidate(BASE.replace(batch_size=128), 80.0)
    )
    policy = StagePolicy(SPACE, BASE, guided=True, split=lambda: True)
    step = policy.next(ledger, waiting=False)
    assert step.stage is Stage.REFINE and step.space is SPACE
    assert list(step.enqueue) == late_variants(SPACE, BASE, best, [])
    assert policy.next(ledger, waiting=True).stage is Stage.REFINE  # variants still queued
    assert policy.next(ledger, waiting=False).stage is Stage.WHOLE
    assert policy.next(ledger, waiting=True).stage is Stage.WHOLE  # never back


def test_unguided_is_the_sampler_over_the_whole_space_throughout() -> None:
    policy = StagePolicy(SPACE, BASE, guided=False, split=lambda: True)
    for _ in range(3):
        step = policy.next(_ledger(_base()), waiting=False)
        assert step.stage is Stage.SAMPLING and step.space is SPACE and not step.enqueue


def test_late_variants_vary_one_numerics_free_knob_then_compile_then_checkpointing() -> None:
    cfg = BASE.replace(batch_size=64, precision="bf16")
    variants = late_variants(SPACE, BASE, cfg, oom_sizes=[128])
    base = SPACE.params_of(cfg, BASE)
    changed = [{k: v for k, v in p.items() if base.get(k) != v} for p in variants]
    assert changed == [
        {"num_workers": 1},
        {"num_workers": 2},
        {"channels_last": True},
        {"compile_mode": "default"},
        # checkpointing only where it lets a batch fit that ran out of memory without it
        {"checkpointing": 1, "batch_size": 128},
    ]
    assert late_variants(SPACE, BASE, cfg, oom_sizes=[])[-1] == {**base, "compile_mode": "default"}


def test_first_guesses_are_the_rules_of_thumb_and_the_safe_one() -> None:
    guesses = first_guesses(SPACE, BASE, cpus=2)
    bold, no_workers, safe = guesses
    assert bold["batch_size"] == 128 and bold["precision"] == "bf16"
    assert bold["num_workers"] == 1 and bold["channels_last"] is True
    assert bold["lr_schedule"] == "cosine"
    assert no_workers == {**bold, "num_workers": 0}
    # The safe guess keeps the baseline's batch and schedule: only precision and memory format.
    assert SPACE.build(safe, BASE) == BASE.replace(precision="bf16", channels_last=True)


def test_the_deadline_keeps_a_grace_for_the_last_steps() -> None:
    """Re-measuring and confirming may pass the deadline by 5% of the budget (at least 2 s)."""
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


def test_a_trial_is_stopped_not_far_past_the_deadline() -> None:
    clock = Clock()
    d = Deadline(start=0.0, end=1010.0, clock=clock)  # 10 s left
    assert d.trial_limit(None) == 40.0  # 10 s + 30 s of overrun
    assert d.trial_limit(15.0) == 15.0
    clock.now = 1100.0
    assert d.trial_limit(15.0) == 5.0  # never below 5 s
    assert Deadline(start=0.0, end=None, clock=clock).trial_limit(None) is None
    assert Deadline(start=0.0, end=None, clock=clock).describe() == "no time limit"
    assert d.describe() == "0 s left"
