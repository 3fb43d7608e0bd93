"""The facts of a finished trial's row (what it changes, its speed and ratio, its accuracy
state; :mod:`autotune._search.words` writes the row) and the search's status for a live
display."""

from __future__ import annotations

from autotune._guard.confirmation import Verdict
from autotune._knobs import registry
from autotune._progress import Status
from autotune._search import derived, words
from autotune._search.ledger import Entry, Ledger, trials_counted
from autotune._search.words import Accuracy, TrialFacts

__all__ = ["search_status", "trial_facts", "trial_line"]


def trial_facts(
    ledger: Ledger,
    entry: Entry,
    *,
    stage: str,
    left: float | None = None,
    n_trials: int | None = None,
) -> TrialFacts:
    """What a finished trial's row says (see :func:`words.trial_row`)."""
    r = entry.record
    base = ledger.baseline
    side = ledger.side_speedup(entry)
    best = ledger.best()
    return TrialFacts(
        number=entry.number,
        stage=stage,
        changes=registry.changes(r.config, base.config if base is not None else r.config),
        throughput=r.measurement.throughput if r.measurement is not None and r.ok else None,
        ratio=side if side is not None else ledger.screening_speedup(entry),
        side_by_side=side is not None,
        accuracy=_accuracy(ledger, entry),
        failure=r.failure.value if r.failure is not None else None,
        note=r.no_run.value if r.no_run is not None and r.failure is None else None,
        left=left,
        trials=None if n_trials is None else f"{trials_counted(ledger)}/{n_trials}",
        best=best is not None and best.number == entry.number,
    )


def trial_line(
    ledger: Ledger,
    entry: Entry,
    *,
    stage: str,
    left: float | None = None,
    n_trials: int | None = None,
) -> str:
    """A finished trial's row of the progress story."""
    return words.trial_row(trial_facts(ledger, entry, stage=stage, left=left, n_trials=n_trials))


def _accuracy(ledger: Ledger, entry: Entry) -> Accuracy:
    """Its accuracy state, as a fact: its check's verdict, else its screening's."""
    if ledger.safe(entry):
        return Accuracy.NOT_NEEDED
    c = ledger.confirmation(entry)
    if c is not None and c.tested:
        return {
            Verdict.CONFIRMED: Accuracy.CONFIRMED,
            Verdict.REJECTED: Accuracy.REJECTED,
            Verdict.UNRESOLVED: Accuracy.UNRESOLVED,
        }[c.verdict]
    screened = ledger.screened(entry)
    if screened is None:
        return Accuracy.NOT_RUN
    return Accuracy.SCREENED if screened else Accuracy.OUTSIDE


def _speedup(ledger: Ledger, entry: Entry) -> str:
    """Its speedup, saying which: measured side by side with the baseline (the rounds' median),
    or a screening estimate (one draw each, which can run a third high on a busy machine)."""
    side = ledger.side_speedup(entry)
    if side is not None:
        return f"{derived.format_speedup(side)} side by side"
    figure = ledger.screening_speedup(entry)
    return derived.format_speedup(figure) + ("" if figure is None else " screening")


def _best(ledger: Ledger) -> str:
    best = ledger.best()
    if best is None:
        return "no feasible candidate yet"
    return f"best {_speedup(ledger, best)} (#{best.number})"


def _failures(ledger: Ledger) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(ledger.failures().items())) or "none"


def search_status(ledger: Ledger, *, n_trials: int | None, deadline: float | None) -> Status:
    """Trials done, the best answer so far, failures by reason, and the budget's end."""
    done = trials_counted(ledger)
    return Status(
        trials=f"{done}/{n_trials}" if n_trials is not None else str(done),
        best=_best(ledger),
        failures=_failures(ledger),
        deadline=deadline,
    )
