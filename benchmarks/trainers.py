"""Do the settings ``autotune.tune`` exports reproduce its measured speed in the user's own
``trainer.fit`` / ``trainer.train()``?

For each trainer of ``trainer_workloads.py``:

1. ``autotune.tune`` searches it, with ``--timeout``, as a user would call it.
2. Side by side, ``--rounds`` alternated rounds of: autotune's own measurement of the chosen
   config (the trial's code, in this process), and the user's own run with the exported
   settings applied by hand (a new ``Trainer`` from ``result.trainer_settings()``, timed by a
   plain callback of this script over ``--steps`` steady steps after a warm-up), and the
   user's own run with their original settings (the baseline).
3. The ratio of the user's run to autotune's measurement of the same config (target: within
   10%), and the speedup the user's own loop shows against what the result reported.

    python benchmarks/trainers.py --timeout 180 --rounds 5

The table goes to benchmarks/RESULTS.md (between this benchmark's markers), with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import statistics
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

import autotune
from autotune._knobs.trainer_args import trainer_settings
from autotune._trial.outcome import Budget
from autotune._trial.runner import run_trial

import trainer_workloads as tw
from honesty import load
from speedup import code_version, write_section

WORKLOADS = ("lightning_resnet", "hf_bert")


# -- The user's own runs, timed by this script --------------------------------------------


class _Clock:
    """Seconds of the steps after ``warmup``, told by a trainer's batch/step ends."""

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps, self.n = warmup, steps, 0
        self.start = self.seconds = 0.0

    def tick(self) -> bool:
        self.n += 1
        if self.n == self.warmup:
            self.start = time.perf_counter()
        if self.n == self.warmup + self.steps:
            self.seconds = time.perf_counter() - self.start
            return True
        return False


def own_lightning(settings: dict[str, Any], lr_factor: float, cfg: autotune.TrainingConfig,
                  warmup: int, steps: int) -> float:  # fmt: skip
    """The user's fit with the exported settings applied by hand: samples/s."""
    import lightning.pytorch as pl

    clock = _Clock(warmup, steps)

    class Timed(pl.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if clock.tick():
                trainer.should_stop = True

    train, _ = tw.resnet_loaders()
    loader = DataLoader(train.dataset, shuffle=True, **settings["dataloader"])
    module = cfg.prepare(tw.ResNetModule(lr=tw.LR * lr_factor))
    trainer = pl.Trainer(
        max_epochs=10, limit_val_batches=0, callbacks=[Timed()], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        **settings["trainer"],
    )  # fmt: skip
    with cfg.backends():
        trainer.fit(module, loader)
    return steps * int(settings["dataloader"]["batch_size"]) / clock.seconds


def own_hf(arguments: dict[str, Any], cfg: autotune.TrainingConfig, warmup: int,
           steps: int) -> float:  # fmt: skip
    """The user's train() with the exported TrainingArguments changes: samples/s."""
    from transformers import TrainerCallback

    clock = _Clock(warmup, steps)

    class Timed(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if clock.tick():
                control.should_training_stop = True

    trainer = tw.hf_bert(**arguments, max_steps=warmup + steps + 1)
    trainer.add_callback(Timed())
    with cfg.backends():
        trainer.train()
    per_step = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps
    return steps * per_step / clock.seconds


# -- autotune's own measurement of a config -------------------------------------------------


def setup_of(name: str) -> Any:
    if name == "lightning_resnet":
        from autotune._trial.lightning_setup import prepare_lightning

        trainer, module, train, val = tw.lightning_resnet()
        return prepare_lightning(
            trainer, module, train_dataloaders=train, val_dataloaders=val, metric="val_acc"
        )
    from autotune._trial.hf_setup import prepare_hf

    return prepare_hf(tw.hf_bert(), metric="eval_accuracy", higher_is_better=None)


def autotunes(setup: Any, cfg: autotune.TrainingConfig, warmup: int, steps: int) -> float:
    micro = steps * cfg.gradient_accumulation_steps
    budget = Budget(
        warmup_steps=warmup * cfg.gradient_accumulation_steps, timed_samples=micro * cfg.batch_size,
        min_timed_steps=micro, chunks=1, min_timed_seconds=0.0, max_timed_seconds=0.0,
        eval_peak=False,
    )  # fmt: skip
    outcome = run_trial(cfg, setup.prepared.workload, budget)
    assert outcome.measurement is not None, outcome.message
    return outcome.measurement.throughput


# -- One workload ---------------------------------------------------------------------------


def search(name: str, timeout: float) -> tuple[autotune.SearchResult, float]:
    start = time.monotonic()
    if name == "lightning_resnet":
        trainer, module, train, val = tw.lightning_resnet()
        result = autotune.tune(
            trainer, module, train_dataloaders=train, val_dataloaders=val, metric="val_acc",
            timeout=timeout, progress=lambda line: print(f"  {line}", flush=True),
        )  # fmt: skip
    else:
        result = autotune.tune(
            tw.hf_bert(), metric="eval_accuracy", timeout=timeout,
            progress=lambda line: print(f"  {line}", flush=True),
        )  # fmt: skip
    print(result, flush=True)
    return result, time.monotonic() - start


def checked_configs(result: autotune.SearchResult) -> dict[str, autotune.TrainingConfig]:
    """The chosen config, and the fastest feasible candidate measured where it is another
    (an exported change that the chosen baseline would not exercise)."""
    out = {"chosen": result.config}
    feasible = [
        t for t in result.trials
        if t.role == "candidate" and t.feasible and t.projected_time is not None
    ]  # fmt: skip
    if feasible:
        fastest = min(feasible, key=lambda t: t.projected_time or math.inf)
        if fastest.config != result.config:
            out[f"fastest (#{fastest.number})"] = fastest.config
    return out


def side_by_side(
    name: str, result: autotune.SearchResult, args: argparse.Namespace
) -> list[dict[str, Any]]:
    setup = setup_of(name)
    base = result.baseline

    def yours(config: autotune.TrainingConfig) -> float:
        if name == "lightning_resnet":
            s = trainer_settings("lightning", config, base)
            return own_lightning(s, s["lr_factor"], config, args.warmup, args.steps)
        changed = {k: v for k, v in config.to_transformers().items()
                   if base.to_transformers().get(k) != v}  # fmt: skip
        return own_hf(changed, config, args.warmup, args.steps)

    configs = checked_configs(result)
    runs: dict[str, list[float]] = {"yours, baseline": []}
    for label in configs:
        runs[f"autotune, {label}"], runs[f"yours, {label}"] = [], []
    for r in range(args.rounds):
        order = list(runs)
        order = order[r % len(order) :] + order[: r % len(order)]  # rotate
        for what in order:
            who, _, label = what.partition(", ")
            cfg = base if label == "baseline" else configs[label]
            if who == "autotune":
                value = autotunes(setup, cfg.replace(device="cpu"), args.warmup, args.steps)
            else:
                value = yours(cfg)
            runs[what].append(value)
            print(f"  round {r + 1}: {what:24} {value:8.1f} samples/s", flush=True)
    rows = []
    for label, cfg in configs.items():
        mine, theirs = runs[f"yours, {label}"], runs[f"autotune, {label}"]
        ratio = [y / a for y, a in zip(mine, theirs, strict=True)]
        own = [y / b for y, b in zip(mine, runs["yours, baseline"], strict=True)]
        rows.append({
            "name": name, "label": label, "config": cfg.describe(),
            "baseline": base.describe(),
            "exported": trainer_settings(result.trainer or "", cfg, base),
            "reported": result.speedup if label == "chosen" else None,
            "side_by_side": result.speedup_range is not None,
            "ratio": statistics.median(ratio), "ratio_range": (min(ratio), max(ratio)),
            "own_speedup": statistics.median(own), "own_range": (min(own), max(own)),
        })  # fmt: skip
    return rows


def _header(title: str, load: str) -> list[str]:
    """A section's title, machine, commit and command (RESULTS.md's rule for every figure)."""
    today = datetime.date.today().isoformat()
    return [
        f"### {title} (`trainers.py`, {today})",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {load}; torch "
        f"{torch.__version__}; commit {code_version()}.",
        f"Command: `python benchmarks/trainers.py {' '.join(sys.argv[1:])}`",
        "",
    ]


def render(rows: list[dict[str, Any]], searched: dict[str, float], args: argparse.Namespace) -> str:
    lines = [
        *_header("The trainer you already have", f"{torch.get_num_threads()} torch threads"),
        "Your run: a new Trainer built from `result.trainer_settings()` by hand, timed by this "
        f"script's own callback over {args.steps} steps after {args.warmup}; autotune's: the "
        "trial's measurement of the same config, in this process; alternated over "
        f"{args.rounds} rounds (median of the per-round ratios, and their range).",
        "",
        "| trainer | search (s) | config | reported speedup | your run / autotune's "
        "(target 0.90-1.10) | speedup in your run |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lo, hi = r["ratio_range"]
        olo, ohi = r["own_range"]
        met = "met" if 0.9 <= r["ratio"] <= 1.1 else "**not met**"
        how = "side by side" if r["side_by_side"] else "throughput ratio, not side by side"
        reported = "-" if r["reported"] is None else f"{r['reported']:.2f}x ({how})"
        lines.append(
            f"| {r['name']} | {searched[r['name']]:.0f} | {r['label']}: `{r['config']}` | "
            f"{reported} | {r['ratio']:.2f} ({lo:.2f}-{hi:.2f}), {met} | "
            f"{r['own_speedup']:.2f}x ({olo:.2f}-{ohi:.2f}) |"
        )
    lines.append("")
    for r in rows:
        lines.append(
            f"- {r['name']}, {r['label']}: exported `{r['exported']}`; baseline `{r['baseline']}`."
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5, help="optimizer steps not timed")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps timed")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--load", type=int, default=0,
        help="busy-loop processes during the searches; then only the searches run, and their "
        "end against the timeout is recorded (no side-by-side)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.load:
        return loaded_searches(args)
    rows, searched = [], {}
    for name in args.workloads:
        print(f"== {name}", flush=True)
        result, seconds = search(name, args.timeout)
        searched[name] = seconds
        rows += side_by_side(name, result, args)
    text = render(rows, searched, args)
    print(text)
    if not args.no_write:
        write_section("trainers", text)
    return 0


def loaded_searches(args: argparse.Namespace) -> int:
    """The searches on a machine another process keeps busy: do they end by their timeout
    (plus its 5% grace), and what do they answer?"""
    lines = [
        *_header(
            "The trainer you already have, on a loaded machine",
            f"{args.load} busy-loop process(es) running",
        ),
        "| trainer | ended (s) | timeout (s) | answer |",
        "| --- | ---: | ---: | --- |",
    ]
    with load(args.load):
        for name in args.workloads:
            result, seconds = search(name, args.timeout)
            first = result.summary().splitlines()[0].removeprefix("autotune result: ")
            lines.append(f"| {name} | {seconds:.0f} | {args.timeout:.0f} | {first} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section("trainers-loaded", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
