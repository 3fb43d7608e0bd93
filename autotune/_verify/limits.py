"""What a verify run may spend: the fixed timing budget of a measurement, each config's time
limit from the runs the study measured of it, and the set-up's."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from autotune._errors import ConfigError
from autotune._knobs.config import TrainingConfig
from autotune._result.result import SearchResult
from autotune._trial.bounded import SetUpLimit
from autotune._trial.executors import make_executor
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import InProcessExecutor, TrialExecutor, worker_env
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome
from autotune._trial.runner import run_samples
from autotune._trial.workload import Workload
from autotune._verify.stored import configs_here, load_result, stored_number

__all__ = [
    "DEFAULT_BUDGET",
    "LIMIT_FACTOR",
    "MIN_LIMIT",
    "RUN_LIMIT",
    "START_UP",
    "Limited",
    "RunLimit",
    "explicit_limit",
    "limited_executor",
    "own_setup_limit",
    "run_limits",
    "setup_limit",
]


# The search calibrates each trial's budget from the baseline's speed and its time budget;
# a check gets this fixed one, longer than the search's default (outcome.Budget).
DEFAULT_BUDGET = Budget(warmup_steps=3, timed_samples=4096, min_timed_steps=10, chunks=5)


def explicit_limit(time_limit: float | None, search: Mapping[str, Any]) -> tuple[float, str] | None:
    """The limit of every verify run where one is given (the user's, else the search's own
    trial limit), and whose it is; None where it is derived from the study."""
    if time_limit is not None:
        return time_limit, "the limit given (time_limit= / --trial-timeout)"
    if stored_number(search.get("trial_limit")) is not None:
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
    data = load_result(result)
    winner, baseline, _ = configs_here(data, device)
    pair = {"baseline": baseline, "winner": winner}
    explicit = explicit_limit(time_limit, data.get("search") or {})
    return own_setup_limit(pair, run_limits(data, pair, explicit, budget=budget or DEFAULT_BUDGET))


def own_setup_limit(
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


class Limited:
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


def limited_executor(
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
