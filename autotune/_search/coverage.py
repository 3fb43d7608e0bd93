"""Which listed values of a user's space were measured, and why the others were not.

A user who lists ``compile_mode: [none, default]`` expects to see ``default`` tried: the search
says "every listed value has been measured" only when that is true, and the result names each
value that was not, with the reason (the trial that failed with it, the trial skipped for want
of time, or the budget that ran out before it came up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._search import words
from autotune._search.bench import Bench
from autotune._search.ledger import Ledger
from autotune._space import Choice, SearchSpace

__all__ = [
    "NOT_REACHED",
    "Skipped",
    "Unmeasured",
    "describe",
    "nothing_left",
    "read_skipped",
    "unmeasured",
]

NOT_REACHED = "not tried: the search ended before it came up"
UNGUARDED = "not tried: it changes the numerics, and no accuracy check could guard it"


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A trial that never ran (not started for want of time, a rejected combination): its
    knob values and the message it was failed with."""

    number: int
    params: dict[str, Any]
    message: str


def read_skipped(study: optuna.Study) -> list[Skipped]:
    """The study's trials that were failed before they ran (see ``Bench.fail``)."""
    out = []
    for t in study.get_trials(deepcopy=False, states=[TrialState.FAIL]):
        message = t.user_attrs.get("message")
        if isinstance(message, str) and t.params:
            out.append(Skipped(t.number, dict(t.params), message))
    return out


@dataclasses.dataclass(frozen=True)
class Unmeasured:
    knob: str
    value: Any
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "value": self.value, "why": self.why}


def unmeasured(
    ledger: Ledger,
    space: SearchSpace,
    baseline: TrainingConfig,
    skipped: Sequence[Skipped] = (),
) -> list[Unmeasured]:
    """Each listed value of each searched knob that no trial measured, with why: the last
    trial with it that failed (its message), else the last one skipped, else not reached."""
    measured: dict[str, set[Any]] = {}
    failed: dict[tuple[str, Any], str] = {}
    for e in ledger.entries:
        values = registry.values_of(e.config, baseline)
        for name, value in values.items():
            if e.record.ok and not e.record.reused:
                measured.setdefault(name, set()).add(value)
            elif not e.record.ok:
                message = e.record.message or str(e.record.failure)
                failed[(name, value)] = f"trial #{e.number}: {message}"
    skips: dict[tuple[str, Any], str] = {}
    for s in sorted(skipped, key=lambda s: s.number):  # the last one says why, in the end
        for name, value in s.params.items():
            skips[(name, value)] = f"trial #{s.number}: {s.message}"
    failed = {**skips, **failed}  # a trial that ran and failed says more than a skip
    numerics = set(space.numerics_knobs(split_free=ledger.split_free))
    out = []
    for name in space.searched():
        knob = space.knobs[name]
        if not isinstance(knob, Choice):
            continue
        # No guard, or one whose checks cannot settle anything (a validation set too small
        # for the tolerance): a change of the numerics was never to be tried.
        unguarded = ledger.guard is None or ledger.checks_unsettleable is not None
        default = UNGUARDED if unguarded and name in numerics else NOT_REACHED
        for value in knob.values:
            if value in measured.get(name, set()):
                continue
            out.append(Unmeasured(name, value, failed.get((name, value), default)))
    return out


def nothing_left(ledger: Ledger, space: SearchSpace, bench: Bench) -> str:
    """What a search says when it has nothing left to try: "every listed value measured"
    only where that is true."""
    missing = unmeasured(ledger, space, bench.settings.baseline, read_skipped(bench.study))
    if not missing:
        return "every listed value of the space has been measured: nothing left to try"
    return f"nothing left to try; not measured: {describe(missing)}"


def describe(missing: Sequence[Unmeasured]) -> str:
    """One line: the values not measured, grouped by why (:func:`words.unmeasured_words`)."""
    return words.unmeasured_words([(m.knob, m.value, m.why) for m in missing])
