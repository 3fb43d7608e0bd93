"""The search's time budget, with an injectable clock so its rules can be tested alone."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

__all__ = ["Deadline"]

GRACE_SHARE = 0.05  # of the time budget, re-measuring and confirming may run past it
GRACE_MIN = 2.0  # seconds, at least
MIN_TRIAL_LIMIT = 5.0  # seconds: no trial is cut off sooner than this, but by the deadline
LAST_RUN_LIMIT = 1.0  # seconds a run started at the end of the grace may still take


@dataclasses.dataclass(frozen=True)
class Deadline:
    """``start`` and ``end`` are wall-clock times (``time.time()``, shared with workers on other
    hosts); ``end`` is None when only a number of trials bounds the search. ``seconds`` is the
    budget's length as given (None: ``end - start``); every share of the budget is asked of
    it (:meth:`share`)."""

    start: float
    end: float | None
    clock: Callable[[], float] = time.time
    seconds: float | None = None

    @classmethod
    def of(
        cls, start: float, seconds: float | None, clock: Callable[[], float] = time.time
    ) -> Deadline:
        """The deadline ``seconds`` after ``start`` (None: no time limit)."""
        return cls(start, None if seconds is None else start + seconds, clock, seconds)

    @property
    def budget(self) -> float | None:
        """The time budget in seconds, or None without a deadline."""
        if self.end is None:
            return None
        return self.seconds if self.seconds is not None else self.end - self.start

    def share(self, fraction: float) -> float | None:
        """``fraction`` of the time budget in seconds, or None without a deadline."""
        budget = self.budget
        return None if budget is None else fraction * budget

    def used(self) -> float | None:
        """The share of the time budget spent so far, or None without one."""
        left, budget = self.left(), self.budget
        return None if left is None or not budget else 1.0 - left / budget

    def now(self) -> float:
        return self.clock()

    def left(self) -> float | None:
        """Seconds left (never below zero), or None without a deadline."""
        return None if self.end is None else max(0.0, self.end - self.clock())

    def fits(self, expected: float) -> bool:
        """Whether something expected to take ``expected`` seconds ends by the deadline."""
        return self.end is None or self.clock() + expected <= self.end

    @property
    def grace(self) -> float:
        """How far past the deadline the last, short steps (re-measuring the leaders and
        confirming the winner) may end: 5% of the budget, at least 2 s."""
        share = self.share(GRACE_SHARE)
        return 0.0 if share is None else max(GRACE_MIN, share)

    def past(self, expected: float = 0.0) -> bool:
        """Whether a step expected to take ``expected`` seconds would end past the deadline by
        more than the grace: a last trial that ran long must not leave the winner unconfirmed
        for want of a second, nor a rejected leader's successor overrun."""
        return self.end is not None and self.clock() + expected >= self.end + self.grace

    def trial_limit(self, limit: float | None, keep: float = 0.0) -> float | None:
        """A trial's wall-clock limit: ``limit``, and never past the deadline by more than the
        grace, nor into the ``keep`` seconds held for pending work (the side-by-side rounds)."""
        if limit is not None:
            limit = max(limit, MIN_TRIAL_LIMIT)
        if self.end is not None:
            # Never past the grace, the floor included: a run started late is cut short.
            remaining = max(LAST_RUN_LIMIT, self.end - keep - self.clock() + self.grace)
            limit = remaining if limit is None else min(limit, remaining)
        return limit

    def describe(self) -> str:
        left = self.left()
        return "no time limit" if left is None else f"{left:.0f} s left"
