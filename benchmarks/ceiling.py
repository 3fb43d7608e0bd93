"""Where the CNN workload's time goes on this machine: why a speedup stops where it does.

    python benchmarks/ceiling.py --batch-size 128 --precision bf16 --channels-last

Measured side by side in one process, with the trial runner's own measurement:

1. the DataLoader alone (no model), in this process: the augmentation's cost per sample;
2. the baseline (PyTorch defaults) and the given config end to end, data loading included;
3. the given config on batches prepared beforehand (no data loading): the model's own speed,
   the ceiling if loading cost nothing;
4. the given config with one loader worker, the model on one thread or on all of them: what
   moving the augmentation to another process costs the model on few cores.

The table goes to benchmarks/RESULTS.md, with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import autotune
from autotune._device import environment
from autotune._trial.outcome import Budget
from autotune._trial.runner import measure_throughput
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import cnn_data, cnn_model

sys.path.insert(0, str(Path(__file__).parent))
from speedup import code_version, write_section


def loader_rate(dataset: Any, batch_size: int) -> float:
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True)
    start, n = time.perf_counter(), 0
    for x, _ in loader:
        n += x.shape[0]
    return n / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--timed-samples", type=int, default=6144)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    command = "python " + " ".join(["benchmarks/ceiling.py", *sys.argv[1:]])
    train, val = cnn_data()
    task = make_task(autotune.Task(metric="accuracy"))
    budget = Budget(timed_samples=args.timed_samples, chunks=5)
    base = autotune.TrainingConfig(device="cpu")
    cfg = base.replace(
        batch_size=args.batch_size,
        precision=autotune.Precision(args.precision),
        channels_last=args.channels_last,
    )
    # The same images, augmented once beforehand: the model's speed without any loading cost.
    images = torch.stack([train[i][0] for i in range(len(train))])
    prepared = TensorDataset(images, torch.as_tensor(train.targets))
    cores = os.cpu_count() or 1

    def speed(config: autotune.TrainingConfig, dataset: Any) -> tuple[float, float]:
        work = Workload(model=cnn_model(), train=dataset, val=val, task=task)
        with config.backends():
            m = measure_throughput(config, work, budget)
        return m.throughput, m.data_wait_fraction

    data_rate = loader_rate(train, args.batch_size)
    rows: list[tuple[str, float, float | None]] = [
        ("DataLoader alone, no model (augmentation + collate, this process)", data_rate, None)
    ]
    cases = [
        ("baseline (PyTorch defaults), end to end", base, train),
        (f"`{cfg.describe()}`, end to end", cfg, train),
        ("the same on batches prepared beforehand (no loading)", cfg, prepared),
        (
            "the same, 1 loader worker, model on 1 thread",
            cfg.replace(num_workers=1, intra_op_threads=1),
            train,
        ),
        (
            f"the same, 1 loader worker, model on {cores} threads",
            cfg.replace(num_workers=1, intra_op_threads=cores),
            train,
        ),
    ]
    for label, config, dataset in cases:
        rate, wait = speed(config, dataset)
        rows.append((label, rate, wait))
        print(f"{label}: {rate:,.0f} samples/s, data wait {wait:.0%}", flush=True)
    baseline_rate = rows[1][1]
    env = environment("cpu")
    lines = [
        f"### `cnn` where the time goes ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {env['device_name']} ({env['device']}), {env['cpu_count']} CPUs, torch "
        f"{env['torch']}. Command: `{command}` (code: {code_version()})",
        "",
        "| what ran | samples/s | vs baseline | data wait |",
        "| --- | --- | --- | --- |",
    ]
    for label, rate, wait in rows:
        waited = "-" if wait is None else f"{wait:.0%}"
        lines.append(f"| {label} | {rate:,.0f} | {rate / baseline_rate:.2f}x | {waited} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section("ceiling-cnn", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
