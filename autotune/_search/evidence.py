"""Evidence bought from the budget: a candidate's accuracy confirmed look by look, each look
adding paired seeds (the candidate's run and the baseline's run of each new seed), for as long
as the check is unresolved and the seeds that would settle it fit before the deadline.

No fixed number of seeds stands: how many a look adds follows from what the runs show (the
paired drops' spread and the validation sample's noise say how many seeds would confirm a
harmless change, never the drops' interim mean, which would bias the look; see
:func:`autotune._guard.stats.seeds_to_settle`), capped only by the time left and by
:data:`STEP`, so a first estimate from a few seeds is checked by a look before it is trusted
with most of the budget. Every look spends part of the guard's error rate (see
:mod:`autotune._guard.guard`), which is why a look that fits goes straight to the seeds that
would settle it rather than one seed at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotune._guard.confirmation import Confirmation, RunFailed, Verdict
from autotune._guard.guard import AccuracyGuard
from autotune._guard.stats import SampleNoise, confirming_bound
from autotune._guard.words import confirmation_settle, describe
from autotune._search import storage, words
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.ledger import Entry
from autotune._trial.failures import FailureReason
from autotune._trial.outcome import AccuracyCheck, AccuracyRun, TrialOutcome

__all__ = ["STEP", "confirm", "evidence_value", "next_target", "unit_sums"]

STEP = 4  # a look adds at most this many times the seeds the check already has
UNTIMED_SEEDS = 32  # with no time budget (n_trials only), a check's seeds at the most


def next_target(
    n: int, need: int | None, cost: float, left: float | None, *, spare: float | None = None
) -> int | None:
    """How many seeds the next look should have: ``need`` (the seeds that would settle it, were
    the runs' mean and spread to hold), at most :data:`STEP` times ``n``, where ``cost`` (the
    seconds of one more paired seed) times the new seeds fits in ``left`` seconds (None: no
    time budget). Where ``need`` does not fit, a search spending its last time on the check
    takes as many seeds as fit in ``spare`` seconds (a step that is not expected to settle the
    check needs no time kept for measuring it as an answer), at least one more, even where no
    number of seeds is expected to settle it (``need`` None: the mean may still move, and
    there is nothing better to spend on); with no ``spare``, none: the check waits, as other
    candidates may be the better use of the time.
    With no time budget (``n_trials`` only), at most :data:`UNTIMED_SEEDS`. None: no look."""
    if need is not None and need <= n:
        return None
    target = STEP * max(n, 1) if need is None else min(need, STEP * max(n, 1))
    if left is None:
        target = min(target, UNTIMED_SEEDS)
        return target if target > n and need is not None else None
    if need is not None and n + math.floor(max(0.0, left) / max(cost, 1e-9)) >= target:
        return target
    if spare is None:
        return None
    fit = min(target, n + math.floor(max(0.0, spare) / max(cost, 1e-9)))
    return fit if fit > n else None


def evidence_value(speedup: float, p_within: float, seconds: float) -> float:
    """Expected gain per second of settling a check: the time the candidate would save over
    the answer so far (``speedup`` over it, less one), times how likely the check is to
    confirm it (``p_within``), per ``seconds`` of the next look."""
    return max(0.0, speedup - 1.0) * p_within / max(seconds, 1e-9)


def p_within(
    confirmation: Confirmation | None,
    tolerance: float,
    drops: list[float],
    noise: SampleNoise | None = None,
) -> float:
    """How likely a check is to end confirmed, from what its runs show: one minus the p-value
    of "the drop is beyond the tolerance", the validation sample's ``noise`` included (an even
    chance before any runs)."""
    if confirmation is None or len(drops) < 2:
        return 0.5
    return 1.0 - confirming_bound(drops, tolerance, 1, noise=noise).p


def seed_seconds(baseline: Baseline, entry: Entry, seed: int) -> float:
    """Seconds one more paired seed costs: the candidate's run, and the baseline's where it
    has no run of that seed yet."""
    candidate = baseline.run_seconds(entry.record)
    have = len(baseline.accuracy.runs) if baseline.accuracy is not None else 0
    return candidate + (baseline.run_seconds() if seed >= have else 0.0)


def confirm(
    bench: Bench,
    baseline: Baseline,
    entry: Entry,
    *,
    keep: float = 0.0,
    persist: float | None = None,
) -> Confirmation:
    """Check ``entry``'s accuracy against the baseline's, look by look, and file the verdict
    under its numerics. The first look pairs its runs with the baseline's seeds; an unresolved
    check continues (also from a check filed earlier) with the seeds :func:`next_target` says,
    while they fit before the deadline with ``keep`` seconds to spare. ``persist``: the search's
    last use of its time, keeping only that many seconds for steps that would not settle it."""
    assert baseline.guard is not None and baseline.accuracy is not None
    earlier = bench.ledger().confirmation(entry)
    # A check taken up again says so when it buys seeds, and its verdict again only then.
    looked, scale = True, 1.0
    if earlier is not None and earlier.verdict is Verdict.UNRESOLVED and len(earlier.runs) > 1:
        result, looked = earlier, False
    else:
        bench.report.trial(f"confirmation of trial #{entry.number}")
        seeds = baseline.first_seeds()
        expected = sum(seed_seconds(baseline, entry, s) for s in seeds)
        start = bench.deadline.now()
        result = _first_look(bench, baseline, entry, keep)
        scale = _overran(bench.deadline.now() - start, expected)
        _file(bench, entry, result)
    guard = baseline.guard  # the words' figures: the latest the loop read, no read more
    while result.verdict is Verdict.UNRESOLVED and result.confirmable:
        current = Baseline.of(bench.ledger()) or baseline
        guard = current.guard or guard
        n = len(result.runs)
        left = bench.deadline.left()
        target = next_target(
            n,
            result.need,
            scale * seed_seconds(current, entry, result.first_seed + n),
            None if left is None else left - keep,
            spare=None if left is None or persist is None else left - persist,
        )
        if target is None:
            if result.need is not None and result.need > n:
                start = result.first_seed
                cost = sum(seed_seconds(current, entry, start + s) for s in range(n, result.need))
                why = (
                    f"a search with no time budget spends at most {UNTIMED_SEEDS} seeds on a "
                    "check (pass timeout= to let it buy more)"
                    if left is None
                    else "they do not fit in the time left"
                )
                bench.detail(  # the verdict's line follows; the summary says what settles it
                    f"trial #{entry.number}: its next look would take {result.need} seeds "
                    f"(~{cost:.0f} s more): {why}"
                )
            break
        bench.detail(  # a look in between: one line says the check's verdict at its end
            f"trial #{entry.number}: unresolved over {n} seeds; running {target - n} more "
            f"({target} in all)"
        )
        looked = True
        start, first = bench.deadline.now(), result.first_seed
        expected = sum(seed_seconds(current, entry, first + s) for s in range(n, target))
        more = _more_seeds(bench, current, entry, result, target, keep)
        scale = _overran(bench.deadline.now() - start, expected)
        if more is None:
            break
        result = more
        _file(bench, entry, result)  # at every look: a search cut off keeps what it bought
    if looked:
        # One short line; the whole reasoning (and what would settle it) is the detail.
        whole = f"confirmation of trial #{entry.number}: {result.verdict} ({describe(result)})"
        storage.add_note(bench.study, whole)
        settle = confirmation_settle(result, guard) if guard is not None else None
        if settle:
            storage.add_note(bench.study, f"  to settle trial #{entry.number}: {settle}")
        bench.report(
            words.check_line(
                entry.number,
                str(result.verdict),
                result.drop,
                result.bound,
                result.tolerance or 0.0,
                len(result.runs),
            )
        )
    return result


def _overran(seconds: float, expected: float) -> float:
    """How many times its estimate a look took (at least 1): the next look's seeds are priced
    by it. Seeds are priced from screening throughput, which accuracy runs can overrun on a
    busy machine: unscaled, a look buys seeds that take the side-by-side rounds' time."""
    return max(1.0, seconds / expected) if expected > 0 else 1.0


def _first_look(bench: Bench, baseline: Baseline, entry: Entry, keep: float) -> Confirmation:
    """The candidate over :meth:`Baseline.first_seeds` (not seed 0: its screening run chose
    it), with the baseline's runs of those seeds it has none of yet. A run that failed (a
    crash, a metric that is not finite, a run that hung past its own limit) rejects the
    candidate; one stopped by the search's deadline (its grace spent), or a baseline's run
    that failed, says nothing of its accuracy: unresolved, and not checked again."""
    assert baseline.guard is not None and baseline.accuracy is not None
    seeds = baseline.first_seeds()
    # The check's rank among those that made a test (see guard.rejudged).
    order = 1 + sum(1 for c in bench.ledger().confirmations.values() if c.tested)
    start = Confirmation(runs=(), verdict=Verdict.UNRESOLVED, first_seed=seeds[0], order=order)
    result = _look(bench, baseline, entry, start, seeds[-1] + 1, looks=1, keep=keep)
    if isinstance(result, Confirmation):
        return result
    outcome, of_baseline = result
    # Stopped by the deadline, or at the time kept for the side-by-side rounds: no verdict.
    late = bench.deadline.past() or (keep > 0 and not bench.deadline.fits(keep))
    stopped = of_baseline or (outcome.failure is FailureReason.TIMEOUT and late)
    failed = RunFailed.FAILED
    if stopped:
        failed = RunFailed.BASELINE_STOPPED if of_baseline else RunFailed.STOPPED
    return Confirmation(
        runs=(),
        verdict=Verdict.UNRESOLVED if stopped else Verdict.REJECTED,
        failed=failed,
        failure=outcome.message,
        trial=entry.number,
        at=bench.deadline.now(),
        order=order,
        first_seed=seeds[0],
    )


def unit_sums(
    runs: Sequence[AccuracyRun], earlier: Sequence[float] | None = ()
) -> tuple[float, ...] | None:
    """The runs' per-unit sums added up over the runs (and onto ``earlier``'s; None: not
    recorded for some run)."""
    if earlier is None or any(r.units is None for r in runs):
        return None
    columns = [list(earlier)] if earlier else []
    columns += [list(r.units) for r in runs if r.units is not None]
    if not columns or len({len(c) for c in columns}) != 1:
        return None
    return tuple(math.fsum(values) for values in zip(*columns, strict=True))


def _file(bench: Bench, entry: Entry, result: Confirmation) -> None:
    storage.file_confirmation(bench.study, bench.ledger().numerics_id(entry.config), result)


def _more_seeds(
    bench: Bench, baseline: Baseline, entry: Entry, last: Confirmation, target: int, keep: float
) -> Confirmation | None:
    """The look after ``last``: ``target`` pairs in all (None: a run failed, the last look
    stands)."""
    end = last.first_seed + target
    result = _look(bench, baseline, entry, last, end, looks=last.looks + 1, keep=keep)
    return result if isinstance(result, Confirmation) else None


def _look(
    bench: Bench,
    baseline: Baseline,
    entry: Entry,
    last: Confirmation,
    end: int,
    *,
    looks: int,
    keep: float,
) -> Confirmation | tuple[TrialOutcome, bool]:
    """A look over ``last``'s seeds and those after them up to ``end`` (exclusive): the
    candidate's runs of the new seeds, and the baseline's where it has no run of them yet (its
    new runs join its accuracy record, which later checks pair with too). A run that failed:
    its outcome, and whether it was the baseline's. No run eats into the ``keep`` seconds held
    for the side-by-side rounds: checks that overran their estimates would leave the answer
    unmeasured side by side."""
    assert baseline.accuracy is not None
    first = last.first_seed
    base_seeds = tuple(range(len(baseline.accuracy.runs), end))
    new_seeds = tuple(range(first + len(last.runs), end))
    if base_seeds:
        more = bench.execute(
            bench.settings.baseline,
            accuracy=AccuracyCheck(
                samples=baseline.accuracy.samples,
                seeds=base_seeds,
                config=baseline.accuracy.config,
            ),
            measured=baseline.record.measurement,
            expected=baseline.run_seconds() * len(base_seeds),
            keep=keep,
        )
        if not more.ok:
            return more, True
        storage.add_baseline_runs(bench.study, more.accuracy)
    outcome = bench.execute(
        entry.config,
        accuracy=baseline.check_of(entry.config, new_seeds),
        measured=entry.record.measurement,
        expected=baseline.run_seconds(entry.record) * len(new_seeds),
        keep=keep,
    )
    extended = Baseline.of(bench.ledger())
    if not outcome.ok or extended is None or extended.guard is None:
        return outcome, False
    guard = extended.guard
    more_squares = guard.pair_squares(outcome.accuracy)
    squares = None
    if more_squares is not None and (last.squares is not None or not last.runs):
        squares = (last.squares or 0.0) + more_squares
    return guard.confirm(
        [*last.runs, *(r.metric for r in outcome.accuracy)],
        units=unit_sums(outcome.accuracy, last.units if last.runs else ()),
        squares=squares,
        looks=looks,
        order=last.order,
        trial=entry.number,
        at=bench.deadline.now(),
        first=first,
        capped=[*(last.capped_units or ()), *won_by_far(guard, outcome.accuracy)],
    )


def won_by_far(
    guard: AccuracyGuard, runs: Sequence[AccuracyRun]
) -> list[tuple[int, tuple[float, ...]]]:
    """(seed, per-unit values) of the candidate's ``runs`` that beat the baseline's run of
    their seed by more than the tolerance: kept with the check, as what takes such a pair out
    of the counted bound's validation noise (:func:`autotune._guard.guard.counted_noise`)."""
    out = []
    for run in runs:
        if run.units is None or run.seed >= guard.repeats:
            continue
        (drop,) = guard.paired_drops([run.metric], run.seed)
        if drop < -guard.tolerance:
            out.append((run.seed, tuple(run.units)))
    return out
