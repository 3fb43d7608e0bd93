"""A changed model is a new question, started from what the last search learned (issue 58): the
README's CNN searched cold, then one convolution made wider and searched again, warm-started.

    python benchmarks/warm_start.py --reps 2 --write
    python benchmarks/warm_start.py --reps 1 --same-command --section warm-start-same --write

Per repetition, in a fresh folder, as a user types it:

1. The README's command on the README's CNN: ``autotune search --model
   autotune.examples:cnn_model --data autotune.examples:cnn_data --timeout 300 --out
   cold.json`` (``--cold``).
2. The same data and a model whose last convolution is 1.5x wider (``job.py:wide_model``, the
   classifier widened to match), ``--timeout 120 --warm-start cold.json --out warm.json``
   (``--warm``), in the same folder: the model's fingerprint differs, so it is a new study in
   the same SQLite file, started from the cold result.
   With ``--same-command`` both searches are ``--model job.py:model`` (the README's CNN, then,
   with ``AUTOTUNE_BENCH_WIDE=1``, the wider one) and the second has no ``--warm-start``: the
   CLI finds the command's earlier study and starts from it by itself.
3. A plain loop of ``never_slower.py`` (``cfg.prepare``, ``cfg.dataloader``, ... applied as the
   README applies a config) on the wider model: its baseline, the warm answer and the cold
   answer, alternated for ``--rounds`` rounds, samples/s over ``--timed-samples``.

Targets: the warm answer at least 95% of the cold answer's speed on the wider model (the loop's
median ratio), and the warm search's first verified win (``search.first_win_seconds``) in at
most a third of the cold search's time to its first. ``--write`` puts the section into
benchmarks/RESULTS.md with the machine, the command and the commit. Run it on an otherwise
idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import autotune
from autotune.examples import ConvBlock, SmallCNN, cnn_data

sys.path.insert(0, str(Path(__file__).parent))
from never_slower import loop_throughput

from speedup import code_version, write_section
from streaming import cpu_model

SECTION = "warm-start"
AT_LEAST_COLD = 0.95
FIRST_WIN_SHARE = 1 / 3

JOB = '''"""The README's CNN with its last convolution 1.5x wider (issue 58's benchmark); ``model``:
the README's CNN, or the wider one where AUTOTUNE_BENCH_WIDE is set (the user's edit)."""
import os
import sys

sys.path.insert(0, {bench!r})
from warm_start import wide_model  # noqa: E402,F401
from autotune.examples import cnn_model  # noqa: E402


def model():
    return wide_model() if os.environ.get("AUTOTUNE_BENCH_WIDE") else cnn_model()
'''


def wide_model() -> nn.Module:
    """The README's CNN (``cnn_model``) with its last convolution 1.5x wider: 64 -> 192
    channels instead of 128, and the classifier taking them."""
    torch.manual_seed(0)
    model = SmallCNN()
    model.blocks[2] = ConvBlock(64, 192)
    model.head = nn.Linear(192, 10)
    return model


def cli(args: list[str], folder: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run ``autotune`` with ``args`` in ``folder``: (wall seconds, its stderr: the story)."""
    start = time.monotonic()
    proc = subprocess.run(
        ["autotune", *args], cwd=folder, capture_output=True, text=True, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    wall = time.monotonic() - start
    print(proc.stderr[-3000:], flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"autotune {' '.join(args)} failed:\n{proc.stdout[-2000:]}")
    return wall, proc.stderr


def one_rep(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    (folder / "job.py").write_text(JOB.format(bench=str(Path(__file__).parent)))
    data = ["--data", "autotune.examples:cnn_data"]
    if args.same_command:  # the user edits the model and runs the same command again
        command = ["search", "--model", "job.py:model", *data, "--timeout"]
        cold_wall, _ = cli([*command, f"{args.cold:g}", "--out", "cold.json"], folder)
        warm_wall, story = cli(
            [*command, f"{args.warm:g}", "--out", "warm.json"], folder,
            env={"AUTOTUNE_BENCH_WIDE": "1"},
        )  # fmt: skip
    else:
        cold_wall, _ = cli(
            ["search", "--model", "autotune.examples:cnn_model", *data, "--timeout",
             f"{args.cold:g}", "--out", "cold.json"],
            folder,
        )  # fmt: skip
        warm_wall, story = cli(
            ["search", "--model", "job.py:wide_model", *data, "--timeout", f"{args.warm:g}",
             "--warm-start", "cold.json", "--out", "warm.json"],
            folder,
        )  # fmt: skip
    cold = json.loads((folder / "cold.json").read_text())
    warm = json.loads((folder / "warm.json").read_text())
    configs = {
        "baseline": autotune.TrainingConfig.from_dict(warm["baseline"]["config"]),
        "warm": autotune.load_config(folder / "warm.json"),
        "cold": autotune.load_config(folder / "cold.json"),
    }
    train, _ = cnn_data()
    speed: dict[str, list[float]] = {n: [] for n in configs}
    for cfg in configs.values():  # one discarded pass each
        loop_throughput(cfg, train, warmup_steps=5, timed_samples=256, make=wide_model)
    names = list(configs)
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            value = loop_throughput(
                configs[name], train, warmup_steps=5, timed_samples=args.timed_samples,
                make=wide_model,
            )  # fmt: skip
            speed[name].append(value)
            print(f"  round {r + 1}: {name:8} {value:8,.1f} samples/s", flush=True)
    said = [line for line in story.splitlines() if "warm start" in line or "changed" in line]
    return {
        "cold": cold,
        "warm": warm,
        "speed": speed,
        "configs": configs,
        "walls": (cold_wall, warm_wall),
        "said": said,
    }


def ratio(speed: dict[str, list[float]], a: str, b: str) -> float:
    return float(statistics.median(x / y for x, y in zip(speed[a], speed[b], strict=True)))


def render(reps: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "## A changed model, warm-started from the last search (issue 58)"
        + (": the same command run again, no --warm-start" if args.same_command else ""),
        "",
        f"{now}; {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__}; commit "
        f"{code_version()}; `{command}`",
        "",
        "| rep | cold answer | warm answer | warm/cold (loop, wide model) | warm/baseline | "
        "cold/baseline | first win: cold | first win: warm | walls |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for i, rep in enumerate(reps, 1):
        speed, c = rep["speed"], rep["configs"]
        first_cold = rep["cold"]["search"].get("first_win_seconds")
        first_warm = rep["warm"]["search"].get("first_win_seconds")
        share = ratio(speed, "warm", "cold")
        out.append(
            f"| {i} | {c['cold'].describe()} | {c['warm'].describe()} | {share:.2f} | "
            f"{ratio(speed, 'warm', 'baseline'):.2f}x | {ratio(speed, 'cold', 'baseline'):.2f}x"
            f" | {_s(first_cold)} | {_s(first_warm)} | {rep['walls'][0]:.0f} s, "
            f"{rep['walls'][1]:.0f} s |"
        )
        quick = (
            first_cold is not None
            and first_warm is not None
            and first_warm <= FIRST_WIN_SHARE * first_cold
        )
        verdicts.append((share >= AT_LEAST_COLD, quick))
    out += ["", "Targets:", ""]
    out.append(
        f"- warm answer >= {AT_LEAST_COLD:.0%} of the cold answer on the wider model: "
        f"{sum(v[0] for v in verdicts)} of {len(verdicts)}"
    )
    out.append(
        f"- first verified win within a third of the cold search's: "
        f"{sum(v[1] for v in verdicts)} of {len(verdicts)}"
    )
    out += ["", "What the warm search said about the change and the warm start:", ""]
    for i, rep in enumerate(reps, 1):
        out += [f"- rep {i}: " + " / ".join(line.strip() for line in rep["said"][:4])]
    out += ["", "The loop's samples/s, round by round:", ""]
    for i, rep in enumerate(reps, 1):
        cells = "; ".join(
            f"{n} " + ", ".join(f"{v:,.0f}" for v in vals) for n, vals in rep["speed"].items()
        )
        out.append(f"- rep {i}: {cells}")
    return "\n".join(out) + "\n"


def _s(value: float | None) -> str:
    return "none" if value is None else f"{value:.0f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--cold", type=float, default=300.0, help="the cold search's timeout")
    parser.add_argument("--warm", type=float, default=120.0, help="the warm search's timeout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timed-samples", type=int, default=2048)
    parser.add_argument("--write", action="store_true", help="write the section to RESULTS.md")
    parser.add_argument(
        "--same-command",
        action="store_true",
        help="both searches run one command (job.py:model), the model edited between them: the "
        "CLI warm-starts the second from the first's study by itself (no --warm-start)",
    )
    parser.add_argument("--section", default=SECTION, help="the RESULTS.md section to write")
    args = parser.parse_args()
    command = "python benchmarks/warm_start.py " + " ".join(sys.argv[1:])
    reps = []
    for n in range(args.reps):
        print(f"== rep {n + 1} of {args.reps}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            reps.append(one_rep(args, Path(tmp)))
    text = render(reps, args, command)
    print(text)
    if args.write:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
