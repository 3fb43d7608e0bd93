"""``autotune.verify``: a result re-measured on this machine."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn
from torch.utils.data import Dataset

from autotune._checks import check_int, check_number
from autotune._display import reporter
from autotune._options import PLANNED_EPOCHS, VERIFY_ROUNDS
from autotune._result.result import SearchResult
from autotune._task import Task, as_task
from autotune._trial.bounded import bounded
from autotune._trial.data import DataModuleLike
from autotune._trial.metrics import AUTO, BUILTIN_METRICS
from autotune._trial.outcome import Budget
from autotune._verify.full import FULL_SEEDS, run_full
from autotune._verify.limits import (
    DEFAULT_BUDGET,
    START_UP,
    Limited,
    explicit_limit,
    limited_executor,
    own_setup_limit,
    run_limits,
)
from autotune._verify.report import VerifyReport, compared
from autotune._verify.rounds import accuracy_runs, measure_rounds
from autotune._verify.stored import configs_here, load_result, stored_number, stored_pair
from autotune._verify.workload import check_entry, own_workload, trainer_workload

__all__ = ["verify"]


def verify(
    result: SearchResult | Mapping[str, Any] | str | os.PathLike[str],
    model: nn.Module | None = None,
    dataset: Dataset[Any] | DataModuleLike | None = None,
    *,
    trainer: Any = None,
    val_dataset: Dataset[Any] | None = None,
    task: Task | None = None,
    rounds: int = VERIFY_ROUNDS,
    budget: Budget | None = None,
    device: str | None = None,
    accuracy_seeds: int = 0,
    progress: bool | Callable[[str], None] = False,
    time_limit: float | None = None,
    full: bool = False,
    full_seeds: int = FULL_SEEDS,
    resume: str | os.PathLike[str] | None = None,
) -> VerifyReport:
    """Re-measure ``result``'s winner against its baseline on this machine, side by side.

    ``result`` is a :class:`SearchResult`, its JSON dict, or the path of ``best.json``; ``model``
    and ``dataset`` are the ones it was searched on. Each of ``rounds`` rounds measures both
    configs' throughput (``budget``: 4,096 timed samples in 5 chunks by default), each round in
    an order drawn afresh. With ``accuracy_seeds`` > 0 both are also trained on the search's
    accuracy budget for that many data-order seeds and validated (on ``val_dataset``, or the
    split find_best makes) in the search's validation batches, on the metric the search guarded
    (a ``task`` whose metric is ``"auto"`` guards the search's builtin metric; a callable metric
    of the search's must be passed again, in ``task``).
    A result of :func:`autotune.tune` is measured through your trainer, as it was searched:
    ``verify(result, trainer=hf_trainer)``, or ``verify(result, module, datamodule,
    trainer=pl_trainer)`` (``dataset`` and ``val_dataset`` may be Lightning's train and
    validation dataloaders instead).
    ``device`` overrides the result's device (e.g. to check a GPU result on this CPU). The
    environment the result was measured in is compared with this one: see ``report.warnings``.
    Every run is stopped at ``time_limit`` seconds: by default the search's own trial limit,
    else :data:`LIMIT_FACTOR` times the longest run the study measured of that config (plus
    :data:`START_UP` where each run starts a process; :data:`RUN_LIMIT` where it measured
    none); a run stopped there is a failure that names the config, the limit and why it was
    that long, and verify goes on to its report.
    With ``full=True`` both configs also train the whole planned run (the winner its share of
    the epochs, where it trains a share) over ``full_seeds`` paired seeds: their end-to-end
    times and final metrics, time to accuracy measured rather than projected (see
    :mod:`autotune._verify.full`); each finished run is kept in ``resume`` (a JSON file), from
    which a verification stopped part way goes on.
    """
    started = time.monotonic()
    data = load_result(result)
    if time_limit is not None:
        check_number("time_limit", time_limit, rule="> 0", ok=lambda v: v > 0)
    check_int("rounds", rounds, rule="an int >= 1", ok=lambda v: v >= 1)
    check_int("accuracy_seeds", accuracy_seeds, rule="an int >= 0", ok=lambda v: v >= 0)
    check_int("full_seeds", full_seeds, rule="an int >= 2", ok=lambda v: v >= 2)
    kind = check_entry(data, model, trainer, task)
    task = as_task(task)
    winner, baseline, here = configs_here(data, device)
    report = reporter(progress)
    search = data.get("search") or {}
    env_warnings = compared(data, here, None if trainer else model, dataset, val_dataset, report)
    recorded = (search.get("hooks") or {}).get("metric")
    if task.metric == AUTO and recorded in BUILTIN_METRICS:
        task = task.replace(metric=recorded)  # the metric the search chose and guarded
    pair = {"baseline": baseline, "winner": winner}
    measure_budget = budget or DEFAULT_BUDGET
    explicit = explicit_limit(time_limit, search)
    setup = own_setup_limit(pair, run_limits(data, pair, explicit, budget=measure_budget))
    if trainer is not None:
        workload = bounded(
            lambda: trainer_workload(data, kind, trainer, model, dataset, val_dataset),
            setup, doing=f"reading and checking your {kind} trainer before the first run",
        )  # fmt: skip
    else:
        workload = bounded(
            lambda: own_workload(data, model, dataset, val_dataset, task, baseline, report),
            setup, doing="reading and checking the model and data before the first run",
        )  # fmt: skip
    inner = limited_executor(workload, here, report, ranks=baseline.ranks)
    start_up = START_UP if inner.isolated else 0.0
    limits = run_limits(data, pair, explicit, budget=measure_budget, start_up=start_up)
    executor = Limited(inner, limits)
    try:
        seed = str(search.get("study_name") or "verify")
        measured, failures = measure_rounds(pair, executor, measure_budget, rounds, report, seed)
        accuracy = accuracy_runs(data, pair, workload, executor, measure_budget, measured, failures,
                             accuracy_seeds, report)  # fmt: skip
        metrics = data.get("metrics") or {}
        planned_samples = int(metrics.get("planned_samples") or 10 * len(workload.train))  # type: ignore[arg-type]
        planned_epochs = float(search.get("planned_epochs") or PLANNED_EPOCHS)
        whole = None
        if full and not failures and winner != baseline:
            validation = data.get("validation") or {}
            whole = run_full(
                pair, executor, measure_budget,
                measured={name: ms[0] if ms else None for name, ms in measured.items()},
                planned_samples=planned_samples, planned_epochs=planned_epochs, seeds=full_seeds,
                metric_name=workload.task.metric_name,
                higher_is_better=bool(validation.get("higher_is_better", True)),
                tolerance=stored_number(data.get("tolerance")), resume=resume, report=report,
            )  # fmt: skip
    finally:
        executor.close()
    return VerifyReport(
        winner=winner,
        baseline=baseline,
        device=here,
        baseline_measurements=tuple(measured["baseline"]),
        winner_measurements=tuple(measured["winner"]),
        recorded_speedup=stored_number(data.get("speedup")),
        recorded_throughput_ratio=stored_number(data.get("throughput_ratio")),
        recorded_interval=stored_pair(data.get("speedup_interval")),
        planned_samples=planned_samples,
        planned_epochs=planned_epochs,
        environment_warnings=tuple(env_warnings),
        failures=failures,
        metric_name=workload.task.metric_name,
        tolerance=data.get("tolerance"),
        accuracy=accuracy,
        seconds=time.monotonic() - started,
        full=whole,
    )
