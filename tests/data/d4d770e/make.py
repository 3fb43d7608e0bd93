"""How study.db and best.json beside this file were made, with the code of d4d770e (before the
guard's facts were codes): a simulated search (tests/sim.py) stored in SQLite.

    git worktree add /tmp/old d4d770e && cd /tmp/old/tests
    PYTHONPATH=/tmp/old:/tmp/old/tests python <this file> OUT_DIR
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import optuna
import sim

out = sys.argv[1]
_create = optuna.create_study


def _sqlite(**kwargs: Any) -> optuna.Study:
    return _create(storage=f"sqlite:///{out}/study.db", study_name="old", **kwargs)


sim.optuna.create_study = _sqlite  # type: ignore[attr-defined]


def metric(cfg: Any, seed: int) -> float:
    """Seed 3 lags (0.76); batch 64 drops 0.004; bf16 moves each seed by up to 0.02."""
    base = 0.76 if seed == 3 else 0.985 + sim.noise(seed, 0.003)
    bf16 = 0.02 * math.sin(seed * 2.1) if cfg.precision == "bf16" else 0.0
    return base - (0.004 if cfg.batch_size == 64 else 0.0) + bf16


def speed(cfg: Any) -> float:
    return (1.73 if cfg.batch_size == 64 else 1.0) * (1.3 if cfg.precision == "bf16" else 1.0)


model = sim.Model(throughput=1000.0, overhead=0.2, speed=speed, metric=metric)
knobs = {"batch_size": [32, 64], "precision": ["fp32", "bf16"]}
run, _, _ = sim.search(model, knobs=knobs, timeout=90.0, n_train=400)
with open(f"{out}/best.json", "w") as f:
    json.dump(sim.result_of(run, 90.0).to_dict(), f, indent=2)
