"""Are autotune's figures honest? Its timing against a bare loop, and its searches on a loaded
machine against an independent side-by-side re-measurement.

    python benchmarks/honesty.py --timeout 90 --load 1

1. **Timing parity** (idle machine): one small-batch config of the digits MLP (batch 8, where a
   fixed per-step cost shows most), timed by autotune in this process, by autotune in an
   isolated trial worker, and by a bare training loop (the same model, optimizer, loss and
   DataLoader, nothing else), alternated for ``--rounds`` rounds. Targets: in-process and
   isolated within 3% of each other, autotune no slower than the bare loop by more than 3%.
2. **Searches on a loaded machine**: ``--load`` CPU-heavy processes (a busy loop each) run
   while ``autotune.find_best`` searches each workload with ``--timeout``, and while the
   baseline and the chosen config are then re-measured side by side, alternated for
   ``--rounds`` rounds, in this process. Targets: the reported speedup within 10% of the
   re-measured one (of the projected times where the search measured side by side, of the
   steady-state throughputs where it says it did not), and the search ending within 5% of its
   timeout without handing back more than 15% of it.

Workloads: the digits MLP and the CNN of ``autotune.examples``, and a ``transformers`` BERT
classifier on a ``datasets.Dataset`` in torch format (``pip install datasets``).
The tables go to benchmarks/RESULTS.md (between this benchmark's markers), with the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import autotune
from autotune._trial.isolation import ProcessExecutor
from autotune._trial.measure import Measurement
from autotune._trial.outcome import Budget
from autotune._trial.runner import measure_throughput
from autotune._trial.workload import Workload, prepare_workload

sys.path.insert(0, str(Path(__file__).parent))
import workloads as w
from speedup import code_version, write_section

WORKLOADS = ("mlp", "cnn", "bert_ds")


# -- Load ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def load(n: int) -> Iterator[None]:
    """``n`` busy-loop processes, each keeping one core busy, for the block's duration."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(0, n))]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


# -- Workloads ----------------------------------------------------------------------------------


def bert_dataset(n: int, seed: int) -> Any:
    """The BERT benchmark's token sequences as a ``datasets.Dataset`` in torch format."""
    from datasets import Dataset

    items = w.TokenSequences(n, seed=seed).items
    ds = Dataset.from_dict(
        {
            "input_ids": [it["input_ids"].tolist() for it in items],
            "labels": [int(it["labels"]) for it in items],
        }
    )
    return ds.with_format("torch")


def workload(name: str) -> tuple[nn.Module, Any, Any, dict[str, Any]]:
    """(model, train, val, hooks) of a workload."""
    from autotune import examples

    if name == "mlp":
        data = examples.mlp_data()
        return examples.mlp_model(), data, None, {}
    if name == "cnn":
        train, val = examples.cnn_data()
        return examples.cnn_model(), train, val, {}
    if name == "bert_ds":
        return (
            w.bert_model(),
            bert_dataset(2000, 0),
            bert_dataset(400, 1),
            {"collate_fn": w.bert_collate},
        )
    raise ValueError(name)


def prepared(name: str) -> Workload:
    model, train, val, hooks = workload(name)
    return prepare_workload(
        model, train, val, autotune.Task(**hooks), val_fraction=0.1, seed=0
    ).workload


# -- 1. Timing parity ---------------------------------------------------------------------------


def bare_loop(cfg: autotune.TrainingConfig, work: Workload, warmup: int, steps: int) -> float:
    """Samples/s of a plain loop: the same model copy, optimizer, loss and DataLoader, three
    chunks of ``steps // 3`` steps timed after ``warmup`` steps (the median chunk)."""
    model = copy.deepcopy(work.model).train()
    opt = work.optimizer(model.parameters(), cfg.lr_schedule.peak_lr)
    loader = cfg.dataloader(work.train, shuffle=True, drop_last=True, collate_fn=None)
    loss_fn = nn.CrossEntropyLoss()

    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    it = batches()

    def step() -> None:
        x, y = next(it)
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    chunk = steps // 3
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(chunk):
            step()
        times.append(time.perf_counter() - start)
    return cfg.batch_size * chunk / statistics.median(times)


def parity(rounds: int, seconds: float) -> dict[str, Any]:
    work = prepared("mlp")
    cfg = autotune.TrainingConfig(batch_size=8)
    probe = measure_throughput(cfg, work, Budget(timed_samples=8 * 30))
    steps = max(30, round(probe.throughput * seconds / 8) // 3 * 3)
    budget = Budget(
        warmup_steps=3,
        timed_samples=8 * steps,
        min_timed_steps=steps,
        min_timed_seconds=0.0,
        max_timed_seconds=0.0,
    )
    isolated = ProcessExecutor(work)
    isolated.ensure_started()
    speed: dict[str, list[float]] = {"in-process": [], "isolated": [], "bare loop": []}

    def run(mode: str) -> float:
        if mode == "in-process":
            return measure_throughput(cfg, work, budget).throughput
        if mode == "isolated":
            outcome = isolated.run(cfg, budget)
            assert outcome.measurement is not None, outcome.message
            return outcome.measurement.throughput
        return bare_loop(cfg, work, 3, steps)

    try:
        modes = list(speed)
        for mode in modes:  # warm up each: thread pools, allocator, lazy imports
            run(mode)
        for r in range(rounds):
            for mode in modes[r % 3 :] + modes[: r % 3]:
                speed[mode].append(run(mode))
                print(f"  parity round {r + 1}: {mode:10} {speed[mode][-1]:,.0f} samples/s")
    finally:
        isolated.close()
    return {"steps": steps, "speed": speed}


def step_overhead(alternations: int = 40, steps: int = 200) -> list[float]:
    """autotune's training step (``Trainer.step``) against the same model, optimizer, loss
    and batches stepped by hand, alternated every ``steps`` steps (the machine's drift hits
    both alike): the per-alternation ratios of autotune's time to the bare loop's."""
    from autotune._trial.runner import Trainer

    work = prepared("mlp")
    cfg = autotune.TrainingConfig(batch_size=8)
    trainer = Trainer(cfg, work, 10**7)
    model = copy.deepcopy(work.model).train()
    opt = work.optimizer(model.parameters(), cfg.lr_schedule.peak_lr)
    loss_fn = nn.CrossEntropyLoss()
    loader = cfg.dataloader(work.train, shuffle=True, drop_last=True, collate_fn=None)
    batches = [b for _, b in zip(range(steps), loader, strict=False)]

    def bare(batch: Any) -> None:
        x, y = batch
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    ratios = []
    for r in range(alternations):
        took: dict[str, float] = {}
        pair = (("auto", trainer.step), ("bare", bare))
        for name, step in pair if r % 2 else pair[::-1]:
            start = time.perf_counter()
            for batch in batches:
                step(batch)
            took[name] = time.perf_counter() - start
        ratios.append(took["auto"] / took["bare"])
    return ratios


# -- 2. Searches on a loaded machine ------------------------------------------------------------


def search(name: str, timeout: float) -> tuple[autotune.SearchResult, float]:
    model, train, val, hooks = workload(name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        result = autotune.find_best(
            model,
            train,
            val_dataset=val,
            task=autotune.Task(**hooks),
            timeout=timeout,
            progress=lambda line: print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True),
            options=autotune.SearchOptions(storage=f"sqlite:///{tmp}/study.db"),
        )
    print(result, flush=True)
    return result, time.monotonic() - start


def remeasure(
    work: Workload, configs: dict[str, autotune.TrainingConfig], rounds: int, seconds: float
) -> dict[str, list[Measurement]]:
    """Each config alternated round by round in this process (the order rotating), about
    ``seconds`` of timed training each, after one discarded pass."""
    names = list(configs)
    base = configs[names[0]]
    with base.backends():
        probe = measure_throughput(base, work, Budget(timed_samples=base.batch_size * 6))
    budget = Budget(
        timed_samples=max(base.batch_size * 6, round(probe.throughput * seconds)),
        min_timed_seconds=0.0,
        max_timed_seconds=0.0,
    )
    out: dict[str, list[Measurement]] = {n: [] for n in names}
    for n in names:
        with configs[n].backends():
            measure_throughput(configs[n], work, budget)
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            with configs[n].backends():
                out[n].append(measure_throughput(configs[n], work, budget))
            print(f"  re-measure round {r + 1}: {n:8} {out[n][-1]!r}", flush=True)
    return out


def loaded(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with load(args.load):
        result, wall = search(name, args.timeout)
        data = result.to_dict()
        side_by_side = result.speedup_range is not None
        row: dict[str, Any] = {
            "workload": name,
            "wall": wall,
            "seconds": data["search"]["seconds"],
            "reported": result.speedup,
            "side_by_side": side_by_side,
            "chosen": result.config.describe(),
            "same": result.config == result.baseline,
            "unmeasured": data["search"].get("unmeasured") or [],
        }
        if row["same"]:
            return row
        measured = remeasure(
            prepared(name),
            {"baseline": result.baseline, "chosen": result.config},
            args.rounds,
            args.seconds,
        )
    samples = data["metrics"]["planned_samples"]
    epochs = float(data["search"]["planned_epochs"])
    pairs = list(zip(measured["baseline"], measured["chosen"], strict=True))
    row["throughput_ratio"] = statistics.median(c.throughput / b.throughput for b, c in pairs)
    row["range"] = (
        min(
            b.projected_time(samples, epochs) / c.projected_time(samples, epochs) for b, c in pairs
        ),
        max(
            b.projected_time(samples, epochs) / c.projected_time(samples, epochs) for b, c in pairs
        ),
    )
    row["projected_ratio"] = statistics.median(
        b.projected_time(samples, epochs) / c.projected_time(samples, epochs) for b, c in pairs
    )
    return row


def compile_check(timeout: float) -> dict[str, Any]:
    """The digits MLP with a user's small space listing compile: is compile measured (or its
    failure recorded), and does the search end early only with every listed value measured?"""
    from autotune.examples import mlp_data, mlp_model

    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        result = autotune.find_best(
            mlp_model(),
            mlp_data(),
            timeout=timeout,
            space={"knobs": {"batch_size": [32, 64], "compile_mode": ["none", "default"]}},
            progress=lambda line: print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True),
            options=autotune.SearchOptions(storage=f"sqlite:///{tmp}/study.db"),
        )
    data = result.to_dict()
    compiled = [t for t in result.trials if t.config.compile_mode.value != "none"]
    return {
        "ended": data["search"]["seconds"],
        "timeout": timeout,
        "compiled": [(t.number, t.failure or "measured") for t in compiled],
        "unmeasured": data["search"]["unmeasured"],
    }


# -- Report -------------------------------------------------------------------------------------


def render(par: dict[str, Any] | None, rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    today = datetime.date.today().isoformat()
    cpu = platform.processor() or platform.machine()
    lines = [
        f"### Honest figures (`honesty.py`, {today})",
        "",
        f"Machine: {cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}; "
        f"commit {code_version()}.",
        f"Command: `python benchmarks/honesty.py {' '.join(sys.argv[1:])}`",
        "",
    ]
    if par is not None:
        med = {k: statistics.median(v) for k, v in par["speed"].items()}
        sp = par["speed"]
        # Paired, round by round (the machine drifts between rounds), then the median.
        pairs = zip(sp["isolated"], sp["in-process"], sp["bare loop"], strict=True)
        iso = statistics.median(i / p for i, p, _ in pairs) - 1
        pairs = zip(sp["isolated"], sp["in-process"], sp["bare loop"], strict=True)
        bare = statistics.median(p / b for _, p, b in pairs) - 1
        lines += [
            f"**Timing parity** (idle; digits MLP, batch 8, {par['steps']} timed steps, "
            f"{len(par['speed']['bare loop'])} alternated rounds; median samples/s, and the "
            "median of the per-round ratios):",
            "",
            "| autotune in-process | autotune isolated | bare loop | isolated vs in-process "
            "| in-process vs bare loop |",
            "|---|---|---|---|---|",
            f"| {med['in-process']:,.0f} | {med['isolated']:,.0f} | {med['bare loop']:,.0f} "
            f"| {iso:+.1%} {'(within 3%)' if abs(iso) <= 0.03 else '(NOT within 3%)'} "
            f"| {bare:+.1%} {'(within 3%)' if bare >= -0.03 else '(NOT within 3%)'} |",
            "",
        ]
        if par.get("step"):
            q = statistics.quantiles(par["step"], n=4)
            lines += [
                f"Step overhead, finely interleaved ({len(par['step'])} alternations of 200 "
                "steps, `Trainer.step` against the same model, optimizer, loss and batches "
                f"by hand): autotune's step takes {q[1] - 1:+.1%} the bare loop's time "
                f"(quartiles {q[0] - 1:+.1%} to {q[2] - 1:+.1%}).",
                "",
            ]
    if rows:
        lines += [
            f"**Searches on a loaded machine** ({args.load} busy-loop process(es) on "
            f"{torch.get_num_threads()} cores during the search and the re-measurement; "
            f"timeout {args.timeout:.0f} s; re-measured over {args.rounds} alternated rounds of "
            f"~{args.seconds:.0f} s):",
            "",
            "| workload | search ended (s of timeout) | chosen | reported | re-measured "
            "| reported / re-measured | targets |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(_row(r, args.timeout))
        lines.append("")
    return "\n".join(lines) + "\n"


def _row(r: dict[str, Any], timeout: float) -> str:
    ended = r["seconds"]
    # Ending early is fine where every listed value was measured (nothing was left to try).
    early_ok = not r["unmeasured"]
    within = ended <= timeout * 1.05 and (ended >= timeout * 0.85 or early_ok)
    budget = f"{ended:.0f} of {timeout:.0f} ({'ok' if within else 'MISSED'})"
    if r["same"]:
        return f"| {r['workload']} | {budget} | the baseline | 1.00x | - | - | {budget} |"
    how = "side by side" if r["side_by_side"] else "throughput only"
    again = r["projected_ratio"] if r["side_by_side"] else r["throughput_ratio"]
    ratio = r["reported"] / again
    ok = abs(ratio - 1) <= 0.10
    return (
        f"| {r['workload']} | {budget} | {r['chosen']} | {r['reported']:.2f}x ({how}) "
        f"| {again:.2f}x (rounds {r['range'][0]:.2f}-{r['range'][1]:.2f}x; throughput "
        f"{r['throughput_ratio']:.2f}x) | {ratio:.2f} "
        f"| speedup {'ok' if ok else 'MISSED'}, budget {'ok' if within else 'MISSED'} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--load", type=int, default=1, help="busy-loop processes")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per run")
    parser.add_argument("--parity-rounds", type=int, default=12)
    parser.add_argument("--no-parity", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--compile-check", action="store_true", help="only the digits compile check (timeout 60)"
    )
    args = parser.parse_args()
    if args.compile_check:
        print(compile_check(60.0))
        return 0
    par = None if args.no_parity else parity(args.parity_rounds, args.seconds / 2)
    if par is not None:
        par["step"] = step_overhead()
    rows = [loaded(name, args) for name in args.workloads]
    text = render(par, rows, args)
    print(text)
    if not args.no_write:
        write_section("honesty", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
