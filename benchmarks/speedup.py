"""Speedup benchmark: search, then re-measure the winner against the baseline side by side.

    python benchmarks/speedup.py --workload cnn --timeout 300

1. ``autotune.find_best`` on the workload with the given budget (or ``--result best.json`` to
   re-measure a result from elsewhere).
2. An independent re-measurement in one process: baseline and winner throughput alternated for
   ``--rounds`` rounds (the order flipping each round), with a larger timing budget than the
   search used; the ratio's median and range are reported.
3. Both configs trained for the same number of samples from the same initial weights, over
   ``--seeds`` data-order seeds; the validation metric's difference is reported.

The table goes to benchmarks/RESULTS.md (between this workload's markers; a GPU run has its own,
``cnn-cuda``), with the machine. ``--device`` (default: CUDA where present) picks the device.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

import autotune
from autotune._device import environment, resolve_device
from autotune._knobs.apply import current_device
from autotune._trial.outcome import Budget
from autotune._trial.runner import measure_throughput, train_for_accuracy
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import cnn_data, cnn_model, lm_data, lm_model, mlp_data, mlp_model

RESULTS = Path(__file__).with_name("RESULTS.md")


def code_version() -> str:
    """The commit the benchmark ran on ('+changes' when other tracked files were modified)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
    except OSError:
        return "unknown"
    # The results file itself changes as benchmarks write to it.
    dirty = [line for line in changed if not line.endswith("benchmarks/RESULTS.md")]
    return f"{head}{'+changes' if dirty else ''}" if head else "unknown"


def workload(name: str) -> tuple[torch.nn.Module, Any, Any]:
    if name == "cnn":
        train, val = cnn_data()
        return cnn_model(), train, val
    if name == "lm":
        train, val = lm_data()
        return lm_model(), train, val
    if name == "mlp":
        from autotune._trial.task import split_dataset

        data = mlp_data()
        task = make_task(autotune.Task(metric="accuracy"))
        train, val, _ = split_dataset(data, task, val_fraction=0.2, seed=0)
        return mlp_model(), train, val
    raise SystemExit(f"unknown workload {name!r}; choose cnn, lm or mlp")


def remeasure(
    result: dict[str, Any], model: torch.nn.Module, train: Any, val: Any, args: argparse.Namespace
) -> dict[str, Any]:
    task = make_task(autotune.Task(metric="accuracy"))
    work = Workload(model=model, train=train, val=val, task=task)
    base = autotune.TrainingConfig.from_dict(result["baseline"]["config"])
    best = autotune.TrainingConfig.from_dict(result["config"])
    budget = Budget(timed_samples=args.timed_samples, chunks=5)
    throughput: dict[str, list[float]] = {"baseline": [], "winner": []}
    for r in range(args.rounds):
        order = [("baseline", base), ("winner", best)]
        for name, cfg in order if r % 2 == 0 else order[::-1]:
            with current_device(cfg.device), cfg.backends():
                m = measure_throughput(cfg, work, budget)
            throughput[name].append(m.throughput)
            print(f"round {r + 1}: {name:8} {m!r}", flush=True)
    ratios = [w / b for w, b in zip(throughput["winner"], throughput["baseline"], strict=True)]
    # A search whose budget ended before the guard measured accuracy stored no horizon: three
    # epochs, the guard's longest, then.
    samples = args.accuracy_samples or result["search"].get("accuracy_samples") or 3 * len(train)
    metrics: dict[str, list[float]] = {"baseline": [], "winner": []}
    for seed in range(args.seeds):
        for name, cfg in (("baseline", base), ("winner", best)):
            with current_device(cfg.device), cfg.backends():
                run = train_for_accuracy(cfg, work, samples, seed)
            metrics[name].append(run.metric)
            print(f"seed {seed}: {name:8} accuracy {run.metric:.4f}", flush=True)
    return {
        "throughput": throughput,
        "ratios": ratios,
        "metrics": metrics,
        "accuracy_samples": samples,
    }


def render(name: str, result: dict[str, Any], check: dict[str, Any], command: str) -> str:
    env = result["environment"]
    ratios = check["ratios"]
    tb, tw = check["throughput"]["baseline"], check["throughput"]["winner"]
    mb, mw = check["metrics"]["baseline"], check["metrics"]["winner"]
    diff = statistics.fmean(mw) - statistics.fmean(mb)
    guard = result["accuracy_guard"]
    today = datetime.date.today().isoformat()
    return "\n".join(
        [
            f"### `{name}` speedup ({today})",
            "",
            f"Machine: {env['device_name']} ({env['device']}), {env['cpu_count']} CPUs, "
            f"torch {env['torch']}, optuna {env['optuna']}, Python {env['python']}.",
            f"Command: `{command}` (code: {code_version()})",
            "",
            f"- Search: {result['search']['trials']} trials in {result['search']['seconds']:.0f} s "
            f"(timeout {result['search']['timeout']}), failures "
            f"{result['search']['failures'] or 'none'}.",
            f"- Winner: `{_describe(result['config'])}`",
            f"- Baseline: `{_describe(result['baseline']['config'])}`",
            f"- Speedup the search projected: **{result['speedup']:.2f}x** "
            f"(throughput ratio {result['throughput_ratio']:.2f}x).",
            "",
            "Independent re-measurement, alternated in one process "
            f"({len(ratios)} rounds, {check['throughput']['baseline'] and len(tb)} each):",
            "",
            "| | median | min | max |",
            "| --- | --- | --- | --- |",
            _row("baseline samples/s", tb),
            _row("winner samples/s", tw),
            f"| ratio (winner/baseline, same round) | **{statistics.median(ratios):.2f}x** | "
            f"{min(ratios):.2f}x | {max(ratios):.2f}x |",
            "",
            f"Accuracy, both trained on {check['accuracy_samples']:,} samples from the same "
            f"initial weights over {len(mb)} data-order seeds: baseline "
            f"{statistics.fmean(mb):.4f} ({', '.join(f'{v:.4f}' for v in mb)}), winner "
            f"{statistics.fmean(mw):.4f} ({', '.join(f'{v:.4f}' for v in mw)}); "
            f"difference {diff:+.4f} against a tolerance of {result['tolerance']} "
            f"({_guard_text(guard)}).",
            "",
        ]
    )


def _guard_text(guard: dict[str, Any] | None) -> str:
    if guard is None:
        return "the search made no accuracy check: its budget ended first, or none was needed"
    spread = guard.get("baseline_spread")
    runs = len(guard.get("baseline_runs") or [])
    return (
        f"the search's guard: baseline over {runs} runs"
        + (f", spread ±{spread:.4f}" if spread is not None else "")
        + ("" if guard.get("learned", True) else ", not learned on every data order")
    )


def _describe(cfg: dict[str, Any]) -> str:
    return autotune.TrainingConfig.from_dict(cfg).describe()


def _row(label: str, values: list[float]) -> str:
    return (
        f"| {label} | {statistics.median(values):,.0f} | {min(values):,.0f} | {max(values):,.0f} |"
    )


def write_section(name: str, text: str) -> None:
    start, end = f"<!-- speedup:{name}:start -->", f"<!-- speedup:{name}:end -->"
    current = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    block = f"{start}\n{text}{end}"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        after = rest.split(end, 1)[1]
        current = before + block + after
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(current, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cnn", choices=["cnn", "lm", "mlp"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--space", default="default")
    parser.add_argument("--result", default=None, help="re-measure this result JSON instead")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--timed-samples", type=int, default=6144)
    parser.add_argument("--accuracy-samples", type=int, default=None)
    parser.add_argument("--no-write", action="store_true", help="print, do not edit RESULTS.md")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    command = "python " + " ".join(["benchmarks/speedup.py", *sys.argv[1:]])
    model, train, val = workload(args.workload)
    if args.result:
        result = json.loads(Path(args.result).read_text())
    else:
        start = time.monotonic()
        found = autotune.find_best(
            model,
            train,
            val_dataset=val,
            timeout=args.timeout,
            space=args.space,
            device=device,
            progress=True,
        )
        print(found)
        print(f"search wall time: {time.monotonic() - start:.0f} s")
        result = found.to_dict()
    result.setdefault("environment", environment(device))
    check = remeasure(result, model, train, val, args)
    # A GPU run is recorded beside the CPU one, not over it.
    section = args.workload if device == "cpu" else f"{args.workload}-cuda"
    text = render(section, result, check, command)
    print(text)
    if not args.no_write:
        write_section(section, text)
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
