"""Where progress goes: a live Rich panel on a terminal, plain lines elsewhere.

On a terminal the panel shows the unit of work running (a trial, the baseline, the memory
probe), its run and the steps within it with the time elapsed, the best answer so far, failures
by reason and the time left; event lines scroll above it, each printed once. Where the output is
not a terminal (a pipe, a CI log) only the event lines are written, each exactly once.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from autotune._progress import Lines, Progress, Report, Status, Whole, log
from autotune._result.summary import render_summary, summary_parts

__all__ = ["LiveDisplay", "console_progress", "print_summary", "reporter"]

REFRESH_PER_SECOND = 4


def _seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 120:
        return f"{value:.0f} s"
    return f"{int(value // 60)} min {int(value % 60):02d} s"


class LiveDisplay(Progress):
    """A live panel on a terminal ``console``; event lines are printed above it."""

    def __init__(self, console: Console, *, prefix: str = "") -> None:
        self.console = console
        self.prefix = prefix
        self._lock = threading.Lock()
        self._label = "starting"
        self._run = ""
        self._expected: float | None = None
        self._run_started = time.monotonic()
        self._step: tuple[str, int, int] | None = None
        self._status: Status | None = None
        self._live = Live(
            self,
            console=console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,  # the panel goes at the end; the lines and the summary stay
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def __call__(self, line: str) -> None:
        self._live.console.print(f"{self.prefix}{line}", markup=False, highlight=False)

    def trial(self, label: str) -> None:
        with self._lock:
            self._label, self._run, self._step = label, "", None

    def run(self, what: str, expected: float | None = None) -> None:
        with self._lock:
            self._run, self._expected, self._step = what, expected, None
            self._run_started = time.monotonic()

    def step(self, phase: str, done: int, total: int) -> None:
        with self._lock:
            self._step = (phase, done, total)

    def status(self, status: Status) -> None:
        with self._lock:
            self._status = status

    def close(self) -> None:
        self._live.stop()  # a second call does nothing

    def __rich__(self) -> RenderableType:
        with self._lock:
            return self._panel()

    def _panel(self) -> RenderableType:
        elapsed = time.monotonic() - self._run_started
        rows: list[RenderableType] = [Text(self._label, style="bold")]
        if self._run:
            expected = f" (~{_seconds(self._expected)} expected)" if self._expected else ""
            rows.append(Text(f"{self._run}: {_seconds(elapsed)}{expected}"))
        if self._step is not None:
            phase, done, total = self._step
            bar = Table.grid(padding=(0, 1))
            bar.add_row(
                Text(phase),
                ProgressBar(total=max(total, 1), completed=min(done, total), width=30),
                Text(f"{done}/{total} steps"),
            )
            rows.append(bar)
        s = self._status
        if s is not None:
            left = "" if s.deadline is None else f" | {_seconds(s.deadline - time.time())} left"
            rows.append(
                Text(f"trials {s.trials} | {s.best} | failures: {s.failures}{left}", style="dim")
            )
        return Panel(Group(*rows), title=f"{self.prefix}autotune", title_align="left")


def console_progress(stream: IO[str], *, prefix: str = "") -> Progress:
    """A live display where ``stream`` is a terminal; each event line once otherwise."""
    console = Console(file=stream)
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveDisplay(console, prefix=prefix)

    def write(line: str) -> None:
        stream.write(f"{prefix}{line}\n")
        stream.flush()

    return Lines(write)


def reporter(progress: bool | Report | Progress, *, live: bool = False) -> Progress:
    """``progress`` itself when it is a :class:`Progress`; its event lines, each whole, to a
    callable of the user's; to stdout, each within 120 characters, when True (a live display
    on a terminal, where ``live``); otherwise the ``autotune`` logger at INFO level (silent
    unless logging is configured)."""
    if isinstance(progress, Progress):
        return progress
    if callable(progress):
        return Whole(progress)  # a program of the user's reads each line whole
    if progress and live:
        return console_progress(sys.stdout)
    if progress:
        return Lines(lambda line: print(line, flush=True))

    def to_log(line: str) -> None:
        log.info("%s", line)

    return Lines(to_log)


def print_summary(data: dict[str, Any], stream: IO[str], *, detail: bool = False) -> None:
    """A result's summary: the short story (at most 12 lines, each within 120 characters), or
    with ``detail`` everything, each line whole, its figures as a table on a terminal."""
    console = Console(file=stream)
    if not detail or not console.is_terminal:
        print(render_summary(data, detail=detail), file=stream, flush=True)
        return
    head, rows, tail = summary_parts(data)
    table = Table(box=box.SIMPLE, padding=(0, 2))
    table.add_column("")
    table.add_column("winner", justify="right", style="bold")
    table.add_column("baseline", justify="right")
    for row in rows:
        table.add_row(*row)
    text = [Text(line) for line in head]
    console.print(Group(*text, Text(""), table, Text(""), *(Text(line) for line in tail)))
