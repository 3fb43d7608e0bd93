"""The safe stage's choice under this machine's measurement noise, simulated (issue 56).

    python benchmarks/race_sim.py --searches 40 --write
    python benchmarks/race_sim.py --rule --searches 1000 --write

With ``--rule``, only the side-by-side rounds: each scenario of ``tests/rounds_sim.py`` (configs
of known speeds, 10% log-normal noise per measurement) raced by the search's own rule, and how
often the answer's 95% interval covers its true speedup, the simpler of two configs 2% apart is
answered, and a config as fast as the baseline is answered (issue 70's figures).

Runs guided searches on the test suite's simulated machine (``tests/sim.py``: a fake clock, no
training) over the numerics-free knobs of the JPEG pipeline: loader workers, one thread,
channels_last and the optimizer implementation. Each config's true speed is the plain loop's
on this 2-core Xeon (benchmarks/RESULTS.md, "never-slower-jpeg-25", the median over its three
runs of each config over the baseline): channels_last 1.13x, fused 1.06x, both 1.20x, one or
two workers 0.89x / 0.94x, foreach 1.0x, one thread 0.6x. Every measurement, screening and
side-by-side rounds alike, reads the true speed times a log-normal draw of spread ``--sd``
(0.098: one plain loop's sd of log on this machine, "noise-floor"), fixed per search seed,
config and draw number, so that two code versions see the same draws.

Reports, over the searches: how often the answer's true speed is at least 0.97x the baseline's,
at least 0.95x the best config's (channels_last + fused; channels_last alone is 0.94x of it),
the reported speed-up within 10% of the true one, and the trials the search ran. Run it from a
worktree of another commit (``PYTHONPATH=<worktree>``) to compare versions on the same draws.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import math
import random
import statistics
import subprocess
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import optuna  # noqa: E402
import sim  # noqa: E402

import autotune  # noqa: E402
from autotune import TrainingConfig  # noqa: E402

from speedup import write_section  # noqa: E402

SAFE = {
    "num_workers": [0, 1, 2],
    "intra_op_threads": [None, 1],
    "channels_last": [False, True],
    "optimizer_impl": ["default", "foreach", "fused"],
}
# With --numerics, the knobs of the default space that change the numerics too (as on the JPEG
# search): they cost the fast stage's accuracy runs and make the space too large to measure
# whole, and none trains faster here (bf16 0.8x, as on this Xeon; a larger batch alike).
NUMERICS = {
    "precision": ["fp32", "bf16"],
    "batch_size": [32, 64, 128],
    "lr_schedule": ["constant", "cosine"],
}
WORKERS = {0: 1.0, 1: 0.89, 2: 0.94}
OPTIMIZER = {"default": 1.0, "foreach": 1.0, "fused": 1.06}


def speed(cfg: TrainingConfig) -> float:
    """The config's true speed over the baseline's (the plain loop's, see the docstring)."""
    s = WORKERS[cfg.num_workers] * OPTIMIZER[cfg.optimizer_impl.value]
    s *= 1.13 if cfg.channels_last else 1.0
    s *= 0.8 if cfg.precision.value == "bf16" else 1.0
    return s * (0.6 if cfg.intra_op_threads == 1 else 1.0)


BEST = max(
    speed(TrainingConfig(num_workers=w, channels_last=c, optimizer_impl=o))
    for w in WORKERS
    for c in (False, True)
    for o in OPTIMIZER
)


def draw(seed: int, sd: float, cfg: TrainingConfig, n: int) -> float:
    """The ``n``-th measurement's factor for ``cfg`` in search ``seed``: log-normal, the same
    for every code version (keyed by the config's description, not Python's hash)."""
    key = zlib.crc32(f"{seed}|{cfg.describe()}|{n}".encode())
    return math.exp(random.Random(key).gauss(0.0, sd))


def one_search(seed: int, sd: float, knobs: dict[str, list[object]]) -> dict[str, float]:
    model = sim.Model(speed=speed, draw=functools.partial(draw, seed, sd))
    extra: dict[str, object] = {}
    if "optimizer_impls" in inspect.signature(sim.search).parameters:
        extra["optimizer_impls"] = tuple(OPTIMIZER)
    else:  # an older tests/sim.py: its Facts take them
        sim.Facts = functools.partial(sim.Facts, optimizer_impls=tuple(OPTIMIZER))  # type: ignore[misc]
    run, _, _ = sim.search(model, knobs=knobs, timeout=240.0, **extra)  # type: ignore[arg-type]
    result = sim.result_of(run)
    true = speed(result.winner.config)
    span = getattr(result, "speedup_interval", None)
    top = [e.config for e in run.ledger().entries if math.isclose(speed(e.config), BEST)]
    return {
        "built": float(bool(top)),
        "true": true,
        "reported": result.speedup,
        "trials": len(run.ledger().candidates),
        "answer": result.winner.config.describe(),
        # Whether the answer's 95% interval covers its true speedup (no interval: None).
        "covered": None if span is None else float(span[0] <= true <= span[1]),
    }


def code_version() -> str:
    repo = Path(autotune.__file__).resolve().parent.parent
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "autotune"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head}{'+changes' if dirty else ''}"


def rule(searches: int, sd: float) -> list[str]:
    """The rounds' rule alone over :data:`rounds_sim.SCENARIOS`, ``searches`` races each."""
    import rounds_sim

    lines = [
        "| scenario | answer's 95% interval covers its true speedup | answers | rounds, mean |",
        "|---|---|---|---|",
    ]
    # The deadline after 3 or 5 rounds as well: a 240-s search's rounds end there, off a look.
    for drift, deadline in ((0.0, None), (0.05, None), (0.0, 3), (0.0, 5)):
        for name, speeds in rounds_sim.SCENARIOS.items():
            raced = [
                rounds_sim.race(speeds, seed, sd=sd, drift=drift, max_rounds=deadline)
                for seed in range(searches)
            ]
            answers: dict[str, int] = {}
            for r in raced:
                answers[r.answer] = answers.get(r.answer, 0) + 1
            named = ", ".join(f"{k} {v}" for k, v in sorted(answers.items(), key=lambda kv: -kv[1]))
            where = f"{name}, drift {drift}" if drift else name
            where += f", deadline after {deadline} rounds" if deadline else ""
            lines.append(
                f"| {where} | {sum(r.covered for r in raced)} of {searches} | {named} | "
                f"{statistics.mean(r.rounds for r in raced):.1f} |"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", action="store_true", help="the rounds' rule alone")
    parser.add_argument("--searches", type=int, default=40)
    parser.add_argument("--sd", type=float, default=0.098)
    parser.add_argument("--numerics", action="store_true", help="the numerics knobs too")
    parser.add_argument("--section", default="race-sim")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.rule:
        version = code_version()
        out = "\n".join(
            [
                f"## The side-by-side rounds' rule, simulated ({version})",
                "",
                f"`python benchmarks/race_sim.py {' '.join(sys.argv[1:])}`, autotune at "
                f"{version}: every measurement log-normal with sd {args.sd}; with drift, a "
                "log-normal factor every config of one round shares; with a deadline, the "
                "rounds stop there if no look decided them first.",
                "",
                *rule(args.searches, args.sd),
                "",
            ]
        )
        print(out)
        if args.write:
            write_section("race-sim-rule", out)
        return 0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    knobs = {**SAFE, **NUMERICS} if args.numerics else SAFE
    runs = [one_search(seed, args.sd, knobs) for seed in range(args.searches)]
    n = len(runs)
    slower = sum(r["true"] >= 0.97 for r in runs)
    best = sum(r["true"] >= 0.95 * BEST for r in runs)
    within = sum(abs(r["reported"] / r["true"] - 1) <= 0.10 for r in runs)
    intervals = [r["covered"] for r in runs if r["covered"] is not None]
    covered, with_interval = int(sum(intervals)), len(intervals)
    answers: dict[str, int] = {}
    for r in runs:
        key = str(r["answer"]).replace("batch=32 workers=0 precision=fp32 compile=none ", "")
        answers[key] = answers.get(key, 0) + 1
    version = code_version()
    lines = [
        f"## The safe stage under this machine's noise, simulated ({version})",
        "",
        f"`python benchmarks/race_sim.py {' '.join(sys.argv[1:])}`, autotune at {version}: "
        f"{n} simulated 240-s searches, every measurement log-normal with sd {args.sd}.",
        "",
        "| answer >= 0.97x baseline | >= 0.95x best | best config measured | reported within "
        "10% | answer the baseline | 95% interval covers the truth (answers not the baseline) "
        "| true speed-up, mean (range) | trials, median |",
        "|---|---|---|---|---|---|---|---|",
        f"| {slower} of {n} | {best} of {n} | {sum(int(r['built']) for r in runs)} of {n} | "
        f"{within} of {n} | {n - with_interval} of {n} | {covered} of {with_interval} | "
        f"{statistics.mean(r['true'] for r in runs):.3f}x "
        f"({min(r['true'] for r in runs):.2f}-{max(r['true'] for r in runs):.2f}) | "
        f"{statistics.median(r['trials'] for r in runs):.0f} |",
        "",
        "Answers: "
        + "; ".join(f"{k} {v}" for k, v in sorted(answers.items(), key=lambda kv: -kv[1])),
        "",
    ]
    out = "\n".join(lines)
    print(out)
    if args.write:
        write_section(args.section, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
