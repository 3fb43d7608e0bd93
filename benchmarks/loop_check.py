"""A result's answer re-measured as a user would check it: a plain training loop that applies the
exported JSON, alternating with the baseline's settings round by round.

    python benchmarks/loop_check.py best.json --workload cnn --rounds 5

The loop is ``never_slower.loop_throughput`` (the README's way of applying a config: ``prepare``,
``optimizer``, ``dataloader``, ``autocast``, ``grad_scaler``); each round measures both, the
order swapped every round so that drift hits both alike. Prints each figure, the medians and
their ratio: compare it with the speed-up the search reported.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import never_slower

import autotune


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a result JSON written by `autotune search --out`")
    parser.add_argument("--workload", default="cnn", choices=["cnn", "jpeg"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timed-samples", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    make, train, _ = never_slower.load(args.workload)
    configs = {"baseline": autotune.TrainingConfig(), "answer": autotune.load_config(args.result)}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(args.rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for name in order:
            rate = never_slower.loop_throughput(
                configs[name], train, warmup_steps=args.warmup,
                timed_samples=args.timed_samples, make=make,
            )  # fmt: skip
            rates[name].append(rate)
            print(f"round {r + 1}: {name:<8} {rate:8.1f} samples/s", flush=True)
    base, answer = (statistics.median(rates[n]) for n in ("baseline", "answer"))
    pairs = zip(rates["answer"], rates["baseline"], strict=True)
    per_round = ", ".join(f"{a / b:.2f}" for a, b in pairs)
    print(
        f"baseline {base:,.0f}, answer {answer:,.0f} samples/s (medians of {args.rounds} "
        f"rounds): {answer / base:.2f}x; per round {per_round}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
