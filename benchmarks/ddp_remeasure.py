"""Re-measure a data-parallel search's answer the way its user runs it, under torchrun:

    torchrun --standalone --nproc-per-node 2 benchmarks/ddp_remeasure.py \
        --result best.json --workload cnn --rounds 6 --out remeasure.json

Every rank joins the process group (gloo on the CPU), and the baseline and the chosen config
train alternately (the order swapped each round) in a plain loop written with the config's
public methods only: ``cfg.prepare`` (DistributedDataParallel with the DDP knobs),
``cfg.dataloader`` (a DistributedSampler), the optimizer the search tuned, ``cfg.autocast``,
``cfg.grad_scaler``, ``no_sync`` on accumulation's inner steps where the config says so, inside
``cfg.backends()``. Each run times about ``--seconds`` of steady-state steps after a warm-up,
between barriers, so the figure is the global samples per second of all ranks. Rank 0 writes
each round's ratio (chosen over baseline) and their median to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import autotune
from autotune._knobs import apply
from autotune._trial.workload import Workload, prepare_workload

sys.path.insert(0, str(Path(__file__).parent))
from realworld import WORKLOADS, load


def _batches(cfg: autotune.TrainingConfig, loader: Any) -> Iterator[Any]:
    epoch = 0
    while True:
        cfg.set_epoch(loader, epoch)
        yield from loader
        epoch += 1


def samples_per_second(cfg: autotune.TrainingConfig, work: Workload, steps: int) -> float:
    """Global samples per second of ``steps`` micro-batches after a warm-up of 3 optimizer
    steps: a user's loop under torchrun."""
    torch.manual_seed(0)
    model = cfg.prepare(work.model)
    ddp = apply.ddp_module(model)
    optimizer = apply.make_optimizer(cfg, work.optimizer, model.parameters())
    scaler = cfg.grad_scaler()
    loader = cfg.dataloader(
        work.train, drop_last=True, collate_fn=work.task.collate_fn,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    k = cfg.gradient_accumulation_steps
    warm = 3 * k
    batches = _batches(cfg, loader)
    start = 0.0
    with cfg.backends():
        for i in range(warm + steps):
            if i == warm:
                dist.barrier()
                start = time.perf_counter()
            batch = cfg.to_device(next(batches))
            inner = cfg.ddp_no_sync and ddp is not None and (i + 1) % k != 0
            with ddp.no_sync() if inner else contextlib.nullcontext():  # type: ignore[union-attr]
                with cfg.autocast():
                    outputs, targets = work.task.forward(model, batch)
                    loss = work.task.loss_fn(outputs, targets)
                scaler.scale(loss / k).backward()
            if (i + 1) % k == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
        dist.barrier()
    seconds = time.perf_counter() - start
    return steps * cfg.batch_size * dist.get_world_size() / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", required=True)
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    data = json.loads(Path(args.result).read_text())
    configs = {
        "baseline": autotune.TrainingConfig.from_dict(data["baseline"]["config"]),
        "chosen": autotune.TrainingConfig.from_dict(data["config"]),
    }
    model, train, val = load(args.workload)
    hooks = autotune.Task(**WORKLOADS[args.workload]["hooks"])
    work = prepare_workload(model, train, val, hooks, val_fraction=0.1, seed=0).workload
    # Steps that last about --seconds at the baseline's speed, the same for both configs'
    # samples: the chosen config's steps are scaled by its batch.
    probe = samples_per_second(configs["baseline"], work, 8)
    # Every rank must run the same steps (or wait forever in the extra all-reduce): rank 0's.
    agreed = torch.tensor([probe], dtype=torch.float64)
    dist.broadcast(agreed, src=0)
    probe = float(agreed.item())
    steps = {
        name: max(6, round(probe * args.seconds / (cfg.batch_size * dist.get_world_size())))
        for name, cfg in configs.items()
    }
    for name, cfg in configs.items():  # one discarded pass each: thread pools, allocator
        samples_per_second(cfg, work, max(4, steps[name] // 4))
    speeds: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(args.rounds):
        order = ["baseline", "chosen"] if r % 2 == 0 else ["chosen", "baseline"]
        for name in order:
            speeds[name].append(samples_per_second(configs[name], work, steps[name]))
    ratios = [c / b for c, b in zip(speeds["chosen"], speeds["baseline"], strict=True)]
    if dist.get_rank() == 0:
        Path(args.out).write_text(
            json.dumps(
                {
                    "ratios": ratios,
                    "median": statistics.median(ratios),
                    "speeds": speeds,
                    "ranks": dist.get_world_size(),
                }
            )
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
