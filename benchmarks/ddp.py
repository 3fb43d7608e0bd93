"""Data-parallel trials on this machine (issue 30): does a search whose every trial is a
torchrun job of 2 ranks keep its budget, measure DDP's knobs, and hand back a speedup that a
user's own torchrun run reproduces?

    python benchmarks/ddp.py --workload cnn --workload digits --timeout 240 --runs 2

Per workload and run:

1. ``autotune.find_best(..., options=SearchOptions(ranks=2))`` as a user calls it (the default
   space; gloo on the CPU), its study in a SQLite file: the wall time against the timeout, the
   configs measured, how many of them set a DDP knob, the answer, its speedup and its
   throughput ratio (the figures of the side-by-side rounds).
2. ``torchrun --standalone --nproc-per-node 2 benchmarks/ddp_remeasure.py``: the baseline and
   the answer alternated in a plain user loop (cfg.prepare, cfg.dataloader, ...) under the
   launcher, global samples per second: the median of the rounds' ratios against the search's
   throughput ratio (target: within 10%).

Rows go to benchmarks/RESULTS.md between this benchmark's markers, with the machine, the
command and the commit. Run it with the machine otherwise idle.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import autotune

sys.path.insert(0, str(Path(__file__).parent))
from realworld import WORKLOADS, load

from speedup import code_version, write_section

HERE = Path(__file__).parent


def search(name: str, timeout: float, ranks: int, tmp: str) -> tuple[dict[str, Any], float]:
    model, train, val = load(name)
    start = time.monotonic()
    result = autotune.find_best(
        model,
        train,
        val_dataset=val,
        task=autotune.Task(**WORKLOADS[name]["hooks"]),
        timeout=timeout,
        progress=lambda line: print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True),
        options=autotune.SearchOptions(storage=f"sqlite:///{tmp}/study.db", ranks=ranks),
    )
    wall = time.monotonic() - start
    print(result, flush=True)
    result.save(f"{tmp}/best.json")
    return result.to_dict(), wall


def remeasure(name: str, tmp: str, ranks: int, rounds: int) -> dict[str, Any]:
    out = f"{tmp}/remeasure.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={ranks}", str(HERE / "ddp_remeasure.py"), "--result",
         f"{tmp}/best.json", "--workload", name, "--rounds", str(rounds), "--out", out],
        env=env, check=True, timeout=300,
    )  # fmt: skip
    return json.loads(Path(out).read_text())  # type: ignore[no-any-return]


def ddp_knobs(cfg: dict[str, Any]) -> list[str]:
    default = autotune.TrainingConfig().to_dict()
    return [k for k in cfg if k.startswith("ddp_") and cfg[k] != default[k]]


def row(name: str, run: int, found: dict[str, Any], wall: float, check: dict[str, Any] | None,
        timeout: float) -> str:  # fmt: skip
    trials = found["trials"]
    measured = [t for t in trials if not t.get("failure")]
    with_ddp = [t for t in measured if ddp_knobs(t["config"])]
    ratio = found.get("throughput_ratio") or 1.0
    cfg = autotune.TrainingConfig.from_dict(found["config"])
    same = cfg == autotune.TrainingConfig.from_dict(found["baseline"]["config"])
    if check is None:
        again, gap = "(baseline kept: nothing to re-measure)", "-"
    else:
        lo, hi = min(check["ratios"]), max(check["ratios"])
        again = f"{check['median']:.2f}x ({lo:.2f}-{hi:.2f}, {len(check['ratios'])} rounds)"
        gap = f"{abs(check['median'] / ratio - 1):.0%}"
    return (
        f"| {name} | {run} | {wall:.0f} / {timeout:.0f} s | {len(measured)} ({len(with_ddp)} "
        f"with a DDP knob) | {'baseline' if same else cfg.describe()} | "
        f"{found['speedup']:.2f}x | {ratio:.2f}x | {again} | {gap} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--tag", default="", help="a section of its own (ddp-NAME-TAG): earlier runs are kept"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    names = args.workload or ["cnn", "digits"]
    command = "python " + " ".join(["benchmarks/ddp.py", *sys.argv[1:]])
    for name in names:
        rows = []
        for run in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory() as tmp:
                found, wall = search(name, args.timeout, args.ranks, tmp)
                same = found["config"] == found["baseline"]["config"]
                check = None if same else remeasure(name, tmp, args.ranks, args.rounds)
            rows.append(row(name, run, found, wall, check, args.timeout))
            print(rows[-1], flush=True)
        write(name, rows, args, command)
    return 0


def write(name: str, rows: list[str], args: argparse.Namespace, command: str) -> None:
    """This workload's rows, in its own section of RESULTS.md (written as it finishes)."""
    text = (
        f"### Data-parallel trials ({name}): {args.ranks} ranks (gloo) per trial, re-measured "
        "under torchrun\n\n"
        f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}; {datetime.date.today()}; commit {code_version()}\n"
        f"- command: `{command}`\n\n"
        "| workload | run | wall / budget | configs measured | answer | speedup | "
        "throughput ratio (rounds) | torchrun re-measure (median, range) | gap |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
    )
    print(text)
    if not args.no_write:
        write_section("-".join(filter(None, ["ddp", name, args.tag])), text)


if __name__ == "__main__":
    sys.exit(main())
