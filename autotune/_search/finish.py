"""Checking and settling: a candidate's accuracy confirmed over the baseline's seeds (paired
with its runs), and the answers measured again side by side with the baseline in alternating
rounds, which is where the reported speedup comes from."""

from __future__ import annotations

import dataclasses

from autotune._search import storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.guard import Confirmation, Verdict
from autotune._search.ledger import Entry, Ledger
from autotune._trial.runner import AccuracyCheck, Budget

__all__ = ["ROUNDS", "confirm", "confirm_pending", "side_by_side", "side_by_side_seconds"]

ROUNDS = 3  # side-by-side rounds of the answers and the baseline
MIN_ROUNDS = 2
MAX_CONFIRMATIONS = 3  # pending candidates confirmed in turn at the end
MAX_SEEDS = 8  # an unresolved confirmation is taken again with at most this many seeds
MAX_STRETCH = 4.0  # the rounds' measurements last at most this many times the search's


def confirm(bench: Bench, baseline: Baseline, entry: Entry, *, keep: float = 0.0) -> Confirmation:
    """Run ``entry``'s config over the baseline's other seeds, pair each run with the
    baseline's run of the same seed, and file the verdict under its numerics. Where that leaves
    it unresolved and the seeds that would settle it (both configs' runs of them) fit before the
    deadline with ``keep`` seconds to spare, they are run and the verdict is taken again."""
    assert baseline.guard is not None and baseline.accuracy is not None
    record = entry.record
    bench.report.trial(f"confirmation of trial #{entry.number}")
    m = record.measurement
    throughput = m.throughput if m is not None else None
    check = AccuracyCheck(
        samples=baseline.accuracy.samples, seeds=tuple(range(1, baseline.guard.repeats))
    )
    outcome = bench.execute(
        entry.config, accuracy=check, measured=m, expected=baseline.confirm_seconds(throughput)
    )
    metric = record.metric
    if outcome.ok and metric is not None:
        runs = [metric, *(r.metric for r in outcome.accuracy)]
        result = baseline.guard.confirm(runs, trial=entry.number, at=bench.deadline.now())
        result = _more_seeds(bench, baseline, entry, runs, result, keep)
    else:
        result = Confirmation(
            runs=(),
            verdict=Verdict.REJECTED,
            failure=outcome.message,
            trial=entry.number,
            at=bench.deadline.now(),
        )
    storage.file_confirmation(bench.study, bench.ledger().numerics_id(entry.config), result)
    bench.report(f"confirmation of trial #{entry.number}: {result.verdict} ({result.describe()})")
    if result.settle:
        bench.report(f"  to settle it: {result.settle}")
    return result


def _more_seeds(
    bench: Bench,
    baseline: Baseline,
    entry: Entry,
    runs: list[float],
    result: Confirmation,
    keep: float,
) -> Confirmation:
    """An unresolved confirmation taken again with the seeds its paired spread says would
    settle it (up to :data:`MAX_SEEDS`), where they fit: the baseline's runs of the new seeds
    join its accuracy record (later checks pair with them too), the candidate's join its runs."""
    need = result.need
    if result.verdict is not Verdict.UNRESOLVED or need is None or need > MAX_SEEDS:
        return result
    assert baseline.accuracy is not None
    m = entry.record.measurement
    throughput = m.throughput if m is not None else None
    have = len(baseline.accuracy.runs)
    base_seeds = tuple(range(have, need))
    new_seeds = tuple(range(len(runs), need))
    cost = baseline.run_seconds() * len(base_seeds) + baseline.run_seconds(throughput) * len(
        new_seeds
    )
    if bench.deadline.past(cost + keep) or not bench.deadline.fits(cost):
        bench.report(
            f"trial #{entry.number}: {need} seeds would settle its accuracy (~{cost:.0f} s "
            "more): they do not fit in the budget"
        )
        return result
    bench.report(f"trial #{entry.number}: unresolved over {len(runs)} seeds; running {need}")
    samples = baseline.accuracy.samples
    if base_seeds:
        more = bench.execute(
            bench.settings.baseline,
            accuracy=AccuracyCheck(samples=samples, seeds=base_seeds),
            measured=baseline.record.measurement,
            expected=baseline.run_seconds() * len(base_seeds),
        )
        if not more.ok:
            return result
        acc = baseline.accuracy
        storage.write_baseline_accuracy(
            bench.study,
            dataclasses.replace(
                acc, runs=(*acc.runs, *more.accuracy), seconds=acc.seconds + more.seconds
            ),
        )
    outcome = bench.execute(
        entry.config,
        accuracy=AccuracyCheck(samples=samples, seeds=new_seeds),
        measured=m,
        expected=baseline.run_seconds(throughput) * len(new_seeds),
    )
    extended = Baseline.of(bench.ledger())
    if not outcome.ok or extended is None or extended.guard is None:
        return result
    runs = [*runs, *(r.metric for r in outcome.accuracy)]
    return extended.guard.confirm(runs, trial=entry.number, at=bench.deadline.now())


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
        if confirm(bench, baseline, entry, keep=after).passed:
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


def _round_budget(bench: Bench, per_round: float) -> tuple[Budget, float]:
    """The measurement budget of the side-by-side rounds, and how many times the search's
    measurement it lasts: stretched to fill the time left (never shortened)."""
    budget = bench.settings.budget
    left = bench.deadline.left()
    if left is None or per_round <= 0:
        return budget, 1.0
    stretch = min(MAX_STRETCH, max(1.0, left / (ROUNDS * per_round)))
    if stretch <= 1.0:
        return budget, 1.0
    return dataclasses.replace(budget, timed_samples=round(budget.timed_samples * stretch)), stretch


def _relative_cost(entry: Entry, baseline: Baseline) -> float:
    seconds = entry.record.measure_seconds
    return seconds / baseline.record.measure_seconds if baseline.record.measure_seconds else 1.0


def side_by_side(bench: Bench, baseline: Baseline) -> None:
    """Measure the baseline and the answers again, one after the other in each round, the
    order rotating from round to round, so that drift in the machine's state hits all alike
    and the speedup reported is what the same machine gives side by side. Each measurement is
    the search's, stretched (up to :data:`MAX_STRETCH` times the timed samples) to use the time
    left: the reported ratio is the figure least exposed to noise."""
    ledger = bench.ledger()
    contenders = _contenders(ledger)
    if len(contenders) < 2:
        return
    s = bench.settings
    per_round = sum(baseline.measure_seconds * _relative_cost(e, baseline) for e in contenders)
    budget, stretch = _round_budget(bench, per_round)
    done = 0
    for r in range(ROUNDS):
        if bench.deadline.past(per_round * stretch):  # the grace is the last it may take
            break
        order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
        bench.report.trial(f"side by side with the baseline: round {r + 1}/{ROUNDS}")
        measured: dict[int, float] = {}
        for entry in order:
            expected = stretch * baseline.measure_seconds * _relative_cost(entry, baseline)
            outcome = bench.execute(entry.config, expected=expected, budget=budget)
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
