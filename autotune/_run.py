"""A search, from what every trial trains to its result: the space restricted to the device and
model, the study opened, the trials' executor, the settings published, the loop, the result.

``find_best`` (a model and datasets, autotune's own loop) and ``tune`` (your Lightning or
Hugging Face trainer's loop) prepare a :class:`~autotune._trial.workload.Prepared` each way and
hand it here, so both paths search, store, resume and report alike.
"""

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

from autotune._checks import check_number
from autotune._device import describe_device, environment
from autotune._display import reporter
from autotune._errors import ArgumentError, AutotuneError, ConfigError, DataError
from autotune._knobs import apply, registry
from autotune._knobs.config import TrainingConfig
from autotune._options import PLANNED_EPOCHS, TIMEOUT, SearchOptions
from autotune._progress import Briefed, Progress
from autotune._result.result import SearchResult
from autotune._search import coverage
from autotune._search.loop import Search
from autotune._search.settings import SearchSettings
from autotune._search.storage import load_study, open_study, read_guard_failure, redact
from autotune._search.warm import STUDY, WarmStart, carried, load_warm_start
from autotune._space import Choice, SearchSpace, load_space
from autotune._stream import Stream
from autotune._task import TaskRefs
from autotune._trial.bounded import ITEM_HINT, SetUpLimit, bounded, step
from autotune._trial.executors import make_executor
from autotune._trial.fingerprint import model_fingerprint
from autotune._trial.isolation import worker_env
from autotune._trial.measure import machine_meter
from autotune._trial.outcome import Budget
from autotune._trial.runner import preserved_rng
from autotune._trial.streaming import first_items
from autotune._trial.task import holds_device_tensors
from autotune._trial.workload import Prepared, SearchStart, Workload

__all__ = [
    "baseline_config",
    "check_limits",
    "check_ranks",
    "has_batch_norm",
    "keeps_callers_rng",
    "restrict_space",
    "run_search",
    "search",
    "setup_limit",
    "start_method",
]

log = logging.getLogger("autotune")
_P = ParamSpec("_P")
_R = TypeVar("_R")

# Each call into the user's code before the first trial may take this share of the search's
# budget: set-up counts against the budget (the deadline runs from find_best's call), so one
# past half of it leaves too little to measure anything worth the answer, while a sound one
# (a dataset read from disk, a forward of two items on the CPU) takes seconds. The floor keeps
# a short budget from failing a slow but sound set-up (a model loaded from disk, a first call
# that builds a cache); it still ends `--timeout 30` on a hang within about twice its budget.
SETUP_SHARE = 0.5
SETUP_FLOOR = 30.0


def setup_limit(timeout: float | None, n_trials: int | None = None) -> SetUpLimit:
    """How long each call into the user's code before a search's first trial may take:
    :data:`SETUP_SHARE` of its budget (the default budget where it has none), at least
    :data:`SETUP_FLOOR` seconds."""
    budget = TIMEOUT if timeout is None else float(timeout)
    said = f"{SETUP_SHARE:.0%} of the search's {budget:g} s budget"
    if timeout is None:
        said = f"{SETUP_SHARE:.0%} of the default {budget:g} s budget"
        said += "" if n_trials is None else " (the search has no timeout)"
    share = SETUP_SHARE * budget
    if share >= SETUP_FLOOR:
        return SetUpLimit(share, said)
    return SetUpLimit(
        SETUP_FLOOR, f"the least any call before the first trial gets ({said} is {share:.3g} s)"
    )


def keeps_callers_rng(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """The user's dataset may draw from the global RNGs (augmentation) while autotune validates
    and splits it: give the caller back the RNG states they had."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with preserved_rng("cuda:0" if torch.cuda.is_available() else "cpu"):
            return fn(*args, **kwargs)

    return wrapper


def check_limits(tolerance: Any, timeout: Any) -> None:
    """The two limits every search takes as keywords."""
    check_number("tolerance", tolerance, rule=">= 0", ok=lambda v: v >= 0)
    check_number("timeout", timeout, rule="> 0 seconds", ok=lambda v: v > 0, optional=True)


def search(
    prepare: Callable[[], SearchStart],
    *,
    space: str | SearchSpace | Mapping[str, Any],
    tolerance: float,
    timeout: float | None,
    options: SearchOptions,
    progress: bool | Callable[[str], None],
    started: float,
) -> SearchResult:
    """A search from what ``prepare`` reads and checks (while the progress display is up):
    space, study, executor, then the loop."""
    report = reporter(progress, live=True)
    limit = setup_limit(timeout, options.n_trials)
    try:
        start = bounded(
            prepare, limit, doing="reading and checking the model and data before the first trial"
        )
        if options.planned_epochs is None and start.planned_epochs is not None:
            options = options.replace(planned_epochs=start.planned_epochs)
        options = stream_length(options, start.prepared.workload, start.baseline)
        return run_search(
            start.prepared,
            start.baseline,
            space=space,
            tolerance=tolerance,
            timeout=timeout,
            options=options,
            report=report,
            started=started,
            limit=limit,
        )
    finally:
        report.close()  # a live display stops; its lines stay


def stream_length(
    options: SearchOptions, workload: Workload, baseline: TrainingConfig | None = None
) -> SearchOptions:
    """A stream's run is its planned samples, over as many passes as they take (the training
    set's size to every reader that plans by samples is one pass, ``len(Stream)``):
    ``planned_epochs`` its passes. A stream whose pass is shorter than ``baseline``'s batch is
    an error: no batch could be read whole."""
    if not isinstance(workload.train, Stream):
        if options.planned_samples is not None:
            raise ArgumentError(
                f"planned_samples={options.planned_samples} is the length of a stream's run; "
                "the dataset is map-style: give planned_epochs= (--planned-epochs) instead."
            )
        return options
    stream = workload.train
    batch = None if baseline is None else baseline.batch_size * baseline.ranks
    if stream.length is not None and batch is not None and stream.length < batch:
        raise DataError(
            f"The stream ({type(stream.source).__name__}) holds {stream.length:,} items, fewer "
            f"than one batch of the baseline's ({batch:,}): no batch can be read whole. Give a "
            "longer stream, or a smaller batch_size."
        )
    return options.replace(planned_epochs=stream.passes)


def run_search(
    prepared: Prepared,
    baseline: TrainingConfig,
    *,
    space: str | SearchSpace | Mapping[str, Any],
    tolerance: float,
    timeout: float | None,
    options: SearchOptions,
    report: Progress,
    started: float,
    limit: SetUpLimit | None = None,
) -> SearchResult:
    """The search for a prepared workload: space, study, executor, then the loop. ``limit``
    bounds the space's restriction, which reads an item and calls the optimizer factory (the
    search's own where None)."""
    workload = prepared.workload
    oversized = baseline.batch_exceeds(len(workload.train))  # type: ignore[arg-type]
    if oversized is not None:
        raise ConfigError(
            f"The baseline's batch cannot train: {oversized}. Pass a smaller batch_size or "
            "gradient_accumulation_steps in baseline=, or more training data."
        )
    if prepared.note:
        report(prepared.note)
    asked = load_space(space)
    restricted = bounded(
        lambda: restrict_space(
            asked, workload, baseline, baseline.device, options.keep_global_batch
        ),
        limit or setup_limit(timeout, options.n_trials),
        doing="restricting the search space to the model and data",
    )
    env = environment(baseline.device)
    warm = None
    if options.warm_start is not None:  # a bad file is an error before the study is opened
        warm = _warm_start(options, restricted, baseline, env)
        # Within the width on a person's display; the result's search.warm_start has it all.
        Briefed(report, lambda whole: None)(warm.line())
    study = open_study(options.storage, options.study_name, options.seed, options.sampler)
    refs = prepared.refs  # the metric chosen, never "auto"
    _check_launcher(options, refs, study, prepared)
    _check_ranks_path(options, prepared)
    executor, fallback = make_executor(
        workload,
        options.isolation,
        env=worker_env(),
        ranks=baseline.ranks,
        device=baseline.device,
    )
    if fallback:
        report(fallback)
    if options.n_trials is None and timeout is None:
        timeout = TIMEOUT
    settings = SearchSettings(
        tolerance=float(tolerance),
        metric_name=workload.task.metric_name,
        higher_is_better=workload.task.higher_is_better,
        hooks=refs,
        seed=options.seed,
        val_fraction=float(options.val_fraction),
        stratified=prepared.stratified,
        # Without the values that failed here (a warm start's); the space asked for is what
        # a resumed search is compared to.
        space=restricted if warm is None else warm.narrowed(restricted),
        space_asked=restricted,
        baseline=baseline,
        baseline_asked=baseline,
        budget=options.budget or Budget(),
        calibrate=options.budget is None,
        accuracy_repeats=options.accuracy_repeats,
        accuracy_samples=options.accuracy_samples,
        n_train=len(workload.train),  # type: ignore[arg-type]
        planned_epochs=float(options.planned_epochs or PLANNED_EPOCHS),
        n_trials=options.n_trials,
        timeout=None if timeout is None else float(timeout),
        started=started,
        trial_timeout=options.trial_timeout,
        isolation=options.isolation,
        isolated=executor.isolated,
        guided=options.guided,
        split_free=not has_batch_norm(workload.model),
        metric_reason=prepared.metric.reason,
        eval_batch_size=workload.eval_batch_size,
        environment=env,
        trainer=workload.trainer_kind,
        timed_seconds=options.timed_seconds,
        min_pairs=options.min_pairs or 0,
        data_note=prepared.note,
        streams=isinstance(workload.train, Stream),
        model_fingerprint=model_fingerprint(workload.model),
        data_fingerprint=prepared.data_fingerprint,
        warm_start=warm,
    )
    search = Search(
        study=study,
        settings=settings,
        executor=executor,
        report=report,
        fingerprint=env["fingerprint"],
        launcher=options.launcher,
        load_meter=machine_meter(settings.baseline.device),
    )
    try:
        interrupted = search.run()
    finally:
        executor.close()
    return SearchResult.from_ledger(
        search.ledger(),
        search.settings,
        study_name=study.study_name,
        storage=redact(options.storage),
        seconds=time.time() - started,
        interrupted=interrupted,
        memory=search.memory,
        skipped=coverage.read_skipped(study),
        no_check=read_guard_failure(study),
    )


def _warm_start(
    options: SearchOptions, space: SearchSpace, baseline: TrainingConfig, env: dict[str, Any]
) -> WarmStart:
    """What the search carries over from ``options.warm_start``: a result file, or
    ``study:NAME`` in the search's storage (the CLI's rerun on an edited model starts from the
    study of the model before the edit). A study that is not there is an error; one that
    measured nothing yet carries nothing, and says so."""
    source = options.warm_start
    assert source is not None
    if not (isinstance(source, str) and source.startswith(STUDY)):
        return load_warm_start(source, space=space, baseline=baseline, environment=env)
    name = source.removeprefix(STUDY)
    if options.storage is None:
        raise ArgumentError(f"warm_start: {source!r} names a study; give the storage it is in.")
    try:
        load_study(options.storage, name)
    except AutotuneError as exc:
        raise ArgumentError(f"warm_start: {exc}") from None
    try:
        data = SearchResult.from_study(options.storage, name).to_dict()
    except Exception as exc:  # whatever it lacks, the search goes on without it
        return WarmStart(
            f"study {name!r}", notes=(f"nothing carried over: it holds no result yet ({exc})",)
        )
    return carried(data, f"study {name!r}", space, baseline, env)


def check_ranks(ranks: int, device: str) -> None:
    """Data-parallel trials need a launcher's worth of devices: one GPU per rank on CUDA."""
    if ranks == 1 or torch.device(device).type != "cuda":
        return
    count = torch.cuda.device_count()
    if ranks > count:
        raise ArgumentError(
            f"ranks={ranks} puts one rank on each GPU, but {count} are visible "
            "(CUDA_VISIBLE_DEVICES): give at most that many ranks."
        )


def _check_ranks_path(options: SearchOptions, prepared: Prepared) -> None:
    """Data-parallel trials train in autotune's own loop, searched from one process."""
    if options.ranks == 1:
        return
    kind = prepared.workload.trainer_kind
    if kind is not None:
        raise ArgumentError(
            f"ranks={options.ranks}: a {kind} trainer's trials run its own loop in one "
            "process, so autotune cannot make them data-parallel; set its own strategy "
            "(devices / DDP) and tune it with ranks=1, or search the model with find_best."
        )
    if options.launcher is not None:
        raise ArgumentError(
            f"ranks={options.ranks} with search processes (a launcher, --processes): each "
            "trial already uses several processes; run one search per host instead (see the "
            'documentation\'s docs/scaling-out.md, "Several hosts").'
        )


def _check_launcher(
    options: SearchOptions, refs: TaskRefs, study: optuna.Study, prepared: Prepared
) -> None:
    """Workers load the hooks by reference and reach the study through its storage."""
    if options.launcher is None:
        return
    if prepared.workload.trainer_kind is not None:
        raise ArgumentError(
            "Search processes (a launcher, --processes) load a model and datasets by "
            f"reference; a {prepared.workload.trainer_kind} trainer's study runs its trials in "
            "this process and its own trial workers. Leave the launcher out."
        )
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


def baseline_config(
    baseline: TrainingConfig | Mapping[str, Any] | None, device: str
) -> TrainingConfig:
    """The baseline as given (a config or a dict of its fields; PyTorch's defaults for None),
    on ``device``."""
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
    """``space`` without what cannot matter on this device and model (nor what the trainer
    that runs the trials cannot apply), widened to include the baseline (every trial is then a
    point any sampler understands); with ``keep_global_batch``, narrowed to the splits of the
    baseline's global batch."""
    model = workload.model
    impls = space.knobs.get("optimizer_impl")
    train = workload.train
    stream = train if isinstance(train, Stream) else None
    if stream is not None:
        first = first_items(stream.source, 1)[0]
    else:
        step("`dataset[0]`, read to see whether the data already lives on the device", ITEM_HINT)
        first = train[0]
    data_on_device = holds_device_tensors(first)
    step(
        "your optimizer factory, built on one parameter (which implementations it takes)",
        "Build the optimizer alone to see it return.",
    )
    facts = registry.Facts(
        device=describe_device(device),
        has_conv=any(isinstance(m, nn.Conv2d | nn.Conv3d) for m in model.modules()),
        n_blocks=len(apply.find_repeated_blocks(model)),
        n_train=len(workload.train),  # type: ignore[arg-type]
        current_threads=torch.get_num_threads(),
        # Tried only where the space has the knob: it builds an optimizer per implementation.
        optimizer_impls=(
            apply.supported_optimizer_impls(workload.optimizer, device)
            if isinstance(impls, Choice) and workload.loop is None
            else ("default",)
        ),
        data_on_device=data_on_device,
        adaptive_optimizer=workload.loop is None and apply.adapts_steps(workload.optimizer),
        length_searchable=workload.loop is None,
        ranks=baseline.ranks,
        has_buffers=any(True for _ in model.buffers()),
        stream_workers=None if stream is None else stream.workers,
        stream_why="" if stream is None else stream.workers_why,
    )
    restricted = _restrict_workers(space.restrict(facts), workload)
    if workload.loop is not None:
        restricted = workload.loop.restrict(restricted)
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
