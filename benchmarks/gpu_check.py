"""The first-GPU check: everything that could only be faked on a CPU, run on the real thing.

    python benchmarks/gpu_check.py

1. ``pytest -m gpu`` (tests/test_gpu.py: real OOM in forward/backward/step, a device-side
   assert in a worker and in process, cuDNN benchmark in fresh workers, every compile mode
   under autocast, bf16/fp16 steps, pinned copies with workers, ``cuda:1``, NVML under
   ``CUDA_VISIBLE_DEVICES``, a model and a dataset already on the GPU, ``verify``), all but
   the max-autotune compiles, which take minutes and run last.
2. A short search on the GPU from the CLI (``autotune search``, the built-in CNN), then
   ``autotune verify`` of its result in fresh workers.
3. ``benchmarks/speedup.py --workload cnn --device cuda`` (its own ``cnn-cuda`` section):
   the search's result re-measured side by side (``--speedup-search`` searches anew instead).
4. With ``--settles WORKLOAD`` (cnn, resnet, bert; repeatable): ``guard_settles.py`` on the
   GPU, a search at its default budget, and how many of its screened checks settled (the
   issue-27 target that a 2-core CPU does not reach; resnet and bert need ``transformers``).
5. The max-autotune compile tests.

What each step found (pass/fail counts, failing tests, the search's winner and speedup, the
verify verdict, exit codes, the machine and the commit) goes to benchmarks/RESULTS.md between
the ``gpu-check`` markers; the full logs, written as they come, to ``--logs`` (default
``gpu-check-logs/``). ``--budget`` bounds the whole check: each step is stopped where it would
run past it and a step with no time left is recorded as not run. The exit status is 0 only
when every step ran and succeeded.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from autotune._device import environment

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("RESULTS.md")
START, END = "<!-- gpu-check:start -->", "<!-- gpu-check:end -->"


def run(name: str, cmd: list[str], logs: Path, timeout: float) -> tuple[int, str, float]:
    """Run ``cmd`` from the repository root, its output teed line by line to ``logs/name.txt``
    (so a check cut off from outside keeps what each step printed); killed after ``timeout``."""
    print(f"\n=== {name} (limit {timeout:.0f} s): {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    lines: list[str] = []
    with (
        (logs / f"{name}.txt").open("w", encoding="utf-8") as log,
        subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        # A timer, not a check per line: a step that hangs silently is stopped too.
        timer = threading.Timer(max(timeout, 0.0), proc.kill)
        timer.start()
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                print(line, end="", flush=True)
                log.write(line)
                log.flush()
                lines.append(line)
        finally:
            code = proc.wait()
            timer.cancel()
        secs = time.monotonic() - start
        if secs >= timeout and code != 0:
            note = f"\n[gpu_check: killed after {timeout:.0f} s]\n"
            log.write(note)
            lines.append(note)
    return code, "".join(lines), secs


class Clock:
    """What is left of ``--budget`` for the steps still to run."""

    def __init__(self, budget: float | None) -> None:
        self.end = None if budget is None else time.monotonic() + budget

    def limit(self, own: float, reserve: float = 0.0) -> float:
        """A step's limit: its own, cut to the budget left once ``reserve`` seconds are kept
        for the steps after it. At most 0 when nothing is left."""
        if self.end is None:
            return own
        return min(own, self.end - time.monotonic() - reserve)


def pytest_cmd(py: str, expr: str, per_test: float | None) -> list[str]:
    cmd = [py, "-m", "pytest", "-m", "gpu", "-k", expr, "-v", "-rs", "-p", "no:cacheprovider",
           "-o", "console_output_style=times"]  # fmt: skip
    if per_test and importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={per_test:.0f}")
    return [*cmd, "tests"]


def pytest_summary(text: str) -> tuple[str, list[str]]:
    """pytest's final counts line, and the failing tests' ids. A run stopped before its end
    has no counts line: the verbose lines are counted, and the test it stopped in named."""
    counts = ""
    for line in reversed(text.splitlines()):
        if re.search(r"\d+ (passed|failed|skipped|error)", line):
            counts = line.strip("= ").strip()
            break
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.MULTILINE)
    if counts:
        return counts, failed
    outcomes = re.findall(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", text, re.M)
    tally = {o: sum(1 for _, x in outcomes if x == o) for o in ("PASSED", "FAILED", "SKIPPED")}
    failed = failed or [t for t, o in outcomes if o in ("FAILED", "ERROR")]
    started = re.findall(r"^(\S+::\S+) *$", text, re.M)  # a test line with no outcome yet
    done = {t for t, _ in outcomes}
    running = next((t for t in reversed(started) if t not in done), None)
    parts = [f"{n} {o.lower()}" for o, n in tally.items() if n]
    stopped = f"stopped in `{running}`" if running else "stopped before its summary"
    return ", ".join([*parts, stopped]) + " (see the log)", failed


def search_summary(best: Path) -> str:
    if not best.exists():
        return "no result written"
    data = json.loads(best.read_text(encoding="utf-8"))
    from autotune import TrainingConfig

    winner = TrainingConfig.from_dict(data["config"]).describe()
    return (
        f"speedup **{data.get('speedup', 0):.2f}x** over `{winner}`; "
        f"{data['search']['trials']} trials, failures {data['search']['failures'] or 'none'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", default="gpu-check-logs")
    parser.add_argument("--search-timeout", type=float, default=180.0)
    parser.add_argument("--speedup-timeout", type=float, default=300.0)
    parser.add_argument(
        "--speedup-search", action="store_true",
        help="the speedup step searches anew instead of re-measuring the search step's result",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, default=None,
        help="seconds for the whole check (a lent GPU's time): steps are cut to fit it",
    )  # fmt: skip
    parser.add_argument(
        "--per-test-timeout", type=float, default=300.0,
        help="stop a single GPU test after this many seconds (needs pytest-timeout)",
    )  # fmt: skip
    parser.add_argument(
        "--only", default=None, metavar="EXPR",
        help="a pytest -k expression: run only these GPU tests (those an earlier check left)",
    )  # fmt: skip
    parser.add_argument(
        "--settles", action="append", default=[], choices=["cnn", "resnet", "bert"],
        help="also run guard_settles.py on the GPU for this workload (repeatable)",
    )  # fmt: skip
    parser.add_argument("--no-write", action="store_true", help="do not edit RESULTS.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; nothing to check.", file=sys.stderr)
        return 2
    clock = Clock(args.budget)
    logs = (ROOT / args.logs).resolve()
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    steps: list[tuple[str, int | None, float, str]] = []

    def step(name: str, label: str, cmd: list[str], own: float, reserve: float) -> str | None:
        """Run one step within the budget; its output, or None where no time was left."""
        limit = clock.limit(own, reserve)
        if limit < 20:
            steps.append((label, None, 0.0, "not run: the check's budget was spent"))
            return None
        code, text, secs = run(name, cmd, logs, timeout=limit)
        steps.append((label, code, secs, ""))
        return text

    def found(detail: str) -> None:
        label, code, secs, _ = steps[-1]
        steps[-1] = (label, code, secs, detail)

    # Reserves: what the later steps need at least, so that one slow step cannot starve them.
    compile_expr = "max-autotune"
    only = f"({args.only}) and " if args.only else ""

    def tests(name: str, label: str, expr: str, own: float, reserve: float) -> None:
        text = step(name, label, pytest_cmd(py, expr, args.per_test_timeout), own, reserve)
        if text is not None:
            counts, failed = pytest_summary(text)
            found(counts + ("; failed: " + ", ".join(f"`{t}`" for t in failed) if failed else ""))

    tests(
        "pytest-gpu", "`pytest -m gpu` (all but max-autotune)",
        f"{only}not ({compile_expr})", 3600, reserve=240,
    )  # fmt: skip

    best = logs / "best.json"
    best.unlink(missing_ok=True)
    storage = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "gpu-check.db"
    factories = ["--model", "autotune.examples:cnn_model", "--data", "autotune.examples:cnn_data"]
    text = step(
        "search", "`autotune search` (cnn, CUDA)",
        [py, "-m", "autotune", "search", *factories, "--timeout", str(args.search_timeout),
         "--storage", f"sqlite:///{storage}", "--out", str(best)],
        args.search_timeout * 3 + 300, reserve=150,
    )  # fmt: skip
    if text is not None:
        found(search_summary(best))

    if best.exists():
        text = step(
            "verify", "`autotune verify` (fresh workers)",
            [py, "-m", "autotune", "verify", str(best), *factories, "--rounds", "3"],
            1800, reserve=100,
        )  # fmt: skip
        if text is not None:
            found(next((x.strip() for x in text.splitlines() if "verdict:" in x), "no verdict"))

    source = (
        ["--result", str(best)]
        if best.exists() and not args.speedup_search
        else ["--timeout", str(args.speedup_timeout)]
    )
    text = step(
        "speedup", "`speedup.py --workload cnn --device cuda`",
        [py, "benchmarks/speedup.py", "--workload", "cnn", "--device", "cuda", *source,
         *(["--no-write"] if args.no_write else [])],
        args.speedup_timeout * 3 + 600, reserve=60,
    )  # fmt: skip
    if text is not None:
        ratio = re.search(r"ratio \(winner/baseline, same round\) \| \*\*([\d.]+x)\*\*", text)
        what = "the search's result re-measured" if "--result" in source else "its own search"
        found(f"{what}: ratio {ratio.group(1) if ratio else 'n/a'} (section `cnn-cuda`)")

    for workload in args.settles:
        text = step(
            f"settles-{workload}", f"`guard_settles.py --workload {workload}` (CUDA)",
            [py, "benchmarks/guard_settles.py", "--workload", workload, "--no-write"],
            900, reserve=0,
        )  # fmt: skip
        if text is not None:
            counts = re.search(r"(\d+ of \d+) screened numerics-changing candidates settled", text)
            answer = re.search(r"answer (.+?) at ([\d.]+x)", text)
            found(
                f"{counts.group(1) if counts else 'no'} screened checks settled"
                + (f"; answer {answer.group(1)} at {answer.group(2)}" if answer else "")
            )

    tests(
        "pytest-gpu-max-autotune", "`pytest -m gpu -k max-autotune` (compiles for minutes)",
        f"{only}{compile_expr}", 1800, reserve=0,
    )  # fmt: skip

    section = render(steps, args)
    print("\n" + section)
    if not args.no_write:
        write(section)
        print(f"wrote {RESULTS}")
    return 0 if all(code == 0 for _, code, _, _ in steps) else 1


def status(code: int | None) -> str:
    return "not run" if code is None else "ok" if code == 0 else f"**exit {code}**"


def render(steps: list[tuple[str, int | None, float, str]], args: argparse.Namespace) -> str:
    env = environment("cuda:0")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    rows = [
        f"| {name} | {status(code)} | {secs:.0f} s | {detail} |"
        for name, code, secs, detail in steps
    ]
    return "\n".join(
        [
            f"### First-GPU check ({datetime.date.today().isoformat()})",
            "",
            f"Machine: {env['device_name']} ({env['device_memory_bytes'] / 2**30:.0f} GiB), "
            f"driver {env['driver']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
            f"{env['cpu_count']} CPUs, torch {env['torch']}.",
            f"Command: `python {' '.join(['benchmarks/gpu_check.py', *sys.argv[1:]])}` "
            f"(code: {commit or 'unknown'}); logs in "
            f"`{args.logs}/`.",
            "",
            "| step | status | time | found |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )


def write(section: str) -> None:
    current = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    block = f"{START}\n{section}{END}"
    if START in current and END in current:
        before, rest = current.split(START, 1)
        current = before + block + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(current, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
