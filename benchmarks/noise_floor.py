"""What a comparison of two plain-loop figures can tell on this machine (issues 56 and 59).

    python benchmarks/noise_floor.py --write

Reads the two back-to-back plain loops of one config from each repetition that
``first_measurement.py`` recorded in RESULTS.md (its sections ``first-measurement-*``), takes
the spread of one loop's figure from them (the standard deviation of log(loop 2 / loop 1),
over the square root of two), and simulates, with that spread, how often a config compared
with *itself* reads below 0.95x when each side is the median of R alternating rounds: the
chance that a target "at least 0.95x of the best" fails for a search that answered the best
config, before the maximum over a grid's several configs makes "the best" read higher still.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from speedup import write_section

RESULTS = Path(__file__).parent / "RESULTS.md"
SECTION = "noise-floor"
PAIR = re.compile(r"loop 1 ([\d,]+), trial 2 [\d,]+, loop 2 ([\d,]+)")
DRAWS = 20_000


def loop_pairs(text: str, workload: str) -> list[tuple[float, float]]:
    """(loop 1, loop 2) of each repetition in the ``first-measurement-<workload>`` section."""
    start = text.index(f"<!-- speedup:first-measurement-{workload}:start -->")
    end = text.index(f"<!-- speedup:first-measurement-{workload}:end -->")
    return [
        (float(a.replace(",", "")), float(b.replace(",", "")))
        for a, b in PAIR.findall(text[start:end])
    ]


def p_below(sd: float, rounds: int, rng: random.Random) -> float:
    """The chance that a config's median over ``rounds`` draws reads below 0.95x of the same
    config's median over as many (one draw's log spread ``sd``)."""
    floor = math.log(0.95)
    below = 0
    for _ in range(DRAWS):
        a = statistics.median(rng.gauss(0.0, sd) for _ in range(rounds))
        b = statistics.median(rng.gauss(0.0, sd) for _ in range(rounds))
        below += a - b < floor
    return below / DRAWS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="2,4,5,10")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    text = RESULTS.read_text()
    rng = random.Random(0)
    rounds = [int(r) for r in args.rounds.split(",")]
    lines = [
        "## What two plain-loop figures can tell here (issues 56 and 59)",
        "",
        f"`python benchmarks/noise_floor.py {' '.join(sys.argv[1:])}`: from the back-to-back "
        "loops of the first-measurement sections; a config against itself, each side the "
        f"median of R rounds, {DRAWS:,} simulated comparisons.",
        "",
        "| workload | repetitions | one loop's spread (sd of log) | "
        + " | ".join(f"P(< 0.95x), R={r}" for r in rounds)
        + " | P(any of 3 runs), R=5 |",
        "|---|---|---|" + "---|" * len(rounds) + "---|",
    ]
    for workload in ("jpeg", "cnn"):
        pairs = loop_pairs(text, workload)
        if len(pairs) < 3:
            continue
        sd = statistics.stdev(math.log(b / a) for a, b in pairs) / math.sqrt(2)
        probs = [p_below(sd, r, rng) for r in rounds]
        five = p_below(sd, 5, rng)
        lines.append(
            f"| {workload} | {len(pairs)} | {sd:.3f} | "
            + " | ".join(f"{p:.2f}" for p in probs)
            + f" | {1 - (1 - five) ** 3:.2f} |"
        )
    out = "\n".join(lines) + "\n"
    print(out)
    if args.write:
        write_section(SECTION, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
