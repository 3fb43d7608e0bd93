"""Side-by-side rounds on a simulated machine: configs of known speeds, every measurement
their true time times a log-normal draw, the rounds run and stopped by the search's own rule
(:func:`autotune._speed.stats.after_round`) and decided by its race
(:func:`autotune._speed.stats.race`). The unit tests and ``benchmarks/race_sim.py --rule``
use it."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping

from autotune._speed import stats


@dataclasses.dataclass(frozen=True)
class Raced:
    """One simulated race: its answer, the answer's true speedup and its interval (1, 1, 1
    for the baseline), and the rounds it took."""

    answer: str
    true: float
    low: float
    high: float
    rounds: int
    decision: stats.Decision

    @property
    def covered(self) -> bool:
        return self.low <= self.true * (1 + 1e-12) and self.true <= self.high * (1 + 1e-12)


def race(
    speeds: Mapping[str, float],
    seed: int,
    *,
    sd: float = 0.10,
    drift: float = 0.0,
    max_rounds: int | None = None,
) -> Raced:
    """``speeds``: each config's true speed over the baseline's, the baseline (speed 1) first
    and the configs in their order of complexity (the first is the simplest); ``drift``: the
    sd of a log-normal factor every config of one round shares (the machine's state)."""
    rng = random.Random(seed)
    keys = list(speeds)
    base = keys[0]
    rank = {k: (float(i),) for i, k in enumerate(keys)}
    rounds: list[dict[str, float]] = []
    active = list(keys)
    for i in range(max_rounds or stats.LOOKS[-1]):
        shared = rng.gauss(0.0, drift) if drift else 0.0
        order = stats.round_order(active, str(seed), i)
        rounds.append({k: math.exp(rng.gauss(0.0, sd) + shared) / speeds[k] for k in order})
        stop, active = stats.after_round(rounds, base, active, rank.__getitem__)
        if stop:
            break
    decided = stats.race(rounds, base, keys, rank.__getitem__)
    assert decided is not None
    answer = decided.answer
    figure = decided.versus_baseline[answer]
    return Raced(
        answer=answer,
        true=speeds[answer] / speeds[base],
        low=figure.low,
        high=figure.high,
        rounds=len(rounds),
        decision=decided.decision,
    )


# The scenarios the unit tests and the benchmark simulate: the JPEG pipeline's numerics-free
# knobs as the plain loop measured them on a 2-core Xeon, two configs 2% apart, configs as fast
# as the baseline, and large gains of different sizes.
SCENARIOS: dict[str, dict[str, float]] = {
    "jpeg": {"baseline": 1.0, "channels_last": 1.13, "fused": 1.06, "both": 1.20, "w1": 0.89},
    "two 2% apart": {"baseline": 1.0, "simpler": 1.20, "other": 1.224},
    "one as fast": {"baseline": 1.0, "same": 1.0},
    "six as fast": {"baseline": 1.0, **{f"same{i}": 1.0 for i in range(6)}},
    "large gains": {"baseline": 1.0, "a": 1.3, "b": 1.6, "c": 1.9},
}
