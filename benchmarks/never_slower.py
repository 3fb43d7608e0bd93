"""Never slower than what the user had (issue 56): a decode-heavy search's answer, re-measured
by a plain loop that applies the exported JSON and alternates with the baseline.

    python benchmarks/never_slower.py --runs 3 --timeout 240 --write
    python benchmarks/never_slower.py --workload cnn --runs 1 --timeout 300 --busy-seconds 60 \
        --write                                   # the README's run, one core busy at first

The workload is ``workloads.py``'s ``jpeg``: a ``transformers`` ResNet from a small config on
3,000 JPEG images held in memory as encoded bytes and decoded by PIL in ``__getitem__`` (a
random crop and a flip); or, with ``--workload cnn``, the README's built-in CNN. Per run:

1. ``autotune.find_best`` as a user calls it (the default space; ``--busy-seconds`` keeps one
   core busy with another process for the search's first seconds), its study in a SQLite file,
   its result saved with ``result.save`` and read back with ``autotune.load_config``.
2. A plain loop of this file (``cfg.prepare``, ``cfg.dataloader``, ``cfg.optimizer``,
   ``cfg.autocast``, ``cfg.grad_scaler``, ``cfg.backends``: the README's way of applying a
   config, no autotune measurement code) over the baseline, the answer, and every
   numerics-free config among loader workers 0/1/2, channels_last and a fused optimizer and
   their pairs, alternated for ``--rounds`` rounds (the order rotating; one discarded pass of
   each first), samples/s over ``--timed-samples`` after a warm-up.

Targets: the answer at least 0.97x the baseline in the loop in every run, and at least 0.95x
the best config the loop found; the reported speed-up within 10% of the loop's ratio; the
search's first baseline figure within 5% of the loop's baseline. ``--write`` puts the section
into benchmarks/RESULTS.md with the machine, the command and the commit. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import autotune

sys.path.insert(0, str(Path(__file__).parent))
import workloads as w
from speedup import code_version, write_section
from streaming import cpu_model

SECTION = "never-slower"
AT_LEAST_BASELINE = 0.97
AT_LEAST_BEST = 0.95
REPORTED_WITHIN = 0.10
FIRST_WITHIN = 0.05


def grid(base: autotune.TrainingConfig) -> dict[str, autotune.TrainingConfig]:
    """The baseline's numerics-free neighbours the issue names: workers 0/1/2, channels_last,
    the fused optimizer, and every pair of them."""

    def workers(cfg: autotune.TrainingConfig, n: int) -> autotune.TrainingConfig:
        return cfg.replace(num_workers=n, persistent_workers=n > 0, prefetch_factor=None)

    single = {
        "w1": workers(base, 1),
        "w2": workers(base, 2),
        "cl": base.replace(channels_last=True),
        "fused": base.replace(optimizer_impl="fused"),
    }
    pairs = {
        "w1+cl": workers(base, 1).replace(channels_last=True),
        "w2+cl": workers(base, 2).replace(channels_last=True),
        "w1+fused": workers(base, 1).replace(optimizer_impl="fused"),
        "w2+fused": workers(base, 2).replace(optimizer_impl="fused"),
        "cl+fused": base.replace(channels_last=True, optimizer_impl="fused"),
    }
    return {**single, **pairs}


def load(name: str) -> tuple[Any, Any, Any]:
    """(model factory, train, val) of the workload."""
    if name == "cnn":
        from autotune.examples import cnn_data, cnn_model

        train, val = cnn_data()
        return cnn_model, train, val
    train, val = w.jpeg_data()
    return w.resnet_model, train, val


def loop_throughput(
    cfg: autotune.TrainingConfig,
    train: Any,
    *,
    warmup_steps: int,
    timed_samples: int,
    make: Any = w.resnet_model,
) -> float:
    """Samples/s of a plain training loop applying ``cfg`` as the README does: timing starts
    after ``warmup_steps`` batches and stops at the batch that completes ``timed_samples``."""
    with cfg.backends():
        model = cfg.prepare(make())
        model.train()
        optimizer = cfg.optimizer(model.parameters())
        k = cfg.gradient_accumulation_steps
        steps = math.ceil((warmup_steps * cfg.batch_size + timed_samples) / cfg.batch_size)
        scheduler = cfg.lr_scheduler(optimizer, total_steps=max(1, math.ceil(steps / k)))
        scaler = cfg.grad_scaler()
        loader = cfg.dataloader(train)
        timed, start, i = 0, 0.0, 0
        batches = iter(loader)
        for i, batch in enumerate(batches, 1):
            inputs, targets = cfg.to_device(batch)
            with cfg.autocast():
                loss = F.cross_entropy(model(inputs), targets)
            scaler.scale(loss / k).backward()
            if i % k == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
            if i == warmup_steps:
                start = time.perf_counter()
            elif i > warmup_steps:
                timed += len(targets)
                if timed >= timed_samples:
                    break
        elapsed = time.perf_counter() - start
        del batches  # its workers shut down
    if timed == 0:
        raise SystemExit(f"the loop timed nothing for {cfg}")
    return timed / elapsed


def busy_core(seconds: float) -> subprocess.Popen[bytes] | None:
    """Another process keeping one core busy for ``seconds`` (None: none)."""
    if seconds <= 0:
        return None
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def one_run(args: argparse.Namespace, folder: Path, n: int) -> dict[str, Any]:
    make, train, val = load(args.workload)
    model = make()
    lines: list[tuple[float, str]] = []
    start = time.monotonic()

    def progress(line: str) -> None:
        at = time.monotonic() - start
        lines.append((at, line))
        print(f"  {at:6.1f}  {line}", flush=True)

    spinner = busy_core(args.busy_seconds)
    path = folder / f"best-{n}.json"
    summary = ""
    try:
        if args.workload == "cnn":  # the README's "Run it", as a user types it
            summary = readme_run(args, folder, path, progress)
        else:
            result = autotune.find_best(
                model,
                train,
                val_dataset=val,
                timeout=args.timeout,
                progress=progress,
                options=autotune.SearchOptions(storage=f"sqlite:///{folder}/study-{n}.db"),
            )
            result.save(path)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    wall = time.monotonic() - start
    data = json.loads(path.read_text())
    answer = autotune.load_config(path)
    base = autotune.TrainingConfig.from_dict(data["baseline"]["config"])
    configs = {"baseline": base, "answer": answer, **grid(base)}
    names = list(dict.fromkeys(configs))  # the answer may equal a grid entry: measured twice
    speed: dict[str, list[float]] = {n: [] for n in names}
    for name in names:  # one discarded pass each: imports, thread pools, allocator
        loop_throughput(
            configs[name], train, warmup_steps=args.warmup, timed_samples=256, make=make
        )
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            value = loop_throughput(
                configs[name],
                train,
                warmup_steps=args.warmup,
                timed_samples=args.timed_samples,
                make=make,
            )
            speed[name].append(value)
            print(f"  round {r + 1}: {name:10} {value:8,.1f} samples/s", flush=True)
    checks = data["search"]["machine"]["baseline_checks"]
    return {
        "summary": summary,
        "data": data,
        "wall": wall,
        "lines": lines,
        "speed": speed,
        "answer": answer,
        "first": checks[0]["throughput"] if checks else None,
        "checks": checks,
    }


def readme_run(args: argparse.Namespace, folder: Path, path: Path, progress: Any) -> str:
    """The README's command in a fresh folder (its default SQLite storage): each line it
    prints while searching to ``progress`` as it comes, and its summary returned."""
    command = [
        "autotune", "search", "--model", "autotune.examples:cnn_model", "--data",
        "autotune.examples:cnn_data", "--timeout", f"{args.timeout:g}", "--out", str(path),
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        progress(line.rstrip("\n"))
    summary = proc.stdout.read()
    if proc.wait() != 0:
        raise SystemExit(f"the README's command failed: {summary[-2000:]}")
    return summary


def story(run: dict[str, Any]) -> list[str]:
    """What the run printed before its summary, as the issue counts it: rows, other lines,
    the longest line."""
    lines = [line for _, line in run["lines"]]
    rows = [line for line in lines if re.match(r"\s*#\d+\*?\s", line)]
    every = lines + run["summary"].splitlines()
    longest = max((len(line) for line in every), default=0)
    over = sum(1 for line in every if len(line) > 120)
    return [
        f"{len(rows)} trial rows and {len(lines) - len(rows)} other lines before the summary; "
        f"the longest line of the output {longest} characters ({over} over 120)"
    ]


def ratio(run: dict[str, Any], name: str) -> float:
    """The median over rounds of ``name``'s samples/s over the baseline's in the same round."""
    s = run["speed"]
    return float(statistics.median(a / b for a, b in zip(s[name], s["baseline"], strict=True)))


def render(runs: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    state = (
        f"one core busy for its first {args.busy_seconds:.0f} s" if args.busy_seconds else "idle"
    )
    out = [
        f"## Never slower than the baseline (issue 56): {args.workload}, {state}",
        "",
        f"{now}; {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}; commit "
        f"{code_version()}; `{command}`",
        "",
        "| run | answer | reported | loop answer/baseline | best of the grid (loop) | "
        "answer/best | first baseline / loop's | checks (samples/s, state) | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for i, run in enumerate(runs, 1):
        data = run["data"]
        got = ratio(run, "answer")
        grid_names = [n for n in run["speed"] if n not in ("baseline", "answer")]
        best = max(grid_names, key=lambda n: ratio(run, n))
        best_ratio = max(1.0, ratio(run, best))
        loop_base = statistics.median(run["speed"]["baseline"])
        first = run["first"]
        checks = ", ".join(
            f"{c['throughput']:.0f}"
            + (f" (others {c['load']['others']:.1f})" if c.get("load") else "")
            for c in run["checks"]
        )
        reported = data["speedup"]
        measured = "side by side" if data.get("speedup_range") else "screening"
        out.append(
            f"| {i} | {run['answer'].describe()} | {reported:.2f}x ({measured}) | {got:.2f}x | "
            f"{best} {ratio(run, best):.2f}x | {got / best_ratio:.2f} | "
            f"{first / loop_base if first else float('nan'):.2f} | {checks} | "
            f"{run['wall']:.0f} s |"
        )
        verdicts.append(
            (
                got >= AT_LEAST_BASELINE,
                got / best_ratio >= AT_LEAST_BEST,
                abs(reported / got - 1) <= REPORTED_WITHIN,
                first is not None and abs(first / loop_base - 1) <= FIRST_WITHIN,
            )
        )
    out += ["", "Per run: the loop's samples/s, round by round:", ""]
    for i, run in enumerate(runs, 1):
        cells = "; ".join(
            f"{n} {statistics.median(v):,.0f}" for n, v in sorted(run["speed"].items())
        )
        out.append(f"- run {i}: {cells}")
    names = ("answer >= 0.97x baseline", "answer >= 0.95x best", "reported within 10%",
             "first baseline within 5% of the loop's")  # fmt: skip
    out += ["", "Targets:", ""]
    for k, name in enumerate(names):
        hits = sum(1 for v in verdicts if v[k])
        out.append(f"- {name}: {hits} of {len(verdicts)} runs")
    if args.busy_seconds:
        out += ["", "Progress lines after the load ended, against the final side-by-side:", ""]
        out += busy_lines(runs, args)
    if args.workload == "cnn":
        for i, run in enumerate(runs, 1):
            out += ["", f"Run {i}, what it printed: {story(run)[0]}", "", "```"]
            out += [line for _, line in run["lines"]] + run["summary"].splitlines() + ["```"]
    return "\n".join(out) + "\n"


def busy_lines(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Of the trial lines printed after the busy core stopped: how many print a ratio within
    25% of that trial's own samples/s over the baseline's final side-by-side samples/s."""
    out = []
    for i, run in enumerate(runs, 1):
        data = run["data"]
        base_side = data["baseline"]["metrics"].get("throughput")
        trials = {t["number"]: t for t in data["trials"]}
        within = total = 0
        for at, line in run["lines"]:
            row = re.match(r"\s*#(\d+)\*?\s.*\s([\d.]+)x[ =]", line)
            if at <= args.busy_seconds or row is None:
                continue
            number, value = int(row.group(1)), float(row.group(2))
            own = (trials.get(number) or {}).get("screening_throughput")
            if not own or not base_side:
                continue
            total += 1
            within += abs(value / (own / base_side) - 1) <= 0.25
        said = [line for _, line in run["lines"]] + run["summary"].splitlines()
        named = any("other processes used" in line for line in said)
        out.append(
            f"- run {i}: {within} of {total} ratios within 25%; the load named in the output: "
            f"{'yes' if named else 'no'}; answer {data['speedup']:.2f}x"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="jpeg", choices=["jpeg", "cnn"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timed-samples", type=int, default=768)
    parser.add_argument("--busy-seconds", type=float, default=0.0)
    parser.add_argument("--write", action="store_true", help="write the section to RESULTS.md")
    args = parser.parse_args()
    command = "python benchmarks/never_slower.py " + " ".join(sys.argv[1:])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.runs):
            print(f"== run {n + 1} of {args.runs}", flush=True)
            runs.append(one_run(args, Path(tmp), n))
    text = render(runs, args, command)
    print(text)
    if args.write:
        name = f"{SECTION}-{args.workload}" + ("-busy" if args.busy_seconds else "")
        write_section(name, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
