"""The progress line of a finished trial (what it was, how it ended, the best so far) and the
search's status for a live display."""

from __future__ import annotations

from autotune._progress import Status
from autotune._search import derived
from autotune._search.ledger import Entry, Ledger, trials_counted

__all__ = ["search_status", "trial_line"]


def trial_line(
    ledger: Ledger, entry: Entry, *, stage: str, n_trials: int | None, time_left: str
) -> str:
    """``trial n/N [#number, stage] config: outcome | best | failures | time left``."""
    r = entry.record
    name = ledger.guard.metric_name if ledger.guard is not None else "metric"
    if r.failure is not None:
        outcome = f"failed ({r.failure.value}): {r.message}"
    elif r.pruned:
        outcome = f"{_speedup(ledger, entry)}, {r.message or 'pruned'}"
    else:
        metric = "" if r.metric is None else f", val {name} {r.metric:.4f}"
        outcome = f"{_speedup(ledger, entry)}{metric}{_verdict(ledger, entry)}"
    best_text, failures = _best(ledger), _failures(ledger)
    done = trials_counted(ledger)
    total = f"/{n_trials}" if n_trials is not None else ""
    return (
        f"trial {done}{total} [#{entry.number}, {stage}] {r.config.describe()}: {outcome}"
        f" | {best_text} | failures: {failures} | {time_left}"
    )


def _verdict(ledger: Ledger, entry: Entry) -> str:
    """What its accuracy check says so far."""
    verdict = derived.accuracy_verdict(ledger.confirmation(entry), ledger.screened(entry))
    return "" if verdict is None else f" ({verdict})"


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
