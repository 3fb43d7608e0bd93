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
  LR left as it is (8x fewer optimizer steps on the same samples).

1. **Horizon H**: the samples per accuracy run a ``--timeout`` (240 s) search would give the
   baseline: ``plan_accuracy_budget`` with the baseline's throughput measured here, as the
   search's calibration measures it; then doubled where the search's horizon rule
   (``horizon.longer_reason``) says, from the baseline's runs and their halfway metrics.
2. **The guard's verdict**: paired runs at H (same data-order seeds for baseline and
   candidate), looked at as the search buys seeds: look 1 at 3 seeds, then the seeds
   ``evidence.next_target`` asks for while unresolved, up to ``--guard-cap`` seeds, each look
   by ``AccuracyGuard.confirm`` with the runs' per-example outcomes (the study's first check);
   the seconds its runs took, and the least that would have decided it at that spread.
3. **Truth**: baseline and candidate trained ``--horizon-multiple`` x H over ``--seeds``
   other data-order seeds; the mean paired drop with a two-sided 95% t-interval: "within"
   (upper bound <= tolerance), "beyond" (lower bound > tolerance), else "unclear".

Each workload's rows go to benchmarks/RESULTS.md as soon as it finishes (between this run's
markers), so partial results survive.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from scipy import stats

import autotune
from autotune._device import environment
from autotune._knobs.registry import KNOBS, config_from
from autotune._search.evidence import next_target, unit_sums
from autotune._search.guard import (
    AccuracyGuard,
    Confirmation,
    Verdict,
    plan_accuracy_budget,
    seeds_to_settle,
)
from autotune._search.horizon import longer_reason, plan_horizon
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


def candidate(name: str, base: autotune.TrainingConfig) -> autotune.TrainingConfig:
    if name == "bf16":
        return base.replace(precision="bf16")
    if name == "lr10":  # a harmful change: the learning rate x10
        return config_from({"lr_multiplier": 10.0}, base)
    if name == "batch8x":  # a harmful one: batch x8, the LR left as it was (8x fewer steps)
        return config_from({"batch_size": 8 * base.batch_size, "lr_batch_scaling": "none"}, base)
    # The search's bold guess (policy.fast_guesses), at 2x the batch instead of up to 4x.
    params = {
        "batch_size": 2 * base.batch_size,
        "lr_schedule": "cosine",
        "lr_batch_scaling": "sqrt",
        "warmup_fraction": 0.05,
        "lr_multiplier": 1.0,
    }
    return config_from(params, base)


class Runs:
    """Accuracy runs of one config at one horizon, seed by seed, computed once each."""

    def __init__(
        self, work: Workload, cfg: autotune.TrainingConfig, samples: int, midpoint: bool = False
    ) -> None:
        self.work, self.cfg, self.samples, self.midpoint = work, cfg, samples, midpoint
        self.metrics: dict[int, float] = {}
        self.runs: dict[int, AccuracyRun] = {}
        self.seconds = 0.0

    def get(self, seeds: range) -> list[float]:
        for seed in seeds:
            if seed not in self.metrics:
                with self.cfg.backends():
                    run = train_run(self.cfg, self.work, self.samples, seed, midpoint=self.midpoint)
                self.metrics[seed] = run.metric
                self.runs[seed] = run
                self.seconds += run.seconds
                print(
                    f"    {self.cfg.describe()} seed {seed} at {self.samples:,}: "
                    f"{run.metric:.4f} ({run.seconds:.1f} s)",
                    flush=True,
                )
        return [self.metrics[s] for s in seeds]


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


def guard_verdict(
    guard_of: Any, base_runs: Runs, cand_runs: Runs, cap: int, tol: float
) -> tuple[Confirmation, int, float, float, float | None]:
    """As the search decides (``evidence.confirm``): look 1 at REPEATS seeds, then the seeds
    ``evidence.next_target`` asks for while unresolved, up to ``cap`` in all; the runs'
    per-example outcomes in every look. Returns the verdict, its looks, the seconds its runs
    took (both arms), the check's own seconds (the candidate's runs and the baseline's beyond
    the REPEATS seeds a search buys once, before any check, for every check to reuse) and the
    least seconds that would have decided it at look 1 (both arms), were its final mean and
    spread known in advance (None: no number of seeds would)."""
    seeds, look = REPEATS, 1
    while True:
        guard: AccuracyGuard = guard_of(base_runs.get(range(seeds)), base_runs)
        metrics = cand_runs.get(range(seeds))
        runs = [cand_runs.runs[s] for s in range(seeds)]
        result = guard.confirm(
            metrics, units=unit_sums(runs), squares=guard.pair_squares(runs), looks=look
        )
        print(f"    look {look}: {result.verdict} - {result.describe()}", flush=True)
        spent = sum(base_runs.runs[s].seconds + cand_runs.runs[s].seconds for s in range(seeds))
        own = spent - sum(base_runs.runs[s].seconds for s in range(REPEATS))
        target = next_target(seeds, result.need, 1.0, float(cap - seeds))
        if result.verdict is not Verdict.UNRESOLVED or target is None:
            drops = guard.paired_drops(metrics)
            noise = guard.sample_noise(unit_sums(runs), drops, guard.pair_squares(runs))
            least = seeds_to_settle(drops, tol, 1, noise=noise)
            least_s = None if least is None else least * spent / seeds
            return result, look, spent, own, least_s
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


def agreement(verdict: str, label: str) -> str:
    if verdict == "unresolved" or label == "unclear":
        return "n.a."
    if verdict == "confirmed":
        return "agree" if label == "within" else "**false accept**"
    return "agree" if label == "beyond" else "**false reject**"


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


def run_workload(name: str, args: argparse.Namespace) -> tuple[list[Row], list[str]]:
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
    h = plan.samples
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

    def guard_of(runs: list[float], source: Runs | None = None) -> AccuracyGuard:
        units = () if source is None else tuple(source.runs[s].units for s in range(len(runs)))
        counts = None if source is None else source.runs[0].counts
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

    # As the search does (baseline.choose_horizon, by horizon.longer_reason): H doubled, up
    # to the planned run (here at most twice), where the baseline did not learn, where some
    # of its seeds lag in take-off, or where the plan expects a check to settle sooner there
    # (whether or not a --timeout search would have the time for it).
    base_h = Runs(work, base, h, midpoint=True)
    for _ in range(2):
        runs = [base_h.runs[s] for s in range(REPEATS)] if base_h.get(range(REPEATS)) else []
        plan = plan_horizon(
            runs,
            samples=h,
            limit=round(PLANNED_EPOCHS * n_train),
            tolerance=tol,
            run_seconds=statistics.fmean(r.seconds for r in runs),
        )
        horizons.append(plan.describe())
        why = longer_reason(guard_of(base_h.get(range(REPEATS)), base_h), plan)
        if why is None:
            break
        h = plan.longer
        long = round(args.horizon_multiple * h)
        print(f"    {why}: H doubled to {h:,} (long runs {long:,})", flush=True)
        base_h = Runs(work, base, h, midpoint=True)
    truth_seeds = range(TRUTH_SEED0, TRUTH_SEED0 + args.seeds)
    base_long = Runs(work, base, long)
    rows: list[Row] = []
    splits: list[str] = []
    for cand_name in args.candidate or CANDIDATES:
        cfg = candidate(cand_name, base)
        print(f"[{name}] candidate {cand_name}: {cfg.describe()}", flush=True)
        guard_runs = Runs(work, cfg, h)
        result, looks, spent, own, least = guard_verdict(
            guard_of, base_h, guard_runs, args.guard_cap, tol
        )
        cand_h = Runs(work, cfg, h)
        cand_h.runs, cand_h.metrics = guard_runs.runs, guard_runs.metrics
        b = base_long.get(truth_seeds)
        cand_long = Runs(work, cfg, long)
        c = cand_long.get(truth_seeds)
        splits.append(
            f"`{name}` {cand_name}: at H {split(guard_of, base_h, cand_h)}; at "
            f"{args.horizon_multiple:g}xH {split(guard_of, base_long, cand_long)}"
        )
        sign = 1.0 if task.higher_is_better else -1.0
        drops = [sign * (x - y) for x, y in zip(b, c, strict=True)]
        mean, lo, hi = interval(drops)
        label = "within" if hi <= tol else "beyond" if lo > tol else "unclear"
        row = Row(
            workload=name,
            candidate=cand_name,
            config=cfg.describe(),
            metric=task.metric_name,
            tolerance=tol,
            verdict=result.verdict.value,
            drop=result.drop,
            lower=result.lower,
            upper=result.bound,
            seeds=len(result.runs),
            looks=looks,
            seconds=spent,
            own=own,
            least=least,
            truth_drop=mean,
            truth_lo=lo,
            truth_hi=hi,
            truth_seeds=len(drops),
            label=label,
            agreement=agreement(result.verdict.value, label),
        )
        print(f"[{name}] {row}", flush=True)
        rows.append(row)
    guard = guard_of(base_h.get(range(len(base_h.metrics))))
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
    accepts = sum(r.agreement == "**false accept**" for r in rows)
    rejects = sum(r.agreement == "**false reject**" for r in rows)
    agree = sum(r.agreement == "agree" for r in rows)
    lines = [
        f"### The guard against long runs (`guard_truth.py`, {datetime.date.today()})",
        "",
        f"Machine: {env['cpu_model']} ({env['device']}), {env['cpu_count']} CPUs, torch "
        f"{env['torch']}{args.niceness}. Command: `{args.command}` "
        f"(code: {code_version()}); wall time {wall / 60:.1f} min.",
        "",
        f"Baseline `{autotune.TrainingConfig().describe()}` (realworld.py's)"
        + (
            f"; every accuracy run, both arms, trains with `{' '.join(args.pair)}` (a safe "
            "answer's shared knobs, as a search's accuracy runs do). "
            if args.pair
            else ". "
        )
        + "H: the samples "
        f"per accuracy run a {args.timeout:g}-s search plans for it (`plan_accuracy_budget` at "
        f"the throughput measured here), doubled where the search's horizon rule says (the plans "
        f"below). Guard: paired seeds 0.. at H, look 1 at {REPEATS} "
        f"seeds, doubled while unresolved up to {args.guard_cap}, `AccuracyGuard.confirm`; "
        f"bounds are its one-sided bounds at that look's level. Long runs: "
        f"{args.horizon_multiple:g}xH over {args.seeds} other seeds, mean paired drop (positive:"
        " worse) ± two-sided 95% t-interval. Tolerance 0.01 for every workload (gpt2: nats of "
        "validation loss, lower is better; the tolerance its realworld.py search used).",
        "",
        "| workload | candidate | guard verdict (drop, bounds, seeds/looks) | seconds to decide: "
        "both arms (least at that spread); the check's own | long-run drop [95% CI] | label | "
        "agreement |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.workload} ({r.metric}) | {r.candidate} | {r.verdict} ({_f(r.drop)}, "
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
        decide_line(rows, args.timeout),
        "",
        "Is the task exercised at H?",
        "",
        *[f"- {n}" for n in notes],
    ]
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--candidate", action="append", choices=CANDIDATES)
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
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.pair_params = pair_params(parser, args.pair)
    nice = os.nice(0)  # what the run was started with, said as it was
    args.niceness = f", run with `nice -n {nice}` beside other work" if nice else ""
    prefix = f"nice -n {nice} python " if nice else "python "
    args.command = prefix + " ".join(["benchmarks/guard_truth.py", *sys.argv[1:]])
    names = args.workload or list(WORKLOAD_NAMES)
    section = "guard-truth" + "".join(f"-{n}" for n in args.workload or [])
    section += "".join(f"-{c}" for c in args.candidate or [])
    start = time.monotonic()
    rows: list[Row] = []
    notes: list[str] = []
    for name in names:
        more, note = run_workload(name, args)
        rows += more
        notes += note
        text = render(rows, notes, args, time.monotonic() - start)
        print(text, flush=True)
        if not args.no_write:
            write_section(section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
