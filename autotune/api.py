"""The public entry point: ``autotune.find_best``. It checks every argument before any trial
runs, then hands the work to the search (:mod:`autotune.search`)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import optuna
import torch
from torch import nn
from torch.utils.data import Dataset

from autotune import knobs
from autotune.config import TrainingConfig
from autotune.data import (
    ForwardFn,
    LossFn,
    MetricFn,
    check_model_consumes,
    checked_task,
    split_dataset,
)
from autotune.device import cpu_share, describe_device, environment, resolve_device
from autotune.errors import ConfigError
from autotune.isolation import ISOLATION_MODES, make_executor
from autotune.records import SETTINGS
from autotune.result import SearchResult
from autotune.runner import (
    Budget,
    OptimizerFactory,
    Workload,
    default_optimizer,
    preserved_rng,
)
from autotune.search import DEFAULT_TIMEOUT, Search
from autotune.space import Choice, SearchSpace, load_space
from autotune.study import open_study, redact

__all__ = ["find_best", "worker_env"]

log = logging.getLogger("autotune")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _keeps_callers_rng(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """The user's dataset may draw from the global RNGs (augmentation) while autotune validates
    and splits it: give the caller back the RNG states they had."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with preserved_rng("cuda:0" if torch.cuda.is_available() else "cpu"):
            return fn(*args, **kwargs)

    return wrapper


@_keeps_callers_rng
def find_best(
    model: nn.Module,
    dataset: Dataset[Any],
    *,
    val_dataset: Dataset[Any] | None = None,
    loss_fn: LossFn | None = None,
    forward: ForwardFn | None = None,
    metric: str | MetricFn = "accuracy",
    higher_is_better: bool | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    optimizer: OptimizerFactory | None = None,
    tolerance: float = 0.01,
    space: str | SearchSpace | Mapping[str, Any] = "default",
    baseline: TrainingConfig | Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    timeout: float | None = None,
    device: str | torch.device | None = None,
    storage: str | optuna.storages.BaseStorage | None = None,
    study_name: str | None = None,
    seed: int = 0,
    planned_epochs: float = 10.0,
    accuracy_samples: int | None = None,
    accuracy_repeats: int = 3,
    val_fraction: float = 0.1,
    budget: Budget | None = None,
    sampler: optuna.samplers.BaseSampler | None = None,
    isolation: str = "auto",
    trial_timeout: float | None = None,
    progress: bool | Callable[[str], None] = False,
    launcher: Callable[[optuna.Study], None] | None = None,
    guided: bool = True,
) -> SearchResult:
    """Find the fastest training config for ``model`` on ``dataset`` on this machine whose
    validation metric stays within ``tolerance`` of the baseline's.

    ``model`` is never modified: every trial trains a copy of its initial weights. Batches are
    ``(inputs, targets)`` unless ``forward(model, batch) -> (outputs, targets)`` says otherwise;
    ``loss_fn(outputs, targets)`` defaults to cross-entropy and ``metric`` to accuracy.
    ``optimizer(params, lr)`` builds the optimizer (AdamW by default); ``sampler`` replaces the
    default multivariate TPE sampler (the accuracy guard and failures reach any sampler as Optuna
    constraints, through ``trial.set_constraint``). The search stops after
    ``n_trials`` candidates or ``timeout`` seconds (10 minutes when neither is given). Candidates
    are ranked by projected time to train ``planned_epochs`` epochs of the training set.

    ``isolation="auto"`` runs trials in a worker process (a hang, a segfault or the OOM-killer
    then ends only that trial) wherever the model and data can be pickled, and says once when
    they cannot; ``"process"`` insists, ``"none"`` runs trials in this process. Each trial is
    stopped after ``trial_timeout`` seconds (default: 5x the baseline's trial, at least a minute).

    ``guided=False`` turns off what autotune adds to the sampler (the rules-of-thumb first
    guess, trying compile and checkpointing on top of the best config, pruning clearly slower
    candidates before their accuracy runs): every candidate is then what the sampler proposes,
    measured in full. For exhaustive grids (``optuna.samplers.BruteForceSampler``) and for
    comparing against plain random search.

    ``launcher(study)``, when given, runs the candidates elsewhere: it is called once the
    baseline is measured and returns when its workers are done (the CLI's ``--workers`` starts
    ``autotune worker`` processes this way); this process then confirms the winner and exports.
    """
    started = time.time()
    _check_arguments(
        model,
        tolerance,
        n_trials,
        timeout,
        planned_epochs,
        accuracy_repeats,
        val_fraction,
        accuracy_samples,
        seed,
    )
    if not isinstance(guided, bool):
        raise ValueError(f"`guided` must be True or False, but got {guided!r}.")
    if isolation not in ISOLATION_MODES:
        raise ValueError(
            f"`isolation` must be one of {', '.join(ISOLATION_MODES)}, but got {isolation!r}."
        )
    if trial_timeout is not None and (
        isinstance(trial_timeout, bool)
        or not isinstance(trial_timeout, int | float)
        or trial_timeout <= 0
    ):
        raise ValueError(f"`trial_timeout` must be > 0 seconds or None, but got {trial_timeout!r}.")
    if n_trials is None and timeout is None:
        timeout = DEFAULT_TIMEOUT
    device_str = resolve_device(device)
    info = describe_device(device_str)
    task = checked_task(
        dataset,
        val_dataset,
        forward=forward,
        loss_fn=loss_fn,
        metric=metric,
        higher_is_better=higher_is_better,
        collate_fn=collate_fn,
    )
    if val_dataset is not None:
        train, val, stratified = dataset, val_dataset, False
    else:
        train, val, stratified = split_dataset(dataset, task, val_fraction=val_fraction, seed=seed)
    check_model_consumes(model, train, task)
    base_cfg = _baseline_config(baseline, device_str)
    template = copy.deepcopy(model).cpu()  # the caller's model is never touched again
    n_train = len(train)  # type: ignore[arg-type]
    restricted = load_space(space).restrict(
        info,
        has_conv=any(isinstance(m, nn.Conv2d | nn.Conv3d) for m in template.modules()),
        n_blocks=len(knobs.find_repeated_blocks(template)),
        max_batch_size=n_train,
        current_threads=torch.get_num_threads(),
    )
    restricted = _restrict_workers(restricted, train, val, task)
    restricted = restricted.including(base_cfg, base_cfg)
    for note in restricted.notes:
        log.info("space: %s", note)
    study = open_study(storage, study_name, seed, sampler)
    workload = Workload(
        model=template,
        train=train,
        val=val,
        task=task,
        optimizer=optimizer if optimizer is not None else default_optimizer,
    )
    reporter = _reporter(progress)
    if launcher is not None and isinstance(study._storage, optuna.storages.InMemoryStorage):
        raise ValueError(
            "Workers need a storage they can reach: pass storage= (e.g. 'sqlite:///autotune.db' "
            "on one host, 'postgresql://...' across hosts)."
        )
    settings = dict(study.user_attrs.get(SETTINGS, {}))
    settings.update(
        {
            "seed": seed,
            "val_fraction": val_fraction,
            "isolation": isolation,
            "metric_name": task.metric_name,
            "higher_is_better": task.higher_is_better,
            "environment": environment(device_str),
        }
    )
    study.set_user_attr(SETTINGS, settings)
    executor, fallback = make_executor(workload, isolation, env=worker_env(study.study_name))
    if fallback:
        reporter(fallback)
    search = Search(
        study=study,
        space=restricted,
        workload=workload,
        executor=executor,
        trial_timeout=trial_timeout,
        baseline=base_cfg,
        budget=budget or Budget(),
        tolerance=tolerance,
        accuracy_samples=accuracy_samples,
        accuracy_repeats=accuracy_repeats,
        planned_samples=round(planned_epochs * n_train),
        planned_epochs=planned_epochs,
        n_trials=n_trials,
        deadline=None if timeout is None else started + timeout,
        report=reporter,
        fingerprint=environment(device_str)["fingerprint"],
        launcher=launcher,
        guided=guided,
    )
    try:
        interrupted = search.run()
    finally:
        executor.close()
    env = environment(device_str)
    return search.result(
        environment=env,
        seconds=time.time() - started,
        interrupted=interrupted,
        extra={
            "study_name": study.study_name,
            "storage": redact(storage),
            "space": restricted.name,
            "space_notes": list(restricted.notes),
            "stratified_split": stratified,
            "seed": seed,
            "n_trials": n_trials,
            "timeout": timeout,
            "planned_epochs": planned_epochs,
            "isolation": "process" if executor.isolated else "in-process",
            "trial_limit": search.auto_limit if trial_timeout is None else trial_timeout,
        },
    )


# -- Arguments --------------------------------------------------------------------------------


def _check_arguments(
    model: Any,
    tolerance: float,
    n_trials: int | None,
    timeout: float | None,
    planned_epochs: float,
    accuracy_repeats: int,
    val_fraction: float,
    accuracy_samples: int | None,
    seed: int,
) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"`model` must be a torch.nn.Module, but got {type(model).__name__}. "
            "Pass the model instance (not its class or a factory)."
        )

    def number(name: str, value: Any, ok: bool, rule: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"`{name}` must be a number, but got {value!r}.")
        if not ok:
            raise ValueError(f"`{name}` must be {rule}, but got {value!r}.")

    number(
        "tolerance",
        tolerance,
        tolerance >= 0 if isinstance(tolerance, int | float) else False,
        ">= 0",
    )
    if n_trials is not None and (isinstance(n_trials, bool) or not isinstance(n_trials, int)):
        raise TypeError(f"`n_trials` must be an int or None, but got {n_trials!r}.")
    if n_trials is not None and n_trials < 1:
        raise ValueError(f"`n_trials` must be >= 1, but got {n_trials}.")
    if timeout is not None:
        number("timeout", timeout, timeout > 0, "> 0 seconds")
    number("planned_epochs", planned_epochs, planned_epochs > 0, "> 0")
    number("val_fraction", val_fraction, 0 < val_fraction < 1, "in (0, 1)")
    if isinstance(accuracy_repeats, bool) or not isinstance(accuracy_repeats, int):
        raise TypeError(f"`accuracy_repeats` must be an int, but got {accuracy_repeats!r}.")
    if accuracy_repeats < 1:
        raise ValueError(f"`accuracy_repeats` must be >= 1, but got {accuracy_repeats}.")
    if accuracy_samples is not None and (
        isinstance(accuracy_samples, bool)
        or not isinstance(accuracy_samples, int)
        or accuracy_samples < 1
    ):
        raise ValueError(f"`accuracy_samples` must be an int >= 1, but got {accuracy_samples!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"`seed` must be an int, but got {seed!r}.")


def _baseline_config(
    baseline: TrainingConfig | Mapping[str, Any] | None, device: str
) -> TrainingConfig:
    if baseline is None:
        return TrainingConfig(device=device)
    if isinstance(baseline, TrainingConfig):
        return baseline.replace(device=device)
    if isinstance(baseline, Mapping):
        try:
            return TrainingConfig.from_dict({**baseline, "device": device})
        except ConfigError as exc:
            raise ConfigError(f"Invalid `baseline`: {exc}") from None
    raise TypeError(
        f"`baseline` must be a TrainingConfig, a dict of its fields, or None, "
        f"but got {type(baseline).__name__}."
    )


def _restrict_workers(space: SearchSpace, train: Any, val: Any, task: Any) -> SearchSpace:
    """DataLoader workers started by 'spawn' or 'forkserver' (the default off Linux) need a
    picklable dataset and collate_fn: without one, search workers=0 only, and say why."""
    workers = space.knobs.get("num_workers")
    if not isinstance(workers, Choice) or workers.values == (0,):
        return space
    if torch.multiprocessing.get_start_method(allow_none=True) in (None, "fork"):
        import multiprocessing

        if multiprocessing.get_start_method(allow_none=True) in (None, "fork") and hasattr(
            os, "fork"
        ):
            return space  # forked workers inherit the dataset: nothing is pickled
    bad = []
    for name, value in (("dataset", train), ("collate_fn", task.collate_fn)):
        try:
            pickle.dumps(value)
        except Exception as exc:
            bad.append(f"{name} ({type(exc).__name__})")
    if not bad:
        return space
    note = (
        f"num_workers: only 0 searched, because DataLoader workers need to pickle "
        f"{', '.join(bad)} with this platform's start method; make them picklable to search "
        "workers"
    )
    log.warning("%s", note)
    knobs_ = {k: v for k, v in space.knobs.items() if k not in ("num_workers",)}
    knobs_["num_workers"] = Choice((0,))
    return dataclasses.replace(space, knobs=knobs_, notes=(*space.notes, note))


def worker_env(study_name: str) -> dict[str, str]:
    """Environment for trial workers: this process's import path and CPU share, and one
    compiled-kernel cache per study, shared by every worker, so that compile cost is paid once
    per graph as in a real run, not once per worker process."""
    cache = Path(tempfile.gettempdir()) / f"autotune-inductor-{_slug(study_name)}"
    env = {
        "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path),
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
    }
    share = cpu_share()
    if share < (os.cpu_count() or share):
        env["OMP_NUM_THREADS"] = str(share)  # the worker inherits the affinity: match threads
    return env


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:80]


def _reporter(progress: bool | Callable[[str], None]) -> Callable[[str], None]:
    if callable(progress):
        return progress
    if progress:
        return lambda line: print(line, flush=True)
    return lambda line: log.info("%s", line)


# -- The search loop --------------------------------------------------------------------------
