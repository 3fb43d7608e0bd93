"""What a search tells while it runs: event lines, each said once, and a live status (the trial
running, its progress, the best so far) that only a terminal display shows.

:class:`Progress` is the interface the search talks to; :class:`Lines` passes the event lines to
a callable (the user's ``progress=``, the ``autotune`` logger, a plain stream) and ignores the
live status. The Rich display that shows both lives in :mod:`autotune._display`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

__all__ = ["Lines", "Progress", "Report", "Status", "as_progress"]

log = logging.getLogger("autotune")

Report = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Status:
    """The search's state between trials, for a live display."""

    trials: str  # "12/40", or "12" without a trial budget
    best: str  # "best 1.84x (#7)" or "no feasible candidate yet"
    failures: str  # "oom 2, diverged 1" or "none"
    deadline: float | None = None  # wall-clock end of the budget (time.time()), if any


class Progress:
    """The search's progress, as a display or a plain line printer receives it. Calling it
    with a line reports an event; the other methods update the live status."""

    def __call__(self, line: str) -> None:
        raise NotImplementedError

    def trial(self, label: str) -> None:
        """A new unit of work starts: ``trial #12 [fast]``, ``baseline``, ``memory probe``."""

    def run(self, what: str, expected: float | None = None) -> None:
        """A run of the current unit starts (``throughput: batch 64, bf16``), expected to take
        ``expected`` seconds."""

    def step(self, phase: str, done: int, total: int) -> None:
        """Within the run: ``done`` of ``total`` steps of ``phase`` (warm-up, timed, ...)."""

    def status(self, status: Status) -> None:
        """The search's state after a trial."""

    def close(self) -> None:
        """The search is over: a live display stops (its lines stay)."""


class Lines(Progress):
    """Event lines only, to ``write``: each line exactly once, nothing live."""

    def __init__(self, write: Report) -> None:
        self.write = write

    def __call__(self, line: str) -> None:
        self.write(line)


def as_progress(report: Progress | Report) -> Progress:
    return report if isinstance(report, Progress) else Lines(report)
