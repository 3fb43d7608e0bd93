"""A late failure keeps what was found: where the baseline's accuracy runs fail (an error, a
stream that ends, a hang stopped at its limit), at the first horizon or at a longer one, the
search says why in one line, goes on with the knobs that leave the numerics alone, and returns
the safe answer with the reason no check was possible (tests/sim.py's simulated machine).

A new user's WebDataset search measured 14 safe configs (channels_last + foreach screened
1.37x), then its baseline's accuracy runs ran out of stream ~40 s in, and find_best raised:
what was found was lost."""

from __future__ import annotations

import pytest
from sim import Model, result_of, search
from test_anytime import KNOBS, bert_like
from test_horizon import DIGITS, _took_off, digits

from autotune._result.report import _guard_line
from autotune._result.summary import render_summary
from autotune._search.question import AccuracyQuestion
from autotune._search.record import GuardFailure, NoCheck
from autotune._search.state import LoopState
from autotune._trial.failures import FailureReason
from autotune._trial.outcome import AccuracyCheck

STREAM_END = (
    "StreamEnded: The stream (WebDataset) ended after 4,096 items: this run trains 10,656 (the "
    "planned run reads 16,384). Give a planned_samples= it holds, or a longer stream."
)


def _baseline_runs(failure: tuple[FailureReason, str]):
    """The baseline's accuracy runs (they score the untrained model too) fail so."""

    def fails(cfg, check: AccuracyCheck) -> tuple[FailureReason, str] | None:
        return failure if check.initial else None

    return fails


def _failing(**changes) -> Model:
    model = bert_like(workers_help=1.3)
    for name, value in changes.items():
        setattr(model, name, value)
    return model


@pytest.mark.parametrize(
    ("model", "why", "words", "goes_on"),
    [
        (
            _failing(fails=_baseline_runs((FailureReason.ERROR, "RuntimeError: boom"))),
            NoCheck.FAILED,
            "failed (RuntimeError: boom)",
            True,
        ),
        (
            _failing(fails=_baseline_runs((FailureReason.ERROR, STREAM_END))),
            NoCheck.STREAM_ENDED,
            "ran out of stream (StreamEnded: The stream (WebDataset) ended after 4,096",
            True,
        ),
        (
            # Runs that never end, stopped at their limit (the baseline's only: no other
            # accuracy run is made once the guard is gone); here the limit is the deadline's,
            # so nothing is left to go on with, but what was found stands.
            _failing(stalls=lambda cfg, seeds: True),
            NoCheck.HUNG,
            "hung, stopped at their limit (timeout",
            False,
        ),
    ],
    ids=["error", "stream-end", "hang"],
)
def test_a_failure_of_the_baseline_accuracy_runs_keeps_the_safe_answer(
    model: Model, why: NoCheck, words: str, goes_on: bool
) -> None:
    run, clock, lines = search(model, knobs=KNOBS, timeout=240.0)  # used to raise
    text = "\n".join(lines)
    ledger = run.ledger()
    assert ledger.guard is None, text
    said = [line for line in lines if "no accuracy check is possible" in line]
    assert len(said) == 1 and words in said[0], text  # why, in one line
    after = lines.index(said[0])
    # The search went on: the safe stage's candidates after the failure (where time was left),
    # none that changes the numerics, and its answer is the safe win found before.
    assert any(" trial " in line for line in lines[after + 1 :]) is goes_on, text
    assert all(ledger.safe(e) for e in ledger.candidates), text
    best = ledger.best()
    assert best is not None and ledger.safe(best) and best.config.num_workers > 0, text
    assert clock.now - run.settings.started <= 1.05 * 240, text
    result = result_of(run)
    failed = GuardFailure.from_dict(result.to_dict()["search"]["no_accuracy_check"])
    assert failed.why is why and failed.samples > 0
    summary = render_summary(result.to_dict(), detail=True)
    assert "no accuracy check was possible" in summary and words in summary, summary


def test_a_longer_horizons_failure_keeps_the_safe_answer_and_the_shorter_runs() -> None:
    """The baseline's runs at 2,048 samples have not all taken off, so the horizon is chosen
    again (4,000): those runs fail. The shorter runs stay on record, no check is made with
    them (the horizon they were found short at), and the safe answer is returned."""

    def metric_at(cfg, seed: int, samples: int) -> float:
        return 0.97 if _took_off(cfg, seed, samples) else 0.70

    def fails(cfg, check: AccuracyCheck) -> tuple[FailureReason, str] | None:
        return (FailureReason.ERROR, STREAM_END) if check.samples >= 4000 else None

    model = digits(metric_at=metric_at, fails=fails)
    run, clock, lines = search(model, knobs=DIGITS, timeout=60.0, n_train=400)
    text = "\n".join(lines)
    ledger = run.ledger()
    assert any("trying 4,000" in line for line in lines), text
    said = [line for line in lines if "no accuracy check is possible" in line]
    assert len(said) == 1 and "at a longer horizon (4,000 samples each)" in said[0], text
    assert ledger.baseline_accuracy is not None and ledger.baseline_accuracy.samples == 2048
    assert not ledger.confirmations, text  # no check was made
    best = ledger.best()
    assert best is not None and ledger.safe(best), text
    assert clock.now - run.settings.started <= 1.05 * 60, text
    result = result_of(run, 60.0)
    failed = GuardFailure.from_dict(result.search["no_accuracy_check"])
    assert failed.why is NoCheck.STREAM_ENDED and failed.longer and failed.samples == 4000
    assert "No accuracy check was possible" in _guard_line(result)  # the report's words
    assert "no accuracy check was possible" in render_summary(result.to_dict(), detail=True)


def test_a_resumed_study_whose_baseline_runs_failed_makes_no_check() -> None:
    """The failure is on record in the study: a worker, or the same command again, does not
    wait for a guard that is not coming, nor checks with a shorter horizon's runs."""
    run, _, _ = search(
        _failing(fails=_baseline_runs((FailureReason.ERROR, "RuntimeError: boom"))),
        knobs=KNOBS,
        timeout=240.0,
    )
    runs = run.bench.executor.runs
    ledger = run.ledger()
    run.worker, run.state.no_checks = True, False
    assert run._checks(ledger) is False
    assert not run._guard_coming(ledger)
    resumed = AccuracyQuestion(run.bench, LoopState.start(run.settings), lambda ledger: 0.0)
    resumed.state.measured(run.state.baseline)
    resumed.ask()  # the same command again: no runs, no check
    assert resumed.state.no_checks and run.bench.executor.runs == runs
