"""The progress line of a finished trial: what it was, how it ended, the best so far."""

from __future__ import annotations

from autotune._search.ledger import Entry, Ledger

__all__ = ["trial_line"]


def trial_line(
    ledger: Ledger, entry: Entry, *, stage: str, n_trials: int | None, time_left: str
) -> str:
    """``trial n/N [#number, stage] config: outcome | best | failures | time left``."""
    r = entry.record
    base = ledger.baseline
    base_time = ledger.projected(base) if base is not None else None
    name = ledger.guard.metric_name if ledger.guard is not None else "metric"

    def speed(e: Entry) -> str:
        projected = ledger.projected(e)
        return f"{base_time / projected:.2f}x" if base_time and projected else "n/a"

    if r.failure is not None:
        outcome = f"failed ({r.failure.value}): {r.message}"
    elif r.pruned:
        outcome = f"{speed(entry)}, {r.message or 'pruned'}"
    else:
        metric = "" if r.metric is None else f", val {name} {r.metric:.4f}"
        outcome = f"{speed(entry)}{metric}{_verdict(ledger, entry)}"
    best = ledger.best()
    best_text = (
        f"best {speed(best)} (#{best.number})" if best is not None else "no feasible candidate yet"
    )
    failures = ", ".join(f"{k} {v}" for k, v in sorted(ledger.failures().items())) or "none"
    reused = " (same config as an earlier trial: reused)" if r.reused else ""
    done = len(ledger.candidates)
    total = f"/{n_trials}" if n_trials is not None else ""
    return (
        f"trial {done}{total} [#{entry.number}, {stage}] {r.config.describe()}: {outcome}"
        f"{reused} | {best_text} | failures: {failures} | {time_left}"
    )


def _verdict(ledger: Ledger, entry: Entry) -> str:
    """What its accuracy check says so far."""
    if ledger.safe(entry) or entry.record.metric is None:
        return ""
    confirmation = ledger.confirmation(entry)
    if confirmation is not None:
        return f" ({confirmation.verdict.value})"
    return " (passed screening)" if ledger.screened(entry) else " (outside tolerance)"
