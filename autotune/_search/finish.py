"""Checking and settling: a candidate's accuracy confirmed over the baseline's seeds (paired
with its runs), and the answers measured again side by side with the baseline in alternating
rounds, which is where the reported speedup comes from."""

from __future__ import annotations

import dataclasses

from autotune._search import figures, storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.evidence import confirm, evidence_value, p_within, seed_seconds
from autotune._search.ledger import Entry, Ledger
from autotune._trial.runner import Budget

__all__ = ["ROUNDS", "confirm_pending", "side_by_side", "side_by_side_seconds"]

ROUNDS = 3  # side-by-side rounds of the answers and the baseline
MIN_ROUNDS = figures.MIN_ROUNDS  # the fewest that make a measured speedup
MAX_STRETCH = 4.0  # the rounds' measurements last at most this many times the search's


def confirm_pending(bench: Bench, baseline: Baseline) -> None:
    """Spend what the side-by-side rounds leave on the checks that would change the answer:
    each time the open check of most expected gain per second (see
    :func:`autotune._search.evidence.evidence_value`), its first look or its next seeds, for as
    long as its looks fit (a search's last use of its time: see ``persist``)."""
    if baseline.guard is None or baseline.guard.repeats < 2:
        return
    done: set[str] = set()
    while True:
        ledger = bench.ledger()
        current = Baseline.of(ledger) or baseline
        guard = ledger.guard
        if guard is None or not guard.learned:
            return  # every check would compare models that did not learn
        best = ledger.best()
        floor = ledger.projected(best) if best is not None else None
        options: list[tuple[float, Entry, float]] = []
        for entry in ledger.open_checks(unresolved=True):
            if ledger.numerics_id(entry.config) in done:
                continue
            c = ledger.confirmation(entry)
            if c is not None and not c.confirmable:
                continue  # no number of seeds would confirm it
            m = entry.record.measurement
            first = c is None
            cost = (
                current.confirm_seconds(m.throughput if m is not None else None)
                if first
                else seed_seconds(current, entry, len(c.runs) if c is not None else 0)
            )
            drops = guard.paired_drops(c.runs) if c is not None else []
            noise = guard.sample_noise(c.units, drops, c.squares) if c is not None else None
            # Over the answer so far; none known (no answer yet, or no time): no gain.
            speedup = figures.speedup(floor, ledger.projected(entry)) or 1.0
            value = evidence_value(speedup, p_within(c, guard.tolerance, drops, noise), cost)
            options.append((value, entry, cost))
        if not options:
            return
        _, entry, cost = max(options, key=lambda o: o[0])
        done.add(ledger.numerics_id(entry.config))
        # The rounds that measure the answers side by side must still fit after it: with it
        # among them where it may settle, the answers so far where it will not.
        after = MIN_ROUNDS / ROUNDS * side_by_side_seconds(ledger, current, entry)
        now = MIN_ROUNDS / ROUNDS * side_by_side_seconds(ledger, current)
        if bench.deadline.past(cost + now):
            bench.report(f"no time left to check trial #{entry.number}'s accuracy (~{cost:.0f} s)")
            continue
        confirm(bench, current, entry, keep=after, persist=now)


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
    left: the reported ratio is the figure least exposed to noise. Where the rounds change
    which answer leads, to one they did not measure, the new answers get rounds too while
    they fit: the answer's speedup is a side-by-side one wherever the budget allows."""
    measured: set[int] = set()
    for _ in range(2):
        contenders = _contenders(bench.ledger())
        if len(contenders) < 2 or {e.number for e in contenders} <= measured:
            break
        if not _rounds(bench, baseline, contenders):
            if not measured:
                bench.report("no time left to measure the answers again side by side")
                return
            break
        measured |= {n for e in contenders for n in bench.ledger().twins(e)}
    ledger = bench.ledger()
    best, base = ledger.best(), ledger.baseline
    if best is not None and base is not None and best.number != base.number:
        speedups = ledger.round_speedups(best)
        figure = figures.side_by_side(speedups)  # the result's headline figure
        if figure is not None:
            median, low, high = figure
            bench.report(
                f"side by side over {len(speedups)} rounds: trial #{best.number} "
                f"{median:.2f}x the baseline (range {low:.2f}-{high:.2f}x)"
            )


def _rounds(bench: Bench, baseline: Baseline, contenders: list[Entry]) -> int:
    """Up to :data:`ROUNDS` side-by-side rounds of ``contenders`` (the baseline first), as
    many as fit; returns how many were measured."""
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
                measured[entry.number] = s.projected_time(outcome.measurement)
        storage.add_round(bench.study, measured)
        done += 1
        if len(measured) < len(order):
            # A contender failed (stopped at the deadline on a loaded machine): the next round
            # would fail the same way, only later.
            bench.report("side by side: a measurement failed; no more rounds")
            break
    return done
