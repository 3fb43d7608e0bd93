"""Does the accuracy guard settle what a real search screens, inside the search's own budget?

    python benchmarks/guard_settles.py                       # cnn 300 s, resnet and bert 240 s
    python benchmarks/guard_settles.py --workload cnn --timeout 300

For each workload (the README's CNN, a ResNet on JPEG files, a BERT classifier: realworld.py's
``load``), ``autotune.find_best`` as a user calls it, with its study in a SQLite file; then,
from the study (``Ledger.read``), every candidate that changes the numerics and passed its
screening run, with its check's final verdict (confirmed / rejected / unresolved / never
checked), its seeds, bound, the validation sample's part of the error, and how many seconds
its check's runs took. The search's wall time against its timeout, the trials measured and the
answer are beside them. Rows go to benchmarks/RESULTS.md between this benchmark's markers.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

import autotune
from autotune._device import environment
from autotune._guard import words as guard_words
from autotune._search import storage
from autotune._search.ledger import Ledger

sys.path.insert(0, str(Path(__file__).parent))
from realworld import WORKLOADS, load

from speedup import code_version, write_section

TIMEOUTS = {"cnn": 300.0, "resnet": 240.0, "bert": 240.0}


def run(name: str, timeout: float) -> tuple[list[str], str]:
    model, train, val = load(name)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/study.db"
        result = autotune.find_best(
            model,
            train,
            val_dataset=val,
            task=autotune.Task(**WORKLOADS[name]["hooks"]),
            timeout=timeout,
            progress=lambda line: print(f"  {time.monotonic() - start:6.1f}  {line}", flush=True),
            options=autotune.SearchOptions(storage=url, study_name="bench"),
        )
        wall = time.monotonic() - start
        study = optuna.load_study(study_name="bench", storage=url)
        settings = storage.read_settings(study)
        assert settings is not None
        ledger = Ledger.read(study, settings)
    rows = []
    best = ledger.best()
    answer_time = ledger.projected(best) if best is not None else None
    for entry in ledger.candidates:
        if ledger.safe(entry) or ledger.screened(entry) is not True or entry.record.reused:
            continue
        c = ledger.confirmation(entry)
        if c is None:
            own_time = ledger.projected(entry)
            beats = answer_time is None or own_time is None or own_time < answer_time
            # A check of a candidate no faster than the answer could not change it: the
            # search spends nothing there, by design.
            verdict = "never checked" if beats else "never checked (not faster than the answer)"
            detail, seconds = "-", "-"
        else:
            verdict = c.verdict.value
            detail = c.describe()
            if c.sample_error is not None:
                detail += f"; validation sample's part ±{c.sample_error:.4f}"
            seconds = "-"
            if ledger.baseline_accuracy is not None:
                per = [r.seconds for r in ledger.baseline_accuracy.runs]
                per += [per[-1]] * max(0, len(c.runs) - len(per))
                seconds = f"~{2 * sum(per[: len(c.runs)]):.0f} s"
        base_time, own = ledger.projected(ledger.baseline), ledger.projected(entry)  # type: ignore[arg-type]
        speedup = base_time / own if base_time and own else float("nan")
        rounds = ledger.round_speedups(entry)
        side = (
            f"; side by side {statistics.median(rounds):.2f}x over {len(rounds)} rounds"
            if rounds
            else ""
        )
        rows.append(
            f"| {name} | #{entry.number} {entry.config.describe()} | {speedup:.2f}x (screening)"
            f"{side} | {verdict} | {detail} | {seconds} |"
        )
    kind = "numerics unchanged" if best is None or ledger.safe(best) else "numerics changed"
    summary = (
        f"`{name}`: {wall:.0f} s of {timeout:.0f} s, {len(ledger.entries)} trials; answer "
        f"{result.config.describe()} at {result.speedup:.2f}x ({kind})"
    )
    accuracy = ledger.baseline_accuracy
    if accuracy is not None:
        summary += f"; accuracy runs of {accuracy.samples:,} samples"
        for plan in accuracy.horizons:
            summary += f"\n  - horizon plan: {guard_words.horizon(plan)}"
    return rows, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", action="append", choices=sorted(TIMEOUTS))
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    names = args.workload or list(TIMEOUTS)
    env = environment("cpu")
    command = " ".join(["python benchmarks/guard_settles.py", *sys.argv[1:]])
    rows: list[str] = []
    notes: list[str] = []
    for name in names:
        more, note = run(name, args.timeout or TIMEOUTS[name])
        rows += more
        notes.append(note)
        settled = sum(1 for r in rows if "| confirmed |" in r or "| rejected |" in r)
        moot = sum(1 for r in rows if "(not faster than the answer)" in r)
        text = "\n".join(
            [
                f"### Does the guard settle what a search screens? (`guard_settles.py`, "
                f"{datetime.date.today()})",
                "",
                f"Machine: {env['cpu_model']}, {env['cpu_count']} CPUs, otherwise idle. Command: "
                f"`{command}` (code: {code_version()}).",
                "",
                "| workload | screened candidate | speedup | verdict | the check | seconds of "
                "its runs (both arms) |",
                "|---|---|---|---|---|---|",
                *rows,
                "",
                f"{settled} of {len(rows)} screened numerics-changing candidates settled "
                f"(confirmed or rejected); {settled} of {len(rows) - moot} that could have "
                "changed the answer (the others were no faster than it, and never checked).",
                "",
                *[f"- {n}" for n in notes],
                "",
            ]
        )
        print(text, flush=True)
        if not args.no_write:
            write_section("guard-settles" + "".join(f"-{n}" for n in args.workload or []), text)


if __name__ == "__main__":
    main()
