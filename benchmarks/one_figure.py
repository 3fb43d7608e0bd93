"""Does the user read what was measured, and is a safe win never dropped? (issue 29)

    python benchmarks/one_figure.py --workload cnn --runs 2        # the README's run, 300 s
    python benchmarks/one_figure.py --workload resnet --runs 5     # JPEG ResNet, 240 s
    python benchmarks/one_figure.py --workload bert --runs 3       # BERT classifier, 240 s
    python benchmarks/one_figure.py --workload cnn --runs 1 --timeout 150 --busy-seconds 25
    python benchmarks/one_figure.py --workload cnn --runs 1 --timeout 150 --busy-seconds 25 \
        --ranks 2                                                  # DDP, loaded

Each run is ``autotune.find_best`` as the README's command calls it (the CNN of
``autotune.examples``; or realworld.py's ResNet on JPEG files with faint classes or BERT
classifier, the default space, compile included), its study in
a SQLite file, its progress lines kept. Per run:

- **one figure**: the headline speedup, the table's throughput ratio and its projected-time
  ratio (the result's JSON, as ``print(result)`` shows them) agree within 5%; no progress line
  shows a ratio more than 10% above the final side-by-side figure without saying "screening"
  (the ranges of the final line aside);
- **a safe win kept**: the answer's side-by-side speedup against the best side-by-side speedup
  of any config that trains the baseline's model in the same run (target: at least 95%), and
  the best screening figure of such configs beside it;
- the search's wall time against its timeout.

Rows go to benchmarks/RESULTS.md between this benchmark's markers, with the machine, the
command and the commit. Run it with the machine otherwise idle.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import optuna
import torch

import autotune
from autotune._search import storage
from autotune._search.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent))
from speedup import code_version, write_section

TIMEOUTS = {"cnn": 300.0, "resnet": 240.0, "bert": 240.0}
FIGURE = re.compile(r"(\d+\.\d+)x")


def _load(name: str) -> tuple[object, object, object, dict]:
    if name == "cnn":
        from autotune.examples import cnn_data, cnn_model

        train, val = cnn_data()
        return cnn_model(), train, val, {}
    from realworld import WORKLOADS, load

    model, train, val = load(name)
    return model, train, val, WORKLOADS[name]["hooks"]


def unlabelled_above(lines: list[str], final: float) -> list[str]:
    """Progress lines with a ratio more than 10% above ``final`` not marked "screening" (the
    range of a side-by-side line is its spread, not a claim)."""
    out = []
    for line in lines:
        text = re.sub(r"\(range [^)]*\)", "", line)
        for m in FIGURE.finditer(text):
            labelled = text[m.end() : m.end() + 10].startswith(" screening")
            if float(m.group(1)) > 1.1 * final and not labelled:
                out.append(line.strip())
                break
    return out


def _busy(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


def run(name: str, timeout: float, busy: float = 0.0, ranks: int = 1) -> dict:
    """One search of ``name``; with ``busy``, a busy-loop process keeps one core for the
    search's first ``busy`` seconds (a newcomer's machine doing something else); ``ranks``:
    every trial a data-parallel job of that many processes."""
    if busy > 0:
        multiprocessing.Process(target=_busy, args=(busy,), daemon=True).start()
    model, train, val, hooks = _load(name)
    lines: list[str] = []
    start = time.monotonic()

    def progress(line: str) -> None:
        lines.append(line)
        print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/study.db"
        result = autotune.find_best(
            model,  # type: ignore[arg-type]
            train,  # type: ignore[arg-type]
            val_dataset=val,  # type: ignore[arg-type]
            task=autotune.Task(**hooks),
            timeout=timeout,
            progress=progress,
            options=autotune.SearchOptions(storage=url, study_name="bench", ranks=ranks),
        )
        wall = time.monotonic() - start
        study = optuna.load_study(study_name="bench", storage=url)
        settings = storage.read_settings(study)
        assert settings is not None
        ledger = Ledger.read(study, settings)
    data = result.to_dict()
    m, b = data["metrics"], data["baseline"]["metrics"]
    headline = float(data["speedup"])
    table = (
        m["throughput"] / b["throughput"] if m.get("throughput") and b.get("throughput") else None
    )
    projected = (
        b["projected_training_time"] / m["projected_training_time"]
        if m.get("projected_training_time") and b.get("projected_training_time")
        else None
    )
    figures = [f for f in (headline, table, projected) if f]
    agree = max(figures) / min(figures) <= 1.05 if figures else False
    base = ledger.baseline
    safe_side = [
        (ledger.side_speedup(e), e)
        for e in ledger.entries
        if base is not None and e is not base and ledger.safe(e) and ledger.side_speedup(e)
    ]
    best_safe = max(safe_side, key=lambda p: p[0], default=(None, None))
    screened = [
        base.record.projected_time / e.record.projected_time
        for e in ledger.candidates
        if base is not None
        and ledger.safe(e)
        and e.record.projected_time
        and base.record.projected_time
        and not e.record.reused
    ]
    answer = ledger.side_speedup(ledger.best()) if ledger.best() is not None else None
    return {
        "wall": wall,
        "timeout": timeout,
        "answer": result.config.describe(),
        "safe": ledger.best() is None or ledger.safe(ledger.best()),  # type: ignore[arg-type]
        "headline": headline,
        "measured_as": m.get("measured_as"),
        "table": table,
        "projected": projected,
        "agree": agree,
        "unlabelled": unlabelled_above(lines, headline),
        "answer_side": answer,
        "best_safe_side": best_safe[0],
        "best_safe": best_safe[1].config.describe() if best_safe[1] is not None else None,
        "best_safe_screening": max(screened, default=None),
        "rounds": len(ledger.rounds),
    }


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(name: str, rows: list[dict]) -> str:
    out = [
        "| run | ended (s of timeout) | answer | headline / table / projected | agree within 5% "
        "| unlabelled lines >10% above | answer side by side | best safe side by side (config) "
        "| best safe screening | safe win kept (>= 95%) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        kept = "n/a (no safe config measured side by side)"
        if r["best_safe_side"] is not None:
            ratio = (r["answer_side"] or 1.0) / r["best_safe_side"]
            kept = f"{ratio:.0%} ({'met' if ratio >= 0.95 else 'MISSED'})"
        out.append(
            f"| {name} {i} | {r['wall']:.0f} of {r['timeout']:.0f} | {r['answer']} "
            f"({r['measured_as']}) | {_x(r['headline'])} / {_x(r['table'])} / "
            f"{_x(r['projected'])} | {'yes' if r['agree'] else 'NO'} | "
            f"{len(r['unlabelled'])} | {_x(r['answer_side'])} | {_x(r['best_safe_side'])} "
            f"({r['best_safe'] or '-'}) | {_x(r['best_safe_screening'])} | {kept} |"
        )
        for line in r["unlabelled"]:
            out.append(f"|  | unlabelled: `{line[:150]}` |  |  |  |  |  |  |  |  |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cnn", choices=sorted(TIMEOUTS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--busy-seconds", type=float, default=0.0,
        help="keep one core busy for each search's first seconds",
    )  # fmt: skip
    parser.add_argument("--ranks", type=int, default=1, help="data-parallel ranks per trial")
    args = parser.parse_args()
    timeout = args.timeout or TIMEOUTS[args.workload]
    rows = []
    for i in range(args.runs):
        print(f"== {args.workload} run {i + 1}/{args.runs} ({timeout:.0f} s)", flush=True)
        rows.append(run(args.workload, timeout, args.busy_seconds, args.ranks))
    text = table(args.workload, rows)
    print(text)
    if not args.no_write:
        command = " ".join(["python", "benchmarks/one_figure.py", *sys.argv[1:]])
        header = (
            f"### {args.workload} ({datetime.date.today().isoformat()})\n\n"
            f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
            f"{torch.get_num_threads()} torch threads, torch {torch.__version__}; "
            f"commit {code_version()}.\nCommand: `{command}`\n\n"
        )
        suffix = f"_ranks{args.ranks}" if args.ranks > 1 else ""
        write_section(f"one_figure_{args.workload}{suffix}", header + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
