"""The accuracy guard's error rates, by simulation: how often the search's *answer* is a
candidate whose true drop is beyond the tolerance (a false accept), and how often a harmless
candidate is confirmed (the power), under the drop shapes real tasks show.

    python benchmarks/guard_error_rates.py                 # every scenario, 1,000 searches each
    python benchmarks/guard_error_rates.py --searches 200 --scenario bimodal
    python benchmarks/guard_error_rates.py --skew-table 10000  # the first look alone, skewed

Each simulated search has one validation subset of ``N`` examples, drawn once and shared by
every seed and every candidate (as the search's fixed validation subset is), and one baseline
whose runs every candidate pairs with. A run is a vector of per-example outcomes (correct or
not), so accuracies are discrete and the subset's own sampling error is in every drop:

- example ``i`` is answered correctly by a baseline run with probability ``q_i + τ_s`` (``q_i``
  its difficulty, ``τ_s`` the data-order seed's luck, which the candidate's run of the same
  seed shares: what pairing cancels);
- a candidate changes example ``i``'s probability by ``-Δ_i`` (``Δ_i`` drawn per example:
  what the candidate breaks and fixes) plus a seed effect of its own ``η_s``; its run reuses
  the baseline run's random draw per example with probability ``ρ`` (the two models agree on
  most examples);
- in the ``bimodal`` scenarios a candidate run fails to take off with probability ``f`` and
  answers at chance;
- in the ``t3`` scenarios ``η_s`` is heavy-tailed (Student's t, 3 degrees of freedom), in the
  ``skewed`` ones skewed towards harm (a lognormal, σ = 1, mirrored so that its long tail
  lowers the candidate's accuracy: most runs a little better, a few much worse), each with
  mean zero and the normal's standard deviation, so the true drop is unchanged;
- the ``pairs-N`` rows give the baseline ``N`` first seeds (``accuracy_repeats``): a first look of
  ``N`` pairs (the check sizes searches use), or two where ``AccuracyGuard.first_pairs`` says;
- the ``quiet`` rows are a task whose runs barely vary (each example nearly always right or
  always wrong, on 8,192 examples): there ``first_pairs`` opens about half the checks with two
  pairs, so these rows hold the two-pair look;
- in the ``lagging`` rows a baseline run ends far behind its others (each example right
  :data:`LAG` less often: a constant rate's noisy last iterate) 15% of the time, the
  candidate's never (``lagging-both``: as often, independently); the true drop is against the
  baseline's expectation, its lagging runs included, and a harmless candidate there is one as
  good as the baseline's runs that do not lag.

The true drop of a candidate is its expected drop on the *population* (examples drawn afresh,
failures included). Under H0 the candidates sit exactly at the tolerance (the worst case a
non-inferiority test must hold); under "harmless" their true drop is 0. Every candidate is
screened and checked as the search does it: its screening run (seed 0) must pass
``AccuracyGuard.violation`` (with the spread of the task's earlier checks' pairs, as the
ledger's guard has it, and the run's own per-example values: ``guard.screening_margin``), then
``AccuracyGuard.confirm`` at look 1 over the seeds ``Baseline.first_seeds`` takes
(``AccuracyGuard.first_pairs``: as many as the baseline's first runs, or two), from
``guard.FIRST_PAIR`` (the run that passed screening is not a pair: ``--reuse-screening`` pairs
it, the rule before the tenth session, to show what that cost), then as many seeds as
``evidence.next_target`` asks while unresolved, up to ``--max-seeds``, the j-th checked
candidate as the study's j-th check. The answer is a false accept when any candidate at the
tolerance ends confirmed.

``--skew-table`` takes the rule's first look alone (:func:`skew_table`) under a harm skew that
the pairs' own spread dominates (the issue's pure lognormal and ``skewed-seeds``' mix): how far
past its level it goes, and how much wider the bound would have to be to hold it, at what cost
to a harmless candidate. A sample of a few runs from such a skew mostly misses its rare, much
worse runs and shows a candidate better and steadier than it is, which no bound on those pairs
can tell from one that is.

Results go to benchmarks/RESULTS.md (machine, command, commit) between this benchmark's markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
import time
from pathlib import Path

import numpy as np

from autotune._device import environment
from autotune._guard.confirmation import Confirmation, Verdict
from autotune._guard.guard import FIRST_PAIR, AccuracyGuard
from autotune._guard.stats import SampleNoise, look_alpha, paired_bounds
from autotune._search.evidence import next_target, won_by_far
from autotune._trial.outcome import AccuracyRun

sys.path.insert(0, str(Path(__file__).parent))
from speedup import code_version, write_section

TOLERANCE = 0.01
CHANCE = 0.1  # a run that fails to take off answers at chance (10 classes)
QUIET = {"examples": 8192, "spread": 0.1, "seed_sd": 0.0005, "own_sd": 0.0005}  # see "quiet"
LAG = 0.25  # a lagging run answers correctly 25% less often (0.85 -> 0.64): a last iterate


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One family of tasks and candidates (see the module's docstring)."""

    name: str
    what: str
    examples: int = 2048  # the validation subset
    accuracy: float = 0.85  # the baseline's mean accuracy on the population
    seed_sd: float = 0.01  # τ: a seed's luck, shared by both arms of a pair
    own_sd: float = 0.004  # η: a candidate run's own seed effect
    flips: float = 0.05  # share of examples whose probability the candidate changes
    agree: float = 0.9  # ρ: a candidate run reuses the baseline run's draw per example
    fail: float = 0.0  # f: a candidate run fails to take off
    candidates: int = 1
    units: bool = True  # per-example values recorded (False: a metric without them)
    identical: bool = False  # the candidate computes exactly what the baseline does
    shape: str = "normal"  # η's distribution: normal, t3 (heavy tails), skewed (harm tail)
    repeats: int | None = None  # the baseline's first seeds, accuracy_repeats (None: --repeats)
    # The difficulty Beta's a + b: small, each example nearly always right or nearly always
    # wrong, so runs of different data orders agree on most of them.
    spread: float = 4.0
    seed_heavy: bool = False  # η 4x the normal rows': the seeds' part dominates the drop
    base_lag: float = 0.0  # a baseline run ends far behind its others (:data:`LAG`)
    both_lag: bool = False  # ... and so does a candidate run, as often, independently

    @property
    def lag_cost(self) -> float:
        """What the baseline's lagging runs cost its expected accuracy."""
        return self.base_lag * LAG * self.accuracy

    @property
    def harmless(self) -> float:
        """The power rows' true drop: 0, or, where only the baseline's runs lag, a candidate
        as good as the baseline's runs that do not (better than the baseline by what its
        lagging runs cost it)."""
        return -self.lag_cost if self.base_lag and not self.both_lag else 0.0


SCENARIOS = (
    Scenario("normal", "one candidate, drops from per-example changes and seed noise"),
    Scenario(
        "no-units",
        "the same, the metric without per-example values (a trainer's logged metric)",
        units=False,
    ),
    Scenario(
        "discrete-small",
        "a 256-example validation set: accuracies in steps of 1/256",
        examples=256,
    ),
    Scenario(
        "bimodal",
        "a candidate run fails to take off 10% of the time (chance accuracy), the baseline's "
        "never; equal otherwise: true drop 0.075",
        fail=0.1,
    ),
    Scenario(
        "bimodal-rare",
        "the same, failing 2% of the time: true drop 0.015",
        fail=0.02,
    ),
    Scenario("3-candidates", "three candidates at the tolerance, one answer", candidates=3),
    Scenario("6-candidates", "six candidates at the tolerance, one answer", candidates=6),
    Scenario("t3", "one candidate, its own seed effect heavy-tailed (t, 3 d.o.f.)", shape="t3"),
    Scenario("t3-6", "six candidates at the tolerance, heavy-tailed", shape="t3", candidates=6),
    Scenario(
        "skewed",
        "one candidate, its own seed effect skewed towards harm (lognormal, σ = 1)",
        shape="skewed",
    ),
    Scenario("skewed-3", "three candidates, skewed towards harm", shape="skewed", candidates=3),
    Scenario("skewed-6", "six candidates, skewed towards harm", shape="skewed", candidates=6),
    Scenario(
        "skewed-seeds",
        "one candidate skewed towards harm, its seed effect 4x (it dominates)",
        shape="skewed",
        seed_heavy=True,
    ),
    Scenario(
        "normal-seeds",
        "one candidate, normal, its seed effect 4x (it dominates)",
        seed_heavy=True,
    ),
    Scenario(
        "quiet",
        "a task whose runs barely vary (GPT-2's validation loss): 8,192 examples, each "
        "nearly always right or always wrong, a seed's luck and a candidate's own effect "
        "±0.0005: the baseline's runs vary by about ±0.0009, and the first look takes two "
        "pairs where they say two settle (about half the checks)",
        **QUIET,  # type: ignore[arg-type]
    ),
    Scenario(
        "quiet-t3",
        "the same, the candidate's own seed effect heavy-tailed",
        **QUIET,  # type: ignore[arg-type]
        shape="t3",
    ),
    Scenario(
        "quiet-skewed",
        "the same, skewed towards harm",
        **QUIET,  # type: ignore[arg-type]
        shape="skewed",
    ),
    Scenario(
        "quiet-seeds",
        "the same, skewed towards harm and 4x: the candidate's own effect dominates its pairs",
        **QUIET,  # type: ignore[arg-type]
        shape="skewed",
        seed_heavy=True,
    ),
    Scenario(
        "quiet-6",
        "six candidates at the tolerance on the quiet task",
        **QUIET,  # type: ignore[arg-type]
        candidates=6,
    ),
    Scenario("pairs-2", "one candidate, a first look of 2 pairs", repeats=2),
    Scenario("pairs-8", "one candidate, a first look of 8 pairs", repeats=8),
    Scenario("pairs-16", "one candidate, a first look of 16 pairs", repeats=16),
    Scenario(
        "skewed-pairs-2", "skewed towards harm, a first look of 2 pairs", shape="skewed", repeats=2
    ),
    Scenario(
        "skewed-pairs-8", "skewed towards harm, a first look of 8 pairs", shape="skewed", repeats=8
    ),
    Scenario(
        "skewed-pairs-16",
        "skewed towards harm, a first look of 16 pairs",
        shape="skewed",
        repeats=16,
    ),
    Scenario(
        "lagging-baseline",
        "a baseline run ends far behind its others 15% of the time (a constant rate's last "
        "iterate: 0.85 -> 0.64), the candidate's never; harmless: as good as the baseline's "
        "runs that do not lag",
        base_lag=0.15,
    ),
    Scenario(
        "lagging-both",
        "baseline and candidate runs each end far behind 15% of the time, independently",
        base_lag=0.15,
        both_lag=True,
    ),
    Scenario(
        "lagging-seeds",
        "the baseline lags 15% of the time, the candidate's seed effect 4x and skewed towards harm",
        base_lag=0.15,
        shape="skewed",
        seed_heavy=True,
    ),
    Scenario(
        "identical",
        "the candidate's runs equal the baseline's, seed for seed (true drop 0)",
        identical=True,
    ),
)


class Task:
    """One simulated search's validation subset and baseline, drawn once; its candidates."""

    def __init__(self, sc: Scenario, rng: np.random.Generator, *, true_drop: float) -> None:
        self.sc, self.rng = sc, rng
        a = sc.accuracy
        # Difficulty: most examples easy, some hard (a Beta with the baseline's mean).
        self.q = rng.beta(a * sc.spread, (1.0 - a) * sc.spread, size=sc.examples)
        self.base_runs: list[np.ndarray] = []
        self.draws: list[np.ndarray] = []
        self.taus: list[float] = []
        self.true_drop = true_drop

    def baseline(self, seeds: int) -> list[np.ndarray]:
        while len(self.base_runs) < seeds:
            tau = float(self.rng.normal(0.0, self.sc.seed_sd))
            u = self.rng.random(self.sc.examples)
            lags = self.rng.random() < self.sc.base_lag
            self.taus.append(tau)
            self.draws.append(u)
            p = np.clip(self.q + tau, 0, 1) * (1.0 - LAG if lags else 1.0)
            self.base_runs.append((u < p).astype(float))
        return self.base_runs[:seeds]

    def candidate(self) -> Candidate:
        """A candidate that moves a share ``flips`` of the examples, each to always wrong
        (breaks it: ``q_i`` lost) or always right (fixes it: ``1 - q_i`` gained), with the
        share it breaks set so that its expected drop on the population (its failures to
        take off included) is the true drop asked for. No probability is clipped: the drop
        is exact."""
        sc = self.sc
        if sc.identical:
            return Candidate(self, np.zeros(sc.examples, dtype=bool), np.zeros(sc.examples))
        a = sc.accuracy
        fail_cost = sc.fail * (a - CHANCE)
        # Against the baseline's expected accuracy, its lagging runs included (a candidate's
        # own, with both_lag, cost it as much: they cancel).
        lag_cost = 0.0 if sc.both_lag else sc.lag_cost
        per_moved = (self.true_drop + lag_cost - fail_cost) / ((1.0 - sc.fail) * sc.flips)
        # per_moved = b a - (1 - b)(1 - a), b the share of moved examples it breaks.
        b = (per_moved + 1.0 - a) / 1.0
        assert 0.0 <= b <= 1.0, f"scenario {sc.name}: no share of breaks gives that drop"
        moved = self.rng.random(sc.examples) < sc.flips
        broken = self.rng.random(sc.examples) < b
        return Candidate(self, moved, np.where(broken, 0.0, 1.0))


class Candidate:
    def __init__(self, task: Task, moved: np.ndarray, moved_to: np.ndarray) -> None:
        self.task, self.moved, self.moved_to = task, moved, moved_to
        self.runs: list[np.ndarray] = []
        self.failed: set[int] = set()  # the seeds whose runs failed to take off

    def run(self, seed: int) -> np.ndarray:
        t, sc, rng = self.task, self.task.sc, self.task.rng
        t.baseline(seed + 1)
        if sc.identical:
            return t.base_runs[seed]
        if rng.random() < sc.fail:
            self.failed.add(seed)
            return (rng.random(sc.examples) < CHANCE).astype(float)
        eta = own_effect(rng, sc)
        same = rng.random(sc.examples) < sc.agree
        u = np.where(same, t.draws[seed], rng.random(sc.examples))
        p = np.clip(t.q + t.taus[seed] + eta, 0, 1)
        if sc.both_lag and rng.random() < sc.base_lag:
            p = p * (1.0 - LAG)
            return np.where(self.moved, self.moved_to * (u < 1.0 - LAG), (u < p).astype(float))
        return np.where(self.moved, self.moved_to, (u < p).astype(float))

    def runs_for(self, seeds: int) -> list[np.ndarray]:
        while len(self.runs) < seeds:
            self.runs.append(self.run(len(self.runs)))
        return self.runs


LOGNORMAL_MEAN = float(np.exp(0.5))
LOGNORMAL_SD = float(np.sqrt((np.e - 1.0) * np.e))


def own_effect(rng: np.random.Generator, sc: Scenario) -> float:
    """A candidate run's own seed effect ``η``: mean zero, standard deviation ``own_sd`` (4x
    with ``seed_heavy``), in the scenario's shape."""
    sd = sc.own_sd * (4.0 if sc.seed_heavy else 1.0)
    if sc.shape == "t3":
        return sd * float(rng.standard_t(3)) / float(np.sqrt(3.0))
    if sc.shape == "skewed":  # the long tail lowers the accuracy: a rare, large harm
        return -sd * (float(rng.lognormal(0.0, 1.0)) - LOGNORMAL_MEAN) / LOGNORMAL_SD
    return sd * float(rng.normal())


def guard_of(task: Task, seeds: int) -> AccuracyGuard:
    base = task.baseline(seeds)
    return AccuracyGuard(
        metric_name="accuracy",
        higher_is_better=True,
        tolerance=TOLERANCE,
        baseline_runs=tuple(float(r.mean()) for r in base),
        accuracy_samples=10_000,
        initial_metric=CHANCE,
        baseline_units=tuple(tuple(r.tolist()) for r in base) if task.sc.units else (),
    )


FIRST_LOOKS = ("search", "repeats", "first-check")  # --first-look: see main()


def check(
    task: Task,
    cand: Candidate,
    order: int,
    repeats: int,
    max_seeds: int,
    first: int,
    first_look: str = "search",
) -> tuple[Confirmation, int]:
    """The check as the search makes it: look 1 over the seeds from ``first`` that
    ``Baseline.first_seeds`` takes (``AccuracyGuard.first_pairs`` of the baseline's runs so
    far, ``repeats`` its ``accuracy_repeats``), then the seeds ``next_target`` asks for while
    unresolved (one second a seed, ``max_seeds`` in all). With the pairs of its first look."""
    have = max(repeats, len(task.base_runs))
    opening = dataclasses.replace(guard_of(task, have), first_look=repeats)
    opens = opening.first_pairs()
    if first_look == "repeats" or (first_look == "first-check" and order > 1):
        opens = repeats
    n, look = max(opens, have - first), 1
    opened = n
    while True:
        runs = cand.runs_for(first + n)[first : first + n]
        units, squares, capped = None, None, None
        g = guard_of(task, first + n)
        metrics = [float(r.mean()) for r in runs]
        if task.sc.units:
            units = tuple(np.sum(runs, axis=0))
            base = task.baseline(first + n)[first:]
            squares = float(sum(((b - r) ** 2).sum() for b, r in zip(base, runs, strict=True)))
            # The seeds whose pair the candidate won by more than the tolerance, with their
            # per-example values, kept as the search keeps them.
            capped = won_by_far(
                g,
                [
                    AccuracyRun(seed=first + i, metric=m, final_loss=0.0, samples=1,
                                seconds=0.0, units=tuple(r.tolist()))
                    for i, (r, m) in enumerate(zip(runs, metrics, strict=True))
                ],
            )  # fmt: skip
        c = g.confirm(
            metrics,
            units=units,
            squares=squares,
            looks=look,
            order=order,
            first=first,
            capped=capped,
        )
        if c.verdict is not Verdict.UNRESOLVED:
            return c, opened
        target = next_target(n, c.need, 1.0, float(max_seeds - n))
        if target is None:
            return c, opened
        n, look = target, look + 1


def simulate(
    sc: Scenario,
    *,
    true_drop: float,
    searches: int,
    repeats: int,
    max_seeds: int,
    seed: int,
    first: int = FIRST_PAIR,
    first_look: str = "search",
) -> tuple[float, float, float, float, float]:
    """(share of searches whose answer was confirmed, mean seeds per check made, share of
    checks whose pairs showed no failed run: where a failure mode went unseen, which no rule
    on those pairs can tell from a candidate without it; share of candidates confirmed at
    their first look: what a budget that holds one look settles; mean pairs of a check's
    first look). A candidate that failed screening is never checked."""
    rng = np.random.default_rng(seed)
    accepted, seeds, unseen, at_first, checks, opened = 0, 0, 0, 0, 0, 0
    for _ in range(searches):
        task = Task(sc, rng, true_drop=true_drop)
        verdicts: list[bool] = []
        done: list[Confirmation] = []
        for _ in range(sc.candidates):
            cand = task.candidate()
            screening = guard_of(task, repeats).with_pairs(done)
            first_run = cand.runs_for(1)[0]
            units = tuple(first_run.tolist()) if sc.units else None
            if screening.violation(float(first_run.mean()), units=units) > 0:
                verdicts.append(False)  # failed screening: never checked, never the answer
                continue
            c, pairs = check(task, cand, len(done) + 1, repeats, max_seeds, first, first_look)
            opened += pairs
            done.append(c)
            verdicts.append(c.passed)
            checks += 1
            seeds += len(c.runs)
            at_first += c.passed and c.looks == 1
            unseen += not any(first <= s < first + len(c.runs) for s in cand.failed)
        accepted += any(verdicts)
    made = max(checks, 1)
    first_share = at_first / (searches * sc.candidates)
    return accepted / searches, seeds / made, unseen / made, first_share, opened / made


SKEW_PAIRS = (2, 3, 5, 8, 16)
# The validation sample's part of a pair's drop (a shift every pair shares, its variance known
# to the rule), as a multiple of the candidate's own seed effect's standard deviation: none (a
# pure harm skew, the issue's own simulation), skewed-seeds' (about a quarter), half, equal
# (about the skewed row's).
SKEW_SHARED = (0.0, 0.25, 0.5, 1.0)
SKEW_GAP = 1.0  # the harmless candidate: this many of its own effect's sd inside the tolerance


def skew_ratios(
    rng: np.random.Generator, pairs: int, shared: float, reps: int, *, skewed: bool, gap: float
) -> np.ndarray:
    """Per simulated look: how far the rule's one-sided bound at look 1's level
    (:func:`guard.paired_bounds`, the validation part as its ``SampleNoise``) may be widened
    and still confirm, ``(tolerance - mean) / (bound - mean)`` (the tolerance at 0): the look
    confirms at a widening ``k`` where the ratio is above ``k``. The candidate's own effect is
    standard (the lognormal's mirror, harm positive, or a normal), its mean ``-gap``."""
    noise = SampleNoise(variance=shared**2, dof=2047.0) if shared > 0 else None
    out = np.empty(reps)
    for i in range(reps):
        if skewed:
            own = (rng.lognormal(0.0, 1.0, pairs) - LOGNORMAL_MEAN) / LOGNORMAL_SD
        else:
            own = rng.normal(size=pairs)
        drops = own - gap + shared * float(rng.normal())
        mean, _, upper = paired_bounds([float(d) for d in drops], 1, noise=noise)
        out[i] = -mean / (upper - mean) if np.isfinite(upper) and upper > mean else -np.inf
    return out


def skew_table(reps: int, seed: int) -> list[str]:
    """The rule in isolation under a harm skew that its pairs' own spread dominates: the
    false-accept rate of look 1 (candidates at the tolerance whose own seed effect is a
    mirrored lognormal, σ = 1), the widening of the bound that would hold it at the look's
    level, and what that widening costs a harmless candidate with a normal effect
    (:data:`SKEW_GAP` of its sd inside the tolerance)."""
    alpha = look_alpha(1)
    rng = np.random.default_rng(seed)
    rows = [
        "| pairs | validation part (x the seed sd) | look 1's false accepts (level "
        f"{alpha:.3f}) | widening that holds the level | harmless confirmed: the rule "
        "/ widened |",
        "|---|---|---|---|---|",
    ]
    for shared in SKEW_SHARED:
        for pairs in SKEW_PAIRS:
            h0 = skew_ratios(rng, pairs, shared, reps, skewed=True, gap=0.0)
            ok = skew_ratios(rng, pairs, shared, reps, skewed=False, gap=SKEW_GAP)
            widen = max(1.0, float(np.quantile(h0, 1.0 - alpha)))
            rows.append(
                f"| {pairs} | {shared:g} | {float(np.mean(h0 > 1.0)):.3f} | {widen:.2f}x | "
                f"{float(np.mean(ok > 1.0)):.3f} / {float(np.mean(ok > widen)):.3f} |"
            )
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="the baseline's first seeds")
    parser.add_argument("--max-seeds", type=int, default=48)
    parser.add_argument("--scenario", action="append", choices=[s.name for s in SCENARIOS])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--reuse-screening",
        action="store_true",
        help="pair the screening run (seed 0) as the search did before the tenth session",
    )
    parser.add_argument(
        "--first-look",
        choices=FIRST_LOOKS,
        default="search",
        help="a check's first look: as the search takes it (`first_pairs`: two pairs where the "
        "baseline's runs say two settle), always the baseline's first seeds (the rule before "
        "the seventeenth session), or two pairs for a study's first check only",
    )
    parser.add_argument(
        "--skew-table",
        type=int,
        metavar="LOOKS",
        help="instead of the searches: the rule's first look alone under a harm skew its pairs' "
        "own spread dominates, LOOKS simulated looks a cell (see skew_table)",
    )
    args = parser.parse_args()
    if args.skew_table:
        skew_only(args)
        return
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    rows = [
        "| scenario | what | false accepts of the answer (candidates at the tolerance) "
        "| harmless confirmed (power) | harmless confirmed at the first look "
        "| seeds per check (H0 / harmless) | first look's pairs (H0 / harmless) "
        "| H0 checks whose pairs showed no failed run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    start = time.perf_counter()
    for i, sc in enumerate(chosen):
        repeats = sc.repeats or args.repeats
        common = dict(
            searches=args.searches,
            repeats=repeats,
            max_seeds=args.max_seeds,
            first=0 if args.reuse_screening else FIRST_PAIR,
            first_look=args.first_look,
        )
        nan = float("nan")
        fa, fa_seeds, power, p_seeds, unseen, first = nan, nan, nan, nan, nan, nan
        fa_open, p_open = nan, nan
        if not sc.identical:
            # Candidates at the tolerance; with failures to take off, as harmful as those make
            # them (equal otherwise), which is beyond it.
            drop = max(TOLERANCE, sc.fail * (sc.accuracy - CHANCE))
            fa, fa_seeds, unseen, _, fa_open = simulate(sc, true_drop=drop, seed=2 * i, **common)  # type: ignore[arg-type]
        if not sc.fail:
            power, p_seeds, _, first, p_open = simulate(
                sc,
                true_drop=sc.harmless,
                seed=2 * i + 1,
                **common,  # type: ignore[arg-type]
            )
        bad = "" if fa != fa or fa <= 0.05 else " **(over 0.05)**"
        row = (
            f"| {sc.name} | {sc.what} | {fa:.3f}{bad} | {power:.3f} | {first:.3f} | "
            f"{fa_seeds:.1f} / {p_seeds:.1f} | {fa_open:.2f} / {p_open:.2f} | "
            f"{unseen if sc.fail else nan:.3f} |"
        )
        rows.append(row.replace("nan", "-"))
        print(rows[-1], flush=True)
    took = time.perf_counter() - start
    details = (
        f"{took:.0f} s. {args.searches} simulated searches per cell, tolerance {TOLERANCE}, the "
        f"baseline's first {args.repeats} seeds (look 1 over as many pairs, or two where "
        f"`first_pairs` says), at most {args.max_seeds} seeds a check."
    )
    report("guard-error-rates", "The guard's error rates, simulated", "", details, rows, args)


def report(
    section: str, title: str, flag: str, details: str, rows: list[str], args: argparse.Namespace
) -> None:
    """Print a section (machine, command, commit, ``details``, the table) and write it to
    RESULTS.md unless ``--no-write``."""
    env = environment("cpu")
    command = " ".join(["python benchmarks/guard_error_rates.py", *sys.argv[1:]])
    text = "\n".join(
        [
            f"### {title} (`guard_error_rates.py{flag}`, {datetime.date.today()})",
            "",
            f"Machine: {env['cpu_model']}, {env['cpu_count']} CPUs. Command: `{command}` "
            f"(code: {code_version()}); {details}",
            "",
            *rows,
            "",
        ]
    )
    if not args.no_write:
        write_section(section, text)
    print(text)


def skew_only(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    rows = skew_table(args.skew_table, seed=0)
    details = (
        f"{time.perf_counter() - start:.0f} s. {args.skew_table} simulated looks per cell: "
        "paired drops whose candidate's own seed effect is a mirrored lognormal (σ = 1: most "
        "runs a little better, a few much worse) with mean at the tolerance, plus a validation "
        "part every pair shares, bounded by `guard.paired_bounds` at look 1's level; the "
        f"harmless candidate's effect is normal, {SKEW_GAP:g} of its sd inside the tolerance."
    )
    title = "The rule's first look under a harm skew"
    report("guard-skew", title, " --skew-table", details, rows, args)


if __name__ == "__main__":
    main()
