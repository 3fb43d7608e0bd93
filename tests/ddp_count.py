"""Run by torchrun in tests/test_ddp.py: how many all-reduces gradient accumulation makes
under DDP, with and without no_sync. Rank 0 writes the counts to the file named by argv[1]."""

# No `from __future__ import annotations`: DDP checks the hook's annotations as objects.

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import TensorDataset

import autotune
from autotune._knobs import apply
from autotune._trial.runner import Trainer
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import tiny_data, tiny_model


def count(no_sync: bool, steps: int, k: int) -> dict[str, int]:
    data = tiny_data()
    workload = Workload(
        model=tiny_model(), train=data, val=data, task=make_task(autotune.Task(metric="accuracy"))
    )
    cfg = autotune.TrainingConfig(
        ranks=dist.get_world_size(), batch_size=8, gradient_accumulation_steps=k,
        ddp_no_sync=no_sync,
    )  # fmt: skip
    trainer = Trainer(cfg, workload, steps)
    ddp = apply.ddp_module(trainer.model)
    assert ddp is not None, "cfg.prepare did not wrap the model in DDP"
    calls = {"allreduce": 0}

    def hook(state: object, bucket: dist.GradBucket):  # type: ignore[no-untyped-def]
        calls["allreduce"] += 1
        return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]

    ddp.register_comm_hook(None, hook)
    loader = cfg.dataloader(data, drop_last=True)
    batches = iter(loader)
    for _ in range(steps):
        trainer.step(next(batches))
    return {"allreduce": calls["allreduce"], "optimizer_steps": trainer.step_count}


def replicas_apart(no_sync: bool) -> float:
    """autotune.train for an epoch whose last window is incomplete (80 items, 2 ranks, 10
    micro-batches of 4 each, 4 per step): how far the ranks' weights end apart."""
    torch.manual_seed(0)
    x, y = torch.randn(80, 4), torch.randint(0, 2, (80,))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    cfg = autotune.TrainingConfig(
        ranks=2, batch_size=4, gradient_accumulation_steps=4, ddp_no_sync=no_sync
    )
    data = TensorDataset(x, y)
    report = autotune.train(model, data, cfg, epochs=1, val_dataset=TensorDataset(x[:8], y[:8]))
    weight = report.model[0].weight.detach().clone()
    gathered = [torch.zeros_like(weight) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weight)
    return float((gathered[0] - gathered[1]).abs().max())


def main(out: str) -> None:
    dist.init_process_group("gloo")
    counts = {
        "no_sync": count(True, steps=8, k=4),
        "sync": count(False, steps=8, k=4),
        "sampler": type(autotune.TrainingConfig(ranks=2).dataloader(tiny_data()).sampler).__name__,
    }
    # cfg.set_epoch reshuffles a sharded loader, under the micro-batch sampler too.
    acc = autotune.TrainingConfig(ranks=2, batch_size=8, gradient_accumulation_steps=2)
    loader = acc.dataloader(tiny_data())
    acc.set_epoch(loader, 0)
    first = next(iter(loader))[0]
    acc.set_epoch(loader, 1)
    counts["reshuffled"] = not bool((next(iter(loader))[0] == first).all())
    counts["apart"] = replicas_apart(no_sync=True)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(counts, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
