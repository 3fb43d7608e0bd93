"""The sentences a person reads, written from typed facts in one place (STYLE.md, "Words for a
reader"): a trial's row in the progress story, and the changes a config makes. The search and
the result hand facts over; nothing else writes these words, so two lines of one output read
the same fact the same way.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from autotune._knobs.registry import Change

__all__ = [
    "ROW_WIDTH",
    "Accuracy",
    "TrialFacts",
    "change_words",
    "check_line",
    "compact",
    "fit",
    "trial_header",
    "trial_row",
    "unmeasured_words",
    "wrap_clauses",
]

ROW_WIDTH = 120  # the most characters a row of the story takes
_CHANGE_WIDTH = 44


class Accuracy(str, enum.Enum):
    """A trial's accuracy state, in a word."""

    NOT_NEEDED = "not needed"  # its numerics are the baseline's
    SCREENED = "screened ok"  # one run within the tolerance; its check comes later
    OUTSIDE = "outside tol."  # its one screening run was outside the tolerance
    CONFIRMED = "confirmed"
    REJECTED = "rejected"
    UNRESOLVED = "unresolved"
    NOT_RUN = "not run"  # a change of the numerics that got no accuracy run (why: ``note``)

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrialFacts:
    """What a finished trial's row says: which trial, what it changes of the baseline, its
    speed and ratio (against the baseline measured in its state), its accuracy state, the
    time left, and whether it leads."""

    number: int
    stage: str
    changes: tuple[Change, ...]
    throughput: float | None = None  # samples/s; None: it failed
    ratio: float | None = None  # over the baseline's, as ranked
    side_by_side: bool = False  # the ratio is the rounds' (else screening, in its state)
    accuracy: Accuracy = Accuracy.NOT_NEEDED
    failure: str | None = None  # its failure's reason code
    note: str | None = None  # why no accuracy run, in a word ("could not win", "no time")
    left: float | None = None  # seconds of the budget left
    trials: str | None = None  # "3/8": the trial budget's count, shown for it where given
    best: bool = False  # the answer so far


def compact(changes: Sequence[Change]) -> str:
    """The changes as ``describe()`` names the new values (``workers=2 channels_last``); a
    loader's persistence is the workers', and not named beside them."""
    labels = {c.label for c in changes}
    words = [c.words for c in changes if not (c.label == "persistent" and "workers" in labels)]
    return " ".join(words) or "your settings"


def change_words(changes: Sequence[Change], *, width: int | None = None) -> str:
    """The changes with their values before and after (``precision fp32 -> bf16,
    channels_last off -> on``); where that runs past ``width`` characters, the new values alone
    (``precision → bf16``: the baseline's config, printed below, has the old ones), so that a
    five-knob answer's change still takes one line."""
    labels = {c.label for c in changes}
    kept = [c for c in changes if not (c.label == "persistent" and "workers" in labels)]
    words = ", ".join(f"{c.label} {c.before} → {c.after}" for c in kept) or "nothing"
    if width is not None and len(words) > width:
        words = ", ".join(f"{c.label} → {c.after}" for c in kept)
    return words


def fit(text: str, width: int = ROW_WIDTH) -> str:
    """``text`` within ``width`` characters, its end cut with "…" where longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


def trial_header() -> str:
    """The story's column heads, printed once before the first row."""
    return (
        f"{'trial':>6}  {'stage':<7} {'change from your settings':<{_CHANGE_WIDTH}}"
        f"{'samples/s':>10} {'vs yours':>9}  {'accuracy':<13}{'left':>7}"
    )


def trial_row(f: TrialFacts) -> str:
    """One row of the story, at most :data:`ROW_WIDTH` characters: a screening ratio is
    against the baseline measured in the trial's own state of the machine; ``=`` marks one
    measured side by side in the rounds; ``*`` the answer so far."""
    change = fit(compact(f.changes), _CHANGE_WIDTH - 1)
    if f.failure is not None:
        speed = f"{'failed: ' + f.failure:>20}"
    else:
        rate = "" if f.throughput is None else f"{f.throughput:,.0f}"
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}x" + ("=" if f.side_by_side else " ")
        speed = f"{rate:>10} {ratio:>9}"
    state = str(f.accuracy) if f.note is None else f"{f.accuracy}: {f.note}"
    if f.failure is not None:  # a run that failed says nothing of its accuracy
        state = "-"
    left = f.trials or ("" if f.left is None else f"{f.left:.0f} s")
    row = (
        f"{'#' + str(f.number):>6}{'*' if f.best else ' '} {f.stage:<7} "
        f"{change:<{_CHANGE_WIDTH}}{speed}  {fit(state, 24):<13}{left:>7}"
    )
    return fit(row.rstrip(), ROW_WIDTH)


def check_line(number: int, verdict: str, drop: float | None, bound: float | None,
               tolerance: float, seeds: int) -> str:  # fmt: skip
    """A check's verdict in one short line: its mean paired drop, the bound it was judged by
    and the tolerance (its reasoning, whole, is in the result's detail)."""
    figures = "" if drop is None else f": mean drop {drop:+.4f}"
    if bound is not None:
        figures += f", upper bound {bound:+.4f}"
    return (
        f"accuracy check of trial #{number}: {verdict}{figures} against tolerance "
        f"{tolerance:g}, {seeds} paired seeds"
    )


def wrap_clauses(line: str, width: int = ROW_WIDTH, indent: str = "    ") -> list[str]:
    """``line`` in lines of at most ``width`` characters, broken after its ``", "`` clauses
    (a long answer's "change:" line names five knobs); a clause longer than a line is left
    whole."""
    if len(line) <= width:
        return [line]
    out: list[str] = []
    current = ""
    for clause in line.split(", "):
        joined = f"{current}, {clause}" if current else clause
        if current and len(joined) + 1 > width:  # room for the comma that ends a broken line
            out.append(current + ",")
            current = indent + clause
        else:
            current = joined
    return [*out, current]


def unmeasured_words(values: Sequence[tuple[str, object, str]]) -> str:
    """The values of the space no trial measured, ``(knob, value, why)`` each, grouped by why,
    in one line: "compile_mode=default, max-autotune (the search ended before they came up);
    batch_size=128 (trial #5: out of memory)". One reason per group, not per value, so that
    no reason is repeated."""
    groups: dict[str, list[str]] = {}
    for knob, value, why in values:
        groups.setdefault(why, []).append(f"{knob}={value}")
    return "; ".join(f"{', '.join(names)} ({why})" for why, names in groups.items())
