"""A result's answer re-measured as a user would check it: a plain training loop that applies the
exported JSON beside the baseline's settings (and, with ``--references``, the numerics-free
references), in randomized paired rounds.

    python benchmarks/loop_check.py best.json --workload cnn --rounds 12 --references

The loop is ``never_slower.loop_throughput`` (the README's way of applying a config: ``prepare``,
``optimizer``, ``dataloader``, ``autocast``, ``grad_scaler``); each round measures every config
once in an order drawn afresh (``autotune._speed.stats.round_order``), so that drift and a
neighbour's load fall on every config alike. Prints each figure; the answer's speed-up over the
baseline with its 95% t interval on the rounds' log-ratios (fixed rounds: no looks) and its
one-sided 95% lower bound, whether that interval overlaps the search's (``speedup_interval`` in
the JSON); and for each reference, its speed over the answer's and whether it is faster than the
answer by more than 5% with 90% confidence (the one-sided 90% lower bound of their ratio above
1.05). The search's own figure is not the evidence: this is.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import never_slower
from scipy import stats as scipy_stats

import autotune
from autotune._speed import stats

# The numerics-free references: loader workers 0/1/2, channels_last, the fused optimizer, and
# their pairs (workers 0 is the baseline's own).
W1 = {"num_workers": 1, "persistent_workers": True}
W2 = {"num_workers": 2, "persistent_workers": True}
CL = {"channels_last": True}
FUSED = {"optimizer_impl": "fused"}
REFERENCES: dict[str, dict[str, object]] = {
    "workers=1": W1,
    "workers=2": W2,
    "channels_last": CL,
    "fused": FUSED,
    "workers=1+channels_last": {**W1, **CL},
    "workers=2+channels_last": {**W2, **CL},
    "workers=1+fused": {**W1, **FUSED},
    "workers=2+fused": {**W2, **FUSED},
    "channels_last+fused": {**CL, **FUSED},
}


def _lower(logs: list[float], confidence: float) -> float:
    """The one-sided ``confidence`` lower bound of the ratio the log-ratios measured."""
    n = len(logs)
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    return math.exp(mean - float(scipy_stats.t.ppf(confidence, n - 1)) * sd / math.sqrt(n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a result JSON written by `autotune search --out`")
    parser.add_argument("--workload", default="cnn", choices=["cnn", "jpeg"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timed-samples", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--references", action="store_true", help="the numerics-free references")
    parser.add_argument("--seed", default="loop-check")
    args = parser.parse_args()
    make, train, _ = never_slower.load(args.workload)
    data = json.loads(Path(args.result).read_text())
    base = autotune.TrainingConfig()
    configs = {"baseline": base, "answer": autotune.load_config(args.result)}
    if args.references:
        for name, change in REFERENCES.items():
            cfg = base.replace(**change)
            if all(cfg != c for c in configs.values()):
                configs[name] = cfg
    rates: dict[str, list[float]] = {name: [] for name in configs}
    same = configs["answer"] == base
    for r in range(args.rounds):
        for name in stats.round_order(list(configs), args.seed, r):
            if name == "answer" and same:
                continue  # the answer is the baseline: its rounds are the baseline's
            rate = never_slower.loop_throughput(
                configs[name], train, warmup_steps=args.warmup,
                timed_samples=args.timed_samples, make=make,
            )  # fmt: skip
            rates[name].append(rate)
            print(f"round {r + 1}: {name:<24} {rate:8.1f} samples/s", flush=True)
    if same:
        rates["answer"] = list(rates["baseline"])
    logs = [math.log(a / b) for a, b in zip(rates["answer"], rates["baseline"], strict=True)]
    figure = stats.interval(logs, stats.ALPHA)
    assert figure is not None
    searched = data.get("speedup_interval")
    overlap = (
        "n/a"
        if not searched
        else "overlaps"
        if figure.low <= searched[1] and searched[0] <= figure.high
        else "does NOT overlap"
    )
    print(
        f"answer over baseline: {figure.estimate:.3f}x (95% interval {figure.low:.3f}-"
        f"{figure.high:.3f}x, one-sided 95% lower bound {_lower(logs, 0.95):.3f}x, "
        f"{figure.rounds} randomized rounds, sd of a round's log-ratio {figure.spread:.3f}); "
        f"the search's: {data.get('speedup', 0):.3f}x, 95% {searched}: {overlap}"
    )
    faster = []
    for name in configs:
        if name in ("baseline", "answer"):
            continue
        over = [math.log(x / a) for x, a in zip(rates[name], rates["answer"], strict=True)]
        ref = stats.interval(over, stats.ALPHA)
        assert ref is not None
        lower = _lower(over, 0.90)
        beyond = lower > 1.05
        faster += [name] if beyond else []
        print(
            f"  {name:<24} over the answer {ref.estimate:.3f}x (95% {ref.low:.3f}-{ref.high:.3f}x;"
            f" one-sided 90% lower {lower:.3f}x){' FASTER by >5%' if beyond else ''}"
        )
    print(f"references faster than the answer by more than 5% (90%): {faster or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
