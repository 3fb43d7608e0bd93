"""What the gradient-accumulation and optimizer-implementation knobs gain, side by side.

    python benchmarks/knobs.py --workload cnn lm mlp bert resnet gpt2 --rounds 6 --seconds 3

For each workload (``cnn``, ``lm``, ``mlp`` from ``autotune.examples``; ``bert``, ``resnet``,
``gpt2`` from ``benchmarks/workloads.py``), the baseline (batch ``--batch``, everything else at
PyTorch's defaults) and one variant per new knob value, measured in this process in alternating
rounds (the order rotating; one discarded pass first), the way ``benchmarks/realworld.py``
re-measures:

- ``optimizer_impl``: ``foreach`` and ``fused``, where the workload's optimizer and this device
  have them (the same update, within float rounding: no accuracy question);
- ``gradient_accumulation_steps`` keeping the global batch: the baseline's batch as 2 and 4
  micro-batches (the same optimizer steps on a model without batch norm: what it costs in
  throughput, and what it saves in peak memory, which is why it exists);
- accumulation with the micro-batch kept: 4 batches per optimizer step (a 4x global batch, so
  a change of the numerics the search would check; here only its speed).

The largest batch that fits between two listed sizes needs a memory limit to matter: on a CPU
the memory probe finds none, so it is not measured here. Each table row: median throughput and
range over the rounds, the ratio of medians to the baseline, and peak memory (process RSS on a
CPU, the CUDA allocator's peak on a GPU). The tables go to benchmarks/RESULTS.md (between each
workload's markers) unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import torch

import autotune
from autotune._device import environment, resolve_device
from autotune._knobs.apply import supported_optimizer_impls
from autotune._trial.measure import Measurement
from autotune._trial.outcome import Budget
from autotune._trial.runner import measure_throughput
from autotune._trial.workload import Workload, prepare_workload

sys.path.insert(0, str(Path(__file__).parent))
from speedup import code_version, write_section

BUILT_IN = ("cnn", "lm", "mlp")
REAL = ("bert", "resnet", "gpt2")


def workload_for(name: str) -> Workload:
    """The workload as a search prepares it (its hooks, a validation split)."""
    if name in BUILT_IN:
        from speedup import workload

        model, train, val = workload(name)
        hooks = autotune.Task()
    else:
        from realworld import WORKLOADS, load

        model, train, val = load(name)
        hooks = autotune.Task(**WORKLOADS[name]["hooks"])
    return prepare_workload(model, train, val, hooks, val_fraction=0.1, seed=0).workload


def variants(base: autotune.TrainingConfig, work: Workload) -> dict[str, autotune.TrainingConfig]:
    """The baseline and one config per new knob value this workload and device allow."""
    out = {"baseline": base}
    for impl in supported_optimizer_impls(work.optimizer, base.device)[1:]:
        out[f"optimizer {impl}"] = base.replace(optimizer_impl=impl)
    for k in (2, 4):
        if base.batch_size % k == 0:
            split = base.replace(batch_size=base.batch_size // k, gradient_accumulation_steps=k)
            out[f"{base.batch_size // k} x {k} (global kept)"] = split
    out[f"{base.batch_size} x 4 (global 4x)"] = base.replace(gradient_accumulation_steps=4)
    return out


def remeasure(
    work: Workload, configs: dict[str, autotune.TrainingConfig], rounds: int, seconds: float
) -> dict[str, list[Measurement]]:
    """Each config measured once per round, the order rotating, with about ``seconds`` of
    timed training each (the same samples for every config); one discarded pass first."""
    names = list(configs)
    base = configs[names[0]]
    with base.backends():
        probe = measure_throughput(base, work, Budget(timed_samples=base.batch_size * 6))
    budget = Budget(
        timed_samples=max(base.batch_size * 12, round(probe.throughput * seconds)),
        chunks=3,
        min_timed_seconds=0.0,
        max_timed_seconds=0.0,
    )
    for n in names:  # warm up: thread pools, allocator, lazy imports
        with configs[n].backends():
            measure_throughput(configs[n], work, budget)
    out: dict[str, list[Measurement]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            with configs[n].backends():
                m = measure_throughput(configs[n], work, budget)
            out[n].append(m)
            print(f"  round {r + 1}: {n:24} {m!r}", flush=True)
    return out


def render(name: str, measured: dict[str, list[Measurement]], device: str, command: str) -> str:
    env = environment(device)
    base = statistics.median(m.throughput for m in measured["baseline"])
    lines = [
        f"## New knobs side by side: {name}",
        "",
        f"{datetime.date.today().isoformat()}, code {code_version()}, {env.get('device_name')} "
        f"({env.get('cpu_count')} CPUs), torch {torch.__version__}. Command: `{command}`",
        "",
        "| config | samples/s (median) | range | vs baseline | peak memory |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, ms in measured.items():
        speeds = [m.throughput for m in ms]
        peak = max((m.peak_memory_bytes or 0) for m in ms) / 2**20
        lines.append(
            f"| {label} | {statistics.median(speeds):,.0f} | {min(speeds):,.0f}-"
            f"{max(speeds):,.0f} | {statistics.median(speeds) / base:.2f}x | {peak:,.0f} MiB |"
        )
    lines.append("")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", nargs="+", default=list(BUILT_IN), choices=BUILT_IN + REAL)
    parser.add_argument("--batch", type=int, default=64, help="the baseline's batch size (64)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per measurement")
    parser.add_argument("--device", default=None)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit RESULTS.md")
    args = parser.parse_args()
    command = "python " + " ".join(["benchmarks/knobs.py", *sys.argv[1:]])
    device = resolve_device(args.device)
    for name in args.workload:
        print(f"{name}:", flush=True)
        work = workload_for(name)
        configs = variants(autotune.TrainingConfig(device=device, batch_size=args.batch), work)
        text = render(name, remeasure(work, configs, args.rounds, args.seconds), device, command)
        print(text, flush=True)
        if not args.no_write:
            write_section(f"knobs-{name}", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
