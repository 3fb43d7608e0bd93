"""Racing in the safe stage: before the search builds on the best safe config, it is drawn a
second time where another is within the screening noise of it, and the fastest single-knob
changes of the baseline are combined in pairs.

One screening draw is noisy (benchmarks/RESULTS.md, "noise-floor"): a search that builds on one
high draw never tries the pair of two smaller wins that together beat it. A config drawn twice
ranks by the median of its draws (:func:`autotune._search.ledger.draws`).
"""

from __future__ import annotations

import itertools
from typing import Any

from autotune._errors import ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._search import derived, ranking
from autotune._search.ledger import Entry, Ledger, away, screening_noise
from autotune._space import SearchSpace

__all__ = ["DRAWS", "TOP_SINGLES", "contender", "pairs", "single_gains"]

DRAWS = 2  # screening draws of a contender before the search builds on it
TOP_SINGLES = 3  # the fastest single-knob changes of the baseline whose pairs are built


def contender(ledger: Ledger, space: SearchSpace, baseline: TrainingConfig) -> Entry | None:
    """The best safe config (:meth:`Ledger.best_safe`) where it was drawn fewer than
    :data:`DRAWS` times (failed draws count: a crash is not retried here) and the choice is in
    doubt: a rival (a safe config without one of its changes of the baseline's settings: one
    built on it, that reads as fast, rather says it was no lucky draw) screened faster than
    the baseline beyond a tie and within this search's screening noise
    (:func:`screening_noise`) of it. It is drawn again before the search builds on it;
    should its draws' median fall behind another, that one is the best next, and drawn again
    in turn. None where the best is the baseline, leads beyond the noise (a second draw would
    not change what is built on), or the rounds measured it."""
    base, best = ledger.baseline, ledger.best_safe()
    if base is None or best is None or best.config == base.config:
        return None
    best = ledger.measured(best.config) or best
    if _drawn(ledger, best) >= DRAWS or len(ledger.remeasured(best)) >= derived.MIN_ROUNDS:
        return None
    floor = ledger.rank_time(base) * (1 - ranking.TIE)
    bar = ledger.rank_time(best) * (1 + screening_noise(ledger))
    ours = _changes(space, baseline, best.config)
    doubt = any(
        e.config != best.config
        and ledger.rank_time(e) < floor
        and ledger.rank_time(e) <= bar
        and not ours.items() <= _changes(space, baseline, e.config).items()
        for e in _safe_entries(ledger)
    )
    return best if doubt else None


def _changes(space: SearchSpace, baseline: TrainingConfig, cfg: TrainingConfig) -> dict[str, Any]:
    """The knobs ``cfg`` sets otherwise than the baseline, with its values (knobs that follow
    from another, such as the prefetch depth a loader worker brings, left out)."""
    ours = space.params_of(baseline, baseline)
    theirs = space.params_of(cfg, baseline)
    return {k: v for k, v in theirs.items() if k in ours and ours[k] != v}


def single_gains(
    ledger: Ledger, space: SearchSpace, baseline: TrainingConfig
) -> list[tuple[str, Entry]]:
    """The safe configs that change one knob of the baseline's and screened faster than it
    beyond a tie, with that knob's name, the fastest first (knobs that follow from it, such as
    the prefetch depth a loader worker brings, do not count as a change)."""
    base = ledger.baseline
    if base is None:
        return []
    floor = ledger.rank_time(base) * (1 - ranking.TIE)
    out: list[tuple[str, Entry]] = []
    for e in _safe_entries(ledger):
        changed = list(_changes(space, baseline, e.config))
        if len(changed) == 1 and ledger.rank_time(e) < floor:
            out.append((changed[0], e))
    return sorted(out, key=lambda pair: ledger.rank_time(pair[1]))


def pairs(ledger: Ledger, space: SearchSpace, baseline: TrainingConfig) -> list[TrainingConfig]:
    """Each two of the :data:`TOP_SINGLES` fastest single-knob changes (:func:`single_gains`)
    that change different knobs, combined: the pair of the two fastest first. Coordinate
    descent on the fastest alone misses a pair whose parts both screened below it."""
    base = ledger.baseline
    if base is None:
        return []
    ours = space.params_of(base.config, baseline)
    top = single_gains(ledger, space, baseline)[:TOP_SINGLES]
    out: list[TrainingConfig] = []
    for (knob_a, a), (knob_b, b) in itertools.combinations(top, 2):
        if knob_a == knob_b:
            continue
        params: dict[str, Any] = space.params_of(a.config, baseline)
        theirs = space.params_of(b.config, baseline)
        params.update({k: v for k, v in theirs.items() if ours.get(k, object()) != v})
        try:
            cfg = space.build(params, baseline)
        except ConfigError:
            continue  # a combination the config rejects
        if cfg not in out:
            out.append(cfg)
    return out


def _safe_entries(ledger: Ledger) -> list[Entry]:
    """One entry per safe candidate config measured (the one :meth:`Ledger.measured` keeps),
    the baseline's own config and figures of a busy machine (:func:`away`) left out."""
    base = ledger.baseline
    out: list[Entry] = []
    for e in ledger.candidates:
        if base is None or e.config == base.config or e.record.reused:
            continue
        if ledger.measured(e.config) is not e or not (ledger.feasible(e) and ledger.safe(e)):
            continue
        if not away(ledger, e):
            out.append(e)
    return out


def _drawn(ledger: Ledger, entry: Entry) -> int:
    """How many trials measured ``entry``'s config (a reuse of another's record is not one)."""
    return sum(1 for e in ledger.entries if e.config == entry.config and not e.record.reused)
