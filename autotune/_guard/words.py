"""Every sentence of the accuracy guard, rendered from its facts: a check, what would
settle it, why none can, the baseline's diagnostics and the plans of accuracy time. Nothing
here decides; a sentence is tested from the fact it renders."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune._guard.confirmation import (
    Confirmation,
    NoBound,
    Reason,
    RunFailed,
    Settle,
    Verdict,
)
from autotune._guard.guard import FIRST_PAIR, LOOK_POWER, AccuracyGuard, validation_floor
from autotune._guard.plan import (
    ACCURACY_SHARE,
    AccuracyPlan,
    HorizonPlan,
    Longer,
    LongerMiss,
    PlanNote,
    check_timeout,
)
from autotune._guard.stats import (
    ALPHA,
    CONFIDENCE,
    FIRST_SHARE,
    MAX_NEED,
    lagging_run,
    unseen_chance,
)

__all__ = [
    "accuracy_note",
    "advice",
    "answer_claim",
    "budget_words",
    "describe",
    "horizon",
    "lag_words",
    "longer_words",
    "option",
    "percent",
    "plan_note",
    "settle_words",
    "test_words",
    "unseen_note",
    "unsettleable_words",
]


def option(field: str, value: object = None) -> str:
    """A search option as advice names it, in both ways in: the command line's flag and the
    :class:`~autotune.SearchOptions` field (``--accuracy-repeats 13 / SearchOptions(
    accuracy_repeats=13)``); tests hold each to the parser and the dataclass."""
    shown = "..." if value is None else str(value)
    flag = f"--{field.replace('_', '-')}" + ("" if value is None else f" {value}")
    return f"{flag} / SearchOptions({field}={shown})"


def percent(confidence: float) -> str:
    """A confidence as a percentage that never rounds up to a certainty: ">99.9%"."""
    return ">99.9%" if confidence > 0.999 else f"{confidence:.1%}"


def answer_claim() -> str:
    """The guarantee a confirmed answer carries, once, in the words a user reads."""
    return (
        f"after the checks' length of training, the answer is within the tolerance with "
        f"{CONFIDENCE:.0%} confidence, one-sided, across every check and look of the search, "
        "for drops whose modes its pairs show"
    )


def unseen_note(pairs: int) -> str:
    """What a confirmation over ``pairs`` pairs cannot rule out, in words."""
    return (
        f"a failure mode of 1 run in 10 would go unseen in {pairs} pairs "
        f"{unseen_chance(pairs):.0%} of the time"
    )


def seeds_reached(
    seeds: Sequence[int], metrics: Sequence[float], metric: str, *, runs: bool = False
) -> str:
    """ "seed 3 reached accuracy 0.7600", or "seeds 3 and 4 reached accuracy 0.7600 and
    0.7580" (``runs``: "run of seed 3 ...", "runs of seeds ...")."""
    if len(seeds) == 1:
        return f"{'run of ' if runs else ''}seed {seeds[0]} reached {metric} {metrics[0]:.4f}"
    names = ", ".join(str(s) for s in seeds[:-1]) + f" and {seeds[-1]}"
    values = ", ".join(f"{m:.4f}" for m in metrics[:-1]) + f" and {metrics[-1]:.4f}"
    return f"{'runs of ' if runs else ''}seeds {names} reached {metric} {values}"


def lag_words(lag: Mapping[str, Any], metric: str) -> str:
    """Lagging baseline runs (:func:`lagging_run`), in words."""
    lo, hi = lag["others"]
    seeds = list(lag.get("seeds") or [lag["seed"]])
    metrics = list(lag.get("metrics") or [lag["metric"]])
    which = seeds_reached(seeds, metrics, metric, runs=True)
    if all(seed < FIRST_PAIR for seed in seeds):
        carried = "the screening runs are judged against it, no check's pair includes it"
    elif len(seeds) == 1:
        carried = "a check's pair of that seed carries it"
    else:
        carried = "a check's pairs of those seeds carry it"
    return (
        f"the baseline's {which} where its others reached {lo:.4f}-{hi:.4f}: the baseline's "
        f"own training varies that much from one data order to the next, and {carried}"
    )


_NO_BOUND = {
    NoBound.ONE_SEED: "one seed",
    NoBound.UNPAIRED: "no seed paired with the baseline's",
    NoBound.EXACT: "the pairs agree exactly, and the metric has no per-example values to bound "
    "the validation sample's noise",
}


def no_bound_words(why: NoBound | None) -> str:
    return _NO_BOUND[why or NoBound.ONE_SEED]


def run_failed(failed: RunFailed | None, message: str | None) -> str:
    """Why a check's runs made no test, from its code and the run's own ``message``; a record
    written before the code holds the whole sentence as ``message``, said as stored."""
    said = f" ({message})" if message else ""
    if failed is RunFailed.STOPPED:
        return f"its accuracy runs were stopped before they ended{said}: no verdict on its accuracy"
    if failed is RunFailed.BASELINE_STOPPED:
        return (
            f"the baseline's accuracy runs were stopped before they ended{said}: no verdict on "
            "its accuracy"
        )
    if failed is RunFailed.NOT_FINITE:
        return "a run's metric is not finite"
    if failed is RunFailed.FAILED:
        return message or "an accuracy run failed"
    return str(message)


def describe(c: Confirmation) -> str:
    """A check in one sentence: its mean paired drop, bound, look and verdict."""
    if c.drop is None:
        return run_failed(c.failed, c.failure)
    text = f"mean paired drop {c.drop:+.4f} over {len(c.runs)} seeds"
    if c.bound is None or c.lower is None:
        text += f", no confidence bound ({no_bound_words(c.no_bound)})"
        if c.verdict is Verdict.REJECTED and c.lower is not None:
            text += f"; every pair {c.lower:+.4f} worse, beyond it"
        return text
    text += f", upper bound {c.bound:+.4f} (look {c.looks} of check {c.order}"
    if c.counted:
        many = "a pair" if c.counted == 1 else f"{c.counted} pairs"
        text += f"; {many} better by more than the tolerance counted as better by it"
    text += ")"
    if c.tolerance is not None:
        text += f" against tolerance {c.tolerance:g}"
    if c.verdict is Verdict.CONFIRMED:
        text += f": within it; {answer_claim()}; {unseen_note(len(c.runs))}"
    elif c.verdict is Verdict.REJECTED:
        text += f"; lower bound {c.lower:+.4f}, beyond it"
    return text


def test_words() -> str:
    """The guard's test, in one sentence (its rule, whatever the study)."""
    return (
        f"sequential non-inferiority: confirmed when the one-sided upper bound of the "
        f"mean paired drop (seed-to-seed and validation-sample noise; a pair better by "
        f"more than the tolerance counted as better by it) is within the "
        f"tolerance; check j, look k at level 1 - {ALPHA:g} w_j w_k (w_1 = "
        f"{FIRST_SHARE:g}, w_k = {1 - FIRST_SHARE:g}/((k-1)k) after), at most "
        f"{ALPHA:g} false accepts for the answer across all checks and looks"
    )


def _wrong_way(guard: AccuracyGuard) -> str:
    initial = math.nan if guard.initial_metric is None else guard.initial_metric
    return (
        f"the baseline's {guard.metric_name} got worse as it trained (untrained model "
        f"{initial:.4f}, trained {guard.baseline_metric:.4f} ± {guard.spread:.4f}): "
        "it cannot be the right metric for this task. Pass the one you judge the model by: "
        "metric='loss' (--metric loss) for the model's loss, or metric=your_fn "
        "(--metric MODULE:FUNCTION) with metric_name= and higher_is_better="
    )


def _not_learned(guard: AccuracyGuard) -> str:
    return (
        f"the baseline's {guard.metric_name} barely moved from the untrained model's in "
        f"{guard.accuracy_samples} samples per run: a longer accuracy budget "
        f"(a longer timeout, or {option('accuracy_samples')}) would let the check tell"
    )


def _small_validation(s: Settle, tolerance: float) -> str:
    floor = s.floor or 0.0
    if tolerance <= 0.0:
        return (
            f"a tolerance of 0 leaves no room for the validation sample's own noise (±{floor:.4f} "
            "at the most lenient look's level whatever the seeds): no change of the numerics "
            "can be confirmed; pass a tolerance above 0"
        )
    which = (
        "no change of the numerics can be confirmed"
        if floor > 2.0 * tolerance
        else "only a change better than the baseline by a margin can be confirmed"
    )
    return (
        f"the validation set's {s.examples} examples are too few for the tolerance "
        f"{tolerance:g}: their own noise, shared by every seed, is ±{floor:.4f} at the "
        f"most lenient look's level whatever the seeds, so {which}. Confirming a harmless "
        f"change takes at least {s.need} validation examples or a tolerance of at least "
        f"{floor:.2g} (more where the runs disagree on more examples)"
    )


def advice(s: Settle | None, guard: AccuracyGuard) -> str | None:
    """What keeps changes of the numerics from being confirmed (:meth:`AccuracyGuard.advice`)."""
    if s is None:
        return None
    if s.reason is Reason.WRONG_WAY:
        return _wrong_way(guard)
    if s.reason is Reason.NOT_LEARNED:
        return _not_learned(guard)
    if s.reason in (Reason.SMALL_VALIDATION, Reason.ZERO_TOLERANCE):
        return _small_validation(s, guard.tolerance)
    return (
        "The baseline was trained with one data-order seed; use accuracy_repeats >= 2 "
        "so that a change of the numerics can be confirmed at all."
    )


def settle_words(s: Settle, guard: AccuracyGuard) -> str:
    """What would settle an unresolved check (:func:`autotune._guard.guard.settle`)."""
    tol, metric = guard.tolerance, guard.metric_name
    if s.reason is Reason.MIN_PAIRS:
        more = f"{s.min_pairs} pairs before a confirmation: {s.min_pairs - s.pairs} more"
        return f"min_pairs={s.min_pairs} asks for {more}"
    if s.reason is Reason.WRONG_WAY:
        return _wrong_way(guard)
    if s.reason is Reason.NOT_LEARNED:
        return _not_learned(guard)
    if s.reason is Reason.ONE_SEED:
        return "accuracy_repeats >= 2 would let the check measure its own noise"
    if s.reason is Reason.NO_UNITS:
        return (
            f"the {metric} has no per-example values (a metric your trainer "
            "logs), so the validation sample's own error, which every seed shares, cannot "
            "be bounded: no number of seeds can confirm it (a rejection still stands); "
            "autotune's own loop (find_best) records them"
        )
    floor, sd, mean = s.floor or 0.0, s.spread or 0.0, s.mean or 0.0
    if s.reason is Reason.SAMPLE_AS_WIDE:
        return (
            f"the validation sample's own noise (±{floor:.4f} at the next "
            f"look's level, whatever the seeds) is as wide as the tolerance "
            f"{tol:g}: more seeds would not confirm a change no better than "
            "the baseline; a larger validation set would"
        )
    if s.reason is Reason.SAMPLE_TOO_WIDE:
        return (
            f"the validation sample's own noise (±{floor:.4f} at the next look's level, "
            f"whatever the seeds) leaves too little of the tolerance {tol:g} "
            f"beside the pairs' ±{sd:.4f} (mean paired drop {mean:+.4f}): no practical "
            f"number of seeds would confirm a harmless change {LOOK_POWER:.0%} of the "
            "time; a larger validation set would"
        )
    if s.reason is Reason.SPREAD_TOO_WIDE:
        return (
            f"its pairs vary by ±{sd:.4f} (mean paired drop {mean:+.4f}): no practical "
            f"number of seeds would confirm a harmless change {LOOK_POWER:.0%} of the time "
            f"against the tolerance {tol:g}; a longer accuracy budget might"
        )
    return _more_seeds(s, guard)


def _more_seeds(s: Settle, guard: AccuracyGuard) -> str:
    """The seeds that would confirm (or reject) it, and what else would."""
    tol = guard.tolerance
    floor, sd, mean = s.floor or 0.0, s.spread or 0.0, s.mean or 0.0
    counting = f", {s.counted} better by more than the tolerance counted at it" if s.counted else ""
    would = (
        f"{s.need} seeds would reject it as often as not, were its drop and spread to hold"
        if s.reason is Reason.REJECT
        else f"{s.need} seeds would confirm a harmless change at this spread {LOOK_POWER:.0%} of "
        "the time"
    )
    text = (
        f"the paired differences vary by ±{sd:.4f} (mean paired drop {mean:+.4f}{counting}): "
        f"{would} ({option('accuracy_repeats', s.need)}), or a longer accuracy budget "
        "would settle it "
        f"against the tolerance {tol:g}"
    )
    lag = lagging_run(guard.baseline_runs, higher_is_better=guard.higher_is_better, tolerance=tol)
    if lag is not None:
        text += f" ({lag_words(lag, guard.metric_name)})"
    if floor > tol / 2:
        # Most of the tolerance goes to the noise the same validation examples put in every
        # seed's drop: the seeds needed are what is left of it.
        text += (
            f"; the validation sample's own noise (±{floor:.4f} at the next look's "
            "level, whatever the seeds) takes most of the tolerance: a larger validation set "
            "would need far fewer"
        )
    return text


def confirmation_settle(c: Confirmation, guard: AccuracyGuard) -> str | None:
    """What would settle check ``c``: its reason's words, or a stored record's own."""
    if c.settle is not None:
        return settle_words(c.settle, guard)
    return c.stored_settle


def unsettleable_words(reason: Reason | None, guard: AccuracyGuard) -> str | None:
    """Why no check can settle a change of the numerics (:func:`guard.unsettleable`)."""
    if reason is None:
        return None
    if reason is Reason.WRONG_WAY:
        return "its metric got worse as the baseline trained"
    if reason is Reason.NOT_LEARNED:
        return "the baseline did not learn measurably in its accuracy budget"
    floor = validation_floor(guard) or 0.0
    small = (
        "a tolerance of 0 leaves no room for"
        if reason is Reason.ZERO_TOLERANCE
        else "the validation set is too small for the tolerance, given"
    )
    return f"{small} the validation sample's own noise, ±{floor:.4f} whatever the seeds"


def plan_note(plan: AccuracyPlan) -> str | None:
    """What the accuracy plan says of its horizon (:class:`PlanNote`), or None."""
    if plan.note is None:
        return None
    samples, n_train = plan.samples, plan.n_train
    if plan.note is PlanNote.WHOLE_RUN:
        return (
            f"the accuracy runs train the whole planned run ({plan.planned_epochs:g} epochs, "
            f"{samples} samples): the space searches the training length, and a shorter run "
            "is judged against the whole one"
        )
    if plan.note is PlanNote.TIME_LEFT:
        return (
            f"the accuracy runs train {samples} samples each, all the time left holds for the "
            "baseline's runs and one check (a shorter horizon than planned)"
        )
    why = (
        "all the time left for the baseline's runs and one check allows"
        if plan.note is PlanNote.EPOCH_TIME_LEFT
        else f"all its {ACCURACY_SHARE:.0%} share of the budget allows for {plan.repeats} seeds"
    )
    return (
        f"the accuracy check trains on {samples} samples per run ({samples / n_train:.0%} "
        f"of an epoch), {why}: a weaker check, said in the result. A timeout of "
        f"{plan.epoch_timeout or 0.0:.0f} s or more gives it a full epoch (or choose: "
        f"{option('accuracy_samples')})."
    )


def horizon_reason(plan: HorizonPlan) -> str | None:
    """Why the longer horizon is the better place to check (:attr:`HorizonPlan.reason`)."""
    if plan.reason is Longer.SOONER:
        return "a check is expected to settle sooner there"
    if plan.reason is Longer.ONLY_THERE:
        return (
            "a change that moves training cannot be settled here in the time left "
            f"(~{plan.left or 0.0:.0f} s), and the least check there fits"
        )
    return None


def horizon(plan: HorizonPlan) -> str:
    """The horizon's plan in one sentence: the spread, a check's price here and there."""

    def check(pairs: int | None, seconds: float) -> str:
        if pairs is None:
            return f"more than {MAX_NEED:,} pairs"
        return f"{pairs} pairs, ~{seconds:.0f} s"

    text = f"runs of {plan.samples:,} samples vary by ±{plan.spread:.4f}"
    if plan.half_spread is not None:
        text += f" (±{plan.half_spread:.4f} at {plan.samples // 2:,})"
    text += f"; a harmless change's check: {check(plan.pairs, plan.seconds)}"
    if plan.longer <= plan.samples:
        return text + " (the planned run's length: no longer horizon)"
    if plan.longer_spread is None:
        text += f"; at {plan.longer:,} samples: not projected (no halfway spread)"
    else:
        text += (
            f"; at {plan.longer:,} samples (±{plan.longer_spread:.4f} projected): "
            f"{check(plan.longer_pairs, plan.longer_seconds)} with the baseline's runs there"
        )
    why = horizon_reason(plan)
    return text + (f": lengthen, {why}" if why else ": keep it")


def longer_words(reason: Longer | None, guard: AccuracyGuard, plan: HorizonPlan) -> str | None:
    """Why the baseline's runs are made again at ``plan.longer`` (:func:`plan.longer_reason`)."""
    if reason is None:
        return None
    if reason is Longer.NOT_LEARNED:
        return (
            f"the baseline's {guard.metric_name} barely moved from the untrained model's in "
            f"{plan.samples:,} samples per run"
        )
    if reason is Longer.LAGGING:
        return (
            f"{guard.lagging} of the baseline's {guard.repeats} seeds had not taken off in "
            f"{plan.samples:,} samples per run where another had"
        )
    return f"at {plan.longer:,} samples {horizon_reason(plan)}"


def budget_words(plan: HorizonPlan, timeout: float | None) -> str | None:
    """What a budget too short for a check at the ``plan``'s horizon means, said once the
    baseline's runs have measured it (None: one fits, or no time budget): which changes can
    still be confirmed, and the ``timeout`` that would hold one check (:func:`check_timeout`)."""
    short = plan.short_by
    if short is None or timeout is None or plan.left is None:
        return None
    more = check_timeout(plan, timeout)
    need = (
        f"a timeout of about {more} s would hold one"
        if more is not None
        else "no timeout would hold one at this horizon"
    )
    cost = f"~{plan.seconds:.0f} s" if math.isfinite(plan.seconds) else "more than any budget"
    return (
        f"a check of a change that moves training (its pairs varying as the baseline's seeds "
        f"do) needs {cost} of accuracy runs here, and ~{plan.left:.0f} s are left for checks: "
        "in this budget only a change whose pairs vary much less (reduced precision's often "
        "do), or one better than the baseline by more than the tolerance in most of its "
        f"pairs, can be confirmed; {need}"
    )


def sentences(*parts: str | None) -> str:
    """``parts`` as sentences: each capitalised and ended with a full stop, one space apart."""
    said = (p.strip() for p in parts if p and p.strip())
    return " ".join(f"{p[0].upper()}{p[1:]}{'' if p.endswith('.') else '.'}" for p in said)


def longer_miss_words(miss: LongerMiss, guard: AccuracyGuard) -> str:
    """A longer horizon that did not fit: why it was asked for, and the timeout that would
    hold it."""
    why = (  # the seeds as they were then: later checks buy the baseline more
        f"{miss.lagging} of the baseline's {miss.repeats} seeds had not taken off in "
        f"{miss.plan.samples:,} samples per run where another had"
        if miss.reason is Longer.LAGGING
        else longer_words(miss.reason, guard, miss.plan)
    )
    text = (
        f"{why}, but runs of {miss.samples:,} samples (~{miss.seconds:.0f} s for the baseline's "
        "and one check) do not fit in the time left"
    )
    if miss.timeout is not None:
        text += f": a timeout of about {miss.timeout} s would hold them"
    return text


def accuracy_note(
    *,
    plan: AccuracyPlan | None,
    horizon: HorizonPlan | None,
    budget: float | None,
    longer: LongerMiss | None,
    guard: AccuracyGuard,
) -> str | None:
    """What the baseline's accuracy record says of its horizon, in sentences: the budget's plan
    (:func:`plan_note`), what a budget too short for a check there allows
    (:func:`budget_words`), and a longer horizon that did not fit; None where it says nothing."""
    parts = [
        None if plan is None else plan_note(plan),
        None if horizon is None or budget is None else budget_words(horizon, budget),
        None if longer is None else f"the horizon: {longer_miss_words(longer, guard)}",
    ]
    return sentences(*parts) or None
