"""The accuracy guard's decisions on a fixed set of simulated and recorded inputs: verdicts,
bounds, the seeds a next look buys, screening, the baseline's diagnostics and the plans of
accuracy time. ``tests/data/guard_decisions.json`` holds them as the code of d4d770e made them
(before the guard moved to ``autotune/_guard/``); ``test_guard_record.py`` asks the code of
today for the same. Only numbers, verdicts and reason codes are compared: the words may change.

Run ``python tests/guard_record.py --write`` only for a deliberate change of the statistics,
and say so in the commit.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from autotune._guard import plan as plan_module
from autotune._guard.confirmation import Reason, Settle
from autotune._guard.guard import AccuracyGuard, screening_violation, unsettleable, validation_floor
from autotune._guard.plan import pairs_to_confirm, plan_horizon
from autotune._trial.outcome import AccuracyRun

DATA = Path(__file__).resolve().parent / "data" / "guard_decisions.json"

# What a Confirmation records that is a decision (its sentences are left out).
CONFIRMATION_FACTS = (
    "verdict", "passed", "looks", "order", "first_seed", "mean", "drop", "resolution", "bound",
    "lower", "confidence", "tolerance", "need", "sample_error", "counted", "wide_sample",
    "unseen_one_in_ten",
)  # fmt: skip
GUARD_FACTS = (
    "baseline_metric", "baseline_spread", "learned", "wrong_way", "screening_margin",
    "paired_spread", "lagging_run",
)  # fmt: skip


# Each reason a sentence of d4d770e gave, by a phrase only that sentence has.
SETTLE_PHRASES = (
    ("min_pairs", "min_pairs="),
    ("wrong_way", "got worse as it trained"),
    ("not_learned", "barely moved from the untrained"),
    ("one_seed", "accuracy_repeats >= 2"),
    ("no_units", "has no per-example values"),
    ("sample_as_wide", "is as wide as the tolerance"),
    ("sample_too_wide", "leaves too little of the tolerance"),
    ("spread_too_wide", "no practical number of seeds"),
    ("reject", "would reject it as often as not"),
    ("confirm", "would confirm a harmless change at this spread"),
    ("small_validation", "are too few for the tolerance"),
    ("zero_tolerance", "a tolerance of 0 leaves no room"),
)


def reason_of(text: str | Settle | None) -> str | None:
    """The reason a sentence of d4d770e gave, or a :class:`Settle` gives (None: none). The
    baseline's one seed and a check's one pair were one phrase then."""
    if text is None:
        return None
    if isinstance(text, Settle):
        return "one_seed" if text.reason is Reason.BASELINE_ONE_SEED else text.reason.value
    for code, phrase in SETTLE_PHRASES:
        if phrase in text:
            return code
    raise AssertionError(f"no known reason in {text!r}")


def _number(value: Any) -> Any:
    """A float rounded to 12 significant digits (a reordered sum may move the last bits)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_number(v) for v in value]
    return value


def _outcomes(rng: np.random.Generator, p: np.ndarray) -> np.ndarray:
    return (rng.random(p.shape) < p).astype(float)


def _case(index: int) -> dict[str, Any]:
    """One simulated guard and a candidate checked against it at several looks."""
    rng = np.random.default_rng(1000 + index)
    items = int(rng.choice([40, 200, 1000]))
    counting = bool(rng.random() < 0.75)
    higher = counting or bool(rng.random() < 0.5)
    tolerance = float(rng.choice([0.0, 0.005, 0.01, 0.02, 0.05]))
    repeats = int(rng.choice([1, 2, 3, 4, 6, 8, 13]))
    seed_sd = float(rng.choice([0.0, 0.002, 0.01, 0.04]))
    true_drop = float(rng.choice([-0.05, -0.01, 0.0, 0.005, 0.01, 0.03, 0.1]))
    if index % 3 == 0:  # a task where checks can settle: a large validation set, a wide tolerance
        items, counting, higher = 1000, True, True
        tolerance = float(rng.choice([0.02, 0.05]))
        true_drop = float(rng.choice([-0.01, 0.0, 0.005, 0.08]))
    level = float(rng.uniform(0.6, 0.95))
    ease = rng.beta(4.0 * level, 4.0 * (1 - level), size=items)
    lag = bool(rng.random() < 0.2) and repeats >= 4
    base_units: list[tuple[float, ...]] = []
    cand_units: list[tuple[float, ...]] = []
    for seed in range(repeats + 3):
        shift = seed_sd * rng.standard_normal()
        if lag and seed == 2:
            shift -= 0.2
        if counting:
            b = _outcomes(rng, np.clip(ease + shift, 0.0, 1.0))
            c = _outcomes(rng, np.clip(ease + shift + 0.3 * seed_sd * rng.standard_normal()
                                       - true_drop, 0.0, 1.0))  # fmt: skip
            fixed = rng.random(items) < 0.8  # examples every run gets right or wrong alike
            b = np.where(fixed, np.round(np.clip(ease, 0, 1)), b)
            c = np.where(fixed & (rng.random(items) > max(true_drop, 0.0)), b, c)
        else:
            b = 1.0 - ease + shift + 0.05 * rng.standard_normal(items)
            c = b + true_drop + 0.02 * rng.standard_normal(items)
        base_units.append(tuple(float(x) for x in b))
        cand_units.append(tuple(float(x) for x in c))
    sign = 1.0 if higher else -1.0
    base_runs = [sign * 0 + float(np.mean(u)) for u in base_units[:repeats]]
    initial = float(rng.choice([np.nan, 0.1, 0.1, level - 0.001, 1.2]))
    if initial is not None and math.isnan(initial):
        initial = None
    with_units = index % 3 == 0 or bool(rng.random() < 0.85)
    if index % 3 == 0:
        initial = 0.1
    guard = AccuracyGuard(
        metric_name="accuracy" if counting else "loss",
        higher_is_better=higher,
        tolerance=tolerance,
        baseline_runs=tuple(base_runs),
        accuracy_samples=int(rng.choice([256, 4096])),
        initial_metric=initial,
        baseline_units=tuple(base_units[:repeats]) if with_units else (),
        min_pairs=int(rng.choice([0, 0, 3, 5])),
        first_look=int(rng.choice([0, 2, 3])),
    )
    out: dict[str, Any] = {
        "guard": {k: guard.to_dict()[k] for k in GUARD_FACTS},
        "first_pairs": guard.first_pairs(),
        "lagging": guard.lagging,
        "validation_floor": validation_floor(guard),
        "advice": reason_of(guard.advice()),
        "unsettleable": unsettleable(guard) is not None,
        "screening": [],
        "checks": [],
    }
    for seed in range(min(repeats, 3)):
        run = AccuracyRun(
            seed=seed,
            metric=float(np.mean(cand_units[seed])),
            final_loss=0.5,
            samples=100,
            seconds=1.0,
            units=cand_units[seed] if with_units else None,
        )
        out["screening"].append(screening_violation(guard, [run]))
    first = int(rng.choice([0, 1, 1]))
    order = int(rng.choice([1, 1, 2, 3]))
    for pairs, looks in ((2, 1), (3, 1), (4, 2), (6, 3), (12, 4)):
        seeds = range(first, first + pairs)
        if seeds[-1] >= len(cand_units):
            break
        runs = [float(np.mean(cand_units[s])) for s in seeds]
        units = tuple(float(sum(col)) for col in zip(*(cand_units[s] for s in seeds), strict=True))
        squares = guard.pair_squares(
            [AccuracyRun(seed=s, metric=0.0, final_loss=0.0, samples=1, seconds=0.0,
                         units=cand_units[s]) for s in seeds]
        )  # fmt: skip
        capped = [
            (s, cand_units[s])
            for s in seeds
            if s < repeats and sign * (float(np.mean(cand_units[s])) - base_runs[s]) > tolerance
        ]
        result = guard.confirm(
            runs,
            units=units if with_units else None,
            squares=squares if with_units else None,
            looks=looks,
            order=order,
            first=first,
            capped=capped or None,
        )
        facts = result.to_dict()
        out["checks"].append(
            {**{k: facts.get(k) for k in CONFIRMATION_FACTS}, "settle": reason_of(result.settle)}
        )
    return out


def _plans() -> list[dict[str, Any]]:
    out = []
    for n_train in (512, 60_000):
        for throughput in (50.0, 2000.0):
            for seconds in (None, 60.0, 600.0, 7200.0):
                for left in (None, 5.0, 100.0):
                    for whole_run in (False, True):
                        plan = plan_module.plan_accuracy_budget(
                            n_train=n_train, batch_size=32, throughput=throughput, repeats=3,
                            seconds=seconds, planned_epochs=10.0, whole_run=whole_run, left=left,
                        )  # fmt: skip
                        out.append(
                            {"samples": plan.samples, "fits": plan.fits, "least": plan.least,
                             "noted": plan.note is not None}
                        )  # fmt: skip
    return out


def _horizons() -> list[dict[str, Any]]:
    def runs(metrics: list[float], halves: list[float] | None) -> list[AccuracyRun]:
        return [
            AccuracyRun(seed=i, metric=m, final_loss=0.5, samples=2048, seconds=2.0,
                        midpoint=None if halves is None else halves[i])
            for i, m in enumerate(metrics)
        ]  # fmt: skip

    cases = [
        ([0.90, 0.92, 0.94], [0.80, 0.84, 0.88]),
        ([0.90, 0.91, 0.90], [0.90, 0.905, 0.90]),
        ([0.98, 0.99, 0.76], [0.5, 0.6, 0.5]),
        ([0.5, 0.8, 0.85], [0.5, 0.5, 0.6]),
    ]
    out = []
    for metrics, halves in cases:
        for limit in (4096, 40_000):
            for tolerance in (0.005, 0.01):
                for left in (None, 30.0, 3000.0):
                    plan = plan_horizon(
                        runs(metrics, halves), samples=2048, limit=limit, tolerance=tolerance,
                        run_seconds=2.0, left=left,
                    )  # fmt: skip
                    out.append(
                        {"pairs": plan.pairs, "seconds": plan.seconds, "longer": plan.longer,
                         "longer_pairs": plan.longer_pairs, "longer_seconds": plan.longer_seconds,
                         "lengthen": plan.lengthen, "short_by": plan.short_by}
                    )  # fmt: skip
    out.append({"pairs": [pairs_to_confirm(s, 0.01, 3) for s in (0.0, 0.004, 0.01, 0.03, 1.0)]})
    return out


def _searches() -> list[dict[str, Any]]:
    """Whole searches on the simulated machine of ``sim.py``: what each trial's accuracy
    state was, the answer and the accuracy horizon, for a harmless, a harmful and a lagging
    batch-size change."""
    from sim import Model, noise, result_of, search

    knobs = {"batch_size": [32, 64], "precision": ["fp32"]}

    def lagging(cfg: Any, seed: int) -> float:
        return (0.76 if seed == 3 else 0.985 + noise(seed, 0.003)) - (
            0.004 if cfg.batch_size == 64 else 0.0
        )

    models = {
        "harmless": lambda cfg, seed: 0.9 + noise(seed, 0.005) - 0.002 * (cfg.batch_size == 64),
        "harmful": lambda cfg, seed: 0.9 + noise(seed, 0.005) - 0.03 * (cfg.batch_size == 64),
        "lagging": lagging,
    }
    out = []
    for name, metric in models.items():
        model = Model(
            throughput=1000.0,
            overhead=0.2,
            speed=lambda cfg: 1.73 if cfg.batch_size == 64 else 1.0,
            metric=metric,
        )
        run, _, _ = search(model, knobs=knobs, timeout=120.0, n_train=400)
        result = result_of(run, 120.0).to_dict()
        trials = [
            {
                "number": t["number"],
                "feasible": t["feasible"],
                "screened": t["screened"],
                "confirmation": None
                if t["confirmation"] is None
                else {k: t["confirmation"].get(k) for k in CONFIRMATION_FACTS},
            }
            for t in result["trials"]
        ]
        out.append(
            {
                "model": name,
                "batch_size": result["config"]["batch_size"],
                "speedup": result["speedup"],
                "accuracy_samples": result["search"]["accuracy_samples"],
                "guard": {k: result["accuracy_guard"][k] for k in GUARD_FACTS},
                "trials": trials,
            }
        )
    return out


def decisions() -> dict[str, Any]:
    return _number(
        {
            "cases": [_case(i) for i in range(240)],
            "plans": _plans(),
            "horizons": _horizons(),
            "searches": _searches(),
        }
    )


if __name__ == "__main__":
    if "--write" in sys.argv:
        DATA.parent.mkdir(exist_ok=True)
        DATA.write_text(json.dumps(decisions(), indent=0, sort_keys=True) + "\n")
        print(f"wrote {DATA}")
    else:
        print(json.dumps(decisions())[:2000])
