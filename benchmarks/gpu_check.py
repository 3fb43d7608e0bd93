"""The first-GPU check: everything that could only be faked on a CPU, run on the real thing.

    python benchmarks/gpu_check.py

1. ``pytest -m gpu`` (tests/test_gpu.py: real OOM in forward/backward/step, a device-side
   assert in a worker and in process, cuDNN benchmark in fresh workers, every compile mode
   under autocast, bf16/fp16 steps, pinned copies with workers, ``cuda:1``, NVML under
   ``CUDA_VISIBLE_DEVICES``, a model and a dataset already on the GPU, ``verify``).
2. A short search on the GPU from the CLI (``autotune search``, the built-in CNN), then
   ``autotune verify`` of its result in fresh workers.
3. ``benchmarks/speedup.py --workload cnn --device cuda`` (its own ``cnn-cuda`` section).

What each step found (pass/fail counts, failing tests, the search's winner and speedup, the
verify verdict, exit codes, the machine and the commit) goes to benchmarks/RESULTS.md between
the ``gpu-check`` markers; the full logs to ``--logs`` (default ``gpu-check-logs/``). The exit
status is 0 only when every step succeeded.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from autotune._device import environment

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("RESULTS.md")
START, END = "<!-- gpu-check:start -->", "<!-- gpu-check:end -->"


def run(name: str, cmd: list[str], logs: Path, timeout: float) -> tuple[int, str, float]:
    """Run ``cmd`` from the repository root, its output teed to ``logs/name.txt``."""
    print(f"\n=== {name}: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                print(line, end="", flush=True)
                lines.append(line)
                if time.monotonic() - start > timeout:
                    proc.kill()
                    lines.append(f"\n[gpu_check: killed after {timeout:.0f} s]\n")
                    break
        finally:
            code = proc.wait()
    text = "".join(lines)
    (logs / f"{name}.txt").write_text(text, encoding="utf-8")
    return code, text, time.monotonic() - start


def pytest_summary(text: str) -> tuple[str, list[str]]:
    """pytest's final counts line, and the failing tests' ids."""
    counts = ""
    for line in reversed(text.splitlines()):
        if re.search(r"\d+ (passed|failed|skipped|error)", line):
            counts = line.strip("= ").strip()
            break
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, flags=re.MULTILINE)
    return counts or "no summary (see the log)", failed


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
    parser.add_argument("--no-write", action="store_true", help="do not edit RESULTS.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available here; nothing to check.", file=sys.stderr)
        return 2
    logs = (ROOT / args.logs).resolve()
    logs.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    steps: list[tuple[str, int, float, str]] = []

    code, text, secs = run(
        "pytest-gpu",
        [py, "-m", "pytest", "-m", "gpu", "-v", "-rs", "-p", "no:cacheprovider", "tests"],
        logs,
        timeout=3600,
    )
    counts, failed = pytest_summary(text)
    detail = counts + ("; failed: " + ", ".join(f"`{t}`" for t in failed) if failed else "")
    steps.append(("`pytest -m gpu`", code, secs, detail))

    best = logs / "best.json"
    factories = ["--model", "autotune.examples:cnn_model", "--data", "autotune.examples:cnn_data"]
    code, _, secs = run(
        "search",
        [py, "-m", "autotune", "search", *factories, "--timeout", str(args.search_timeout),
         "--storage", f"sqlite:///{logs / 'gpu-check.db'}", "--out", str(best)],
        logs,
        timeout=args.search_timeout * 3 + 300,
    )  # fmt: skip
    steps.append(("`autotune search` (cnn, CUDA)", code, secs, search_summary(best)))

    if best.exists():
        code, text, secs = run(
            "verify",
            [py, "-m", "autotune", "verify", str(best), *factories, "--rounds", "3"],
            logs,
            timeout=1800,
        )
        verdict = next((x.strip() for x in text.splitlines() if "verdict:" in x), "no verdict")
        steps.append(("`autotune verify` (fresh workers)", code, secs, verdict))

    code, text, secs = run(
        "speedup",
        [py, "benchmarks/speedup.py", "--workload", "cnn", "--device", "cuda",
         "--timeout", str(args.speedup_timeout), *(["--no-write"] if args.no_write else [])],
        logs,
        timeout=args.speedup_timeout * 3 + 600,
    )  # fmt: skip
    ratio = re.search(r"ratio \(winner/baseline, same round\) \| \*\*([\d.]+x)\*\*", text)
    steps.append(
        (
            "`speedup.py --workload cnn --device cuda`",
            code,
            secs,
            f"re-measured ratio {ratio.group(1) if ratio else 'n/a'} (section `cnn-cuda`)",
        )
    )

    section = render(steps, args)
    print("\n" + section)
    if not args.no_write:
        write(section)
        print(f"wrote {RESULTS}")
    return 0 if all(code == 0 for _, code, _, _ in steps) else 1


def render(steps: list[tuple[str, int, float, str]], args: argparse.Namespace) -> str:
    env = environment("cuda:0")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    rows = [
        f"| {name} | {'ok' if code == 0 else f'**exit {code}**'} | {secs:.0f} s | {detail} |"
        for name, code, secs, detail in steps
    ]
    return "\n".join(
        [
            f"### First-GPU check ({datetime.date.today().isoformat()})",
            "",
            f"Machine: {env['device_name']} ({env['device_memory_bytes'] / 2**30:.0f} GiB), "
            f"driver {env['driver']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
            f"{env['cpu_count']} CPUs, torch {env['torch']}.",
            f"Command: `python benchmarks/gpu_check.py` (code: {commit or 'unknown'}); logs in "
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
