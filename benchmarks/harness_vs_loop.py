"""Where the search's figure and a plain loop's part (issue 56): the JPEG workload's configs
measured by the search's own trial code (``run_trial`` in a trial worker process, as the search
runs it) and by ``never_slower.py``'s plain loop, alternated in the same rounds.

    python benchmarks/harness_vs_loop.py --rounds 4 --write

For each config: the loop's samples/s (every timed sample over the whole timed time), the trial
code's reported throughput (the median of its chunks' step times) and the same trial's mean
(its timed samples over the sum of its chunks' times), each over the baseline's in the same
round. A loader whose pace comes in bursts (workers sharing two cores with two compute threads)
reads faster by a median of chunks than over the whole time; a user's training takes the whole
time.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

import autotune

sys.path.insert(0, str(Path(__file__).parent))
from never_slower import grid, load, loop_throughput

from speedup import code_version, write_section
from streaming import cpu_model

SECTION = "harness-vs-loop"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--timed-samples", type=int, default=2048)
    parser.add_argument("--configs", default="baseline,w1,w2,cl,cl+fused,w2+cl,w2+fused")
    parser.add_argument("--workload", default="jpeg", choices=["jpeg", "cnn"])
    parser.add_argument(
        "--in-process", action="store_true", help="the trial code in this process, not a worker"
    )
    parser.add_argument("--section", default=SECTION)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    from autotune._task import as_task
    from autotune._trial.isolation import ProcessExecutor, worker_env
    from autotune._trial.outcome import Budget
    from autotune._trial.workload import prepare_workload

    make, train, val = load(args.workload)
    workload = prepare_workload(
        make(), train, val, as_task(None), val_fraction=0.1, seed=0
    ).workload
    if args.in_process:
        from autotune._trial.runner import run_trial

        def trial(cfg: autotune.TrainingConfig) -> Any:
            return run_trial(cfg, workload, budget)
    else:
        executor = ProcessExecutor(workload, env=worker_env())
        atexit.register(executor.close)

        def trial(cfg: autotune.TrainingConfig) -> Any:
            return executor.run(cfg, budget, time_limit=300.0)

    base = autotune.TrainingConfig()
    configs = {
        "baseline": base,
        **grid(base),
        "bf16+cl": base.replace(precision="bf16", channels_last=True),
    }
    names = args.configs.split(",")
    budget = Budget(timed_samples=args.timed_samples)
    out: dict[str, dict[str, list[float]]] = {
        n: {"loop": [], "median": [], "mean": []} for n in names
    }
    for r in range(args.rounds):
        shift = r % len(names)
        for n in names[shift:] + names[:shift]:
            cfg = configs[n]
            loop = loop_throughput(
                cfg, train, warmup_steps=5, timed_samples=args.timed_samples, make=make
            )
            m = trial(cfg).measurement
            assert m is not None, n
            mean = m.batch_size * m.chunk_steps * len(m.chunk_times) / sum(m.chunk_times)
            out[n]["loop"].append(loop)
            out[n]["median"].append(m.throughput)
            out[n]["mean"].append(mean)
            print(
                f"  round {r + 1}: {n:10} loop {loop:7,.0f}  trial median {m.throughput:7,.0f}"
                f"  trial mean {mean:7,.0f}  chunks {[round(t, 2) for t in m.chunk_times]}",
                flush=True,
            )

    def rel(n: str, kind: str) -> float:
        pairs = zip(out[n][kind], out["baseline"][kind], strict=True)
        return float(statistics.median(a / b for a, b in pairs))

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## The search's trial code against a plain loop, {args.workload} workload (issue 56)",
        "",
        f"{now}; {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}; commit "
        f"{code_version()}; `python benchmarks/harness_vs_loop.py {' '.join(sys.argv[1:])}`",
        "",
        "| config | loop / baseline | trial (median of chunks) / baseline | trial (whole time) "
        "/ baseline | loop samples/s | trial median samples/s |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        lines.append(
            f"| {n} | {rel(n, 'loop'):.2f}x | {rel(n, 'median'):.2f}x | {rel(n, 'mean'):.2f}x | "
            f"{statistics.median(out[n]['loop']):,.0f} | "
            f"{statistics.median(out[n]['median']):,.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
