"""Checking and settling: a candidate's accuracy confirmed over the baseline's seeds (paired
with its runs), and the answers measured again side by side with the baseline in paired
rounds, which is where the reported speedup comes from."""

from __future__ import annotations

import dataclasses

from autotune._guard.guard import counted_noise
from autotune._knobs import registry
from autotune._load import Load
from autotune._search import derived, ranking, storage
from autotune._search.baseline import Baseline
from autotune._search.bench import Bench
from autotune._search.evidence import confirm, evidence_value, p_within, seed_seconds
from autotune._search.ledger import (
    Entry,
    Ledger,
    away,
    config_rounds,
    fastest_verified,
    promise,
    race,
    runner_up,
    screening_noise,
    unproven,
)
from autotune._speed import stats as speed
from autotune._speed import words as speed_words
from autotune._trial.failures import FailureReason

__all__ = [
    "ROUNDS",
    "confirm_pending",
    "least_rounds_seconds",
    "side_by_side",
    "side_by_side_seconds",
]

# Side-by-side rounds whose time is kept from the start of the search; they go on beyond it,
# until decided or the last look (speed.LOOKS), only in time the search left.
ROUNDS = 3
MIN_ROUNDS = derived.MIN_ROUNDS  # the fewest that make a measured speedup
SAFE_LEADERS = 2  # configs that train the baseline's model measured in the first rounds
CHALLENGERS = 3  # configs a second pass of rounds may add, where they fit
# Where no config that trains the baseline's model screened faster than the baseline, the
# fastest one that screened at least this fraction of its speed is measured beside it: the
# baseline's screening is one draw too, and a fast draw of it would hide every safe win.
NEAR_SAFE = 0.75


def confirm_pending(bench: Bench, baseline: Baseline) -> None:
    """Spend the search's last time on the checks that would change the answer, before the
    side-by-side rounds: each time the open check of most expected gain per second (see
    :func:`autotune._search.evidence.evidence_value`), its first look or its next seeds, for as
    long as its looks fit (a search's last use of its time: see ``persist``) beside the fewest
    rounds of the answers; the search's first check, where it fits only without those rounds,
    still comes first if it could make an answer faster than the one so far beyond a tie."""
    if baseline.guard is None or baseline.guard.repeats < 2:
        return
    done: set[str] = set()
    while True:
        ledger = bench.ledger()
        current = Baseline.of(ledger) or baseline
        guard = ledger.guard
        if guard is None or not guard.learned:
            return  # every check would compare models that did not learn
        fastest = fastest_verified(ledger)
        floor = fastest[1] if fastest is not None else None
        options: list[tuple[float, Entry, float, float, bool]] = []
        for entry in ledger.open_checks(unresolved=True):
            if ledger.numerics_id(entry.config) in done:
                continue
            c = ledger.confirmation(entry)
            if c is not None and not c.confirmable:
                continue  # no number of seeds would confirm it
            first = c is None
            cost = (
                current.confirm_seconds(entry.record)
                if first
                else seed_seconds(current, entry, c.first_seed + len(c.runs) if c else 0)
            )
            drops = guard.paired_drops(c.runs, c.first_seed) if c is not None else []
            noise = (
                counted_noise(guard, c.units, drops, c.squares, c.first_seed, c.capped_units)
                if c is not None
                else None
            )
            # Over the answer so far; none known (no answer yet, or no time): no gain.
            speedup = derived.speedup(floor, promise(ledger, entry)) or 1.0
            value = evidence_value(speedup, p_within(c, guard.tolerance, drops, noise), cost)
            options.append((value, entry, cost, speedup, first))
        if not options:
            return
        _, entry, cost, speedup, first = max(options, key=lambda o: o[0])
        done.add(ledger.numerics_id(entry.config))
        # The fewest rounds that measure the answers side by side must still fit after it:
        # with it among them where it may settle, the answers so far where it will not. Not
        # more: a check may make an answer, while rounds beyond the fewest (a second pass,
        # stretched measurements) only sharpen a figure.
        after = least_rounds_seconds(ledger, current, entry)
        now = least_rounds_seconds(ledger, current)
        if not bench.deadline.past(cost + now):
            confirm(bench, current, entry, keep=after, persist=now)
        elif (
            speedup > 1 + ranking.TIE
            and not ledger.confirmations
            and not bench.deadline.past(cost + _pair_rounds(ledger, current, entry))
        ):
            # The search's first check fits alone: a check that may make a faster answer
            # comes before the rounds that measure the answers so far (as the loop's first
            # check does), which take what it leaves. Once a check was made, the rounds keep
            # their time: more checks taken from it could leave the answer unmeasured side by
            # side.
            bench.detail(  # the check's verdict line follows
                f"trial #{entry.number}'s check (~{cost:.0f} s) fits only before the "
                "side-by-side rounds' time: it comes first, the rounds take what it leaves"
            )
            confirm(bench, current, entry, keep=0.0, persist=0.0)
        else:
            # A check already made says "another seed", not as if none had been made.
            what = (
                f"to check trial #{entry.number}'s accuracy"
                if first
                else f"for another seed of trial #{entry.number}'s check"
            )
            rounds = f" beside the side-by-side rounds (~{now:.0f} s)" if now > 0 else ""
            line = f"no time left {what} (~{cost:.0f} s){rounds}"
            # A check made already said its verdict: one more seed of it is the detail's.
            if first:
                bench.report(line)
            else:
                bench.detail(line)


def _pair_rounds(ledger: Ledger, baseline: Baseline, entry: Entry) -> float:
    """Seconds of the fewest rounds that measure ``entry`` beside the baseline alone: what a
    check that may make it the answer must leave, so that no answer goes unmeasured side by
    side (and reported from screening, against one draw of the baseline)."""
    base = ledger.baseline
    return 0.0 if base is None else MIN_ROUNDS * _per_round(baseline, [base, entry])


def _contenders(ledger: Ledger, extra: Entry | None = None, *, near: bool = False) -> list[Entry]:
    """The baseline and the answers: the safe one with :data:`SAFE_LEADERS` - 1 more configs
    that train the baseline's model (the simplest screened within the noise of the fastest,
    see :func:`_simplest_near`, then the next fastest), each screened faster than the baseline
    beyond a tie (screening is one draw each: the leader by one draw is often not the leader
    side by side), or where none did and ``near``, the fastest that screened at least
    :data:`NEAR_SAFE` of the baseline's speed (the baseline's own draw may have run fast: the
    fewest rounds' time is kept for it); and the fast one where
    there is one (or ``extra``, a candidate that would become it if confirmed)."""
    base = ledger.baseline
    if base is None:
        return []
    out = [base]
    floor = ledger.rank_time(base) * (1 - ranking.TIE)
    ranked = sorted(
        (e for e in ledger.candidates if ledger.feasible(e) and ledger.safe(e)),
        key=ledger.rank_time,
    )
    fit = [
        e
        for e in (ledger.best_safe(), *ranked)
        if e is not None and ledger.rank_time(e) < floor and not ledger.slower_side_by_side(e)
    ]
    leaders: list[Entry] = []
    for lead in (*fit[:1], *_simplest_near(ledger, fit), *fit[1:]):
        if len(leaders) < SAFE_LEADERS and all(lead.config != o.config for o in (*out, *leaders)):
            leaders.append(lead)
    if near and not leaders:
        close = (
            e
            for e in ranked
            if ledger.rank_time(e) * NEAR_SAFE <= ledger.rank_time(base)
            and not ledger.slower_side_by_side(e)
            and e.config != base.config
        )
        first = next(close, None)
        leaders = [] if first is None else [first]
    for e in (*leaders, extra or ledger.best_fast()):
        if e is not None and all(e.config != o.config for o in out):
            out.append(e)
    return out


def _simplest_near(ledger: Ledger, fit: list[Entry]) -> list[Entry]:
    """Of ``fit`` (the fastest first), the simplest one simpler than the fastest that screened
    within the screening noise of it: the answer is the simplest config the rounds do not
    separate from their leader, and one draw each cannot rank two configs that close."""
    if len(fit) < 2:
        return []
    base = ledger.baseline
    assert base is not None
    bar = ledger.rank_time(fit[0]) * (1 + screening_noise(ledger))
    rank = lambda e: registry.complexity(e.config, base.config)  # noqa: E731
    near = [e for e in fit[1:] if ledger.rank_time(e) <= bar and rank(e) < rank(fit[0])]
    return [min(near, key=rank)] if near else []


def _challengers(ledger: Ledger) -> list[Entry]:
    """After the rounds: the configs they did not measure whose screening speedup beats the
    answer's side-by-side one beyond a tie (the fastest first, at most :data:`CHALLENGERS`):
    what could still be the answer if measured alike."""
    base, best = ledger.baseline, ledger.best()
    if base is None or best is None:
        return []
    bar = (ledger.side_speedup(best) or 1.0) * (1 + ranking.TIE)
    out: list[Entry] = []
    for e in sorted(ledger.entries, key=ledger.rank_time):
        screening = ledger.screening_speedup(e)
        if (
            ledger.feasible(e)
            and not e.record.reused
            and not away(ledger, e)
            and ledger.side_speedup(e) is None
            and not ledger.round_speedups(e)
            and screening is not None
            and screening > bar
            and all(e.config != o.config for o in out)
        ):
            out.append(e)
    return out[:CHALLENGERS]


def _per_round(baseline: Baseline, contenders: list[Entry]) -> float:
    return sum(baseline.measure_seconds * _relative_cost(e, baseline) for e in contenders)


def _second_pass_seconds(ledger: Ledger, baseline: Baseline, contenders: list[Entry]) -> float:
    """Seconds kept for a second pass of rounds (the baseline, the answer and one challenger,
    the fewest rounds that make a measured speedup) where a feasible config beyond
    ``contenders`` was screened faster than the baseline: what lets the rounds correct the
    first pass."""
    base = ledger.baseline
    if base is None or len(contenders) < 2:
        return 0.0
    floor = ledger.rank_time(base) * (1 - ranking.TIE)
    more = any(
        ledger.feasible(e) and ledger.rank_time(e) < floor
        for e in ledger.candidates
        if all(e.config != c.config for c in contenders)
    )
    # The baseline, the answer and one challenger, at the baseline's cost each.
    return MIN_ROUNDS * 3 * baseline.measure_seconds if more else 0.0


def side_by_side_seconds(ledger: Ledger, baseline: Baseline, extra: Entry | None = None) -> float:
    """Expected seconds of the side-by-side rounds, if the answers so far stand (or with
    ``extra`` as the fast answer): kept back from the start of the search. Where no config
    screened faster than the baseline, the fewest rounds of the one that screened nearly as
    fast (see :func:`_contenders`): a noisy screening can put a faster safe config just below
    the baseline, and only rounds kept for it can show it faster side by side."""
    contenders = _contenders(ledger, extra)
    if len(contenders) < 2:
        return least_rounds_seconds(ledger, baseline, extra)
    first = ROUNDS * _per_round(baseline, contenders)
    return first + _second_pass_seconds(ledger, baseline, contenders)


def least_rounds_seconds(ledger: Ledger, baseline: Baseline, extra: Entry | None = None) -> float:
    """Seconds of the fewest side-by-side rounds that make a measured speedup
    (:data:`MIN_ROUNDS`) of the answers so far (or with ``extra`` as the fast answer; where
    none screened faster than the baseline, the one nearly as fast), with no second pass: what
    a search's last check must leave."""
    contenders = _contenders(ledger, extra)
    if len(contenders) < 2:
        contenders = _contenders(ledger, extra, near=True)
    return MIN_ROUNDS * _per_round(baseline, contenders) if len(contenders) > 1 else 0.0


def _relative_cost(entry: Entry, baseline: Baseline) -> float:
    seconds = entry.record.measure_seconds
    return seconds / baseline.record.measure_seconds if baseline.record.measure_seconds else 1.0


def side_by_side(bench: Bench, baseline: Baseline) -> None:
    """Measure the baseline and the answers again, one after the other in each round, in an
    order drawn afresh for each round, so that drift in the machine's state hits all alike and
    the speedup reported is what the same machine gives side by side, with its interval; the
    rounds go on until they decide (see :func:`_rounds`). The first pass measures the
    answers and the next fastest safe configs (see :func:`_contenders`); where its figures fall
    below what another config's screening promised, a second pass measures those challengers
    beside the baseline and the answer, in the time kept for it."""
    ledger = bench.ledger()
    answers, contenders = _contenders(ledger), _contenders(ledger, near=True)
    if len(contenders) > len(answers) and bench.deadline.past(
        MIN_ROUNDS * _per_round(baseline, contenders)
    ):
        # The answers' rounds first. Tested as the rounds test themselves (they may end within
        # the deadline's grace): a stricter test here would drop rounds that still fit.
        contenders = answers
    if len(contenders) < 2:
        return
    spare = _second_pass_seconds(ledger, baseline, contenders)
    per_round = _per_round(baseline, contenders)
    if not bench.deadline.fits(MIN_ROUNDS * per_round + spare):
        spare = 0.0  # the answers' own rounds first
    first = _rounds(bench, baseline, contenders, keep=spare)
    if not first.count:
        bench.report("no time left to measure the answers again side by side")
        return
    ledger = bench.ledger()
    challengers = _challengers(ledger)  # none without an answer
    if challengers and ledger.baseline is not None:
        yardstick = ledger.baseline
        # The rounds' leader (the answer, unless a challenger's screening outranks it).
        measured = [
            e
            for e in ledger.entries
            if ledger.feasible(e)
            and e.config != yardstick.config
            and ledger.side_speedup(e)
            and not ledger.slower_side_by_side(e)
        ]
        lead = max(measured, key=lambda e: ledger.side_speedup(e) or 0.0, default=None)
        again = [yardstick] if lead is None else [yardstick, lead]
        challengers = [e for e in challengers if all(e.config != a.config for a in again)]
        fitting: list[Entry] = []
        for e in challengers:  # as many as fit, the fastest screened first
            if not bench.deadline.past(MIN_ROUNDS * _per_round(baseline, [*again, *fitting, e])):
                fitting.append(e)
        if fitting:
            names = ", ".join(f"#{e.number}" for e in fitting)
            bench.report(
                f"side by side: screened faster than the rounds measured the answer: trial "
                f"{names}; measured beside it"
            )
            _rounds(bench, baseline, [*again, *fitting], keep=0.0)
        elif not first.decided:
            # No second pass: the time kept for it goes on to the first pass's rounds.
            _rounds(bench, baseline, first.active, keep=0.0, fewest=1)
    elif not first.decided:
        _rounds(bench, baseline, first.active, keep=0.0, fewest=1)
    _say_answer(bench, bench.ledger())


def _say_answer(bench: Bench, ledger: Ledger) -> None:
    """The rounds' answer, its interval and what they decided, or that nothing beat the
    baseline beyond the noise."""
    best, base = ledger.best(), ledger.baseline
    if best is None or base is None:
        return
    decided = race(ledger, [e for e in ledger.entries if ledger.feasible(e)])
    if decided is None:
        return
    if best.config == base.config:
        if decided.fell_back:
            bench.report(f"side by side: {speed_words.no_faster(decided.spread)}")
            lead = ledger.measured(decided.leader)
            if lead is not None:
                lead_figure = decided.versus_baseline[decided.leader]
                bench.report(speed_words.fastest(f"trial #{lead.number}", lead_figure).strip())
        elif decided.leader == base.config:
            bench.report(f"side by side: {speed_words.none_faster(decided.spread)}")
        else:
            bench.report(f"side by side: {speed_words.as_fast(decided.spread)}")
        return
    answer = ledger.side_interval(best)
    if answer is None:
        return
    near = runner_up(ledger, decided, best)
    runner = speed_words.runner_up(None if near is None else near.number, base.number)
    doubt = near is not None and unproven(decided, near.config, best.config)
    bench.report(
        f"side by side: trial #{best.number} {speed_words.interval(answer, short=True)}; "
        f"{speed_words.decision(decided.decision, runner, unproven=doubt)}"
    )


@dataclasses.dataclass(frozen=True)
class _Pass:
    """What a pass of rounds did: how many rounds it measured, the contenders still in them
    (the baseline first), and whether they stopped as decided."""

    count: int
    active: list[Entry]
    decided: bool


def _rounds(
    bench: Bench,
    baseline: Baseline,
    contenders: list[Entry],
    *,
    keep: float,
    fewest: int = MIN_ROUNDS,
) -> _Pass:
    """Side-by-side rounds of ``contenders`` (the baseline first), each measuring every one
    once in an order drawn afresh (:func:`autotune._speed.stats.round_order`), until the rounds
    decide between them (:func:`autotune._speed.stats.after_round`: at a look, those the leader
    was separated from leave) or the time before the ``keep`` seconds held for later rounds
    ends; none unless ``fewest`` fit (:data:`MIN_ROUNDS`: one round is one draw, not a
    measured speedup; one for a pass that goes on with the contenders of the last)."""
    s = bench.settings
    per_round = _per_round(baseline, contenders)
    if bench.deadline.past(fewest * per_round + keep):
        return _Pass(0, contenders, decided=False)
    budget = s.budget
    ledger = bench.ledger()
    base_cfg = contenders[0].config
    by_config = {e.config: e for e in contenders}
    active = [e.config for e in contenders]
    done, decided = 0, False
    while len(ledger.rounds) < speed.LOOKS[-1]:
        if bench.deadline.past(per_round + keep):  # the grace is the last it may take
            break
        index = len(ledger.rounds)
        order = [by_config[c] for c in speed.round_order(active, bench.study.study_name, index)]
        bench.report.trial(f"side by side with the baseline: round {index + 1}")
        measured: dict[int, float] = {}
        rates: dict[int, float] = {}
        loads: dict[int, Load] = {}
        timed_out = False
        for entry in order:
            expected = baseline.measure_seconds * _relative_cost(entry, baseline)
            outcome = bench.execute(entry.config, expected=expected, budget=budget)
            if outcome.ok and outcome.measurement is not None:
                measured[entry.number] = s.projected_time(outcome.measurement, entry.config)
                rates[entry.number] = outcome.measurement.throughput
                if outcome.load is not None:
                    loads[entry.number] = outcome.load
            timed_out = timed_out or outcome.failure is FailureReason.TIMEOUT
        storage.add_round(bench.study, measured, rates, loads)
        done += 1
        ledger = bench.ledger()
        failed = [e for e in order if e.number not in measured]
        if failed:
            names = ", ".join(f"#{e.number}" for e in failed)
            if by_config[base_cfg] in failed or timed_out or len(failed) >= len(active) - 1:
                # Stopped at the deadline on a loaded machine, or nothing left to compare:
                # the next round would fail the same way, only later.
                bench.report(
                    f"side by side: the measurement of trial {names} failed; no more rounds"
                )
                break
            bench.report(f"side by side: the measurement of trial {names} failed; going on")
            active = [c for c in active if by_config[c] not in failed]
        stop, active = speed.after_round(
            config_rounds(ledger),
            base_cfg,
            active,
            lambda cfg: registry.complexity(cfg, base_cfg),
        )
        per_round = _per_round(baseline, [by_config[c] for c in active])
        if stop:
            decided = len(ledger.rounds) < speed.LOOKS[-1]
            break
    return _Pass(done, [by_config[c] for c in active], decided)
