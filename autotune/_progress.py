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

__all__ = [
    "WIDTH",
    "Briefed",
    "Lines",
    "Progress",
    "Report",
    "Status",
    "Whole",
    "as_progress",
    "brief",
]

log = logging.getLogger("autotune")

WIDTH = 120  # the most characters an event line takes; the rest is in the result's detail
_MORE = " … (more: autotune show --detail)"

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
    with a line reports an event; the other methods update the live status. ``whole``: it
    takes each event line whole, however long (a log kept for reading later, the tests'
    simulated machine), where a person's display takes it within :data:`WIDTH` characters."""

    whole = False

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


class Whole(Lines):
    """Event lines to ``write``, each whole however long (a program reads them)."""

    whole = True


def as_progress(report: Progress | Report) -> Progress:
    return report if isinstance(report, Progress) else Lines(report)


def brief(line: str, width: int = WIDTH) -> str:
    """``line`` within ``width`` characters: whole where it fits, else cut at the last clause
    boundary (``; ``, ``: ``, ``, ``, `` (``) that leaves room to say where the rest is."""
    if len(line) <= width:
        return line
    room = width - len(_MORE)
    cut = max(line.rfind(mark, 0, room) for mark in ("; ", ": ", ", ", " ("))
    if cut < room // 2:
        cut = line.rfind(" ", 0, room)
    return line[: max(cut, 1)].rstrip(" ,;:") + _MORE


class Briefed(Progress):
    """``inner`` with every event line within :data:`WIDTH` characters (see :func:`brief`);
    each line's whole text goes to ``keep`` (the result's detail), once."""

    def __init__(self, inner: Progress, keep: Callable[[str], None]) -> None:
        self.inner = inner
        self.keep = keep

    def __call__(self, line: str) -> None:
        short = brief(line)
        if short != line:
            self.keep(line)
        self.inner(line if self.inner.whole else short)

    def detail(self, line: str) -> None:
        """A line only the detail holds (the reasoning behind a story line: a check's
        intermediate looks, the horizon's plan): kept, and shown where the progress takes
        every line whole (a log read later), never in a person's story."""
        self.keep(line)
        if self.inner.whole:
            self.inner(line)

    def trial(self, label: str) -> None:
        self.inner.trial(label)

    def run(self, what: str, expected: float | None = None) -> None:
        self.inner.run(what, expected)

    def step(self, phase: str, done: int, total: int) -> None:
        self.inner.step(phase, done, total)

    def status(self, status: Status) -> None:
        self.inner.status(status)

    def close(self) -> None:
        self.inner.close()
