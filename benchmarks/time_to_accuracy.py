"""Time to accuracy, measured end to end (issue 28): does the config a search hands over train
to the baseline's accuracy faster over the user's whole run?

    python benchmarks/time_to_accuracy.py                          # cnn, digits, resnet
    python benchmarks/time_to_accuracy.py --workload cnn --timeout 300 --seeds 3

For each workload (the README's CNN; realworld.py's ViT on scanned digits and ResNet on JPEG
files, both ``transformers`` models) ``autotune.find_best`` as a user calls it (the default
space: the training length and the LR schedules with the systems knobs), then
``autotune.verify(result, ..., full=True)``: the baseline and the chosen config each train the
whole planned run (the chosen one its share of the epochs) over ``--seeds`` paired seeds. Per
workload: the search's answer and the speedup it reported (and how much of it is throughput),
the measured end-to-end time of each config and their ratio, the final metric of each with a
95% interval, and the paired drop against the tolerance. Target on the CNN: at least 2x end to
end with the final accuracy within the tolerance on the mean over seeds. Rows go to
benchmarks/RESULTS.md with the machine, the command and the commit; run it on an otherwise idle
machine.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import autotune
from autotune._device import environment

sys.path.insert(0, str(Path(__file__).parent))
from one_figure import _load

from speedup import code_version, write_section

NAMES = ("cnn", "digits", "resnet")


def run(name: str, timeout: float, seeds: int) -> dict[str, Any]:
    model, train, val, hooks = _load(name)
    start = time.monotonic()

    def progress(line: str) -> None:
        print(f"  [{name}] {time.monotonic() - start:6.1f}  {line}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        result = autotune.find_best(
            model,
            train,
            val_dataset=val,
            task=autotune.Task(**hooks),
            timeout=timeout,
            progress=progress,
            options=autotune.SearchOptions(storage=f"sqlite:///{tmp}/study.db", study_name="t"),
        )
        searched = time.monotonic() - start
        path = Path(tmp) / "best.json"
        result.save(path)
        model, train, val, hooks = _load(name)  # a fresh model, as a user's verify run has
        report = autotune.verify(
            path,
            model,
            train,
            val_dataset=val,
            task=autotune.Task(**hooks),
            rounds=3,
            progress=progress,
            full=True,
            full_seeds=seeds,
            resume=Path(tmp) / "full.json",
        )
    data = result.to_dict()
    full = report.full.to_dict() if report.full is not None else None
    return {
        "name": name,
        "searched": searched,
        "timeout": timeout,
        "answer": result.config.describe(),
        "fraction": result.config.train_fraction,
        "speedup": data["speedup"],
        "throughput_ratio": data["throughput_ratio"],
        "verify_throughput": report.median_throughput_ratio,
        "verify_speedup": report.median_speedup,
        "full": full,
        "metric": result.metric_name,
        "tolerance": result.tolerance,
        "summary": report.full.lines() if report.full is not None else [],
    }


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def row(r: dict[str, Any]) -> str:
    full = r["full"]
    if full is None:
        return (
            f"| {r['name']} | {r['searched']:.0f} of {r['timeout']:.0f} | {r['answer']} | "
            f"{_x(r['speedup'])} ({_x(r['throughput_ratio'])} throughput) | - | - | - | - | "
            "the baseline was kept: nothing to train against it |"
        )
    runs = full["runs"]

    def arm(name: str) -> tuple[float, list[float]]:
        mine = [x for x in runs if x["arm"] == name]
        return statistics.fmean(x["seconds"] for x in mine), [x["metric"] for x in mine]

    base_s, base_m = arm("baseline")
    win_s, win_m = arm("winner")
    drop = full["drop"]
    drop_text = (
        "-" if drop is None else f"{drop['mean']:+.4f} [{drop['low']:+.4f}, {drop['high']:+.4f}]"
    )
    reported = f"{_x(r['speedup'])} ({_x(r['throughput_ratio'])} throughput; verify "
    reported += f"{_x(r['verify_speedup'])} / {_x(r['verify_throughput'])})"
    metrics = f"{statistics.fmean(base_m):.4f} / {statistics.fmean(win_m):.4f}"
    return (
        f"| {r['name']} | {r['searched']:.0f} of {r['timeout']:.0f} | {r['answer']} | "
        f"{reported} | {base_s:.1f} s / {win_s:.1f} s | {_x(full['time_ratio'])} | {metrics} | "
        f"{drop_text} (tolerance {r['tolerance']:g}) | {full['verdict']} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=NAMES)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--seeds", type=int, default=3, help="paired seeds of the whole run")
    parser.add_argument(
        "--tag", default="", help="a section of its own (time-to-accuracy-NAMES-TAG): earlier "
        "runs stay beside it (without it, a run replaces the last one of the same workloads)",
    )  # fmt: skip
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    names = args.workload or list(NAMES)
    rows = []
    started = time.monotonic()
    for name in names:
        r = run(name, args.timeout, args.seeds)
        rows.append(r)
        print("\n".join(r["summary"]), flush=True)
    env = environment("cpu")
    command = " ".join(["python benchmarks/time_to_accuracy.py", *sys.argv[1:]])
    lines = [
        f"### Time to accuracy, end to end (`time_to_accuracy.py`, {datetime.date.today()})",
        "",
        f"Machine: {env['cpu_model']}, {env['cpu_count']} CPUs, otherwise idle. Command: "
        f"`{command}` (code: {code_version()}); {(time.monotonic() - started) / 60:.1f} min. "
        f"Each workload: a {args.timeout:.0f}-s `find_best` (default space), then "
        f"`verify(..., full=True)` over {args.seeds} paired seeds of the whole planned run "
        "(10 epochs; the chosen config its share of them).",
        "",
        "| workload | search (s of timeout) | answer | reported speedup (verify's rounds) "
        "| end to end: baseline / chosen (mean) | time to accuracy | final metric: baseline / "
        "chosen | paired drop [95%] | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        *[row(r) for r in rows],
        "",
    ]
    text = "\n".join(lines)
    if not args.no_write:
        write_section(
            "-".join(["time-to-accuracy", *names, *([args.tag] if args.tag else [])]), text
        )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
