"""Checking and settling: a candidate's accuracy confirmed over the baseline's seeds (paired
with its runs), and the answers measured again side by side with the baseline in alternating
rounds, which is where the reported speedup comes from."""

from __future__ import annotations

from autotune import _knobs
from autotune._search import storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.guard import Confirmation, Verdict
from autotune._search.ledger import Entry, Ledger
from autotune._trial.runner import AccuracyCheck

__all__ = ["ROUNDS", "confirm", "confirm_pending", "side_by_side", "side_by_side_seconds"]

ROUNDS = 3  # side-by-side rounds of the answers and the baseline
MIN_ROUNDS = 2
MAX_CONFIRMATIONS = 3  # pending candidates confirmed in turn at the end


def confirm(bench: Bench, baseline: Baseline, entry: Entry) -> Confirmation:
    """Run ``entry``'s config over the baseline's other seeds, pair each run with the
    baseline's run of the same seed, and file the verdict under its numerics."""
    assert baseline.guard is not None and baseline.accuracy is not None
    record = entry.record
    seeds = tuple(range(1, baseline.guard.repeats))
    check = AccuracyCheck(samples=baseline.accuracy.samples, seeds=seeds)
    bench.report.trial(f"confirmation of trial #{entry.number}")
    m = record.measurement
    expected = baseline.confirm_seconds(m.throughput if m is not None else None)
    outcome = bench.execute(entry.config, accuracy=check, measured=m, expected=expected)
    metric = record.metric
    if outcome.ok and metric is not None:
        runs = [metric, *(r.metric for r in outcome.accuracy)]
        result = baseline.guard.confirm(runs, trial=entry.number, at=bench.deadline.now())
    else:
        result = Confirmation(
            runs=(),
            verdict=Verdict.REJECTED,
            failure=outcome.message,
            trial=entry.number,
            at=bench.deadline.now(),
        )
    storage.file_confirmation(bench.study, _knobs.numerics_id(entry.config), result)
    bench.report(f"confirmation of trial #{entry.number}: {result.verdict} ({result.describe()})")
    if result.settle:
        bench.report(f"  to settle it: {result.settle}")
    return result


def confirm_pending(bench: Bench, baseline: Baseline) -> None:
    """Confirm the fastest candidate that passed screening and is faster than the answer so
    far, and the next one if it is rejected, while the budget lasts."""
    if baseline.guard is None or baseline.guard.repeats < 2:
        return
    for _ in range(MAX_CONFIRMATIONS):
        entry = bench.ledger().unconfirmed_leader()
        if entry is None:
            return
        throughput = entry.record.measurement.throughput if entry.record.measurement else None
        # The rounds that measure the answers side by side must still fit after it.
        after = MIN_ROUNDS / ROUNDS * side_by_side_seconds(bench.ledger(), baseline, entry)
        if bench.deadline.past(baseline.confirm_seconds(throughput) + after):
            bench.report(
                f"no time left to confirm trial #{entry.number}'s accuracy over several seeds"
            )
            return
        if confirm(bench, baseline, entry).passed:
            return


def _contenders(ledger: Ledger, extra: Entry | None = None) -> list[Entry]:
    """The baseline and the answers: the safe one, and the fast one where there is one (or
    ``extra``, a candidate that would become it if confirmed)."""
    out: list[Entry] = []
    for e in (ledger.baseline, ledger.best_safe(), extra or ledger.best_fast()):
        if e is not None and all(e.config != o.config for o in out):
            out.append(e)
    return out


def side_by_side_seconds(ledger: Ledger, baseline: Baseline, extra: Entry | None = None) -> float:
    """Expected seconds of the side-by-side rounds, if the answers so far stand (or with
    ``extra`` as the fast answer)."""
    contenders = _contenders(ledger, extra)
    if len(contenders) < 2:
        return 0.0
    per_round = sum(baseline.measure_seconds * _relative_cost(e, baseline) for e in contenders)
    return ROUNDS * per_round


def _relative_cost(entry: Entry, baseline: Baseline) -> float:
    seconds = entry.record.measure_seconds
    return seconds / baseline.record.measure_seconds if baseline.record.measure_seconds else 1.0


def side_by_side(bench: Bench, baseline: Baseline) -> None:
    """Measure the baseline and the answers again, one after the other in each round, the
    order rotating from round to round, so that drift in the machine's state hits all alike
    and the speedup reported is what the same machine gives side by side."""
    ledger = bench.ledger()
    contenders = _contenders(ledger)
    if len(contenders) < 2:
        return
    s = bench.settings
    done = 0
    for r in range(ROUNDS):
        cost = sum(baseline.measure_seconds * _relative_cost(e, baseline) for e in contenders)
        if bench.deadline.past(cost):  # the grace past the deadline is the last it may take
            break
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        bench.report.trial(f"side by side with the baseline: round {r + 1}/{ROUNDS}")
        measured: dict[int, float] = {}
        for entry in order:
            expected = baseline.measure_seconds * _relative_cost(entry, baseline)
            outcome = bench.execute(entry.config, expected=expected)
            if outcome.ok and outcome.measurement is not None:
                projected = outcome.measurement.projected_time(s.planned_samples, s.planned_epochs)
                measured[entry.number] = projected
        storage.add_round(bench.study, measured)
        done += 1
    if not done:
        bench.report("no time left to measure the answers again side by side")
        return
    ledger = bench.ledger()
    best = ledger.best()
    if best is not None and best.number != contenders[0].number:
        speedups = ledger.round_speedups(best)
        if speedups:
            bench.report(
                f"side by side over {len(speedups)} rounds: trial #{best.number} "
                f"{sorted(speedups)[len(speedups) // 2]:.2f}x the baseline "
                f"(range {min(speedups):.2f}-{max(speedups):.2f}x)"
            )
