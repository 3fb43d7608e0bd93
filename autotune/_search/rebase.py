"""The baseline measured again while the search runs, so that every ratio is against a baseline
measured in the same state of the machine.

The baseline's first measurement comes when caches are cold and the machine may still be
busy, and every screening ratio against a slow first figure runs high. It is taken again

- when a candidate ran while other processes used the machine differently from every baseline
  measurement so far (:meth:`Load.differs`; at most :data:`STATE_RUNS` times in a row, then the
  candidate keeps its reading with the state named), and
- every so often (:data:`CHECK_SHARE` of the time between two), since machines drift,

within :data:`CHECK_SHARE` of the budget for the second kind. Each measurement is filed in the
study (:func:`storage.add_baseline_check`); the ledger compares each trial with the one of its
own state nearest it (:meth:`Ledger.reference`) and prices runs from the latest.
"""

from __future__ import annotations

from autotune._knobs.config import TrainingConfig
from autotune._load import Load
from autotune._search import storage
from autotune._search.baseline import SLACK, Baseline
from autotune._search.bench import Bench
from autotune._search.ledger import Ledger, measure_again
from autotune._search.policy import STAGE_ATTR, Stage
from autotune._search.record import BaselineCheck, CheckReason, Record, Role
from autotune._space import SearchSpace

__all__ = ["AGAIN", "CHECK_SHARE", "JUMP", "STATE_RUNS", "due", "recheck", "requeue"]

# The share of the search's time its regular re-measurements of the baseline may take: one
# measurement per (its length / CHECK_SHARE) seconds, and no more in all.
CHECK_SHARE = 0.08
STATE_RUNS = 2  # re-measurements for a change of state in a row, at most
JUMP = 0.25  # a figure this far from the last of the same state is measured once more
MIN_GAP = 30.0  # seconds between two regular re-measurements, at the least
# Configs measured while the machine was busy that are measured again once it is free, at most
# (in all): each that beat the baseline in that state, the fastest there first. Not fewer: a
# busy state's ranking puts configs that gain from it (one thread) before the truly fastest.
AGAIN = 12


def due(ledger: Ledger, load: Load | None, now: float, budget: float | None) -> CheckReason | None:
    """Why the baseline should be measured again now, after a candidate measured in the state
    ``load`` at time ``now`` (None: it is not due). ``budget``: the search's time budget in
    seconds (None: no time limit, where only the cadence bounds it)."""
    checks = ledger.checks
    if not checks:
        return None
    latest = checks[-1]
    if load is not None and all(load.differs(c.load) for c in checks):
        recent = ledger.baseline_checks[-STATE_RUNS:]
        if len(recent) < STATE_RUNS or any(c.reason is not CheckReason.STATE for c in recent):
            return CheckReason.STATE
    cost = SLACK * (latest.measure_seconds or 0.0)
    if cost <= 0:
        return None
    spent = sum(SLACK * c.measure_seconds for c in ledger.baseline_checks)
    if budget is not None and spent + cost > CHECK_SHARE * budget:
        return None
    return CheckReason.CADENCE if now - latest.at >= max(MIN_GAP, cost / CHECK_SHARE) else None


def recheck(
    bench: Bench, load: Load | None, *, reserve: float, trial: int | None = None
) -> BaselineCheck | None:
    """Measure the baseline again where :func:`due` says so and the time left holds it beside
    the ``reserve`` kept for pending work; file it and say so in one line. ``load``: the
    machine's state during the candidate just measured (trial number ``trial``). Returns the
    new measurement (None: none was taken, or it failed)."""
    ledger = bench.ledger()
    deadline = bench.deadline
    reason = due(ledger, load, deadline.now(), deadline.budget)
    baseline = Baseline.of(ledger)
    if reason is None or baseline is None:
        return None
    if not deadline.fits(baseline.measure_seconds + reserve):
        return None
    check = _measure(bench, baseline, reason, reserve)
    if check is None:
        return None
    before = ledger.reference(_as_record(check))
    if (
        before is not None
        and abs(check.throughput / before.throughput - 1) > JUMP
        and deadline.fits(baseline.measure_seconds + reserve)
    ):
        # The same state of the machine, yet a figure far from the last: one draw may be an
        # outlier that every ratio after it would divide by: measured once more, the second kept.
        check = _measure(bench, baseline, reason, reserve) or check
    storage.add_baseline_check(bench.study, check)  # the one kept: the last taken
    words = _words(check, ledger.latest_check, load, trial)
    if check.reason is CheckReason.STATE:
        bench.report(words)  # a change of the machine's state is the story's
    else:
        storage.add_note(bench.study, words)  # a regular one is the detail's
    return check


def requeue(bench: Bench, space: SearchSpace, done: set[TrainingConfig]) -> bool:
    """Once the baseline's latest measurement found the machine free, queue the configs that
    led while it was busy to be measured again in this state (:func:`measure_again`: their
    ratios were of the busy one), at most :data:`AGAIN` in all; ``done``: the configs queued
    so far (updated). Said in one line. Returns whether any were queued."""
    if not bench.settings.guided:  # it measures exactly what its sampler proposes
        return False
    ledger = bench.ledger()
    latest, base = ledger.latest_check, ledger.baseline
    if latest is None or latest.load is None or latest.load.busy or base is None:
        return False
    left = AGAIN - len(done)
    again = [e for e in measure_again(ledger, AGAIN) if e.config not in done][: max(left, 0)]
    for e in again:
        done.add(e.config)
        stage = Stage.SAFE if ledger.safe(e) else Stage.FAST
        params = space.params_of(e.config, base.config)
        bench.study.enqueue_trial(params, user_attrs={STAGE_ATTR: stage.value})
    if again:
        names = ", ".join(f"#{e.number}" for e in again)
        bench.report(f"machine: free now; measuring again what led while busy: trial {names}")
        bench.detail(
            f"machine: free now; measuring again the configs that led while it was busy "
            f"(their ratios were of that state): trial {names}"
        )
    return bool(again)


def _measure(
    bench: Bench, baseline: Baseline, reason: CheckReason, reserve: float
) -> BaselineCheck | None:
    """The baseline measured once more (None: the run failed, said in a line)."""
    cfg = baseline.record.config
    outcome = bench.execute(cfg, expected=baseline.measure_seconds / SLACK, keep=reserve)
    m = outcome.measurement
    if not outcome.ok or m is None:
        bench.report(f"baseline: measuring it again failed ({outcome.failure}): {outcome.message}")
        return None
    check = BaselineCheck(
        at=bench.deadline.now(),
        projected_time=bench.settings.projected_time(m, cfg),
        throughput=m.throughput,
        measure_seconds=outcome.seconds,
        load=outcome.load,
        reason=reason,
    )
    return check


def _as_record(check: BaselineCheck) -> Record:
    """A check as a record of the machine's state at its time (what Ledger.reference reads)."""
    return Record(role=Role.BASELINE, config=TrainingConfig(), at=check.at, load=check.load)


def _words(
    check: BaselineCheck, before: BaselineCheck | None, load: Load | None, trial: int | None
) -> str:
    was = f" (was {before.throughput:,.0f})" if before is not None else ""
    figure = f"{check.throughput:,.0f} samples/s{was}"
    if check.reason is CheckReason.STATE and load is not None:
        who = f"trial #{trial}" if trial is not None else "the last trial"
        state = (
            f"other processes used ~{load.others:.1f} of {load.cores} cores during {who}"
            if load.busy
            else f"the machine was free again during {who}"
        )
        return f"machine: {state}; baseline measured again in that state: {figure}"
    return f"baseline measured again: {figure}"
