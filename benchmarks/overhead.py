"""Does the search's own cost per trial stay flat as the study grows?

    python benchmarks/overhead.py                        # 200 trials, SQLite, one process
    python benchmarks/overhead.py --storage postgres --workers 2   # a throwaway local server
    python benchmarks/overhead.py --storage postgresql://user@host/db --workers 2

An unguided search (``guided=False``: every trial is what the sampler proposes) of the smallest
real trials the runner allows (``examples.tiny_model``, one warm-up step, three timed steps of 64
samples), its study in a SQLite file or the given server. The search's own seconds per trial:
from one trial's start to the next one's start (in the same process), less the seconds the
trial's run took (its record's ``seconds``: training and validation), so what is left is the
time spent deciding, reading and writing the study. Reported as the median over each block of
25 trials; the target: the last 50 trials' median within 1.3x of the first 50's.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

import autotune
from autotune._device import environment
from autotune._search import storage as study_storage
from autotune._search.distributed import join_search
from autotune.examples import tiny_data, tiny_model

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent / "tests"))
from speedup import code_version, write_section

BUDGET = autotune.Budget(warmup_steps=1, timed_samples=64, min_timed_steps=3, chunks=1)
BLOCK = 25
TARGET = 1.3


def search(url: str, name: str, trials: int) -> None:
    """The search: ``trials`` candidates into the study ``name`` at ``url``."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    autotune.find_best(
        tiny_model(),
        tiny_data(),
        options=autotune.SearchOptions(
            n_trials=trials,
            guided=False,
            budget=BUDGET,
            isolation="none",
            storage=url,
            study_name=name,
        ),
        progress=lambda line: None,
    )


def join(url: str, name: str, offset: int) -> None:
    """One more process on the study ``name``, once the search has published its settings."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    join_search(
        tiny_model(),
        tiny_data(),
        storage=url,
        study_name=name,
        isolation="none",
        seed_offset=offset,
        progress=lambda line: None,
    )


def finished(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=url)
    return [t for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None]


def overheads(url: str, name: str) -> list[float]:
    """Each finished trial's share of the search's own time, in start order per process."""
    study = optuna.load_study(study_name=name, storage=url)
    by_owner: dict[object, list[tuple[datetime.datetime, float]]] = {}
    for trial, record in study_storage.read_records(study):
        if trial.datetime_start is None:
            continue
        owner = trial.user_attrs.get(study_storage.OWNER, {})
        key = (owner.get("host"), owner.get("pid")) if isinstance(owner, dict) else None
        by_owner.setdefault(key, []).append((trial.datetime_start, record.seconds))
    out: list[tuple[datetime.datetime, float]] = []
    for runs in by_owner.values():
        runs.sort()
        for (start, seconds), (after, _) in itertools.pairwise(runs):
            out.append((start, (after - start).total_seconds() - seconds))
    return [gap for _, gap in sorted(out)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="candidate trials in all")
    parser.add_argument(
        "--storage",
        default=None,
        help="a storage URL, or 'postgres' for a throwaway local server (default: a SQLite file)",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes on the one study")
    parser.add_argument("--label", default=None, help="this run's name in RESULTS.md")
    parser.add_argument("--keep", default=None, help="copy a SQLite study to this file")
    parser.add_argument("--no-write", action="store_true", help="print, do not edit RESULTS.md")
    args = parser.parse_args()
    name = f"overhead-{int(time.time())}"
    version = code_version()  # before the run: the tree may be edited while it runs
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = args.storage or f"sqlite:///{tmp}/study.db"
        if url == "postgres":
            from pg import server  # tests/pg.py: initdb and pg_ctl in a temporary directory

            url = stack.enter_context(server())
        start = time.monotonic()
        if args.workers == 1:
            search(url, name, args.trials)
        else:
            # The first process makes the study and measures the baseline, the others join it
            # (``autotune worker``'s join_search); the trial limit counts all of theirs.
            ctx = multiprocessing.get_context("spawn")
            first = ctx.Process(target=search, args=(url, name, args.trials))
            others = [ctx.Process(target=join, args=(url, name, i)) for i in range(1, args.workers)]
            for p in [first, *others]:
                p.start()
            for p in [first, *others]:
                p.join()
        wall = time.monotonic() - start
        ended = datetime.datetime.now()
        gaps = overheads(url, name)
        last = max(t.datetime_complete for t in finished(url, name))
        tail = (ended - last).total_seconds()
        if args.keep and url.startswith("sqlite:///"):
            shutil.copy(url.removeprefix("sqlite:///"), args.keep)
    storage_kind = url.split(":", 1)[0].split("+", 1)[0]
    lines = [
        f"- {len(gaps) + args.workers} trials, {storage_kind}, {args.workers} process(es), "
        f"{wall:.0f} s wall, of which {tail:.0f} s after the last trial ended (the rounds, "
        "the last checks and the result)",
        "",
        "| trials | search's own seconds per trial (median) | max |",
        "|---|---:|---:|",
    ]
    for i in range(0, len(gaps), BLOCK):
        block = gaps[i : i + BLOCK]
        lines.append(
            f"| {i + 1}-{i + len(block)} | {statistics.median(block):.3f} | {max(block):.3f} |"
        )
    head, tail = statistics.median(gaps[:50]), statistics.median(gaps[-50:])
    ratio = tail / head if head > 0 else float("inf")
    verdict = "met" if ratio <= TARGET else "NOT met"
    lines += [
        "",
        f"- last 50 over first 50: {tail:.3f} s / {head:.3f} s = **{ratio:.2f}x** "
        f"(target at most {TARGET}x: {verdict})",
    ]
    env = environment("cpu")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    label = args.label or f"{storage_kind}-{args.workers}"
    text = (
        f"### Per-trial overhead ({label}): {when}, commit {version}\n\n"
        f"Machine: {env['cpu_model']}, {env['cpu_count']} CPUs, torch {env['torch']}, "
        f"optuna {env['optuna']}; "
        f"command: `python benchmarks/overhead.py {' '.join(sys.argv[1:])}`\n\n"
        + "\n".join(lines)
        + "\n"
    )
    print(text)
    if not args.no_write:
        write_section(f"overhead-{label}", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
