"""A simulated machine for the search loop: an executor that takes no real time but advances a
fake clock by what each run would cost, with throughput and accuracy from a cost model. The
loop's budget rules (what is started, what is kept back, when it ends) are then tested
exactly, on workloads as slow as real models, in milliseconds."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import optuna
from test_space import CPU

from autotune import TrainingConfig, load_space
from autotune._knobs.registry import Facts
from autotune._load import Load
from autotune._progress import Lines, Whole
from autotune._search.loop import Search
from autotune._search.settings import SearchSettings
from autotune._task import TaskRefs
from autotune._trial.failures import FailureReason
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, AccuracyRun, Budget, TrialOutcome
from autotune._trial.runner import fitted_steps as _runner_fitted
from autotune._trial.runner import halfway_is_a_shorter_run, run_samples

if TYPE_CHECKING:
    from autotune._result.result import SearchResult


class Clock:
    def __init__(self, now: float = 1.0e9) -> None:
        self.now = now
        self.start = now

    def __call__(self) -> float:
        return self.now


VAL_ITEMS = 2000  # the simulated validation set


def per_example(seed: int, metric: float, items: int = VAL_ITEMS) -> tuple[float, ...]:
    """A run's per-example outcomes (1: correct) with accuracy ``metric``: the first
    ``metric * items`` examples of an order fixed per seed are right, so that two runs of one
    seed (a pair) disagree on as few examples as their accuracies allow."""
    order = random.Random(seed).sample(range(items), items)
    right = set(order[: round(metric * items)])
    return tuple(1.0 if i in right else 0.0 for i in range(items))


@dataclasses.dataclass
class Model:
    """How fast and how accurate a config trains, on the simulated machine."""

    throughput: float = 100.0  # the baseline's samples/s
    overhead: float = 1.0  # seconds of set-up per run
    speed: Callable[[TrainingConfig], float] = lambda cfg: 1.0  # x the baseline's throughput
    metric: Callable[[TrainingConfig, int], float] = lambda cfg, seed: 0.85
    initial: float = 0.5  # the untrained model's metric
    learns_after: int = 0  # runs of fewer samples score the untrained metric (plus seed noise)
    compile_seconds: float = 0.0  # a compiled config's first step, on top of its set-up
    # The metric after a number of samples (config, seed, samples), where the horizon matters;
    # ``metric`` (and ``learns_after``) otherwise.
    metric_at: Callable[[TrainingConfig, int, int], float] | None = None
    # What a config's n-th throughput measurement (0: its first) reads, as a multiple of its
    # true speed: a slow first window, or a family of configs whose screening draws run high.
    draw: Callable[[TrainingConfig, int], float] = lambda cfg, n: 1.0
    # A draw below 1 is a slow window: its first chunks read slow, the last at the true speed
    # (the measurement's spread shows it).
    # Whether a config's n-th throughput measurement crashes (a flaky config).
    crashes: Callable[[TrainingConfig, int], bool] = lambda cfg, n: False
    # Whether a config's run with these accuracy seeds never ends (it is stopped at its limit).
    stalls: Callable[[TrainingConfig, tuple[int, ...]], bool] = lambda cfg, seeds: False
    # Whether a run of this accuracy check fails, and how: (reason, message); None: it does not.
    fails: Callable[[TrainingConfig, AccuracyCheck], tuple[FailureReason, str] | None] = (
        lambda cfg, check: None
    )
    # Every seed gets the validation examples right in one order (a task whose runs agree
    # example by example: they differ only by as many examples as their metrics do).
    one_order: bool = False
    val_items: int = VAL_ITEMS  # the validation examples each run is scored on
    # Cores other processes keep busy at a time of the clock (seconds since the start): every
    # run started then trains 1 / (1 + busy) as fast (they share the machine's two cores).
    busy: Callable[[float], float] = lambda t: 0.0
    # How much slower a run of a config trains with ``busy`` cores taken (its throughput is
    # divided by it); None: 1 + busy for every config. A config's speed may depend on the
    # state: one thread stalls on no shared core where two OpenMP threads wait for each other.
    slowed: Callable[[TrainingConfig, float], float] | None = None

    def score(self, cfg: TrainingConfig, seed: int, samples: int) -> float:
        if self.metric_at is not None:
            return self.metric_at(cfg, seed, samples)
        if samples < self.learns_after:
            return self.initial + 0.001 * math.sin(seed)
        return self.metric(cfg, seed)


class SimulatedExecutor:
    """A TrialExecutor on the simulated machine. ``interrupt_at``: raise KeyboardInterrupt on
    that run (1-based), as Ctrl-C would."""

    isolated = True

    def __init__(self, clock: Clock, model: Model, interrupt_at: int | None = None) -> None:
        self.clock = clock
        self.model = model
        self.runs = 0
        self.budgets: list[Budget] = []
        self.arms: list[tuple[TrainingConfig, TrainingConfig]] = []  # (trial's, accuracy runs')
        self.interrupt_at = interrupt_at
        self.drawn: dict[TrainingConfig, int] = {}  # how many times each config was measured

    def run(
        self,
        cfg: TrainingConfig,
        budget: Budget,
        *,
        accuracy: AccuracyCheck | None = None,
        measured: Measurement | None = None,
        time_limit: float | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> TrialOutcome:
        self.runs += 1
        self.budgets.append(budget)
        if self.interrupt_at is not None and self.runs >= self.interrupt_at:
            raise KeyboardInterrupt
        tp = self.model.throughput * self.model.speed(cfg)
        busy = self.model.busy(self.clock.now - self.clock.start)
        tp /= self.model.slowed(cfg, busy) if self.model.slowed else 1.0 + busy
        cost = self.model.overhead
        draw = 1.0
        if measured is None:
            n = self.drawn.get(cfg, 0)
            draw = self.model.draw(cfg, n)
            self.drawn[cfg] = n + 1
            if self.model.crashes(cfg, n):
                self.clock.now += cost
                return TrialOutcome(
                    config=cfg, failure=FailureReason.CRASH, message="crashed", seconds=cost
                )
        if cfg.compile_mode.value != "none":
            cost += self.model.compile_seconds
        m = measured
        if m is None:
            step = cfg.batch_size / (tp * draw)
            timed = _fitted(budget.timed_steps(cfg.batch_size), budget, step)
            cost += (budget.warmup_steps + timed) * step
            chunk = step * (timed // budget.chunks)
            last = chunk * draw if draw < 1 else chunk  # a slow window ends within the run
            m = Measurement(
                batch_size=cfg.batch_size,
                chunk_steps=timed // budget.chunks,
                chunk_times=(chunk,) * (budget.chunks - 1) + (last,),
                data_wait=0.0,
                warmup_steps=budget.warmup_steps,
                warmup_time=budget.warmup_steps * step,
                first_batch_time=0.0,
                peak_memory_bytes=10**8 + 10**6 * cfg.batch_size,
            )
        runs = []
        failed = None if accuracy is None else self.model.fails(cfg, accuracy)
        if failed is not None:
            self.clock.now += cost
            return TrialOutcome(
                config=cfg, measurement=m, failure=failed[0], message=failed[1], seconds=cost
            )
        if accuracy is not None:
            arm = accuracy.config or cfg
            self.arms.append((cfg, arm))
            samples = run_samples(arm, accuracy.samples)
            arm_tp = self.model.throughput * self.model.speed(arm)  # the arm's settings train
            for seed in accuracy.seeds:
                seconds = samples / arm_tp
                cost += seconds
                order = 0 if self.model.one_order else seed
                items = self.model.val_items
                units = per_example(order, self.model.score(arm, seed, samples), items)
                halfway = None
                if accuracy.midpoint and halfway_is_a_shorter_run(arm):
                    half = per_example(order, self.model.score(arm, seed, samples // 2), items)
                    halfway = sum(half) / len(half)
                runs.append(AccuracyRun(seed=seed, metric=sum(units) / len(units), final_loss=0.5,
                                        samples=samples, seconds=seconds,
                                        units=units, midpoint=halfway))  # fmt: skip
        if accuracy is not None and self.model.stalls(cfg, tuple(accuracy.seeds)):
            cost = math.inf
        if time_limit is not None and cost > time_limit:
            self.clock.now += time_limit
            return TrialOutcome(
                config=cfg, failure=FailureReason.TIMEOUT, message="timeout", seconds=time_limit
            )
        self.clock.now += cost
        initial = self.model.initial if accuracy is not None and accuracy.initial else None
        return TrialOutcome(
            config=cfg,
            measurement=m,
            accuracy=tuple(runs),
            seconds=cost,
            initial_metric=initial,
        )

    def close(self) -> None:
        pass


class SimulatedMeter:
    """The load meter of the simulated machine: other processes' use as the model's ``busy``
    says at the start of each run (a LoadMeter's interface)."""

    def __init__(self, clock: Clock, model: Model) -> None:
        self.clock = clock
        self.model = model
        self._at: float | None = None

    def start(self) -> None:
        self._at = self.clock.now

    def stop(self) -> Load | None:
        at, self._at = self._at, None
        if at is None:
            return None
        others = self.model.busy(at - self.clock.start)
        return Load(others=others, cores=2, seconds=self.clock.now - at)


def search(
    model: Model,
    *,
    knobs: dict,
    timeout: float | None = 240.0,
    n_trials: int | None = None,
    tolerance: float = 0.01,
    interrupt_at: int | None = None,
    n_train: int = 4000,
    accuracy_samples: int | None = None,
    story: list[str] | None = None,
    optimizer_impls: tuple[str, ...] = ("default",),
) -> tuple[Search, Clock, list[str]]:
    """A guided search of ``knobs`` on the simulated machine; returns it after it ran.
    ``story``: where the lines a person's display shows go (each within 120 characters, the
    detail left out), instead of every line whole to the lines returned;
    ``optimizer_impls``: those the simulated optimizer takes."""
    clock = Clock()
    space = load_space({"knobs": knobs})
    device = dataclasses.replace(CPU, supports_bf16=True)
    facts = Facts(device=device, has_conv=True, n_blocks=4, n_train=n_train, current_threads=2,
                  optimizer_impls=optimizer_impls)  # fmt: skip
    base = TrainingConfig()
    space = space.restrict(facts).including(base, base)
    settings = SearchSettings(
        tolerance=tolerance,
        metric_name="accuracy",
        higher_is_better=True,
        hooks=TaskRefs(),
        seed=0,
        val_fraction=0.1,
        stratified=True,
        space=space,
        baseline=base,
        budget=Budget(),
        calibrate=True,
        accuracy_repeats=3,
        accuracy_samples=accuracy_samples,
        n_train=n_train,
        planned_epochs=10.0,
        n_trials=n_trials,
        timeout=timeout,
        started=clock(),
        environment={"device": "cpu", "fingerprint": "sim"},
    )
    lines: list[str] = []
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    run = Search(
        study=study,
        settings=settings,
        executor=SimulatedExecutor(clock, model, interrupt_at),
        # Each line whole (a person's display shortens the long ones): the tests read them.
        report=(
            Whole(lambda line: lines.append(f"{clock.now - settings.started:7.1f} {line}"))
            if story is None
            else Lines(story.append)
        ),
        fingerprint="sim",
        clock=clock,
        load_meter=SimulatedMeter(clock, model),
    )
    run.interrupted = run.run()  # type: ignore[attr-defined]
    return run, clock, lines


def _fitted(timed: int, budget: Budget, step: float) -> int:
    """The runner's own fitting of the timed steps to min/max seconds (see runner.fitted_steps)."""
    return _runner_fitted(timed, budget, step * max(1, budget.warmup_steps - 1))


def noise(seed: int, scale: float) -> float:
    """A fixed per-seed offset: what every config trained with this data order shares."""
    return scale * math.sin(1.7 * seed + 0.3)


__all__ = ["Clock", "Model", "SimulatedExecutor", "SimulatedMeter", "noise", "search"]


def result_of(run: Search, seconds: float = 240.0) -> SearchResult:
    """The result a simulated search ``run`` reports, from its study (budget ``seconds``)."""
    from autotune._result.result import SearchResult
    from autotune._search.ledger import Ledger
    from autotune._search.storage import read_guard_failure

    ledger = Ledger.read(run.bench.study, run.settings)
    return SearchResult.from_ledger(
        ledger, run.settings, study_name="s", storage=None, seconds=seconds, interrupted=False,
        memory=None, skipped=(), no_check=read_guard_failure(run.bench.study),
    )  # fmt: skip
