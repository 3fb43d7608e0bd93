"""Ground truth for the accuracy guard: does its verdict at the search's horizon agree with
long runs?

    nice -n 5 python benchmarks/guard_truth.py                      # all five workloads
    python benchmarks/guard_truth.py --workload bert --candidate bf16 --horizon-multiple 4

For each workload (cnn, bert, resnet on JPEG files, gpt2, a ViT on scanned digits) the
baseline that realworld.py's searches use (``TrainingConfig()``: batch 32, fp32, constant LR
1e-3) and the guard's typical candidates:

- ``bf16``: the baseline in bf16 autocast (the same optimizer steps);
- ``batch2x``: twice the batch, with the LR rule the search's own bold guess applies
  (``policy.fast_guesses``: sqrt batch scaling of the peak LR, a cosine schedule, 5% warm-up),
  built by the space's own ``config_from``;
- ``lr10`` and ``batch8x``: harmful changes, the learning rate x10 and the batch x8 with the
  LR left as it is (8x fewer optimizer steps on the same samples);
- tunable ones, to place a harmful change near the tolerance (``--no-guard`` runs only the
  long runs that tune them, ``--cache`` keeps every run so that the tuning runs are reused):
  ``noise:R`` (a share R of the candidate arm's training labels wrong, a fixed draw: a
  mislabelled copy of the data), ``lr:M`` (the peak LR x M), ``frac:F`` (a share F of the
  epochs), ``lrfrac:M:F``.

1. **Horizon H**: the samples per accuracy run a ``--timeout`` (240 s) search would give the
   baseline: ``plan_accuracy_budget`` with the baseline's throughput measured here, as the
   search's calibration measures it; then doubled where the search's horizon rule
   (``_guard.plan.longer_reason``) says, from the baseline's runs and their halfway metrics.
   ``--horizon-samples`` gives H instead (no horizon rule).
2. **The guard's verdict**: paired runs at H (same data-order seeds for baseline and
   candidate), looked at as the search buys seeds: look 1 at 2 or 3 seeds
   (``AccuracyGuard.first_pairs`` of the baseline's first 3 runs), then the seeds
   ``evidence.next_target`` asks for while unresolved, up to ``--guard-cap`` seeds, each look
   by ``AccuracyGuard.confirm`` with the runs' per-example outcomes (the study's first check);
   the seconds its runs took, and the least that would have decided it at that spread.
   ``--repeats K``: K such checks of each candidate, check k on the seeds from
   (k - 1) x cap, disjoint from every other check's.
3. **Truth**: baseline and candidate trained ``--horizon-multiple`` x H over ``--seeds``
   other data-order seeds; the mean paired drop with a two-sided 95% t-interval: "within"
   (upper bound <= tolerance), "beyond" (lower bound > tolerance), "at" (neither, the point
   estimate >= tolerance), else "unclear". A confirmation where the truth is beyond or at the
   tolerance is a false accept, each one listed with its looks and its pairs' drops.

Each workload's rows go to benchmarks/RESULTS.md as soon as it finishes (between this run's
markers), so partial results survive.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import pickle
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import yaml
from scipy import stats
from torch.utils.data import Dataset

import autotune
from autotune._device import environment
from autotune._guard import words as guard_words
from autotune._guard.confirmation import Confirmation, Verdict
from autotune._guard.guard import AccuracyGuard
from autotune._guard.plan import longer_reason, plan_accuracy_budget, plan_horizon
from autotune._guard.stats import seeds_to_settle
from autotune._knobs.registry import KNOBS, config_from
from autotune._search.evidence import next_target, unit_sums, won_by_far
from autotune._trial.failures import Diverged
from autotune._trial.outcome import AccuracyRun, Budget
from autotune._trial.runner import Trainer, evaluate, measure_throughput
from autotune._trial.runner import train_for_accuracy as train_run
from autotune._trial.workload import Workload

sys.path.insert(0, str(Path(__file__).parent))
from realworld import workload_for

from speedup import code_version, write_section

WORKLOAD_NAMES = ("cnn", "bert", "resnet", "gpt2", "digits")
CANDIDATES = ("bf16", "batch2x", "lr10", "batch8x")
# gpt2 guards its validation loss (nats per token, lower is better): 0.01 nats is the
# tolerance realworld.py's gpt2 search ran with (find_best's default), about 1% of a loss
# near 1 nat and a fraction of a percent of one near 4.
TOLERANCE = {"cnn": 0.01, "bert": 0.01, "resnet": 0.01, "gpt2": 0.01, "digits": 0.01}
REPEATS = 3  # find_best's accuracy_repeats: the baseline's seeds, the guard's first look
PLANNED_EPOCHS = 10.0  # find_best's planned_epochs
TRUTH_SEED0 = 1000  # the long runs' data-order seeds are others than the guard's


class NoisyLabels(Dataset[Any]):
    """A training set whose labels are wrong at ``rate``: each item's label replaced, once and
    for all (a fixed draw, ``seed``), by another class chosen uniformly, as a mislabelled copy
    of a dataset or a broken label mapping would have it. Items are the base set's, the same
    augmentation randomness consumed in the same order, so a pair's two arms see the same
    images in the same order, the candidate's with some labels wrong."""

    def __init__(self, base: Any, rate: float, classes: int, seed: int = 12345) -> None:
        self.base = base
        targets = torch.as_tensor([int(t) for t in base.targets])
        g = torch.Generator().manual_seed(seed)
        flip = torch.rand(len(targets), generator=g) < rate
        shift = torch.randint(1, classes, (len(targets),), generator=g)
        self.targets = torch.where(flip, (targets + shift) % classes, targets)
        self.flipped = int(flip.sum())

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        item, _ = self.base[index]
        return item, int(self.targets[index])


def candidate(
    name: str, base: autotune.TrainingConfig, work: Workload
) -> tuple[autotune.TrainingConfig, Workload]:
    """The candidate's config and the workload its arm trains on (the baseline's, but for
    ``noise:R``). Besides the named ones, tunable harmful changes: ``noise:R`` (the candidate
    arm's training labels wrong at rate R, see :class:`NoisyLabels`), ``lr:M`` (the peak LR
    times M), ``frac:F`` (a share F of the epochs, the schedule annealed over it), and
    ``lrfrac:M:F`` (both)."""
    kind, _, arg = name.partition(":")
    if kind == "noise":
        classes = len({int(t) for t in work.train.targets})  # type: ignore[attr-defined]
        return base, dataclasses.replace(work, train=NoisyLabels(work.train, float(arg), classes))
    if kind == "lr":
        return config_from({"lr_multiplier": float(arg)}, base), work
    if kind == "frac":
        return config_from({"train_fraction": float(arg)}, base), work
    if kind == "lrfrac":
        m, f = arg.split(":")
        return config_from({"lr_multiplier": float(m), "train_fraction": float(f)}, base), work
    if name == "bf16":
        return base.replace(precision="bf16"), work
    if name == "lr10":  # a harmful change: the learning rate x10
        return config_from({"lr_multiplier": 10.0}, base), work
    if name == "batch8x":  # a harmful one: batch x8, the LR left as it was (8x fewer steps)
        cfg = config_from({"batch_size": 8 * base.batch_size, "lr_batch_scaling": "none"}, base)
        return cfg, work
    if name != "batch2x":
        raise ValueError(f"unknown candidate {name!r}")
    # The search's bold guess (policy.fast_guesses), at 2x the batch instead of up to 4x.
    params = {
        "batch_size": 2 * base.batch_size,
        "lr_schedule": "cosine",
        "lr_batch_scaling": "sqrt",
        "warmup_fraction": 0.05,
        "lr_multiplier": 1.0,
    }
    return config_from(params, base), work


def candidate_name(text: str) -> str:
    """An argparse type: a named candidate or a tunable one (``noise:0.2``, ``lr:30``...)."""
    kind, sep, arg = text.partition(":")
    try:
        if text in CANDIDATES:
            return text
        if sep and kind in ("noise", "lr", "frac"):
            float(arg)
            return text
        if sep and kind == "lrfrac":
            m, f = arg.split(":")
            float(m), float(f)
            return text
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r}: one of {', '.join(CANDIDATES)}, or noise:R, lr:M, frac:F, lrfrac:M:F"
    )


class Runs:
    """Accuracy runs of one config at one horizon, seed by seed, computed once each. A run
    that diverges (a loss that is not finite) has the metric NaN, as the search's check sees
    it: a failed run, which rejects the candidate."""

    def __init__(
        self,
        work: Workload,
        cfg: autotune.TrainingConfig,
        samples: int,
        midpoint: bool = False,
        label: str = "",
    ) -> None:
        self.work, self.cfg, self.samples, self.midpoint = work, cfg, samples, midpoint
        self.label = label or cfg.describe()
        # Its name in the --cache folder: workload, candidate and --pair settings.
        self.work_name, self.key = type(work.model).__name__, self.label
        self.metrics: dict[int, float] = {}
        self.runs: dict[int, AccuracyRun] = {}
        self.seconds = 0.0

    def get(self, seeds: Iterable[int]) -> list[float]:
        seeds = list(seeds)
        for seed in seeds:
            if seed not in self.metrics:
                start = time.perf_counter()
                cached = self.cached(seed)
                if cached is not None:
                    self.metrics[seed], self.runs[seed] = cached.metric, cached
                    self.seconds += cached.seconds
                    continue
                try:
                    with self.cfg.backends():
                        run = train_run(
                            self.cfg, self.work, self.samples, seed, midpoint=self.midpoint
                        )
                except Diverged as e:
                    run = AccuracyRun(
                        seed=seed,
                        metric=math.nan,
                        final_loss=math.nan,
                        samples=self.samples,
                        seconds=time.perf_counter() - start,
                    )
                    print(f"    {self.label} seed {seed}: {e}", flush=True)
                self.metrics[seed] = run.metric
                self.runs[seed] = run
                self.seconds += run.seconds
                if CACHE is not None:
                    with open(self.path(seed), "wb") as f:
                        pickle.dump(run, f)
                print(
                    f"    {self.label} seed {seed} at {self.samples:,}: "
                    f"{run.metric:.4f} ({run.seconds:.1f} s)",
                    flush=True,
                )
        return [self.metrics[s] for s in seeds]

    def path(self, seed: int) -> Path:
        assert CACHE is not None
        name = f"{self.work_name}-{self.key}{PAIR_KEY}-{self.samples}-{seed}"
        name += f"-t{torch.get_num_threads()}"
        return CACHE / f"{name}.pkl"

    def cached(self, seed: int) -> AccuracyRun | None:
        """A run of this config, workload, horizon, seed and thread count that an earlier
        invocation with the same --cache saved (runs are deterministic given these)."""
        if CACHE is None or not self.path(seed).exists():
            return None
        with open(self.path(seed), "rb") as f:
            run: AccuracyRun = pickle.load(f)
        print(f"    {self.label} seed {seed} at {self.samples:,}: {run.metric:.4f} (cached)")
        return run


# --cache: a folder where every accuracy run is kept, keyed by workload, candidate (and the
# --pair settings), horizon, seed and thread count, so that tuning runs are not run again.
CACHE: Path | None = None
PAIR_KEY = ""


def baseline_throughput(work: Workload, base: autotune.TrainingConfig) -> float:
    """The baseline's samples/s as the search's calibration measures it: one warm-up pass,
    then the ~1% budget (2.4 s of a 240-s search) with the same steps for every config."""
    with base.backends():
        first = measure_throughput(base, work, Budget())
        budget = Budget(
            warmup_steps=2,
            timed_samples=max(base.batch_size, round(first.throughput * 2.4)),
            min_timed_steps=3,
            min_timed_seconds=0.0,
            max_timed_seconds=0.0,
        )
        return measure_throughput(base, work, budget).throughput


@dataclasses.dataclass
class Check:
    """One check of a candidate as a search makes it, on the seeds ``first``, ``first + 1``..."""

    result: Confirmation | None  # None: not checked (--no-guard)
    looks: int = 0
    seconds: float = 0.0
    own: float = 0.0
    least: float | None = None
    drops: tuple[float, ...] = ()  # the last look's paired drops
    trace: tuple[str, ...] = ()  # every look: seeds, mean drop, bounds, verdict


def guard_verdict(
    guard_of: Any, base_runs: Runs, cand_runs: Runs, cap: int, tol: float, first: int = 0
) -> Check:
    """As the search decides (``evidence.confirm``): look 1 at the pairs
    ``AccuracyGuard.first_pairs`` takes from the baseline's first REPEATS runs (two where
    they say two settle a harmless change, else REPEATS), then the seeds
    ``evidence.next_target`` asks for while unresolved, up to ``cap`` in all; the runs'
    per-example outcomes in every look; the data-order seeds ``first``, ``first + 1``... for
    both arms (each check as a search's first, on seeds no other check of this run used).
    Returns the verdict, its looks, the seconds its runs took (both arms), the check's own
    seconds (the candidate's runs and the baseline's beyond the REPEATS seeds a search buys
    once, before any check, for every check to reuse) and the least seconds that would have
    decided it at look 1 (both arms), were its final mean and spread known in advance (None:
    no number of seeds would)."""
    opening = list(range(first, first + REPEATS))
    first_look = guard_of(base_runs.get(opening), base_runs, opening)
    seeds = dataclasses.replace(first_look, first_look=REPEATS).first_pairs()
    look = 1
    trace: list[str] = []
    while True:
        chosen = list(range(first, first + seeds))
        guard: AccuracyGuard = guard_of(base_runs.get(chosen), base_runs, chosen)
        metrics = cand_runs.get(chosen)
        # The guard pairs the i-th run with the baseline's i-th: seeds renumbered from 0.
        runs = [dataclasses.replace(cand_runs.runs[s], seed=i) for i, s in enumerate(chosen)]
        units = unit_sums(runs) if all(math.isfinite(m) for m in metrics) else None
        squares = guard.pair_squares(runs) if units is not None else None
        # The pairs won by far more than the tolerance, as the search keeps them with a check.
        capped = won_by_far(guard, runs) if units is not None else None
        result = guard.confirm(metrics, units=units, squares=squares, looks=look, capped=capped)
        print(f"    look {look}: {result.verdict} - {guard_words.describe(result)}", flush=True)
        trace.append(
            f"look {look} at {seeds} seeds: {_f(result.drop)} "
            f"[{_f(result.lower)}, {_f(result.bound)}] {result.verdict.value}"
        )
        spent = sum(base_runs.runs[s].seconds + cand_runs.runs[s].seconds for s in chosen)
        own = spent - sum(base_runs.runs[s].seconds for s in chosen[:REPEATS])
        target = next_target(seeds, result.need, 1.0, float(cap - seeds))
        if result.verdict is not Verdict.UNRESOLVED or target is None:
            drops = guard.paired_drops(metrics)
            least_s = None
            if units is not None:
                noise = guard.sample_noise(units, drops, squares)
                least = seeds_to_settle(drops, tol, 1, noise=noise)
                least_s = None if least is None else least * spent / seeds
            return Check(result, look, spent, own, least_s, tuple(drops), tuple(trace))
        seeds, look = target, look + 1


def interval(drops: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(drops)
    if len(drops) < 2:
        return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.975, len(drops) - 1)) * statistics.stdev(drops)
    half /= math.sqrt(len(drops))
    return mean, mean - half, mean + half


@dataclasses.dataclass
class Row:
    workload: str
    candidate: str
    config: str
    metric: str
    tolerance: float
    verdict: str
    drop: float | None
    lower: float | None
    upper: float | None
    seeds: int
    looks: int
    seconds: float  # the guard's runs, both arms, until its verdict
    own: float  # of them, the candidate's and the baseline's beyond the seeds bought once
    least: float | None  # the fewest seconds that decide at look 1, at the final spread
    truth_drop: float
    truth_lo: float
    truth_hi: float
    truth_seeds: int
    label: str
    agreement: str
    check: int = 1  # the candidate's k-th check, on seeds first..first + cap - 1
    first: int = 0
    drops: tuple[float, ...] = ()  # the last look's paired drops at H
    trace: tuple[str, ...] = ()  # every look of the check
    # The mean paired drop at H over every seed any check of this candidate ran so far, with
    # its two-sided 95% t-interval (the candidate's truth at the guard's own horizon).
    pooled: tuple[float, float, float, int] | None = None


def truth_label(mean: float, lo: float, hi: float, tol: float) -> str:
    """The long runs' answer: "within" (the interval's upper end at most the tolerance),
    "beyond" (its lower end past it), "at" (neither, the point estimate at or past the
    tolerance: a change that a confirmation should not pass), else "unclear"."""
    if hi <= tol:
        return "within"
    if lo > tol:
        return "beyond"
    return "at" if mean >= tol else "unclear"


def agreement(verdict: str, label: str) -> str:
    """A confirmation of a change whose long runs are beyond or at the tolerance is a false
    accept; a rejection of one within it, a false reject."""
    if verdict in ("unresolved", "not checked") or label == "unclear":
        return "n.a."
    if verdict == "confirmed":
        return "agree" if label == "within" else "**false accept**"
    if label == "within":
        return "**false reject**"
    return "agree"


def pair_params(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """``--pair KNOB=VALUE`` options as knob values, each a shared knob (see Knob.shared)."""
    shared = {k.name for k in KNOBS if k.shared}
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in shared:
            parser.error(f"--pair {item!r}: expected KNOB=VALUE with KNOB one of {sorted(shared)}")
        out[name] = yaml.safe_load(value)
    return out


def run_workload(name: str, args: argparse.Namespace, emit: Any) -> tuple[list[Row], list[str]]:
    """The workload's rows and notes; ``emit(rows, notes)`` after each check, so that partial
    results are written as they come."""
    start = time.monotonic()
    work = workload_for(name)
    # The settings every accuracy run trains with (the search's pair_settings): the baseline's,
    # with the shared knobs of the safe answer given by --pair.
    base = config_from(args.pair_params, autotune.TrainingConfig(device="cpu"))
    task = work.task
    tol = args.tolerance if args.tolerance is not None else TOLERANCE[name]
    n_train = len(work.train)  # type: ignore[arg-type]
    speed = baseline_throughput(work, base)
    plan = plan_accuracy_budget(
        n_train=n_train,
        batch_size=base.global_batch_size,
        throughput=speed,
        repeats=REPEATS,
        seconds=args.timeout,
        planned_epochs=PLANNED_EPOCHS,
    )
    h = plan.samples if args.horizon_samples is None else args.horizon_samples
    long = round(args.horizon_multiple * h)
    print(
        f"[{name}] baseline {base.describe()}: {speed:,.0f} samples/s; horizon H = {h:,} "
        f"samples ({h / n_train:.2f} epochs of {n_train:,}); long runs {long:,}; "
        f"{task.metric_name} ({'higher' if task.higher_is_better else 'lower'} is better), "
        f"tolerance {tol:g}",
        flush=True,
    )
    horizons: list[str] = []
    with base.backends():
        initial = evaluate(Trainer(base, work, 1).model, base, work)
    print(f"    untrained model: {task.metric_name} {initial:.4f}", flush=True)

    def guard_of(
        runs: list[float], source: Runs | None = None, seeds: list[int] | None = None
    ) -> AccuracyGuard:
        seeds = list(range(len(runs))) if seeds is None else seeds
        units = () if source is None else tuple(source.runs[s].units for s in seeds)
        counts = None if source is None else source.runs[seeds[0]].counts
        return AccuracyGuard(
            metric_name=task.metric_name,
            higher_is_better=task.higher_is_better,
            tolerance=tol,
            baseline_runs=tuple(runs),
            accuracy_samples=h,
            initial_metric=initial,
            baseline_units=units,
            unit_counts=counts,
        )

    # As the search does (baseline.choose_horizon, by plan.longer_reason): H doubled, up
    # to the planned run (here at most twice), where the baseline did not learn, where some
    # of its seeds lag in take-off, or where the plan expects a check to settle sooner there
    # (whether or not a --timeout search would have the time for it).
    base_h = Runs(work, base, h, midpoint=True, label="baseline")
    for _ in range(0 if args.horizon_samples is not None else 2):
        runs = [base_h.runs[s] for s in range(REPEATS)] if base_h.get(range(REPEATS)) else []
        plan = plan_horizon(
            runs,
            samples=h,
            limit=round(PLANNED_EPOCHS * n_train),
            tolerance=tol,
            run_seconds=statistics.fmean(r.seconds for r in runs),
        )
        horizons.append(guard_words.horizon(plan))
        guard = guard_of(base_h.get(range(REPEATS)), base_h)
        why = guard_words.longer_words(longer_reason(guard, plan), guard, plan)
        if why is None:
            break
        h = plan.longer
        long = round(args.horizon_multiple * h)
        print(f"    {why}: H doubled to {h:,} (long runs {long:,})", flush=True)
        base_h = Runs(work, base, h, midpoint=True, label="baseline")
    if args.horizon_samples is not None:
        horizons.append(f"H = {h:,} samples given by --horizon-samples (no horizon rule)")
    truth_seeds = range(TRUTH_SEED0, TRUTH_SEED0 + args.seeds)
    base_long = Runs(work, base, long, label="baseline")
    rows: list[Row] = []
    splits: list[str] = []
    sign = 1.0 if task.higher_is_better else -1.0
    truths: dict[str, tuple[str, Runs, Runs, float, float, float, str, int]] = {}
    for cand_name in args.candidate or CANDIDATES:
        cfg, cand_work = candidate(cand_name, base, work)
        what = cfg.describe()
        if isinstance(cand_work.train, NoisyLabels):
            what += f", {cand_work.train.flipped:,} of {n_train:,} training labels wrong"
        print(f"[{name}] candidate {cand_name}: {what}", flush=True)
        # Truth first (the tuning runs of --no-guard are these): long runs on other seeds. A
        # run that diverged is scored as the untrained model.
        b = base_long.get(truth_seeds)
        cand_long = Runs(cand_work, cfg, long, label=cand_name)
        c = [x if math.isfinite(x) else initial for x in cand_long.get(truth_seeds)]
        drops = [sign * (x - y) for x, y in zip(b, c, strict=True)]
        mean, lo, hi = interval(drops)
        label = truth_label(mean, lo, hi, tol)
        print(
            f"[{name}] {cand_name} at {args.horizon_multiple:g}xH: drop {mean:+.4f} "
            f"[{lo:+.4f}, {hi:+.4f}] ({label}); pairs {', '.join(f'{d:+.4f}' for d in drops)}",
            flush=True,
        )
        guard_runs = Runs(cand_work, cfg, h, label=cand_name)
        truths[cand_name] = (what, guard_runs, cand_long, mean, lo, hi, label, len(drops))
    # The checks, check 1 of every candidate first (they share the baseline's seeds), so that
    # a run cut short has checked every candidate about as often.
    for k in range(args.repeats if not args.no_guard else 1):
        first = k * args.guard_cap
        for cand_name, (what, guard_runs, _, mean, lo, hi, label, n) in truths.items():
            if args.no_guard:
                check = Check(None)
            else:
                print(f"[{name}] {cand_name}: check {k + 1}, seeds from {first}", flush=True)
                check = guard_verdict(guard_of, base_h, guard_runs, args.guard_cap, tol, first)
            result = check.result
            verdict = "not checked" if result is None else result.verdict.value
            row = Row(
                workload=name,
                candidate=cand_name,
                config=what,
                metric=task.metric_name,
                tolerance=tol,
                verdict=verdict,
                drop=None if result is None else result.drop,
                lower=None if result is None else result.lower,
                upper=None if result is None else result.bound,
                seeds=0 if result is None else len(result.runs),
                looks=check.looks,
                seconds=check.seconds,
                own=check.own,
                least=check.least,
                truth_drop=mean,
                truth_lo=lo,
                truth_hi=hi,
                truth_seeds=n,
                label=label,
                agreement=agreement(verdict, label),
                check=k + 1,
                first=first,
                drops=check.drops,
                trace=check.trace,
            )
            print(f"[{name}] {row}", flush=True)
            rows.append(row)
            seeds = sorted(set(guard_runs.metrics) & set(base_h.metrics))
            pooled = [
                sign * (base_h.metrics[s] - guard_runs.metrics[s])
                if math.isfinite(guard_runs.metrics[s])
                else sign * (base_h.metrics[s] - initial)
                for s in seeds
            ]
            if pooled:
                for r in rows:
                    if r.candidate == cand_name:
                        r.pooled = (*interval(pooled), len(pooled))
            emit(rows, splits)
    for cand_name, (_, guard_runs, cand_long, *_) in truths.items():
        splits.append(
            f"`{name}` {cand_name}: at H {split(guard_of, base_h, guard_runs)}; at "
            f"{args.horizon_multiple:g}xH {split(guard_of, base_long, cand_long)}"
        )
    guard = guard_of(list(base_h.metrics.values()))
    at_long = list(base_long.metrics.values())
    wall = time.monotonic() - start
    notes = [
        f"`{name}`: {speed:,.0f} samples/s -> H = {h:,} samples ({h / n_train:.2f} epochs), "
        f"long runs {long:,}; {task.metric_name}: untrained {initial:.4f}, baseline at H "
        f"{guard.baseline_metric:.4f} ± {guard.spread:.4f} ({guard.repeats} seeds; "
        f"learned: {'yes' if guard.learned else 'no'}), at {args.horizon_multiple:g}xH "
        f"{statistics.fmean(at_long):.4f} ± "
        f"{statistics.stdev(at_long) if len(at_long) > 1 else 0.0:.4f}; {wall:.0f} s",
        *[f"`{name}` horizon plan: {h}" for h in horizons],
        *splits,
    ]
    return rows, notes


def split(guard_of: Any, base: Runs, cand: Runs) -> str:
    """Where a pair's spread comes from, over the seeds both ``base`` and ``cand`` ran: the
    paired drops' sd, split into training randomness and the examples' outcomes varying from
    seed to seed (the within term of the seed x example analysis of variance), and the part of
    the mean's error that the validation subset adds however many seeds there are."""
    seeds = sorted(set(base.runs) & set(cand.runs))
    if len(seeds) < 2:
        return "n/a (fewer than two pairs)"
    guard: AccuracyGuard = guard_of([base.metrics[s] for s in seeds])
    runs = [cand.runs[s] for s in seeds]
    shifted = [dataclasses.replace(r, seed=i) for i, r in enumerate(runs)]  # pairs 0, 1, ...
    guard = dataclasses.replace(
        guard,
        baseline_units=tuple(base.runs[s].units for s in seeds),
        unit_counts=base.runs[seeds[0]].counts,
    )
    drops = guard.paired_drops([r.metric for r in runs])
    noise = guard.sample_noise(unit_sums(runs), drops, guard.pair_squares(shifted))
    sd = statistics.stdev(drops)
    if noise is None:
        return f"pairs ±{sd:.4f} over {len(seeds)} (no per-example values to split them)"
    within = math.sqrt(noise.shrinks * len(seeds))  # per pair: σ²_within / N
    training = math.sqrt(max(0.0, sd * sd - within * within))
    subset = math.sqrt(max(noise.floor, noise.variance - noise.shrinks))
    return (
        f"pairs ±{sd:.4f} over {len(seeds)} = training ±{training:.4f} and example outcomes "
        f"±{within:.4f}; the validation subset adds ±{subset:.4f} to the mean"
    )


def _f(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.4f}"


def render(rows: list[Row], notes: list[str], args: argparse.Namespace, wall: float) -> str:
    env = environment("cpu")
    order = {(r.workload, r.candidate): i for i, r in reversed(list(enumerate(rows)))}
    rows = sorted(rows, key=lambda r: (order[r.workload, r.candidate], r.check))
    accepts = sum(r.agreement == "**false accept**" for r in rows)
    rejects = sum(r.agreement == "**false reject**" for r in rows)
    agree = sum(r.agreement == "agree" for r in rows)
    lines = [
        f"### The guard against long runs (`guard_truth.py`, {datetime.date.today()})",
        "",
        f"Machine: {env['cpu_model']} ({env['device']}), {env['cpu_count']} CPUs, torch "
        f"{env['torch']} ({torch.get_num_threads()} intra-op thread(s)){args.niceness}. "
        f"Command: `{args.command}` "
        f"(code: {code_version()}); wall time {wall / 60:.1f} min.",
        "",
        f"Baseline `{autotune.TrainingConfig().describe()}` (realworld.py's)"
        + (
            f"; every accuracy run, both arms, trains with `{' '.join(args.pair)}` (a safe "
            "answer's shared knobs, as a search's accuracy runs do). "
            if args.pair
            else ". "
        )
        + (
            f"H = {args.horizon_samples:,} samples, given by `--horizon-samples`. "
            if args.horizon_samples is not None
            else "H: the samples "
            f"per accuracy run a {args.timeout:g}-s search plans for it (`plan_accuracy_budget` "
            "at the throughput measured here), doubled where the search's horizon rule says "
            "(the plans below). "
        )
        + f"Guard: {args.repeats} check(s) of each candidate, check k on paired data-order "
        f"seeds from (k - 1) x {args.guard_cap} at H (disjoint), each as a search's first "
        f"check: look 1 at the pairs `AccuracyGuard.first_pairs` takes from the baseline's "
        f"first {REPEATS} runs (2 or {REPEATS}), then the seeds `evidence.next_target` asks for "
        f"while unresolved, up to {args.guard_cap}, each look by `AccuracyGuard.confirm`; "
        f"bounds are its one-sided bounds at that look's level. Long runs: "
        f"{args.horizon_multiple:g}xH over {args.seeds} other seeds, mean paired drop (positive:"
        " worse) ± two-sided 95% t-interval; label within / beyond (the interval below / above "
        "the tolerance), at (neither, the point estimate at or past it), unclear (neither, "
        "below it). Tolerance 0.01 for every workload (gpt2: nats of "
        "validation loss, lower is better; the tolerance its realworld.py search used).",
        "",
        "| workload | candidate | check (first seed) | guard verdict (drop, bounds, seeds/looks) "
        "| seconds to decide: both arms (least at that spread); the check's own | long-run drop "
        "[95% CI] | label | agreement |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.workload} ({r.metric}) | {r.candidate} | {r.check} ({r.first}) | "
            f"{r.verdict} ({_f(r.drop)}, "
            f"{_f(r.lower)} .. {_f(r.upper)}, {r.seeds}/{r.looks}) | {r.seconds:.0f} s "
            f"({'-' if r.least is None else f'{r.least:.0f} s'}); {r.own:.0f} s | "
            f"{r.truth_drop:+.4f} "
            f"[{_f(r.truth_lo)}, {_f(r.truth_hi)}] | {r.label} | {r.agreement} |"
        )
    lines += [
        "",
        f"{len(rows)} checks: {agree} agree, **{accepts} false accepts, {rejects} false "
        f"rejects**, {len(rows) - agree - accepts - rejects} n.a. (guard unresolved or long "
        "runs unclear).",
        "",
        *tallies(rows),
        "",
        *false_accepts(rows),
        decide_line(rows, args.timeout),
        "",
        "Is the task exercised at H?",
        "",
        *[f"- {n}" for n in notes],
    ]
    return "\n".join(lines) + "\n"


def tallies(rows: list[Row]) -> list[str]:
    """Per candidate: its long-run truth and how its checks came out."""
    out = [
        "| workload | candidate | long-run truth | drop at H over every check's seeds [95% CI] "
        "| confirmed | rejected | unresolved |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    seen: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        seen.setdefault((r.workload, r.candidate), []).append(r)
    for (work, cand), group in seen.items():
        r = group[0]
        count = {v: sum(g.verdict == v for g in group) for v in ("confirmed", "rejected")}
        at_h = (
            "-"
            if r.pooled is None
            else f"{r.pooled[0]:+.4f} [{_f(r.pooled[1])}, {_f(r.pooled[2])}] ({r.pooled[3]} pairs)"
        )
        out.append(
            f"| {work} | {cand} ({r.config}) | {r.truth_drop:+.4f} [{_f(r.truth_lo)}, "
            f"{_f(r.truth_hi)}]: {r.label} | {at_h} | {count['confirmed']} | {count['rejected']} | "
            f"{len(group) - count['confirmed'] - count['rejected']} |"
        )
    return out


def false_accepts(rows: list[Row]) -> list[str]:
    """Each false accept with the looks that led to it and its pairs' drops at H."""
    out = []
    for r in rows:
        if r.agreement != "**false accept**":
            continue
        out.append(
            f"- **False accept**: `{r.workload}` {r.candidate}, check {r.check} (seeds "
            f"{r.first}..{r.first + r.seeds - 1}): {'; '.join(r.trace)}; the pairs' drops at H "
            f"{', '.join(f'{d:+.4f}' for d in r.drops)}, against a long-run drop of "
            f"{r.truth_drop:+.4f} [{_f(r.truth_lo)}, {_f(r.truth_hi)}]"
            + (
                ""
                if r.pooled is None
                else f" and a drop at H of {r.pooled[0]:+.4f} [{_f(r.pooled[1])}, "
                f"{_f(r.pooled[2])}] over all {r.pooled[3]} of its checks' pairs"
            )
            + "."
        )
    return [*out, ""] if out else []


def decide_line(rows: list[Row], timeout: float) -> str:
    """The median seconds to decide a harmless change (long runs: within), an unresolved one
    counted as never decided; both arms, and the check's own (the baseline's first REPEATS
    seeds are bought once by a search, before any check, and reused by every check)."""
    harmless = [r for r in rows if r.label == "within"]
    if not harmless:
        return "No harmless change (long runs within the tolerance) to time."

    def median(values: list[float]) -> str:
        m = statistics.median(values)
        return "not decided" if math.isinf(m) else f"{m:.0f} s ({m / timeout:.0%} of {timeout:g} s)"

    decided = [r.verdict != "unresolved" for r in harmless]
    both = [r.seconds if d else math.inf for r, d in zip(harmless, decided, strict=True)]
    own = [r.own if d else math.inf for r, d in zip(harmless, decided, strict=True)]
    return (
        f"Seconds to decide a harmless change, median over {len(harmless)} (an unresolved one "
        f"never decided): **{median(both)} both arms; {median(own)} the check's own**."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=WORKLOAD_NAMES)
    parser.add_argument(
        "--candidate", action="append", type=candidate_name,
        help=f"one of {', '.join(CANDIDATES)}, or a tunable harmful change: noise:R (the "
        "candidate arm's training labels wrong at rate R), lr:M (peak LR x M), frac:F (a share "
        "F of the epochs), lrfrac:M:F",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=240.0, help="the search's, for H")
    parser.add_argument("--horizon-multiple", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, default=4, help="seeds of the long runs")
    parser.add_argument("--guard-cap", type=int, default=6, help="most seeds the guard buys")
    parser.add_argument("--tolerance", type=float, default=None)
    parser.add_argument(
        "--pair", action="append", default=[], metavar="KNOB=VALUE",
        help="a shared knob of the safe answer a search would find here (channels_last=true, "
        "num_workers=2, ...): every accuracy run trains with it, as the search's do",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=int, default=1,
        help="checks of each candidate, each on its own data-order seeds (check k on seeds "
        "k*cap .. k*cap + cap - 1, both arms): how often the guard decides it, and how",
    )  # fmt: skip
    parser.add_argument(
        "--horizon-samples", type=int, default=None,
        help="H in samples, instead of a --timeout search's plan and the horizon rule",
    )  # fmt: skip
    parser.add_argument(
        "--no-guard", action="store_true",
        help="the long runs only (tuning a harmful change's size)",
    )  # fmt: skip
    parser.add_argument("--cache", default=None, help="a folder that keeps every run (tuning)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.pair_params = pair_params(parser, args.pair)
    global CACHE, PAIR_KEY
    if args.cache is not None:
        CACHE = Path(args.cache)
        CACHE.mkdir(parents=True, exist_ok=True)
        PAIR_KEY = "".join(f"-{p}" for p in sorted(args.pair)).replace("/", "_")
    nice = os.nice(0)  # what the run was started with, said as it was
    args.niceness = f", run with `nice -n {nice}` beside other work" if nice else ""
    prefix = f"nice -n {nice} python " if nice else "python "
    if "OMP_NUM_THREADS" in os.environ:
        prefix = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {prefix}"
    args.command = prefix + " ".join(["benchmarks/guard_truth.py", *sys.argv[1:]])
    names = args.workload or list(WORKLOAD_NAMES)
    section = "guard-truth" + "".join(f"-{n}" for n in args.workload or [])
    section += "".join(f"-{c}" for c in args.candidate or []).replace(":", "")
    section += f"-x{args.repeats}" if args.repeats > 1 else ""
    start = time.monotonic()
    rows: list[Row] = []
    notes: list[str] = []

    def emit(more: list[Row], extra: list[str]) -> str:
        text = render(rows + more, notes + extra, args, time.monotonic() - start)
        if not args.no_write:
            write_section(section, text)
        return text

    for name in names:
        more, note = run_workload(name, args, emit)
        text = emit(more, note)
        rows += more
        notes += note
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
