"""The accuracy question's share of the budget: priced once the baseline's throughput is
measured, kept from the safe stage (after its own share), asked when only it is left, at the
longest horizon the time left holds.

A plan priced from the whole budget can be found not to fit the time left later, and then
every check is dropped for questions worth less. So the plan is made before the first
candidate (and where not even the shortest horizon's runs and one check fit, that is said
then, with the timeout that would hold one), the time it keeps counts each run's start-up,
and the first check comes before the rounds: the rounds measure answers, a check makes one.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune._guard.plan import timeout_for
from autotune._search import storage
from autotune._search.baseline import (
    Baseline,
    GuardRunsFailed,
    accuracy_plan_seconds,
    choose_horizon,
    measure_baseline_accuracy,
)
from autotune._search.bench import Bench
from autotune._search.candidate import expected_seconds
from autotune._search.ledger import Ledger
from autotune._search.state import LoopState

__all__ = ["SAFE_FIRST_SHARE", "AccuracyQuestion"]

# Of the time left once the baseline is measured, the share the safe stage has before the time
# kept for the accuracy question may cut it short: a safe win is cheap and certain, and the
# accuracy runs train with the safe answer's knobs.
SAFE_FIRST_SHARE = 0.2
# Screenings the question keeps time for beyond the checked candidate's own: the first change
# of the numerics screened is the boldest (the largest projected win) and often fails its
# screening, which leaves the next one too little time for its check without this spare.
SPARE_SCREENINGS = 1


class AccuracyQuestion:
    """When and at which horizon the baseline's accuracy runs are made, for one search.
    ``reserve(ledger)``: the seconds the loop keeps for pending work (a leader's confirmation,
    the side-by-side rounds)."""

    def __init__(self, bench: Bench, state: LoopState, reserve: Callable[[Ledger], float]) -> None:
        self.bench = bench
        self.state = state
        self.reserve = reserve

    def pending(self, *, worker: bool) -> bool:
        """Whether this process still owes the search its accuracy guard: the coordinator's,
        where the space changes the numerics and checks were not ruled out."""
        state = self.state
        return (
            not worker
            and not state.no_checks
            and state.baseline is not None
            and state.baseline.guard is None
            and bool(state.space.numerics_knobs(split_free=state.settings.split_free))
        )

    def plan(self, *, worker: bool) -> None:
        """Once the baseline's throughput is measured, before any candidate: how much of the
        budget the accuracy question keeps (the baseline's runs at the plan's horizon and one
        check, about as long again, with their start-ups), which the safe stage may not use
        after its own share; or, where not even the shortest horizon's runs and one check fit
        after that share, say so now, with the timeout that would hold one."""
        state, bench = self.state, self.bench
        left = bench.deadline.left()
        if self.failed() or not self.pending(worker=worker) or left is None:
            return
        assert state.baseline is not None
        ledger = bench.ledger()
        fixed = self.overhead(ledger, state.baseline)
        # A check comes before the side-by-side rounds (they measure answers; a check makes
        # one): only a pending leader's confirmation is kept from it.
        reserve = self.confirm_reserve(ledger)
        cost = accuracy_plan_seconds(bench, state.baseline)
        least = cost.least_question_seconds + fixed + reserve
        safe = SAFE_FIRST_SHARE * left
        if not bench.deadline.fits(least + safe):
            self._no_time(least + safe)
            return
        kept = cost.question_seconds + self.spare(ledger, state.baseline, cost.seconds) + fixed
        state.keep_for_guard(kept, safe_until=bench.deadline.now() + safe)
        spare = f" and {SPARE_SCREENINGS} more screening" if SPARE_SCREENINGS else ""
        what = (
            f"the baseline's accuracy runs ({cost.samples:,} samples each), one candidate's "
            f"check{spare}"
        )
        # One short line in the story (the stage it opens); the whole plan is the detail's.
        if kept + safe <= left:
            bench.report(
                f"accuracy guard: ~{kept:.0f} s kept for its runs and one check; the safe "
                "knobs (numerics unchanged) come first"
            )
            bench.detail(
                f"accuracy guard: ~{kept:.0f} s of the budget are kept for {what}; the knobs "
                "that leave the numerics alone are searched until then"
            )
        else:
            # Not "kept": the runs may want more than is left. The safe knobs have their
            # share; the runs then shrink to the time left.
            bench.report(
                f"accuracy guard: its runs would take ~{kept:.0f} s; the safe knobs have "
                f"~{safe:.0f} s first, then the runs shorten to the time left"
            )
            bench.detail(
                f"accuracy guard: {what} would take ~{kept:.0f} s, more than the "
                f"{left - safe:.0f} s left after the safe knobs' share (~{safe:.0f} s): the "
                "knobs that leave the numerics alone are searched for that share, then the "
                "runs shorten to the time left"
            )

    def spare(self, ledger: Ledger, baseline: Baseline, runs_seconds: float) -> float:
        """Seconds of :data:`SPARE_SCREENINGS` screenings: each a throughput measurement and
        one accuracy run (``runs_seconds`` is the baseline's runs', over its seeds)."""
        s = self.state.settings
        one = runs_seconds / s.accuracy_repeats
        return SPARE_SCREENINGS * (one + expected_seconds(s.baseline, ledger, baseline, s.budget))

    def due(self, ledger: Ledger, baseline: Baseline, *, worker: bool) -> bool:
        """Whether the time kept for the accuracy question has come: the safe stage had its
        share, and one more throughput measurement and the pending work would leave less."""
        kept = self.state.guard_seconds
        if kept is None or not self.pending(worker=worker):
            return False
        if self.bench.deadline.now() < self.state.safe_until:
            return False  # the safe stage's own share first
        s = self.state.settings
        cheapest = expected_seconds(s.baseline, ledger, baseline, s.budget)
        return not self.bench.deadline.fits(cheapest + self.reserve(ledger) + kept)

    def ask(self) -> None:
        """Measure the baseline's accuracy runs where the space changes the numerics, at the
        longest horizon at which they and a candidate's check after them fit the time left
        (shorter than planned where the time left is short); where not even the shortest
        does, say that only the knobs that leave the numerics alone are searched."""
        state, bench = self.state, self.bench
        assert state.baseline is not None
        if self.failed() or state.baseline.guard is not None or state.no_checks:
            return
        if not state.space.numerics_knobs(split_free=state.settings.split_free):
            state.drop_checks()
            return
        state.guard_due()
        ledger = bench.ledger()
        reserve = self.confirm_reserve(ledger)  # the rounds come after a check, not before
        fixed = self.overhead(ledger, state.baseline)
        left = bench.deadline.left()
        room = None if left is None else left - reserve - fixed
        cost = accuracy_plan_seconds(bench, state.baseline, left=room)
        if not cost.fits:
            self._no_time(cost.least_question_seconds + fixed + reserve)
            return
        try:
            state.measured(
                measure_baseline_accuracy(bench, state.baseline, reserve=reserve, left=room)
            )
            state.measured(choose_horizon(bench, state.baseline, self.reserve(bench.ledger())))
        except GuardRunsFailed as failed:
            # The guard's failure does not end the search: what was found stands, and the
            # safe stage goes on.
            storage.write_guard_failure(bench.study, failed.failure)
            state.drop_checks()
            bench.report(
                f"accuracy guard: {failed.failure.describe()}: no accuracy check is possible; "
                "only the knobs that leave the numerics alone are searched"
            )

    def failed(self) -> bool:
        """Whether the baseline's accuracy runs failed, as the study says (a worker's search,
        a resumed one, as well as this one's): then no accuracy check is made, and none waited
        for."""
        if storage.read_guard_failure(self.bench.study) is None:
            return False
        self.state.drop_checks()
        return True

    def overhead(self, ledger: Ledger, baseline: Baseline) -> float:
        """Seconds a first check costs besides its runs' training: the candidate's throughput
        measurement, and the start-up of four runs (the baseline's accuracy runs, the
        candidate's screening run, the baseline's run of the check's last seed and the
        candidate's pairs), each about a measurement's."""
        s = self.state.settings
        return 4 * expected_seconds(s.baseline, ledger, baseline, s.budget)

    def confirm_reserve(self, ledger: Ledger) -> float:
        """Seconds kept for confirming the leader that passed screening (0: none pending, or
        its check no longer fits even alone: it is never made, and keeping its time back would
        leave trials that fit unrun)."""
        assert self.state.baseline is not None
        leader = ledger.pending()
        cost = 0.0 if leader is None else self.state.baseline.confirm_seconds(leader.record)
        return cost if self.bench.deadline.fits(cost) else 0.0

    def _no_time(self, need: float) -> None:
        """No accuracy check fits, ``need`` seconds being the least one (the shortest horizon's
        runs and one check, the pending confirmation, and before the first check the safe
        stage's share): said, with the timeout that would hold it."""
        self.state.drop_checks()
        deadline = self.bench.deadline
        budget, left = deadline.budget or 0.0, float(deadline.left() or 0.0)
        more = timeout_for(budget=budget, left=left, need=need)
        self.bench.report(
            f"accuracy guard: no time for accuracy checks (~{need:.0f} s: the baseline's runs "
            "at the shortest horizon and one candidate's check, with the time kept beside them "
            "for the safe knobs and any pending confirmation): only the knobs that leave the "
            "numerics alone are searched; a timeout of "
            f"{more} s or more would allow them"
        )
