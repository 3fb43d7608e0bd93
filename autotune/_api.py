"""The public entry point: ``autotune.find_best``. It checks every argument before any trial
runs, prepares what every trial trains (:func:`prepare_workload`), and hands the work to the
search (:mod:`autotune._search.loop`)."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import pickle
import time
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import optuna
import torch
from torch import nn
from torch.utils.data import Dataset

from autotune import _knobs
from autotune._checks import check_choice, check_flag, check_int, check_number
from autotune._config import TrainingConfig
from autotune._device import describe_device, environment, resolve_device
from autotune._display import reporter
from autotune._errors import ArgumentError, ConfigError
from autotune._progress import Progress
from autotune._result.result import SearchResult
from autotune._search import coverage
from autotune._search.loop import DEFAULT_TIMEOUT, Search
from autotune._search.settings import SearchSettings
from autotune._search.storage import open_study, redact
from autotune._space import Choice, SearchSpace, load_space
from autotune._trial import apply
from autotune._trial.data import DataModuleLike
from autotune._trial.isolation import ISOLATION_MODES, make_executor, worker_env
from autotune._trial.runner import Budget, preserved_rng
from autotune._trial.task import (
    CollateFn,
    ForwardFn,
    HookRefs,
    Hooks,
    LossFn,
    MetricFn,
    OptimizerFactory,
    Task,
    on_accelerator,
)
from autotune._trial.workload import Workload, prepare_workload

__all__ = ["find_best", "restrict_space"]

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
    dataset: Dataset[Any] | DataModuleLike,
    *,
    val_dataset: Dataset[Any] | None = None,
    loss_fn: LossFn | None = None,
    forward: ForwardFn | None = None,
    metric: str | MetricFn = "auto",
    higher_is_better: bool | None = None,
    metric_name: str | None = None,
    collate_fn: CollateFn | None = None,
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
    keep_global_batch: bool = False,
) -> SearchResult:
    """Find the fastest training config for ``model`` on ``dataset`` on this machine whose
    validation metric stays within ``tolerance`` of the baseline's.

    ``model`` is never modified: every trial trains a copy of its initial weights. Batches are
    ``(inputs, targets)`` unless ``forward(model, batch) -> (outputs, targets)`` says otherwise;
    ``loss_fn(outputs, targets)`` defaults to cross-entropy (MSE for float targets). Dict
    batches go to a Hugging Face model as its ``Trainer`` sends them: ``model(**batch)``, the
    model's own loss (or cross-entropy on ``.logits`` against ``labels``): no hook needed.

    ``metric="auto"`` chooses the guarded metric once, from a batch: the model's own loss where
    it computes one from ``labels`` (lower is better, as ``Trainer`` evaluates); accuracy for
    (batch, classes) logits against (batch,) labels; the loss otherwise (lower is better). The
    result says which and why. Or pass ``"accuracy"``, ``"loss"``, ``"token_accuracy"`` (tokens,
    labels -100 skipped, shifted for a causal LM) or ``metric(outputs, targets) -> float``
    (``higher_is_better`` says its direction). Every config validates in batches of the
    baseline's batch size; builtin metrics are sums over items (tokens), a callable's value is
    weighted by the items of each batch. ``metric_name`` names the metric in progress lines and
    reports ("metric" for a callable by default). ``dataset`` may be a ``LightningDataModule``:
    its training and validation datasets and its collate function are used (its own DataLoader
    settings are what autotune tunes).
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

    ``keep_global_batch=True``: candidates keep the baseline's global batch (``batch_size *
    gradient_accumulation_steps``), split differently, so need no accuracy runs (except with
    batch norm, which sees the micro-batch); a baseline batch that does not fit is split.

    ``launcher(study)``, when given, runs the candidates elsewhere: it is called once the
    baseline is measured and returns when its workers are done (the CLI's ``--workers`` starts
    ``autotune worker`` processes this way); this process then confirms the winner and exports.
    The hooks must then be importable functions, so the workers can load them.
    """
    args = dict(locals())  # every argument by name: for the checks and the settings
    started = time.time()
    _check_arguments(args)
    hooks = Hooks(**{name: args[name] for name in _HOOKS})
    device_str = resolve_device(device)
    report = reporter(progress, live=True)
    try:
        return _search(args, hooks, device_str, report, started)
    finally:
        report.close()  # a live display stops; its lines stay


def _search(
    args: Mapping[str, Any], hooks: Hooks, device: str, report: Progress, started: float
) -> SearchResult:
    """The search for checked arguments: workload, space, study, executor, then the loop."""
    base_cfg = _baseline_config(args["baseline"], device)
    prepared = prepare_workload(
        args["model"],
        args["dataset"],
        args["val_dataset"],
        hooks,
        val_fraction=args["val_fraction"],
        seed=args["seed"],
        eval_batch_size=base_cfg.batch_size,  # every candidate validates in the same batches
    )
    if prepared.note:
        report(prepared.note)
    restricted = restrict_space(
        load_space(args["space"]), prepared.workload, base_cfg, device, args["keep_global_batch"]
    )
    study = open_study(args["storage"], args["study_name"], args["seed"], args["sampler"])
    refs = prepared.hooks.references()  # the metric chosen, never "auto"
    launcher = args["launcher"]
    _check_launcher(launcher, refs, study)
    executor, fallback = make_executor(prepared.workload, args["isolation"], env=worker_env())
    if fallback:
        report(fallback)
    env = environment(device)
    settings = _settings(
        args,
        task=prepared.workload.task,
        refs=refs,
        metric_reason=prepared.metric.reason,
        eval_batch_size=prepared.workload.eval_batch_size,
        stratified=prepared.stratified,
        space=restricted,
        baseline=base_cfg,
        n_train=len(prepared.workload.train),  # type: ignore[arg-type]
        split_free=not has_batch_norm(prepared.workload.model),
        started=started,
        isolated=executor.isolated,
        environment=env,
    )
    search = Search(
        study=study,
        settings=settings,
        executor=executor,
        report=report,
        fingerprint=env["fingerprint"],
        launcher=launcher,
    )
    try:
        interrupted = search.run()
    finally:
        executor.close()
    return SearchResult.from_ledger(
        search.ledger(),
        search.settings,
        study_name=study.study_name,
        storage=redact(args["storage"]),
        seconds=time.time() - started,
        interrupted=interrupted,
        memory=search.memory,
        skipped=coverage.read_skipped(study),
    )


# -- Arguments --------------------------------------------------------------------------------

_HOOKS = (
    "forward",
    "loss_fn",
    "metric",
    "higher_is_better",
    "metric_name",
    "collate_fn",
    "optimizer",
)


def _check_arguments(args: Mapping[str, Any]) -> None:
    if not isinstance(args["model"], nn.Module):
        raise TypeError(
            f"`model` must be a torch.nn.Module, but got {type(args['model']).__name__}. "
            "Pass the model instance (not its class or a factory)."
        )
    check_number("tolerance", args["tolerance"], rule=">= 0", ok=lambda v: v >= 0)
    check_int("n_trials", args["n_trials"], rule=">= 1", ok=lambda v: v >= 1, optional=True)
    check_number("timeout", args["timeout"], rule="> 0 seconds", ok=lambda v: v > 0, optional=True)
    check_number("planned_epochs", args["planned_epochs"], rule="> 0", ok=lambda v: v > 0)
    check_number("val_fraction", args["val_fraction"], rule="in (0, 1)", ok=lambda v: 0 < v < 1)
    check_int("accuracy_repeats", args["accuracy_repeats"], rule=">= 1", ok=lambda v: v >= 1)
    check_int(
        "accuracy_samples", args["accuracy_samples"], rule=">= 1", ok=lambda v: v >= 1,
        optional=True,
    )  # fmt: skip
    check_int("seed", args["seed"], rule="an int", ok=lambda v: True)
    check_flag("guided", args["guided"])
    check_flag("keep_global_batch", args["keep_global_batch"])
    check_choice("isolation", args["isolation"], ISOLATION_MODES)
    check_number(
        "trial_timeout",
        args["trial_timeout"],
        rule="> 0 seconds or None",
        ok=lambda v: v > 0,
        optional=True,
    )


def _check_launcher(
    launcher: Callable[[optuna.Study], None] | None, refs: HookRefs, study: optuna.Study
) -> None:
    """Workers load the hooks by reference and reach the study through its storage."""
    if launcher is None:
        return
    if refs.unnamed:
        raise ArgumentError(
            f"Workers cannot load the {', '.join(refs.unnamed)} hook(s): they are lambdas, "
            "local functions or defined in __main__. Define them in an importable module."
        )
    if isinstance(study._storage, optuna.storages.InMemoryStorage):
        raise ArgumentError(
            "Workers need a storage they can reach: pass storage= (e.g. 'sqlite:///autotune.db' "
            "on one host, 'postgresql://...' across hosts)."
        )


def _settings(args: Mapping[str, Any], *, task: Task, **facts: Any) -> SearchSettings:
    """The search's settings: the user's arguments and what preparing the search found."""
    timeout = args["timeout"]
    if args["n_trials"] is None and timeout is None:
        timeout = DEFAULT_TIMEOUT
    return SearchSettings(
        tolerance=float(args["tolerance"]),
        metric_name=task.metric_name,
        higher_is_better=task.higher_is_better,
        hooks=facts.pop("refs"),
        seed=args["seed"],
        val_fraction=float(args["val_fraction"]),
        budget=args["budget"] or Budget(),
        calibrate=args["budget"] is None,
        accuracy_repeats=args["accuracy_repeats"],
        accuracy_samples=args["accuracy_samples"],
        planned_epochs=float(args["planned_epochs"]),
        n_trials=args["n_trials"],
        timeout=None if timeout is None else float(timeout),
        trial_timeout=args["trial_timeout"],
        isolation=args["isolation"],
        guided=args["guided"],
        space_asked=facts.get("space"),
        **facts,
    )


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


# -- The space for this device and model ------------------------------------------------


def has_batch_norm(model: nn.Module) -> bool:
    """Whether ``model`` has batch-norm layers: their statistics see each micro-batch alone."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def restrict_space(
    space: SearchSpace,
    workload: Workload,
    baseline: TrainingConfig,
    device: str,
    keep_global_batch: bool = False,
) -> SearchSpace:
    """``space`` without what cannot matter on this device and model, widened to include the
    baseline (every trial is then a point any sampler understands); with
    ``keep_global_batch``, narrowed to the splits of the baseline's global batch."""
    model = workload.model
    impls = space.knobs.get("optimizer_impl")
    facts = _knobs.Facts(
        device=describe_device(device),
        has_conv=any(isinstance(m, nn.Conv2d | nn.Conv3d) for m in model.modules()),
        n_blocks=len(apply.find_repeated_blocks(model)),
        n_train=len(workload.train),  # type: ignore[arg-type]
        current_threads=torch.get_num_threads(),
        # Tried only where the space has the knob: it builds an optimizer per implementation.
        optimizer_impls=(
            apply.supported_optimizer_impls(workload.optimizer, device)
            if isinstance(impls, Choice)
            else ("default",)
        ),
        data_on_device=on_accelerator(workload.train[0]),
    )
    restricted = _restrict_workers(space.restrict(facts), workload)
    if keep_global_batch:
        restricted = restricted.keeping_global_batch(baseline)
        if has_batch_norm(model):
            restricted = restricted.with_note(
                "keep_global_batch: the model has batch-norm layers, whose statistics see "
                "the micro-batch: a split of the global batch changes them, so it gets the "
                "accuracy check"
            )
    restricted = restricted.including(baseline, baseline)
    for note in restricted.notes:
        log.info("space: %s", note)
    return restricted


def start_method() -> str:
    """The start method DataLoader workers will use: the one set, else the platform's
    default (fork on Linux up to Python 3.13, forkserver from 3.14, spawn on macOS and
    Windows), read without fixing it (``get_context().get_start_method()`` would)."""
    chosen = multiprocessing.get_start_method(allow_none=True)
    return chosen or multiprocessing.get_all_start_methods()[0]


def _restrict_workers(space: SearchSpace, workload: Workload) -> SearchSpace:
    """DataLoader workers started by 'spawn' or 'forkserver' (the default off Linux) need a
    picklable dataset and collate_fn: without one, search workers=0 only, and say why."""
    workers = space.knobs.get("num_workers")
    if not isinstance(workers, Choice) or workers.values == (0,):
        return space
    if start_method() == "fork":
        return space  # forked workers inherit the dataset: nothing is pickled
    bad = []
    for name, value in (("dataset", workload.train), ("collate_fn", workload.task.collate_fn)):
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
    return space.with_choice("num_workers", (0,), note)
