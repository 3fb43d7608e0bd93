"""Search-efficiency benchmark: autotune and random search against the exhaustive grid.

    python benchmarks/efficiency.py --workload cnn --seeds 2 --share 0.15

1. The exhaustive grid of a reduced discrete space (Optuna's BruteForceSampler through
   ``find_best(guided=False)``: every config measured in full, accuracy check included, nothing
   pruned). Its table of projected training times is the ground truth; its fastest feasible
   config the optimum.
2. For each seed, autotune (its default sampler, first guess, stages and pruning) and plain
   random search (Optuna's RandomSampler with ``guided=False``: same measurements and accuracy
   guard, none of autotune's guidance), each given ``--share`` of the grid's wall time.
3. Each method's winner is looked up in the grid's table, so all three are scored on the same
   measurements: the fraction of the optimum's speed reached (optimum time / winner's time),
   and the wall time spent.

The table goes to benchmarks/RESULTS.md, with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

import autotune

sys.path.insert(0, str(Path(__file__).parent))
from speedup import code_version, workload, write_section

SPACES: dict[str, dict[str, Any]] = {
    "cnn": {
        "batch_size": [32, 64, 128, 256],
        "num_workers": [0, 1],
        "precision": ["fp32", "bf16"],
        "channels_last": [False, True],
        "lr_schedule": ["constant", "cosine"],
    },
    # Without LR scaling every larger batch loses accuracy on the digits MLP and the grid's
    # optimum is the baseline itself; loader workers cannot help a TensorDataset, threads can.
    "mlp": {
        "batch_size": [32, 64, 128, 256],
        "precision": ["fp32", "bf16"],
        "lr_batch_scaling": ["none", "sqrt", "linear"],
        "intra_op_threads": [None, 1],
    },
    # Loader workers measured 20-30% faster on the LM; checkpointing only costs on a CPU.
    "lm": {
        "batch_size": [16, 32, 64],
        "num_workers": [0, 1],
        "precision": ["fp32", "bf16"],
        "lr_schedule": ["constant", "cosine"],
    },
}


def key(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, sort_keys=True)


def run(name: str, args: argparse.Namespace, **options: Any) -> tuple[dict[str, Any], float]:
    model, train, val = workload(name)
    start = time.monotonic()
    result = autotune.find_best(
        model,
        train,
        val_dataset=val,
        space={"knobs": SPACES[name]},
        progress=lambda line: print(f"  {line}", flush=True),
        options=autotune.SearchOptions(accuracy_samples=args.accuracy_samples, **options),
    )
    return result.to_dict(), time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cnn", choices=sorted(SPACES))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.15)
    parser.add_argument(
        "--accuracy-samples",
        type=int,
        default=None,
        help="one fixed accuracy budget for the grid and both methods (default: each search "
        "plans its own from its time budget)",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    command = "python " + " ".join(["benchmarks/efficiency.py", *sys.argv[1:]])
    name = args.workload
    size = 1
    for values in SPACES[name].values():
        size *= len(values)

    print(f"grid: {size} configs", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        grid, grid_seconds = run(
            name,
            args,
            sampler=optuna.samplers.BruteForceSampler(seed=0),
            guided=False,
            n_trials=size,
            storage=f"sqlite:///{tmp}/grid.db",
            study_name="grid",
        )
    table = {
        key(t["config"]): t["projected_training_time"]
        for t in grid["trials"]
        if t["feasible"] and t["projected_training_time"]
    }
    optimum = min(table.values())
    best_cfg = min(table, key=lambda k: table[k])
    budget = args.share * grid_seconds
    rows: dict[str, list[tuple[float, float, bool, str, bool]]] = {"autotune": [], "random": []}
    for seed in range(args.seeds):
        for method in rows:
            plain = method == "random"
            sampler = optuna.samplers.RandomSampler(seed=seed) if plain else None
            print(f"{method}, seed {seed}, {budget:.0f} s", flush=True)
            found, seconds = run(
                name, args, timeout=budget, seed=seed, sampler=sampler, guided=not plain
            )
            winner = key(found["config"])
            feasible_in_grid = winner in table
            time_in_grid = table.get(winner)
            if time_in_grid is None:
                time_in_grid = float("inf")
            # A winner the grid found outside the tolerance reached nothing usable: score 0.
            fraction = optimum / time_in_grid if feasible_in_grid else 0.0
            described = autotune.TrainingConfig.from_dict(found["config"]).describe()
            reliable = bool(found["accuracy_guard"]["reliable"])
            rows[method].append((fraction, seconds, feasible_in_grid, described, reliable))

    env = grid["environment"]  # the machine the grid measured on (a GPU where one is present)
    lines = [
        f"### `{name}` search efficiency ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {env['device_name']} ({env['device']}), {env['cpu_count']} CPUs, torch "
        f"{env['torch']}, optuna {env['optuna']}. Command: `{command}` (code: {code_version()})",
        "",
        f"Space: {', '.join(f'{k} {v}' for k, v in SPACES[name].items())} ({size} configs). "
        f"The exhaustive grid took {grid_seconds:.0f} s; its optimum is "
        f"`{autotune.TrainingConfig.from_dict(json.loads(best_cfg)).describe()}` at "
        f"{grid['baseline']['metrics']['projected_training_time'] / optimum:.2f}x the baseline. "
        f"autotune and random search each got {args.share:.0%} of the grid's time "
        f"({budget:.0f} s) per seed"
        + (
            f", all three with the same accuracy budget ({args.accuracy_samples} samples per run)"
            if args.accuracy_samples
            else ""
        )
        + "; winners are scored on the grid's own measurements, and a "
        "winner the grid measured outside the tolerance scores 0.",
        "",
        "| method | seed | fraction of the grid optimum | wall time | share of grid time | "
        "winner feasible in the grid | guard reliable | winner |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| grid (BruteForceSampler, unguided) | - | 100% | {grid_seconds:.0f} s | 100% | yes | "
        f"{'yes' if grid['accuracy_guard']['reliable'] else 'no'} | "
        f"`{autotune.TrainingConfig.from_dict(grid['config']).describe()}` |",
    ]
    for method, results in rows.items():
        for seed, (fraction, seconds, ok, described, reliable) in enumerate(results):
            lines.append(
                f"| {method} | {seed} | {fraction:.1%} | {seconds:.0f} s | "
                f"{seconds / grid_seconds:.0%} | {'yes' if ok else 'no'} | "
                f"{'yes' if reliable else 'no'} | `{described}` |"
            )
    for method, results in rows.items():
        fractions = [r[0] for r in results]
        lines.append(
            f"\n{method}: median {statistics.median(fractions):.1%} of the optimum "
            f"(min {min(fractions):.1%}) over {len(fractions)} seeds."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section(f"efficiency-{name}-{args.share:g}", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
