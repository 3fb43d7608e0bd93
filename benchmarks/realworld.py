"""Real model code, real budgets: autotune on ``transformers`` models with realistic inputs.

    python benchmarks/realworld.py --workload bert --timeout 240

For one workload of ``benchmarks/workloads.py`` (bert, resnet, gpt2, gpt2_own) or a built-in
one (cnn):

1. ``autotune.find_best`` with the timeout, as a user would call it; the search's wall time
   against its timeout, the candidates it measured, the time to its first verified win, its
   answers and the speedup it reports.
2. An independent re-measurement in this process, the way a user's own loop would run: the
   baseline and the chosen config alternated for ``--rounds`` rounds with a longer timing
   budget; the ratio's median and range against the reported speedup.
3. A small exhaustive grid of the knobs that matter here, measured side by side in this
   process, its accuracy judged by a longer check than the search could afford (``--grid-epochs``
   per run, ``--grid-seeds`` paired seeds: a config is within tolerance where its mean paired
   drop is): its optimum, and the search's chosen config as a fraction of it.

The table goes to benchmarks/RESULTS.md (between this workload's markers), with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import autotune
from autotune._guard.words import percent
from autotune._trial.outcome import Budget
from autotune._trial.runner import measure_throughput, train_for_accuracy
from autotune._trial.workload import Workload, prepare_workload

sys.path.insert(0, str(Path(__file__).parent))
import workloads as w
from speedup import code_version, write_section

# Per workload: the factories, the hooks find_best gets, and the grid's knobs.
WORKLOADS: dict[str, dict[str, Any]] = {
    "bert": {
        "hooks": {"collate_fn": w.bert_collate},
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128]},
    },
    "resnet": {
        "hooks": {},
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128], "channels_last": [False, True]},
    },
    "gpt2": {
        "hooks": {
            "forward": w.gpt2_forward,
            "loss_fn": w.gpt2_loss,
            "metric": w.gpt2_metric,
            "higher_is_better": False,
        },
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128]},
    },
    "gpt2_own": {
        "hooks": {},
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128]},
    },
    "digits": {
        "hooks": {},
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128]},
    },
    "cnn": {
        "hooks": {},
        "grid": {"precision": ["fp32", "bf16"], "batch": [32, 128], "channels_last": [False, True]},
    },
}


def load(name: str) -> tuple[torch.nn.Module, Any, Any]:
    if name == "cnn":
        from autotune.examples import cnn_data, cnn_model

        train, val = cnn_data()
        return cnn_model(), train, val
    train, val = getattr(w, f"{name}_data")()
    return getattr(w, f"{name}_model")(), train, val


def search(name: str, args: argparse.Namespace) -> tuple[dict[str, Any], float]:
    model, train, val = load(name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        result = autotune.find_best(
            model,
            train,
            val_dataset=val,
            task=autotune.Task(**WORKLOADS[name]["hooks"]),
            timeout=args.timeout,
            progress=lambda line: print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True),
            options=autotune.SearchOptions(storage=f"sqlite:///{tmp}/study.db"),
        )
    wall = time.monotonic() - start
    print(result, flush=True)
    return result.to_dict(), wall


def workload_for(name: str) -> Workload:
    model, train, val = load(name)
    hooks = autotune.Task(**WORKLOADS[name]["hooks"])
    return prepare_workload(model, train, val, hooks, val_fraction=0.1, seed=0).workload


def remeasure(
    work: Workload, configs: dict[str, autotune.TrainingConfig], rounds: int, seconds: float
) -> dict[str, list[float]]:
    """Throughput of each config, alternated round by round in this process (the order
    rotating), with about ``seconds`` of timed training each; one discarded pass first."""
    names = list(configs)
    speed: dict[str, list[float]] = {n: [] for n in names}
    base = configs[names[0]]
    with base.backends():
        probe = measure_throughput(base, work, Budget(timed_samples=base.batch_size * 6))
    budget = Budget(
        timed_samples=max(base.batch_size * 6, round(probe.throughput * seconds)),
        chunks=3,
        min_timed_seconds=0.0,
        max_timed_seconds=0.0,
    )
    for n in names:  # warm up: thread pools, allocator, lazy imports
        with configs[n].backends():
            measure_throughput(configs[n], work, budget)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            with configs[n].backends():
                m = measure_throughput(configs[n], work, budget)
            speed[n].append(m.throughput)
            print(f"  round {r + 1}: {n:10} {m!r}", flush=True)
    return speed


def accuracy(work: Workload, cfg: autotune.TrainingConfig, samples: int, seeds: int) -> list[float]:
    out = []
    for seed in range(seeds):
        with cfg.backends():
            out.append(train_for_accuracy(cfg, work, samples, seed).metric)
    return out


def grid(name: str, work: Workload, base: autotune.TrainingConfig, args: argparse.Namespace):
    """Every combination of the workload's grid knobs (a larger batch with its LR scaled by the
    square root and a cosine schedule, as autotune's rule of thumb has it)."""
    spec = WORKLOADS[name]["grid"]
    configs: dict[str, autotune.TrainingConfig] = {}
    for values in itertools.product(*spec.values()):
        choice = dict(zip(spec, values, strict=True))
        cfg = base.replace(
            precision=choice.get("precision", "fp32"),
            channels_last=bool(choice.get("channels_last", False)),
        )
        batch = int(choice.get("batch", base.batch_size))
        if batch != base.batch_size:
            cfg = cfg.replace(
                batch_size=batch,
                lr_schedule={
                    "kind": "cosine",
                    "peak_lr": base.lr_schedule.peak_lr * (batch / base.batch_size) ** 0.5,
                    "warmup_fraction": 0.05,
                    "batch_scaling": "sqrt",
                    "reference_batch_size": base.batch_size,
                },
            )
        configs[cfg.describe()] = cfg
    speed = remeasure(work, configs, args.grid_rounds, args.seconds)
    samples = round(args.grid_epochs * len(work.train))  # type: ignore[arg-type]
    metrics: dict[tuple[Any, ...], list[float]] = {}
    verdicts: dict[str, tuple[float, bool, float]] = {}
    base_runs = accuracy(work, base, samples, args.grid_seeds)
    higher = work.task.higher_is_better
    for label, cfg in configs.items():
        key = cfg.numerics_key()
        if key not in metrics:
            metrics[key] = (
                base_runs
                if key == base.numerics_key()
                else accuracy(work, cfg, samples, args.grid_seeds)
            )
        drops = [
            (b - c) if higher else (c - b) for b, c in zip(base_runs, metrics[key], strict=True)
        ]
        drop = statistics.fmean(drops)
        verdicts[label] = (drop, drop <= args.tolerance, statistics.fmean(metrics[key]))
        print(f"  grid {label}: {metrics[key]} drop {drop:+.4f}", flush=True)
    return configs, speed, verdicts, samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="bert", choices=sorted(WORKLOADS))
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed seconds per round")
    parser.add_argument("--grid-rounds", type=int, default=3)
    parser.add_argument("--grid-epochs", type=float, default=1.0)
    parser.add_argument("--grid-seeds", type=int, default=5)
    parser.add_argument("--no-grid", action="store_true")
    parser.add_argument(
        "--reach",
        action="store_true",
        help="re-measure the chosen config side by side with bf16 alone (and, for image "
        "models, bf16 + channels-last), and show the guard's verdict on them",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    command = "python " + " ".join(["benchmarks/realworld.py", *sys.argv[1:]])
    name = args.workload
    found, wall = search(name, args)
    base = autotune.TrainingConfig.from_dict(found["baseline"]["config"])
    chosen = autotune.TrainingConfig.from_dict(found["config"])
    work = workload_for(name)
    check = None
    refs = references(name, base) if args.reach else {}
    if chosen != base or refs:
        speed = remeasure(
            work, {"baseline": base, "chosen": chosen, **refs}, args.rounds, args.seconds
        )
        check = [c / b for c, b in zip(speed["chosen"], speed["baseline"], strict=True)]
    grid_result = None if args.no_grid else grid(name, work, base, args)
    text = render(name, found, wall, check, grid_result, args, command)
    if refs:
        text += render_reach(found, speed, refs)
    print(text)
    if not args.no_write:
        write_section(f"realworld-{name}-{args.timeout:g}", text)
    return 0


def references(name: str, base: autotune.TrainingConfig) -> dict[str, autotune.TrainingConfig]:
    """The configs issue 18 holds the search to: bf16 alone, and for image models bf16 with
    channels-last, on the baseline's batch (the same optimizer steps)."""
    refs = {"bf16": base.replace(precision="bf16")}
    if name in ("resnet", "cnn"):
        refs["bf16+cl"] = base.replace(precision="bf16", channels_last=True)
    return refs


def render_reach(
    found: dict[str, Any], speed: dict[str, list[float]], refs: dict[str, autotune.TrainingConfig]
) -> str:
    """The chosen config against the best reference, side by side, and the guard's verdict on
    each reference's numerics (from the search's trials)."""
    base = statistics.median(speed["baseline"])
    chosen = statistics.median(speed["chosen"]) / base
    lines = ["", "Against the references, side by side in this process:", ""]
    best = max(statistics.median(speed[n]) / base for n in refs)
    for label, cfg in refs.items():
        ratio = statistics.median(speed[label]) / base
        verdict = "not checked by the search"
        for t in found["trials"]:
            c = t.get("confirmation")
            same = autotune.TrainingConfig.from_dict(t["config"]).numerics_key() == (
                cfg.numerics_key()
            )
            if same and c:
                bound = c.get("bound")
                lower = c.get("lower")
                verdict = (
                    f"{c['verdict']} over {len(c.get('runs', []))} seeds (drop "
                    f"{c.get('drop', float('nan')):+.4f}, bounds "
                    f"{'n/a' if lower is None else f'{lower:+.4f}'} .. "
                    f"{'n/a' if bound is None else f'{bound:+.4f}'})"
                )
                break
        lines.append(f"- `{label}`: {ratio:.2f}x the baseline; the guard: {verdict}")
    lines.append(
        f"- chosen: {chosen:.2f}x, **{chosen / best:.0%}** of the best reference ({best:.2f}x)"
    )
    return "\n".join(lines) + "\n"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def render(name, found, wall, check, grid_result, args, command) -> str:  # type: ignore[no-untyped-def]
    env = found["environment"]
    search_info = found["search"]
    answers = found["answers"]
    reported = found["speedup"]
    span = found.get("speedup_range")
    first = search_info.get("first_win_seconds")
    lines = [
        f"### `{name}` on a real budget ({datetime.date.today().isoformat()})",
        "",
        f"Machine: {env['device_name']} ({env['device']}), {env['cpu_count']} CPUs, torch "
        f"{env['torch']}. Command: `{command}` (code: {code_version()})",
        "",
        f"- Search: {search_info['configs_measured']} configs measured ({search_info['trials']} "
        f"trials, reused measurements included) in "
        f"{wall:.0f} s of a {args.timeout:.0f} s timeout ({wall / args.timeout:.0%}); first "
        f"verified win {'none' if first is None else f'after {first:.0f} s'}; failures "
        f"{search_info['failures'] or 'none'}.",
        f"- Safe answer: `{_describe(answers['safe'])}` "
        f"({_x((answers['safe'] or {}).get('speedup'))}).",
        f"- Fast answer: {_fast(answers)}.",
        f"- Chosen: the {answers['chosen']} answer, `{_describe({'config': found['config']})}`; "
        f"reported speedup **{_x(reported)}**"
        + (
            f" (side by side {span[0]:.2f}-{span[1]:.2f}x)"
            if span
            else " (not re-measured side by side)"
        )
        + ".",
    ]
    if check:
        med = statistics.median(check)
        lines.append(
            f"- Independent re-measurement in this process ({len(check)} alternating rounds, "
            f"~{args.seconds:g} s timed each): **{med:.2f}x** "
            f"({min(check):.2f}-{max(check):.2f}x); "
            f"the reported speedup is {reported / med - 1:+.0%} from it."
        )
    if grid_result is not None:
        configs, speed, verdicts, samples = grid_result
        base_label = next(iter(configs))
        base_speed = statistics.median(speed[base_label])
        lines += [
            "",
            f"Small grid, measured side by side here ({args.grid_rounds} rounds), accuracy by "
            f"{args.grid_seeds} paired seeds of {samples:,} samples (mean paired drop against "
            f"the tolerance {args.tolerance:g}):",
            "",
            "| config | samples/s (median) | vs baseline | val metric (mean) | mean paired drop "
            "| within tolerance |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        best_label, best_ratio = base_label, 1.0
        for label in configs:
            ratio = statistics.median(speed[label]) / base_speed
            drop, ok, mean = verdicts[label]
            if ok and ratio > best_ratio:
                best_label, best_ratio = label, ratio
            lines.append(
                f"| `{label}` | {statistics.median(speed[label]):,.0f} | {ratio:.2f}x | "
                f"{mean:.4f} | {drop:+.4f} | {'yes' if ok else 'no'} |"
            )
        ours = statistics.median(check) if check else 1.0
        lines += [
            "",
            f"Grid optimum: `{best_label}` at {best_ratio:.2f}x; the search's chosen config, "
            f"re-measured, reaches **{ours / best_ratio:.0%}** of it.",
        ]
    return "\n".join(lines) + "\n"


def _describe(answer: dict[str, Any] | None) -> str:
    if not answer:
        return "none"
    return autotune.TrainingConfig.from_dict(answer["config"]).describe()


def _fast(answers: dict[str, Any]) -> str:
    fast, pending = answers.get("fast"), answers.get("pending")
    if fast:
        c = fast.get("confirmation") or {}
        return (
            f"`{_describe(fast)}` ({_x(fast.get('speedup'))}), confirmed: mean paired drop "
            f"{c.get('drop', 0):+.4f}, upper bound {c.get('bound') or 0:+.4f} at "
            f"{percent(c.get('confidence') or 0.0)} confidence over {len(c.get('runs', []))} seeds"
        )
    if pending:
        c = pending.get("confirmation") or {}
        return (
            f"none confirmed; `{_describe(pending)}` ({_x(pending.get('speedup'))}) passed "
            f"screening, not settled: {c.get('settle') or 'no time to confirm it'}"
        )
    return "none (no candidate that changes the numerics passed its checks)"


if __name__ == "__main__":
    sys.exit(main())
