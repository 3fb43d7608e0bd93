"""Re-measure a result on this machine: ``autotune.verify`` and ``autotune verify``.

The winner and its baseline are run once each and the runs discarded (warm-up), then measured
side by side in paired rounds, each in an order drawn afresh as the search's rounds draw theirs
(so drift in the machine's state hits both alike), each with a fixed timing budget
(:data:`DEFAULT_BUDGET` unless ``budget=`` is given), not the one the search calibrated from its
time budget. Each round's speedup is the baseline's projected training time over the winner's,
as the search ranks them; their figure with its 95% interval (the search's one function), and
whether that interval overlaps the one the result recorded, are reported. With
``accuracy_seeds``, both are also trained on the search's accuracy budget and validated. A
result measured on other hardware or software is flagged field by field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune._checks import check_int, check_number
from autotune._device import environment, resolve_device
from autotune._display import reporter
from autotune._errors import ArgumentError, ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._options import PLANNED_EPOCHS, VERIFY_ROUNDS
from autotune._progress import Report
from autotune._result.result import SearchResult
from autotune._search.derived import round_interval, round_speedup, speedup
from autotune._speed import stats as speed
from autotune._speed import words as speed_words
from autotune._speed.stats import Interval
from autotune._task import Task, as_task, check_model
from autotune._trial.bounded import SetUpLimit, bounded
from autotune._trial.data import DataModuleLike
from autotune._trial.executors import make_executor
from autotune._trial.failures import FailureReason
from autotune._trial.fingerprint import (
    data_changes,
    data_fingerprint,
    measured_on,
    model_changes,
    model_fingerprint,
)
from autotune._trial.isolation import InProcessExecutor, TrialExecutor, worker_env
from autotune._trial.measure import Measurement
from autotune._trial.metrics import AUTO, BUILTIN_METRICS
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome
from autotune._trial.runner import run_samples
from autotune._trial.workload import Workload, prepare_workload
from autotune._verify_full import FULL_SEEDS, FullReport, run_full

__all__ = ["VerifyReport", "compare_environments", "setup_limit", "verify"]

# The search calibrates each trial's budget from the baseline's speed and its time budget;
# a check gets this fixed one, longer than the search's default (outcome.Budget).
DEFAULT_BUDGET = Budget(warmup_steps=3, timed_samples=4096, min_timed_steps=10, chunks=5)

# Fields of a result's `environment` that decide timings, and how to name them.
_ENV_FIELDS = (
    ("device_name", "device"),
    ("cpu_model", "CPU model"),
    ("cpu_count", "CPU count"),
    ("torch", "torch version"),
    ("cuda", "CUDA version"),
    ("cudnn", "cuDNN version"),
    ("driver", "GPU driver"),
)


def compare_environments(
    recorded: Mapping[str, Any] | None, current: Mapping[str, Any]
) -> list[str]:
    """One warning per timing-relevant difference between where a result was measured and
    here; empty when they match."""
    if not recorded:
        return [
            "the result has no `environment` record, so it cannot be told whether it was "
            "measured on this machine"
        ]
    out = []
    for key, label in _ENV_FIELDS:
        if key not in recorded:
            continue
        old, new = recorded.get(key), current.get(key)
        if old != new:
            out.append(f"{label} differs: the result was measured with {old!r}, here it is {new!r}")
    old_fp, new_fp = recorded.get("fingerprint"), current.get("fingerprint")
    if not out and old_fp is not None and old_fp != new_fp:
        out.append(
            f"environment fingerprint differs ({old_fp} recorded, {new_fp} here) although the "
            "listed fields match: the result may have been edited or measured elsewhere"
        )
    return out


def _compared(
    data: Mapping[str, Any], here: str, model: Any, train: Any, val: Any, report: Report
) -> list[str]:
    """The warnings where the result was measured elsewhere, or on another model or data
    (its fingerprints, named in a line first), each said."""
    search = data.get("search") or {}
    warnings = compare_environments(data.get("environment"), environment(here))
    warnings += other_model(search, model, train, val)
    named = measured_on(search)
    if named:
        report(f"the result was measured on {named.removeprefix('fingerprints: ')}")
    for line in warnings:
        report(f"warning: {line}")
    return warnings


def other_model(search: Mapping[str, Any], model: Any, train: Any, val: Any) -> list[str]:
    """A warning where the model or data given differ from those the result was measured on
    (its fingerprints): its speed-up and accuracy verdict are of those; empty where they match
    or the result names none (written before fingerprints were, or a trainer's)."""
    if not isinstance(model, nn.Module) or not search.get("model_fingerprint"):
        return []
    try:
        changes = model_changes(search.get("model_fingerprint"), model_fingerprint(model))
        if train is not None and search.get("data_fingerprint"):
            changes += data_changes(search["data_fingerprint"], data_fingerprint(train, val))
    except Exception as exc:  # a fingerprint that cannot be read is no failure
        return [f"the model and data could not be compared with the result's ({exc})"]
    if not changes:
        return []
    return [
        f"the model or data differ from those the result was measured on ({'; '.join(changes)}): "
        "its figures and accuracy verdict are of those; search this one to know its own"
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The winner against its baseline, re-measured here. Ratios are winner over baseline
    (higher is better for the winner), paired round by round."""

    winner: TrainingConfig
    baseline: TrainingConfig
    device: str
    baseline_measurements: tuple[Measurement, ...]
    winner_measurements: tuple[Measurement, ...]
    recorded_speedup: float | None
    recorded_throughput_ratio: float | None
    planned_samples: int
    planned_epochs: float
    environment_warnings: tuple[str, ...]
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    metric_name: str = "metric"
    tolerance: float | None = None
    accuracy: dict[str, Any] | None = None  # {"samples", "baseline": [...], "winner": [...]}
    seconds: float = 0.0
    full: FullReport | None = None  # the whole planned run of both (verify --full)
    recorded_interval: tuple[float, float] | None = None  # the search's 95% interval

    @property
    def same_config(self) -> bool:
        return self.winner == self.baseline

    @property
    def throughput_ratios(self) -> list[float]:
        return [
            w.throughput / b.throughput
            for b, w in zip(self.baseline_measurements, self.winner_measurements, strict=False)
        ]

    @property
    def speedups(self) -> list[float]:
        """Projected-training-time speedup of each round, one-time costs amortised as the
        search ranked them."""
        out = []
        for b, w in zip(self.baseline_measurements, self.winner_measurements, strict=False):
            bt = self._projected(self.baseline, b)
            wt = self._projected(self.winner, w)
            ratio = speedup(bt, wt)
            if ratio is not None:
                out.append(ratio)
        return out

    def _projected(self, cfg: TrainingConfig, m: Measurement) -> float:
        """``cfg``'s planned run at ``m``'s speed: its share of the planned epochs."""
        samples = round(self.planned_samples * cfg.train_fraction)
        return m.projected_time(samples, cfg.epochs(self.planned_epochs))

    @property
    def median_speedup(self) -> float | None:
        """The rounds' speedup as the search computes it (:func:`derived.round_speedup`)."""
        return round_speedup(self.speedups)

    @property
    def interval(self) -> Interval | None:
        """The speedup here with its 95% interval, as the search computes it
        (:func:`derived.round_interval`, over this run's fixed number of rounds)."""
        return round_interval(self.speedups, looks=1)

    @property
    def agreement(self) -> str | None:
        """Whether this run's interval overlaps the search's: "agrees", "slower here" (this
        run's interval wholly below the search's) or "faster here"; None where either is
        missing."""
        here, there = self.interval, self.recorded_interval
        if here is None or there is None or self.same_config:
            return None
        if here.high < there[0]:
            return "slower here"
        if here.low > there[1]:
            return "faster here"
        return "agrees"

    @property
    def median_throughput_ratio(self) -> float | None:
        return round_speedup(self.throughput_ratios)

    @property
    def faster_here(self) -> bool:
        """Whether the winner still beats the baseline here beyond the noise (its interval's
        lower bound above 1; from one round, that round's ratio above 1)."""
        if self.same_config:
            return True
        if "winner" in self.failures:
            return False
        figure = self.interval
        if figure is None:  # one round is one draw: its ratio is all there is
            median = self.median_speedup
            return median is not None and median > 1.0
        return figure.above_one

    @property
    def warnings(self) -> list[str]:
        out = list(self.environment_warnings)
        for name, message in self.failures.items():
            out.append(f"the {name} config failed here: {message}")
        figure = self.interval
        if figure is not None and not self.same_config:
            if not figure.above_one:
                out.append(
                    "the winner is not faster than the baseline here beyond the noise: "
                    f"{speed_words.interval(figure)}"
                )
            if self.agreement in ("slower here", "faster here") and self.recorded_interval:
                low, high = self.recorded_interval
                out.append(
                    f"{self.agreement} than at search time: {speed_words.interval(figure)} "
                    f"against the search's {self.recorded_speedup or 0:.2f}x "
                    f"(95% interval {low:.2f}-{high:.2f}x)"
                )
        for name, ms in (
            ("baseline", self.baseline_measurements),
            ("winner", self.winner_measurements),
        ):
            noisy = [m for m in ms if m.spread > 0.10]
            if len(noisy) > len(ms) // 2:
                out.append(
                    f"{name} timings are noisy ({len(noisy)} of {len(ms)} rounds spread > 10%): "
                    "close other programs or use more rounds / --timed-samples"
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "winner": self.winner.to_dict(),
            "baseline": self.baseline.to_dict(),
            "device": self.device,
            "rounds": len(self.speedups),
            "baseline_throughput": [m.throughput for m in self.baseline_measurements],
            "winner_throughput": [m.throughput for m in self.winner_measurements],
            "throughput_ratios": self.throughput_ratios,
            "speedups": self.speedups,
            "median_speedup": self.median_speedup,
            "speedup_interval": (
                None if self.interval is None else [self.interval.low, self.interval.high]
            ),
            "recorded_interval": (
                None if self.recorded_interval is None else list(self.recorded_interval)
            ),
            "agreement": self.agreement,
            "median_throughput_ratio": self.median_throughput_ratio,
            "recorded_speedup": self.recorded_speedup,
            "recorded_throughput_ratio": self.recorded_throughput_ratio,
            "faster_here": self.faster_here,
            "failures": dict(self.failures),
            "accuracy": self.accuracy,
            "full": None if self.full is None else self.full.to_dict(),
            "warnings": self.warnings,
            "seconds": self.seconds,
        }

    def summary(self) -> str:
        lines = [f"autotune verify on {self.device}"]
        lines.append(f"  winner:   {self.winner.describe()}")
        lines.append(f"  baseline: {self.baseline.describe()}")
        if self.same_config:
            lines.append(
                "  the winner is the baseline itself (nothing beat it): nothing to compare"
            )
        speedups, ratios = self.speedups, self.throughput_ratios
        if speedups:
            lines.append("")
            lines.append(f"  {'':28}{'middle':>10}{'min':>10}{'max':>10}{'recorded':>10}")
            for label, values, recorded in (
                ("speedup (projected time)", speedups, self.recorded_speedup),
                ("throughput ratio", ratios, self.recorded_throughput_ratio),
            ):
                rec = "n/a" if recorded is None else f"{recorded:.2f}x"
                lines.append(
                    f"  {label:28}{round_speedup(values) or 0.0:>9.2f}x{min(values):>9.2f}x"
                    f"{max(values):>9.2f}x{rec:>10}"
                )
            for name, ms in (
                ("baseline samples/s", self.baseline_measurements),
                ("winner samples/s", self.winner_measurements),
            ):
                tp = [m.throughput for m in ms]
                lines.append(
                    f"  {name:28}{statistics.median(tp):>10,.0f}{min(tp):>10,.0f}{max(tp):>10,.0f}"
                )
            lines.append(
                f"  ({len(speedups)} paired rounds, each in an order drawn afresh; projected "
                f"for {self.planned_samples:,} samples over {self.planned_epochs:g} epochs; "
                "middle: the ratios' geometric mean, the samples/s' median)"
            )
            figure = self.interval
            if figure is not None:
                lines.append(f"  speed-up here: {speed_words.interval(figure)}")
            if figure is not None and self.recorded_interval is not None:
                low, high = self.recorded_interval
                lines.append(
                    f"  the search's: {self.recorded_speedup or 0:.2f}x (95% interval "
                    f"{low:.2f}-{high:.2f}x): {self.agreement}"
                )
        if self.accuracy:
            b, w = self.accuracy["baseline"], self.accuracy["winner"]
            diff = statistics.fmean(w) - statistics.fmean(b)
            tol = "" if self.tolerance is None else f" (tolerance {self.tolerance:g})"
            lines.append(
                f"  val {self.metric_name} on {self.accuracy['samples']:,} samples over {len(b)} "
                f"seeds: baseline {statistics.fmean(b):.4f}, winner {statistics.fmean(w):.4f}, "
                f"difference {diff:+.4f}{tol}"
            )
        if self.full is not None:
            lines.extend(self.full.lines())
        lines.append("")
        if self.same_config:
            verdict = "the winner is the baseline: keep the baseline's settings"
        else:
            verdict = "the winner is " + ("faster here" if self.faster_here else "NOT faster here")
        lines.append(f"  verdict: {verdict}")
        lines.extend(f"  ! {w}" for w in self.warnings)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _load(result: SearchResult | Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(result, SearchResult):
        return result.to_dict()
    if isinstance(result, Mapping):
        data: Any = dict(result)
    elif isinstance(result, str | os.PathLike):
        try:
            data = json.loads(Path(result).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"Cannot read result file {str(result)!r}: {exc.strerror}.") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"Result file {str(result)!r} is not valid JSON: {exc}.") from None
    else:
        raise TypeError(
            "`result` must be a SearchResult, its JSON as a dict, or the path of a result JSON "
            f"file, but got {type(result).__name__}."
        )
    if not isinstance(data, dict) or "config" not in data or "baseline" not in data:
        raise ConfigError(
            "`result` is not an autotune result: it needs `config` and `baseline` (as "
            "result.save() writes them). A bare config has no baseline to compare against."
        )
    return data


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
    :mod:`autotune._verify_full`); each finished run is kept in ``resume`` (a JSON file), from
    which a verification stopped part way goes on.
    """
    started = time.monotonic()
    data = _load(result)
    if time_limit is not None:
        check_number("time_limit", time_limit, rule="> 0", ok=lambda v: v > 0)
    check_int("rounds", rounds, rule="an int >= 1", ok=lambda v: v >= 1)
    check_int("accuracy_seeds", accuracy_seeds, rule="an int >= 0", ok=lambda v: v >= 0)
    check_int("full_seeds", full_seeds, rule="an int >= 2", ok=lambda v: v >= 2)
    kind = _check_entry(data, model, trainer, task)
    task = as_task(task)
    winner, baseline, here = _configs_here(data, device)
    report = reporter(progress)
    search = data.get("search") or {}
    env_warnings = _compared(data, here, None if trainer else model, dataset, val_dataset, report)
    recorded = (search.get("hooks") or {}).get("metric")
    if task.metric == AUTO and recorded in BUILTIN_METRICS:
        task = task.replace(metric=recorded)  # the metric the search chose and guarded
    pair = {"baseline": baseline, "winner": winner}
    measure_budget = budget or DEFAULT_BUDGET
    explicit = _explicit_limit(time_limit, search)
    setup = _setup_limit(pair, run_limits(data, pair, explicit, budget=measure_budget))
    if trainer is not None:
        workload = bounded(
            lambda: _trainer_workload(data, kind, trainer, model, dataset, val_dataset),
            setup, doing=f"reading and checking your {kind} trainer before the first run",
        )  # fmt: skip
    else:
        workload = bounded(
            lambda: _own_workload(data, model, dataset, val_dataset, task, baseline, report),
            setup, doing="reading and checking the model and data before the first run",
        )  # fmt: skip
    inner = _executor(workload, here, report, ranks=baseline.ranks)
    start_up = START_UP if inner.isolated else 0.0
    limits = run_limits(data, pair, explicit, budget=measure_budget, start_up=start_up)
    executor = _Limited(inner, limits)
    try:
        seed = str(search.get("study_name") or "verify")
        measured, failures = _measure_rounds(pair, executor, measure_budget, rounds, report, seed)
        accuracy = _accuracy(data, pair, workload, executor, measure_budget, measured, failures,
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
                tolerance=_number(data.get("tolerance")), resume=resume, report=report,
            )  # fmt: skip
    finally:
        executor.close()
    return VerifyReport(
        winner=winner,
        baseline=baseline,
        device=here,
        baseline_measurements=tuple(measured["baseline"]),
        winner_measurements=tuple(measured["winner"]),
        recorded_speedup=_number(data.get("speedup")),
        recorded_throughput_ratio=_number(data.get("throughput_ratio")),
        recorded_interval=_pair(data.get("speedup_interval")),
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


def _explicit_limit(
    time_limit: float | None, search: Mapping[str, Any]
) -> tuple[float, str] | None:
    """The limit of every verify run where one is given (the user's, else the search's own
    trial limit), and whose it is; None where it is derived from the study."""
    if time_limit is not None:
        return time_limit, "the limit given (time_limit= / --trial-timeout)"
    if _number(search.get("trial_limit")) is not None:
        return float(search["trial_limit"]), "the search's own trial limit (trial_timeout)"
    return None


def setup_limit(
    result: SearchResult | Mapping[str, Any] | str | os.PathLike[str],
    *,
    time_limit: float | None = None,
    device: str | None = None,
    budget: Budget | None = None,
) -> SetUpLimit:
    """How long each call into the user's code before verify's first run may take (the CLI's
    factories; the checks of the model and data, the first forward among them), as
    :func:`verify` derives it for the same arguments."""
    data = _load(result)
    winner, baseline, _ = _configs_here(data, device)
    pair = {"baseline": baseline, "winner": winner}
    explicit = _explicit_limit(time_limit, data.get("search") or {})
    return _setup_limit(pair, run_limits(data, pair, explicit, budget=budget or DEFAULT_BUDGET))


def _setup_limit(
    pair: Mapping[str, TrainingConfig], limits: Mapping[TrainingConfig, RunLimit]
) -> SetUpLimit:
    """The longer of the two configs' run limits (no process's start-up: these calls run in
    this one): a check of two items does less than one run of either."""
    name = max(pair, key=lambda n: limits[pair[n]].seconds)
    limit = limits[pair[name]]
    return SetUpLimit(
        limit.seconds,
        f"the {name}'s limit of one verify run, the longer of the two: {limit.why}",
        longer="a longer run limit (time_limit=, --trial-timeout)",
    )


def _own_workload(
    data: Mapping[str, Any],
    model: Any,
    dataset: Any,
    val_dataset: Any,
    task: Task,
    baseline: TrainingConfig,
    report: Callable[[str], None],
) -> Workload:
    """The workload of a find_best result: the split find_best made, so that an accuracy
    check validates on the same items, in the search's validation batches (a result from
    before they were fixed: the baseline's)."""
    search = data.get("search") or {}
    prepared = prepare_workload(
        model,
        dataset,
        val_dataset,
        task,
        val_fraction=float(search.get("val_fraction") or 0.1),
        seed=int(search.get("seed") or 0),
        eval_batch_size=int(
            (data.get("validation") or {}).get("batch_size") or baseline.batch_size
        ),
        planned_samples=(data.get("metrics") or {}).get("planned_samples"),  # a stream's run
        search_workers=False,
    )
    if prepared.note:
        report(prepared.note)
    return prepared.workload


def _check_entry(data: Mapping[str, Any], model: Any, trainer: Any, task: Any) -> str | None:
    """What the result was searched through (a trainer's kind, None for find_best), checked
    against what was passed."""
    kind: str | None = (data.get("trainer") or {}).get("kind")
    if trainer is not None and task is not None:
        raise ArgumentError(
            "`task` does not apply with `trainer`: the trainer's own training step and "
            "evaluation are measured, guarding the metric the search guarded."
        )
    if trainer is None:
        if kind:
            raise ArgumentError(
                f"This result was measured through your {kind} trainer (autotune.tune): pass "
                "it, as tune took it (verify(result, trainer=...); --trainer FACTORY), and "
                "verify measures both configs through it."
            )
        check_model(model)
    return kind


def _trainer_workload(
    data: Mapping[str, Any],
    kind: str | None,
    trainer: Any,
    model: Any,
    dataset: Any,
    val_dataset: Any,
) -> Workload:
    """The workload a :func:`autotune.tune` result was searched on: the user's trainer, its
    module and data (Lightning) or what it holds (Hugging Face), guarding the same metric."""
    from autotune._tune import trainer_kind

    given = trainer_kind(trainer)
    if given is None or not kind:
        raise ArgumentError(
            f"`trainer` is a {type(trainer).__name__}, but "
            + (
                f"this result was searched through a {kind} trainer."
                if kind
                else "this result was searched with find_best (autotune's own loop): pass "
                "the model and dataset instead."
            )
        )
    if given != kind:
        raise ArgumentError(
            f"`trainer` is a {given} trainer, but this result was searched through a {kind} one."
        )
    validation = data.get("validation") or {}
    metric, higher = validation.get("metric"), validation.get("higher_is_better")
    search = data.get("search") or {}
    seed = int(search.get("seed") or 0)
    # A stream's run as it was searched (the trainer's max_steps, or the options' samples).
    streamed = (data.get("metrics") or {}).get("planned_samples") if search.get("streams") else None
    samples = None if streamed is None else int(streamed)
    if kind == "lightning":
        from autotune._trial.lightning_setup import prepare_lightning

        datamodule = dataset if hasattr(dataset, "train_dataloader") else None
        start = prepare_lightning(
            trainer, model, datamodule=datamodule,
            train_dataloaders=None if datamodule is not None else dataset,
            val_dataloaders=val_dataset, metric=metric, higher_is_better=higher, seed=seed,
            planned_samples=samples,
        )  # fmt: skip
    else:
        if model is not None or dataset is not None:
            raise ArgumentError(
                "A Hugging Face Trainer holds its model and data: leave out the model and "
                "dataset (verify(result, trainer=trainer))."
            )
        from autotune._trial.hf_setup import prepare_hf

        start = prepare_hf(
            trainer, metric=metric, higher_is_better=higher, seed=seed, planned_samples=samples
        )
    return start.prepared.workload


RUN_LIMIT = 600.0  # seconds a verify run may take where nothing says how long it should
LIMIT_FACTOR = 3.0  # a run's limit: this many times the longest run the study measured of it
START_UP = 30.0  # seconds on top where each run starts a process (imports, a CUDA context)
MIN_LIMIT = 10.0  # seconds: no measured limit is shorter


@dataclasses.dataclass(frozen=True)
class RunLimit:
    """How long one config's verify runs may take, and why that long: ``seconds`` for a
    throughput run; an accuracy run adds ``LIMIT_FACTOR`` times its samples at ``throughput``
    (the slowest the study measured; None: no measurement to scale by)."""

    seconds: float
    why: str
    throughput: float | None = None

    def of(self, accuracy: AccuracyCheck | None, cfg: TrainingConfig) -> tuple[float, str]:
        if accuracy is None or self.throughput is None:
            return self.seconds, self.why
        training = len(accuracy.seeds) * run_samples(cfg, accuracy.samples) / self.throughput
        return (
            self.seconds + LIMIT_FACTOR * training,
            f"{self.why}, plus {LIMIT_FACTOR:g}x the {training:.0f} s its accuracy runs "
            "should train",
        )


def run_limits(
    data: Mapping[str, Any],
    pair: Mapping[str, TrainingConfig],
    explicit: tuple[float, str] | None,
    *,
    budget: Budget = DEFAULT_BUDGET,
    start_up: float = 0.0,
) -> dict[TrainingConfig, RunLimit]:
    """Each config's verify limit: ``explicit`` (seconds, and whose: the user's, or the
    search's own trial limit) where given; else :data:`LIMIT_FACTOR` times the longest run
    the study measured of that config, or of the steps ``budget`` takes at the slowest
    throughput it measured where that is longer, plus ``start_up`` where each run starts a
    process, at least :data:`MIN_LIMIT`; :data:`RUN_LIMIT` where it measured none on this
    device (a model that hangs is then stopped in seconds, not in ten minutes)."""
    out: dict[TrainingConfig, RunLimit] = {}
    for cfg in pair.values():
        if explicit is not None:
            out[cfg] = RunLimit(*explicit)
            continue
        runs = [
            t
            for t in data.get("trials") or []
            if not t.get("failure") and t.get("seconds") and _same_config(t.get("config"), cfg)
        ]
        if not runs:
            out[cfg] = RunLimit(
                RUN_LIMIT, f"the default: the study measured no run of it on {cfg.device}"
            )
            continue
        longest = max(float(t["seconds"]) for t in runs)
        rates = [float(t["throughput"]) for t in runs if t.get("throughput")]
        why = f"{LIMIT_FACTOR:g}x the longest run the study measured of it ({longest:.1f} s)"
        if rates:  # verify's budget may take more steps than the search's did
            steps = sum(budget.steps(cfg.batch_size, cfg.gradient_accumulation_steps))
            work = steps * cfg.batch_size / min(rates)
            if work > longest:
                longest = work
                why = (
                    f"{LIMIT_FACTOR:g}x the {steps} steps of a verify run at the slowest "
                    f"throughput the study measured of it ({work:.1f} s)"
                )
        seconds = LIMIT_FACTOR * longest + start_up
        if start_up:
            why += f" plus {start_up:g} s to start its process"
        if seconds < MIN_LIMIT:
            seconds, why = MIN_LIMIT, f"{MIN_LIMIT:g} s, the least ({why}: less)"
        out[cfg] = RunLimit(seconds, why, min(rates) if rates else None)
    return out


def _same_config(stored: Any, cfg: TrainingConfig) -> bool:
    """Whether a stored trial's config is ``cfg`` as measured on ``cfg``'s device."""
    try:
        return isinstance(stored, dict) and TrainingConfig.from_dict(stored) == cfg
    except ConfigError:
        return False


class _Limited:
    """An executor whose every run is stopped at its config's limit (see :func:`run_limits`),
    its failure message naming the config, the limit and why it was that long."""

    def __init__(self, executor: TrialExecutor, limits: Mapping[TrainingConfig, RunLimit]) -> None:
        self.executor, self.limits = executor, limits
        self.isolated = executor.isolated

    def run(self, cfg: TrainingConfig, budget: Budget, **kwargs: Any) -> TrialOutcome:
        default = RunLimit(RUN_LIMIT, "the default: nothing says how long it should take")
        limit, why = self.limits.get(cfg, default).of(kwargs.get("accuracy"), cfg)
        outcome = self.executor.run(cfg, budget, time_limit=limit, **kwargs)
        if outcome.failure is FailureReason.TIMEOUT:
            message = (
                f"{cfg.describe()} ran past the {limit:.0f} s limit of a verify run and was "
                f"stopped; the limit was {why} (time_limit= / --trial-timeout sets it)"
            )
            outcome = dataclasses.replace(outcome, message=message)
        return outcome

    def close(self) -> None:
        self.executor.close()


def _executor(
    workload: Workload, device: str, report: Callable[[str], None], *, ranks: int = 1
) -> TrialExecutor:
    """On CUDA, every run in a fresh worker process: cuDNN's plans, compiled kernels and
    CUDA-graph pools from one round would otherwise carry into the next (and a CUDA error
    would end the verification). On a CPU, in this process, as before. A result of several
    data-parallel ranks is verified with as many (a job of that many processes per run)."""
    if torch.device(device).type != "cuda" and ranks == 1:
        return InProcessExecutor(workload)
    cuda = torch.device(device).type == "cuda"
    executor, note = make_executor(
        workload, "auto", env=worker_env(), fresh_each=cuda, ranks=ranks, device=device
    )
    if note:
        report(note)
    return executor


def _accuracy(
    data: Mapping[str, Any],
    pair: dict[str, TrainingConfig],
    workload: Workload,
    executor: _Limited,
    budget: Budget,
    measured: dict[str, list[Measurement]],
    failures: dict[str, str],
    seeds: int,
    report: Callable[[str], None],
) -> dict[str, Any] | None:
    """Both configs trained on the search's accuracy budget over ``seeds`` data-order seeds."""
    if not seeds or pair["winner"] == pair["baseline"] or failures:
        return None
    search = data.get("search") or {}
    samples = int(
        search.get("accuracy_samples")
        or (data.get("accuracy_guard") or {}).get("accuracy_samples")
        or 3 * len(workload.train)  # type: ignore[arg-type]
    )
    check = AccuracyCheck(samples=samples, seeds=tuple(range(seeds)))
    runs: dict[str, list[float]] = {}
    for name, cfg in pair.items():
        outcome = executor.run(cfg, budget, accuracy=check, measured=measured[name][0])
        if not outcome.ok:
            failures[name] = f"{outcome.failure}: {outcome.message}"
            return None
        runs[name] = [run.metric for run in outcome.accuracy]
        report(f"accuracy: {name:8} {', '.join(f'{v:.4f}' for v in runs[name])}")
    return {"samples": samples, **runs}


def _configs_here(
    data: Mapping[str, Any], device: str | None
) -> tuple[TrainingConfig, TrainingConfig, str]:
    """The winner and the baseline, moved to the device they are measured on here."""
    winner = TrainingConfig.from_dict(data["config"])
    baseline = TrainingConfig.from_dict(data["baseline"]["config"])
    if device is None:
        try:
            here = resolve_device(winner.device)
        except ArgumentError as exc:
            raise ArgumentError(
                f"{exc} The result was measured on {winner.device!r}; pass device='cpu' "
                "(--device cpu) to re-measure it on this machine's CPU."
            ) from None
    else:
        here = resolve_device(device)
    return winner.replace(device=here), baseline.replace(device=here), here


def _measure_rounds(
    pair: dict[str, TrainingConfig],
    executor: _Limited,
    budget: Budget,
    rounds: int,
    report: Callable[[str], None],
    seed: str,
) -> tuple[dict[str, list[Measurement]], dict[str, str]]:
    """Both configs' throughput, each round in an order drawn afresh as the search's rounds
    draw theirs (:func:`autotune._speed.stats.round_order`); the failures by name."""
    measured: dict[str, list[Measurement]] = {"baseline": [], "winner": []}
    failures: dict[str, str] = {}
    if pair["winner"] == pair["baseline"]:
        return measured, failures
    # A first, discarded pass of each: thread pools, allocator caches and lazy imports warm
    # up in whichever config runs first, and would otherwise flatter the other one.
    for name in ("baseline", "winner"):
        outcome = executor.run(pair[name], budget)
        if outcome.failure is FailureReason.TIMEOUT:
            failures[name] = f"{outcome.failure}: {outcome.message}"
            report(f"warm-up: {name} failed ({failures[name]})")
            return measured, failures
    for r in range(rounds):
        order = speed.round_order(["baseline", "winner"], f"verify:{seed}", r)
        for name in order:
            if name in failures:
                continue
            outcome = executor.run(pair[name], budget)
            if not outcome.ok or outcome.measurement is None:
                failures[name] = f"{outcome.failure}: {outcome.message}"
                report(f"round {r + 1}: {name} failed ({failures[name]})")
                continue
            measured[name].append(outcome.measurement)
            report(f"round {r + 1}/{rounds}: {name:8} {outcome.measurement!r}")
        if failures:
            break
    return measured, failures


def _pair(value: Any) -> tuple[float, float] | None:
    """A stored interval ``[low, high]`` (None: absent, or not two numbers)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    low, high = _number(value[0]), _number(value[1])
    return None if low is None or high is None else (low, high)


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None
