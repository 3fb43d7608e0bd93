"""The short story's warnings: one short sentence per fact a user must know or act on, each
written from the fact itself (never a long stored sentence cut short), with the rank that
decides which three the default summary keeps (:func:`choose`). The whole of each, with its
reasoning, is in ``autotune show --detail``, the report and the JSON.
"""

from __future__ import annotations

import dataclasses
import enum
import textwrap
from collections.abc import Sequence

from autotune._guard.words import option, seeds_reached
from autotune._progress import WIDTH
from autotune._search.record import NoCheck

__all__ = [
    "MOST",
    "STORY_LINES",
    "Note",
    "Rank",
    "choose",
    "fit_first",
    "guard_advice",
    "interrupted",
    "lagging",
    "measured_on",
    "no_check",
    "plan_note",
    "rejected",
    "shared",
    "short_horizon",
    "unchecked",
    "unconfirmed",
    "unmeasured",
    "unsettled",
    "what_settles",
]

STORY_LINES = 12  # the most non-blank lines the default summary takes
MOST = 3  # the most warnings it keeps
MARK, INDENT = "  ! ", "    "
TIMEOUT = "a longer --timeout"


class Rank(enum.IntEnum):
    """The order of importance: a lower rank is kept first."""

    UNSETTLED = 0  # a faster answer left unsettled, and what would settle it
    LAGGING = 1  # a baseline seed that lagged: every check pairs against it
    SHARED = 2  # the machine was shared while it measured
    INTERRUPTED = 3
    NO_CHECK = 4
    HORIZON = 5
    REJECTED = 6
    UNCONFIRMED = 7
    GUARD = 8
    PLAN = 9
    UNMEASURED = 10


@dataclasses.dataclass(frozen=True)
class Note:
    """One warning of the short story: its rank and its one whole sentence."""

    rank: Rank
    text: str

    def lines(self) -> list[str]:
        """The sentence after its mark, in lines of at most :data:`WIDTH` characters (two at
        most for every sentence here; the tests hold each to that)."""
        return textwrap.wrap(
            self.text,
            WIDTH,
            initial_indent=MARK,
            subsequent_indent=INDENT,
            break_long_words=False,
            break_on_hyphens=False,
        )

    def fits(self) -> bool:
        """Whether it takes at most two lines, each within :data:`WIDTH` characters."""
        lines = self.lines()
        return len(lines) <= 2 and all(len(line) <= WIDTH for line in lines)


def choose(notes: Sequence[Note], room: int, most: int = MOST) -> list[Note]:
    """The ``most`` most important of ``notes`` that fit in ``room`` lines, in rank order. The
    first that does not fit ends the choice: a lower one never takes the place of a more
    important one."""
    chosen: list[Note] = []
    used = 0
    for note in sorted(notes, key=lambda n: n.rank):
        size = len(note.lines())
        if len(chosen) == most or used + size > room:
            break
        chosen.append(note)
        used += size
    return chosen


def fit_first(*variants: str, width: int = WIDTH) -> str:
    """The first of ``variants`` within ``width`` characters (the last where none is: each
    caller's last is short by construction)."""
    return next((v for v in variants if len(v) <= width), variants[-1])


def what_settles(reason: str | None, need: int | None, metric: str) -> str | None:
    """What would settle an unresolved check, from its reason code (the guard's
    ``settle_reason``) and the seeds it needs (``need``); None for a reason not known here."""
    if reason in ("confirm", "reject", "min_pairs"):
        if need:
            return (
                f"{need} paired seeds would settle it ({option('accuracy_repeats', need)}), "
                f"or {TIMEOUT}."
            )
        return f"more paired seeds ({option('accuracy_repeats')}) or {TIMEOUT} would settle it."
    if reason == "one_seed":
        return f"one pair cannot measure its own noise; {option('accuracy_repeats', 2)} would."
    if reason == "no_units":
        return (
            f"its {metric} has no per-example values, so no number of seeds confirms it; "
            "autotune's own loop (find_best) records them."
        )
    if reason == "not_learned":
        return (
            f"the baseline barely learned in its accuracy runs: {TIMEOUT} or "
            f"{option('accuracy_samples')} would tell."
        )
    if reason == "spread_too_wide":
        return (
            f"its pairs vary too much for a practical number of seeds; {TIMEOUT} or "
            f"{option('accuracy_samples')} might settle it."
        )
    if reason == "wrong_way":
        return (
            f"the baseline's {metric} got worse as it trained; --metric loss (metric='loss') "
            "judges by the loss instead."
        )
    if reason in ("sample_as_wide", "sample_too_wide"):
        share = "all" if reason == "sample_as_wide" else "most"
        return (
            f"the validation set's own noise takes {share} of the tolerance; a larger "
            "validation set would settle it (SearchOptions(val_fraction=...))."
        )
    return None


def unsettled(
    trial: int, speedup: str, *, reason: str | None, need: int | None, metric: str
) -> Note:
    """A faster candidate that changes the numerics and whose check did not settle, with the
    one option that would settle it (``reason``: the guard's ``settle_reason``; None for a
    result written before it was stored, or a reason this version does not know)."""
    words = what_settles(reason, need, metric)
    head = f"trial #{trial} ({speedup}) changes the numerics and its accuracy is not settled"
    if words is None:
        return Note(Rank.UNSETTLED, f"{head}; `autotune show --detail` says what would settle it.")
    return Note(Rank.UNSETTLED, f"{head}: {words}")


def unchecked(trial: int, speedup: str, failure: str | None = None) -> Note:
    """A faster candidate that passed screening and got no check (``failure``: why its check
    was stopped, where it was)."""
    head = f"trial #{trial} ({speedup}) changes the numerics and passed screening, but "
    if failure is None:
        return Note(Rank.UNSETTLED, head + "no check of it was made before the search ended.")
    note = Note(Rank.UNSETTLED, head + f"its check was stopped: {failure}.")
    if note.fits():
        return note
    return Note(Rank.UNSETTLED, head + "its check was stopped; `autotune show --detail` says why.")


def lagging(
    seeds: Sequence[int],
    metrics: Sequence[float],
    others: Sequence[float],
    metric: str,
    *,
    constant: bool,
) -> Note:
    """Baseline runs far behind the others (the guard's ``lagging_run``); ``constant``: the
    baseline's learning rate is constant, whose last iterate is noisy."""
    lo, hi = others
    which = seeds_reached(seeds, metrics, metric)
    act = (
        "if your run anneals its learning rate, give that schedule as --baseline."
        if constant
        else "every check pairs against that spread."
    )
    return Note(
        Rank.LAGGING, f"the baseline's {which} where its others reached {lo:.4f}-{hi:.4f}; {act}"
    )


def shared(shared: int, readings: int, *, cores: int | None, others_max: float, gpu: int) -> Note:
    """Other processes used the machine in ``shared`` of ``readings`` measurements."""
    use = f"~{others_max:.1f} of {cores} cores" if cores else "the CPUs"
    if gpu:
        use += f" and the GPU ({gpu} process{'es' if gpu > 1 else ''})"
    return Note(
        Rank.SHARED,
        f"machine shared: other processes used up to {use} in {shared} of {readings} "
        "measurements; ratios are of that state.",
    )


def interrupted() -> Note:
    return Note(
        Rank.INTERRUPTED,
        "interrupted: this is the best answer found before the stop; the same command resumes.",
    )


_HOW = {NoCheck.FAILED: "failed", NoCheck.STREAM_ENDED: "ran out of stream", NoCheck.HUNG: "hung"}


def no_check(
    *,
    needed: bool,
    failed: NoCheck | None = None,
    failure: str | None = None,
    interrupted: bool = False,
) -> Note:
    """Why no accuracy check was made: none was ``needed`` (no knob searched changes the
    numerics), the baseline's accuracy runs ``failed`` (how, and the ``failure``'s reason
    code), or the search ended (was ``interrupted``) before them."""
    if not needed:
        return Note(
            Rank.NO_CHECK, "no accuracy check was needed: no knob searched changes the numerics."
        )
    if failed is not None:
        why = f"possible: the baseline's accuracy runs {_HOW[failed]}"
        if failure:
            why += f" ({failure})"
    else:
        why = "made: the search " + ("was interrupted" if interrupted else "ended") + " first"
    return Note(
        Rank.NO_CHECK,
        f"no accuracy check was {why}; only knobs that leave the numerics alone could win.",
    )


def short_horizon(horizon: int, planned: int) -> Note:
    """The chosen change of the numerics was judged ``horizon`` samples into a run of
    ``planned``."""
    return Note(
        Rank.HORIZON,
        f"its accuracy was judged after {horizon:,} samples, {horizon / planned:.0%} of the "
        "planned run; `autotune verify --full` measures the whole run.",
    )


def rejected(trials: Sequence[tuple[int, str]]) -> Note:
    """Faster candidates (number, speedup) whose accuracy dropped beyond the tolerance."""
    named = ", ".join(f"#{n} ({s})" for n, s in trials)
    many = "trials" if len(trials) > 1 else "trial"
    text = f"{many} {named} trained faster but lost accuracy beyond the tolerance: rejected."
    if len(MARK + text) > WIDTH:
        text = f"{len(trials)} faster trials lost accuracy beyond the tolerance: rejected."
    return Note(Rank.REJECTED, text)


def unconfirmed(could_not: int, failed: int, no_time: int) -> Note:
    """No change of the numerics was confirmed: how many of those tried could not win, failed
    screening, or had no time for their accuracy runs."""
    said = [
        f"{n} {words}"
        for n, words in (
            (could_not, "could not win"),
            (failed, "failed screening"),
            (no_time, "had no time for their accuracy runs"),
        )
        if n
    ]
    return Note(Rank.UNCONFIRMED, f"no change of the numerics was confirmed: {', '.join(said)}.")


def guard_advice(reason: str, *, metric: str) -> Note:
    """What keeps every change of the numerics from being confirmed, from the guard's advice
    reason code: its metric got worse, it did not move, the validation set is too small for
    the tolerance (or the tolerance is 0), or the baseline has one seed."""
    if reason == "wrong_way":
        text = (
            f"the baseline's {metric} got worse as it trained: it cannot be the right metric; "
            "--metric loss (metric='loss') judges by the loss."
        )
    elif reason == "not_learned":
        text = (
            f"the baseline's {metric} barely moved in its accuracy runs; {TIMEOUT} or "
            f"{option('accuracy_samples')} would let checks tell."
        )
    elif reason == "zero_tolerance":
        text = (
            "a tolerance of 0 leaves no room for the validation set's own noise: no change of "
            "the numerics can be confirmed; pass a --tolerance above 0."
        )
    elif reason == "baseline_one_seed":
        text = (
            "the baseline was trained with one seed, so no change of the numerics can be "
            f"confirmed; {option('accuracy_repeats', 2)} or more would."
        )
    else:
        text = (
            "the validation set is too small for the tolerance to confirm a change of the "
            "numerics; a larger one would."
        )
    return Note(Rank.GUARD, text)


def plan_note(samples: int, planned: int) -> Note:
    """The accuracy runs were planned shorter than the budget meant them: each trains
    ``samples`` of the planned run's ``planned``."""
    return Note(
        Rank.PLAN,
        f"each accuracy run trained {samples:,} samples, {samples / planned:.0%} of the planned "
        f"run, as the time allowed: a weaker check; {TIMEOUT} gives it more.",
    )


def unmeasured(knobs: Sequence[str], values: int) -> Note:
    """``values`` values of the space, of ``knobs``, that no trial measured."""
    text = (
        f"{values} value{'s' if values != 1 else ''} of {', '.join(knobs)} not measured; "
        "`autotune show --detail` says why."
    )
    if len(MARK + text) > WIDTH:
        text = f"{values} values of the space not measured; `autotune show --detail` says why."
    return Note(Rank.UNMEASURED, text)


def measured_on(machine: str, model: str | None, data: str | None) -> str:
    """Where it was measured (``machine``: the device, torch, the CPUs), with the model's and
    the training set's types where the result has their fingerprints (``SmallCNN on
    TensorDataset of 4,096 items``), within :data:`WIDTH` characters."""
    line = f"  measured on: {machine}"
    what = f"{model} on {data}" if model and data else model or data
    return fit_first(*(line + f"; {x}" for x in (what, data) if x), line)
