"""The search loop's state: everything that changes while a search runs, in one object, and
changed only through its methods.

The set-up fixes the settings the study's trials are measured under: the memory probe's limits
on the batch sizes, a resumed study's stored settings, a split of the baseline's batch that
fits, the calibrated measurement budget. The candidates loop then moves the rest: the baseline
as the study holds it, the stage policy's step, how many measured configs the sampler proposed
in a row, how long the loop waited for other processes. The :class:`Bench` reads the settings
and the deadline from here, so every part of a search sees the same ones.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from autotune._knobs.config import TrainingConfig
from autotune._search.deadline import Deadline
from autotune._search.policy import Stage, Step
from autotune._search.settings import SearchSettings
from autotune._space import Choice, SearchSpace
from autotune._trial.outcome import Budget
from autotune._trial.probe import MemoryLimits

if TYPE_CHECKING:
    from autotune._search.baseline import Baseline

__all__ = ["LoopState", "fitting_batch_sizes"]


@dataclasses.dataclass(eq=False)
class LoopState:
    """One search's moving parts. ``settings.space`` is the space searched: narrowed by the
    memory probe and the calibration, as the study's settings publish it."""

    settings: SearchSettings
    deadline: Deadline
    memory: MemoryLimits | None = None  # the memory probe's limits (None: none known)
    baseline: Baseline | None = None  # as the study holds it (None: not measured yet)
    no_checks: bool = False  # accuracy checks were found not to fit the budget, or not to settle
    # Seconds kept from the safe stage for the baseline's accuracy runs and one check, decided
    # once its throughput is measured (None: nothing kept); once they are all that is left,
    # the accuracy question comes first (``fast_first``).
    guard_seconds: float | None = None
    safe_until: float = 0.0  # the safe stage's own share ends then (wall-clock)
    fast_first: bool = False
    step: Step = dataclasses.field(default_factory=lambda: Step(Stage.SAMPLING))
    repeats: int = 0  # candidates in a row whose config was measured before
    waited: float = 0.0  # seconds spent waiting for other processes
    # Configs queued to be measured again once the machine was free (see rebase.requeue).
    again: set[TrainingConfig] = dataclasses.field(default_factory=set)

    @classmethod
    def start(cls, settings: SearchSettings, clock: Callable[[], float] = time.time) -> LoopState:
        """The state of a search that has not run yet: its deadline from the settings."""
        return cls(
            settings=settings, deadline=Deadline.of(settings.started, settings.timeout, clock)
        )

    @property
    def space(self) -> SearchSpace:
        return self.settings.space

    # -- Set-up: the settings the trials are measured under -------------------------------------

    def use_memory(self, memory: MemoryLimits | None) -> None:
        """The memory probe's limits: batch sizes that cannot fit leave the space (see
        :func:`fitting_batch_sizes`)."""
        self.memory = memory
        self._fit_memory()

    def resume(self, stored: SearchSettings) -> None:
        """A resumed study: every trial is measured with the budget the first run calibrated,
        against the baseline it measured (where the one asked for did not fit, its split), in
        the space it narrowed (and the memory limits applied to it)."""
        self.settings = self.settings.replace(
            budget=stored.budget, calibrate=False, baseline=stored.baseline, space=stored.space
        )
        self._fit_memory()

    def split_baseline(self, cfg: TrainingConfig) -> None:
        """The baseline is ``cfg``: a split of the global batch asked for into micro-batches
        that fit in memory."""
        self.settings = self.settings.replace(baseline=cfg)

    def calibrated(self, budget: Budget, space: SearchSpace) -> None:
        """The measurement budget every config gets, and the space without the batch sizes
        one measurement of which would take too long."""
        self.settings = self.settings.replace(budget=budget, space=space)

    def note(self, text: str) -> None:
        """Say ``text`` in the space's notes (the result and the report show them)."""
        self.settings = self.settings.replace(space=self.space.with_note(text))

    # -- The loop ------------------------------------------------------------------------------

    def measured(self, baseline: Baseline) -> None:
        """The baseline as the study holds it now: its throughput, then its accuracy runs and
        the guard they make."""
        self.baseline = baseline

    def drop_checks(self) -> None:
        """No accuracy checks from now on: only knobs that leave the numerics alone are tried."""
        self.no_checks = True

    def keep_for_guard(self, seconds: float, *, safe_until: float = 0.0) -> None:
        """Keep ``seconds`` of the budget for the baseline's accuracy runs and one check: the
        safe stage runs only while more than that (and the pending work) is left, but in any
        case until ``safe_until`` (its own share)."""
        self.guard_seconds = seconds
        self.safe_until = safe_until

    def guard_due(self) -> None:
        """The time kept for the accuracy question has come: the changes of the numerics go
        first from now on, the safe variants left after them."""
        self.fast_first = True
        self.guard_seconds = None

    def take(self, step: Step) -> None:
        """The stage policy's next step: its candidates run until it gives another."""
        self.step = step

    def count(self, *, repeated: bool) -> None:
        """A candidate ran: one whose config was measured before adds to the repeats in a row,
        any other ends them."""
        self.repeats = self.repeats + 1 if repeated else 0

    def next_stage(self) -> None:
        """The step's stage is exhausted: the next stage starts with no repeats."""
        self.repeats = 0

    def wait(self, seconds: float) -> None:
        """The loop waited ``seconds`` for another process (a trial, or the accuracy guard)."""
        self.waited += seconds

    def _fit_memory(self) -> None:
        space = fitting_batch_sizes(self.space, self.memory, keep=self.settings.baseline.batch_size)
        if space is not self.space:
            self.settings = self.settings.replace(space=space)


def fitting_batch_sizes(
    space: SearchSpace, memory: MemoryLimits | None, *, keep: int
) -> SearchSpace:
    """``space`` with the batch sizes that cannot fit removed (but ``keep``, the baseline's),
    and, unless the global batch is kept, the largest batch that fits between two listed
    sizes added (a batch of 100 where 128 does not fit, rather than 64). ``space`` itself
    where nothing changes."""
    knob = space.knobs.get("batch_size")
    if memory is None or not memory.limits or not isinstance(knob, Choice):
        return space
    top = max(memory.limits.values())
    kept = [v for v in knob.values if int(v) <= top or v == keep]  # type: ignore[arg-type]
    if space.global_batch_size is None:
        kept += sorted({b for b in memory.limits.values() if b > 0} - set(kept))
    if tuple(kept) == knob.values:
        return space
    return space.with_choice("batch_size", tuple(kept))
