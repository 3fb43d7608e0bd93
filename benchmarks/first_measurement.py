"""Does the search's first measurement of the baseline read low (issue 56)?

    python benchmarks/first_measurement.py --workload jpeg --reps 8 --write

Each repetition starts as a search does: a fresh trial worker process (``ProcessExecutor``,
the search's own), whose first trial is the baseline. It then alternates, on the same
config (the baseline), the trial code and ``never_slower.py``'s plain loop:

    trial 1 (cold: the worker's first), loop 1, trial 2, loop 2, trial 3

and reports, over the repetitions, the median of each trial's figure over loop 1's, and how
often it lies within 5% of it; beside it the same for loop 2 over loop 1: two plain loops of
one config back to back, the machine's own noise floor for a single draw. A first trial that
reads low against the loop where the later trials do not is a cold start the tool could fix;
a spread the two loops share is the machine's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path

import torch

import autotune

sys.path.insert(0, str(Path(__file__).parent))
from never_slower import load, loop_throughput

from speedup import code_version, write_section
from streaming import cpu_model

SECTION = "first-measurement"
WITHIN = 0.05


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="jpeg", choices=["jpeg", "cnn"])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--timed-samples", type=int, default=2048)
    parser.add_argument("--section", default=SECTION)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    from autotune._task import as_task
    from autotune._trial.isolation import ProcessExecutor, worker_env
    from autotune._trial.outcome import Budget
    from autotune._trial.workload import prepare_workload

    make, train, val = load(args.workload)
    budget = Budget(timed_samples=args.timed_samples)
    base = autotune.TrainingConfig()
    names = ["trial 1 (cold)", "trial 2", "trial 3", "loop 2"]
    ratios: dict[str, list[float]] = {n: [] for n in names}
    figures: list[str] = []

    def loop() -> float:
        return loop_throughput(
            base, train, warmup_steps=5, timed_samples=args.timed_samples, make=make
        )

    def trial(executor: ProcessExecutor) -> float:
        m = executor.run(base, budget, time_limit=300.0).measurement
        assert m is not None
        return m.throughput

    for rep in range(args.reps):
        workload = prepare_workload(
            make(), train, val, as_task(None), val_fraction=0.1, seed=0
        ).workload
        executor = ProcessExecutor(workload, env=worker_env())
        try:
            t1 = trial(executor)
            l1 = loop()
            t2 = trial(executor)
            l2 = loop()
            t3 = trial(executor)
        finally:
            executor.close()
        for n, v in zip(names, (t1, t2, t3, l2), strict=True):
            ratios[n].append(v / l1)
        line = (
            f"rep {rep + 1}: trial 1 {t1:,.0f}, loop 1 {l1:,.0f}, trial 2 {t2:,.0f}, "
            f"loop 2 {l2:,.0f}, trial 3 {t3:,.0f} samples/s"
        )
        figures.append(line)
        print(line, flush=True)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## The first measurement of the baseline against a plain loop, {args.workload} "
        "(issue 56)",
        "",
        f"{now}; {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}; commit "
        f"{code_version()}; `python benchmarks/first_measurement.py {' '.join(sys.argv[1:])}`",
        "",
        f"Each repetition a fresh trial worker; figures over the plain loop's first ({args.reps} "
        "repetitions).",
        "",
        "| measurement | median over loop 1 | range | within 5% of loop 1 |",
        "|---|---|---|---|",
    ]
    for n in names:
        rs = ratios[n]
        within = sum(abs(r - 1) <= WITHIN for r in rs)
        lines.append(
            f"| {n} | {statistics.median(rs):.3f} | {min(rs):.2f}-{max(rs):.2f} | "
            f"{within} of {len(rs)} |"
        )
    lines += ["", "Per repetition:", "", *(f"- {f}" for f in figures)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
