"""The search loop: baseline first, then Optuna-sampled candidates, the accuracy guard as a
constraint, and the winner's accuracy confirmed before it is declared.

Data flow: search space -> trial runner -> measurement -> study -> exported config. The study is
a normal Optuna study: each trial's config, measurement and outcome live in its user attributes,
so a resumed search (same storage and study name) rebuilds everything from the storage.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Precision, ScheduleKind, TrainingConfig
from autotune.device import describe_device
from autotune.errors import AutotuneError, ConfigError
from autotune.failures import FailureReason
from autotune.guard import AccuracyGuard, AccuracyPlan, plan_accuracy_budget, worth_growing
from autotune.isolation import TrialExecutor
from autotune.measure import Measurement
from autotune.probe import MemoryLimits, probe_memory, usable_memory
from autotune.records import (
    ACCURACY_CONSTRAINT,
    CONFIRMATIONS,
    FAILED_CONSTRAINT,
    MEMORY,
    RECORD,
    REMEASURED,
    ROLE,
    SETTINGS,
    WINNER,
    feasible,
    median_time,
    numerics_id,
)
from autotune.result import SearchResult, TrialRecord
from autotune.runner import AccuracyRun, Budget, TrialOutcome, Workload
from autotune.space import Choice, SearchSpace
from autotune.study import heartbeat, mark_owner, reconcile_stale_trials, retry_once

__all__ = ["DEFAULT_TIMEOUT", "Search"]

log = logging.getLogger("autotune")

DEFAULT_TIMEOUT = 600.0
PENALTY = 10.0  # objective of a failed trial, as a multiple of the baseline's projected time
# Knobs tried on top of the best config rather than sampled from the start: compile's one-time
# cost and checkpointing's recompute only pay off in combination with a good config.
LATE_KNOBS = frozenset({"compile_mode", "checkpointing"})
# Knobs that leave the numerics alone: stage 2 tries each value of each on the best config,
# throughput only (its accuracy runs carry over), one knob at a time.
NUMERICS_FREE_KNOBS = (
    "num_workers",
    "intra_op_threads",
    "channels_last",
    "pin_memory",
    "cudnn_benchmark",
    "prefetch_factor",
)
STAGE_ONE_SHARE = 0.55
MAX_REPEATS = 25  # consecutive proposals of measured configs before the space counts as exhausted
PROBE_LIMIT = 120.0  # seconds a memory-probe run may take (a few steps) unless trial_timeout
PRUNE_MARGIN = 1.10  # prune only candidates >10% slower than the best (beyond timing noise)
RERANK_TOP = 3  # candidates re-measured, with the baseline, before a winner is declared
TIE = 0.03  # relative difference below which two configs count as equally fast (at least)
MAX_NOISE = 0.25
MIN_TRIAL_LIMIT = 5.0  # seconds: no trial is cut off sooner than this
FINISH_GRACE_SHARE = 0.05  # of the time budget, re-measuring and confirming may run past it
FINISH_GRACE_MIN = 2.0
DEADLINE_GRACE = 30.0  # seconds a trial may run past the search's deadline before it is stopped


class Search:
    def __init__(
        self,
        *,
        study: optuna.Study,
        space: SearchSpace,
        workload: Workload,
        executor: TrialExecutor,
        trial_timeout: float | None,
        baseline: TrainingConfig,
        budget: Budget,
        tolerance: float,
        accuracy_samples: int | None,
        accuracy_repeats: int,
        planned_samples: int,
        planned_epochs: float,
        n_trials: int | None,
        deadline: float | None,
        report: Callable[[str], None],
        fingerprint: str = "",
        launcher: Callable[[optuna.Study], None] | None = None,
        guided: bool = True,
    ) -> None:
        self.study = study
        # Unguided: no first guess, no stages, no pruning; every candidate is what the sampler
        # proposes, measured in full (exhaustive grids, plain random search for comparison).
        self.guided = guided
        self.space = space
        self.workload = workload
        self.executor = executor
        self.trial_timeout = trial_timeout
        self.auto_limit: float | None = None  # set from the baseline's own duration
        self.baseline = baseline
        self.budget = budget
        self.tolerance = tolerance
        self.accuracy_samples = accuracy_samples
        self.accuracy_repeats = accuracy_repeats
        self.planned_samples = planned_samples
        self.planned_epochs = planned_epochs
        self.n_trials = n_trials
        self.deadline = deadline  # wall-clock (time.time()), shared with workers on other hosts
        self.report = report
        self.fingerprint = fingerprint
        self.launcher = launcher
        self.stage_split_at: float | None = None
        self.baseline_fingerprint = ""
        self.memory: MemoryLimits | None = None
        self.guard: AccuracyGuard | None = None
        self.baseline_time = math.nan
        self.durations: list[float] = []
        self.exhausted = False
        self.repeats = 0  # consecutive trials that repeated a measured config
        self.stage = "sampling"
        self.confirm_reserve = 0.0
        self.confirm_seconds = 0.0  # expected time of one confirmation (the baseline's runs)
        self.remeasure_seconds = 0.0  # expected time of one re-measurement
        self.started = time.time()

    # The trial's record lives in its user attributes, so a resumed search rebuilds from storage.

    def _records(self) -> list[tuple[FrozenTrial, dict[str, Any]]]:
        out = []
        states = [TrialState.COMPLETE, TrialState.PRUNED]
        for t in self.study.get_trials(deepcopy=False, states=states):
            rec = t.user_attrs.get(RECORD)
            if isinstance(rec, dict):
                out.append((t, rec))
        return out

    def run(self) -> bool:
        """Run baseline and candidates until the budget is spent. Returns True if interrupted."""
        self._reconcile()
        try:
            # Before any trial enters the study: Optuna's categorical distributions are fixed
            # once used, so the batch sizes that cannot fit are removed first.
            self._probe_memory()
            self._ensure_baseline()
            assert self.guard is not None
            self._publish_settings()
            if self.guided:
                self._enqueue_first_guess()
            if self.launcher is not None:
                self.launcher(self.study)  # workers run the candidates; back when they are done
                self._reconcile()
            else:
                self.candidate_loop()
            self._rerank()
            self._confirm_winner()
        except KeyboardInterrupt:
            if self.guard is None:
                raise  # no baseline yet: there is nothing to report
            self.report("interrupted: finishing with the best config found so far")
            return True
        return False

    def _probe_memory(self) -> None:
        """Find the largest batch that fits per precision and checkpointing (once per study)."""
        stored = self.study.user_attrs.get(MEMORY)
        if isinstance(stored, dict):
            self.memory = MemoryLimits.from_dict(stored)
        else:
            self.memory = probe_memory(
                self.executor,
                self.baseline,
                self.space,
                capacity=usable_memory(self.baseline.device),
                report=self.report,
                time_limit=self.trial_timeout or PROBE_LIMIT,
            )
            if self.memory is not None:
                self.study.set_user_attr(MEMORY, self.memory.to_dict())
        self._apply_memory_limits()

    def _apply_memory_limits(self) -> None:
        knob = self.space.knobs.get("batch_size")
        if self.memory is None or not self.memory.limits or not isinstance(knob, Choice):
            return
        top = max(self.memory.limits.values())
        kept = tuple(v for v in knob.values if int(v) <= top or v == self.baseline.batch_size)  # type: ignore[arg-type]
        if kept != knob.values:
            knobs_ = dict(self.space.knobs)
            knobs_["batch_size"] = Choice(kept)
            self.space = dataclasses.replace(self.space, knobs=knobs_)

    def _predicted_oom(self, cfg: TrainingConfig) -> TrialOutcome | None:
        if self.memory is None or self.memory.allows(cfg):
            return None
        peak = self.memory.predicted_peak(cfg)
        need = f" (needs ~{peak / 2**30:.2f} GiB" if peak else " ("
        return TrialOutcome(
            config=cfg,
            failure=FailureReason.OOM,
            message=(
                f"out of memory, predicted by the memory probe: batch {cfg.batch_size} is above "
                f"{self.memory.limit(cfg)}, the largest that fits with {cfg.precision.value} and "
                f"checkpointing={cfg.checkpointing}{need} of "
                f"{self.memory.capacity / 2**30:.2f} GiB usable); not run"
            ),
        )

    def candidate_loop(self) -> None:
        """Stage 1: everything but the knobs that only pay on top of a good config (compile's
        one-time cost, checkpointing's recompute). Stage 2: those, on the best so far. Then the
        whole space, for what budget is left. Workers on other processes run this too."""
        if not self.space.searched():
            self.report("the space has a single config (the baseline's): nothing to search")
            return
        first = self.space.without(LATE_KNOBS)
        if self.guided:
            self.stage = "stage 1: sampling"
            split = self._stage_split()
            while self._has_budget() and not split():
                self._run_candidate(first)
            if self._has_budget():
                self.stage = "stage 2: refining the best"
                self._enqueue_late_variants()
        while self._has_budget():
            self._run_candidate(self.space)
            if self.stage.startswith("stage 2") and not self._waiting():
                self.stage = "stage 3: whole space"

    def run_worker(self) -> None:
        """Join the study as a worker: the coordinator measured the baseline; run candidates."""
        self._reconcile()
        for _, rec in self._records():
            if rec["role"] == "baseline":
                self._adopt_baseline(rec)
                break
        else:
            raise AutotuneError(
                f"Study {self.study.study_name!r} has no baseline yet: start the search with "
                "`autotune search` first, then add workers with `autotune worker`."
            )
        expected = rec.get("fingerprint")
        if expected and self.fingerprint and expected != self.fingerprint:
            raise AutotuneError(
                f"This worker's hardware and software (fingerprint {self.fingerprint}) differ "
                f"from those the study's baseline was measured on ({expected}): its timings "
                "could not be ranked against the baseline. Run workers on identical machines "
                "(same device, CPU share, torch and driver), or start a separate study here."
            )
        settings = self.study.user_attrs.get(SETTINGS, {})
        self.stage_split_at = settings.get("stage_split_at")
        stored = self.study.user_attrs.get(MEMORY)
        self.memory = MemoryLimits.from_dict(stored) if isinstance(stored, dict) else None
        self._apply_memory_limits()
        try:
            self.candidate_loop()
        except KeyboardInterrupt:
            self.report("worker interrupted")

    def _reconcile(self) -> None:
        stale = reconcile_stale_trials(self.study)
        if stale:
            self.report(
                f"trials {', '.join(f'#{n}' for n in stale)} were left running by a process that "
                "is gone: marked failed, and retried once"
            )

    def _publish_settings(self) -> None:
        """What workers need to join: the stage schedule (wall clock) and the budget."""
        assert self.guard is not None
        settings = dict(self.study.user_attrs.get(SETTINGS, {}))
        if self.deadline is not None and "stage_split_at" not in settings:
            now = time.time()
            settings["stage_split_at"] = now + STAGE_ONE_SHARE * (self.deadline - now)
        self.stage_split_at = settings.get("stage_split_at")
        settings.update(
            {
                "space": self.space.to_dict(),
                "baseline": self.baseline.to_dict(),
                "budget": dataclasses.asdict(self.budget),
                "tolerance": self.tolerance,
                "accuracy_repeats": self.accuracy_repeats,
                "planned_samples": self.planned_samples,
                "planned_epochs": self.planned_epochs,
                "n_trials": self.n_trials,
                "deadline": self.deadline,
                "trial_timeout": self.trial_timeout,
                "fingerprint": self.fingerprint,
                "guided": self.guided,
            }
        )
        self.study.set_user_attr(SETTINGS, settings)

    def _ask(self) -> optuna.Trial:
        with warnings.catch_warnings():
            # Optuna warns that heartbeats are meant for study.optimize; autotune beats itself
            # (study.heartbeat) around each trial of its ask-and-tell loop.
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            return self.study.ask()

    def _limit(self) -> float | None:
        """This trial's wall-clock limit: the user's, or 5x the baseline's trial (at least a
        minute), and never far past the search's deadline."""
        limit = self.trial_timeout if self.trial_timeout is not None else self.auto_limit
        if self.deadline is not None:
            remaining = self.deadline - time.time() + DEADLINE_GRACE
            limit = remaining if limit is None else min(limit, remaining)
        return None if limit is None else max(limit, MIN_TRIAL_LIMIT)

    def _execute(
        self,
        cfg: TrainingConfig,
        *,
        accuracy_seeds: tuple[int, ...] = (),
        measured: Measurement | None = None,
    ) -> TrialOutcome:
        return self.executor.run(
            cfg,
            self.budget,
            accuracy_seeds=accuracy_seeds,
            measured=measured,
            time_limit=self._limit(),
        )

    def _candidates(self) -> int:
        return sum(1 for _, r in self._records() if r["role"] == "candidate")

    def _stage_split(self) -> Callable[[], bool]:
        """A test for 'stage 1 has had its share': 55% of the time or 60% of the trials left."""
        if self.deadline is not None:
            now = time.time()
            at = self.stage_split_at or now + STAGE_ONE_SHARE * (self.deadline - now)
            return lambda: time.time() >= at
        assert self.n_trials is not None
        start = self._candidates()
        quota = math.ceil(0.6 * max(0, self.n_trials - start))
        return lambda: self._candidates() - start >= quota

    def _enqueue_late_variants(self) -> None:
        """On the best config so far: each other value of each knob that leaves the numerics
        alone (throughput-only trials: the accuracy runs carry over), then compile, then
        checkpointing where it lets a larger batch fit."""
        best = self._best()
        cfg = TrainingConfig.from_dict(best[1]["config"]) if best is not None else self.baseline
        params = self.space.params_of(cfg, self.baseline)
        for name in NUMERICS_FREE_KNOBS:
            knob = self.space.knobs.get(name)
            if name not in params or not isinstance(knob, Choice):
                continue
            for value in knob.values:
                if value != params[name]:
                    self.study.enqueue_trial({**params, name: value}, skip_if_exists=True)
        variants: list[TrainingConfig] = []
        compile_knob = self.space.knobs.get("compile_mode")
        if isinstance(compile_knob, Choice):
            variants += [
                cfg.replace(compile_mode=m) for m in compile_knob.values if m != cfg.compile_mode
            ]
        ckpt = self.space.knobs.get("checkpointing")
        oom_sizes = sorted(
            TrainingConfig.from_dict(r["config"]).batch_size
            for _, r in self._records()
            if r["failure"] == "oom"
        )
        bigger = [b for b in oom_sizes if b > cfg.batch_size]
        if isinstance(ckpt, Choice) and bigger:
            # Checkpointing only pays when it lets a batch size fit that did not.
            every = min((v for v in ckpt.values if isinstance(v, int) and v > 0), default=0)
            if every:
                variants.append(cfg.replace(checkpointing=every, batch_size=bigger[0]))
        for variant in variants:
            params = self.space.params_of(variant, self.baseline)
            self.study.enqueue_trial(params, skip_if_exists=True)

    def _has_budget(self) -> bool:
        if self.exhausted:
            return False
        if self.n_trials is not None and self._candidates() >= self.n_trials:
            return False
        if self.deadline is not None:
            expected = statistics.median(self.durations) if self.durations else 0.0
            # Keep back what confirming the winner's accuracy will take.
            return time.time() + expected + self.confirm_reserve <= self.deadline
        return True

    def _time_left(self) -> str:
        if self.deadline is None:
            return "no time limit"
        return f"{max(0.0, self.deadline - time.time()):.0f} s left"

    # -- Baseline ------------------------------------------------------------------------------

    def _ensure_baseline(self) -> None:
        for trial, rec in self._records():
            if rec["role"] == "baseline":
                self._adopt_baseline(rec)
                self.report(f"baseline: reusing trial {trial.number} from the study")
                return
        self.report(f"baseline: {self.baseline.describe()}")
        # The accuracy budget is fixed once, from the baseline's speed and spread (the guard's
        # plan), and every candidate gets the same budget.
        probe = self._execute(self.baseline)
        if not probe.ok or probe.measurement is None:
            raise AutotuneError(
                f"The baseline config failed ({probe.failure}): {probe.message}. Nothing can be "
                "compared against it: fix the model/data, or pass a baseline= that runs."
            )
        samples, outcome = self._measure_baseline_accuracy(probe.measurement)
        outcome = dataclasses.replace(outcome, seconds=outcome.seconds + probe.seconds)
        # The baseline is a point of the space (restrict() made sure), so it is stored with its
        # parameters and every sampler, grid samplers included, can place it.
        self.study.enqueue_trial(self.space.params_of(self.baseline, self.baseline))
        new_trial = self._ask()
        as_sampled = self.space.suggest(new_trial, self.baseline)
        if as_sampled != self.baseline:
            log.debug("baseline parameters do not rebuild it exactly: %s", as_sampled)
        rec = self._record(outcome, role="baseline", reused=False)
        rec["accuracy_samples"] = samples
        runs = [r.seconds for r in outcome.accuracy]
        rec["trial_limit"] = max(60.0, 5 * (probe.seconds + statistics.fmean(runs)))
        rec["throughput_seconds"] = probe.seconds
        mark_owner(new_trial)
        self._adopt_baseline(rec)
        self._tell(new_trial, rec)

    def _measure_baseline_accuracy(self, m: Measurement) -> tuple[int, TrialOutcome]:
        """The baseline's accuracy runs over ``accuracy_repeats`` seeds. Unless the caller fixed
        ``accuracy_samples``, the budget starts from the plan (time share, floor) and doubles
        while the baseline's own spread hides a drop of the tolerance and time allows."""
        seeds = tuple(range(self.accuracy_repeats))
        plan = plan_accuracy_budget(
            n_train=len(self.workload.train),  # type: ignore[arg-type]
            batch_size=self.baseline.batch_size,
            throughput=m.throughput,
            repeats=self.accuracy_repeats,
            seconds_left=self._seconds_left(),
            planned_epochs=self.planned_epochs,
        )
        if self.accuracy_samples is not None:
            plan = AccuracyPlan(
                first=self.accuracy_samples, most=self.accuracy_samples, floor=plan.floor
            )
        elif plan.note is not None:
            self.report(f"accuracy guard: {plan.note}")
        samples = plan.first
        spent = 0.0
        while True:
            self.budget = _with_accuracy_samples(self.budget, samples)
            outcome = self._execute(self.baseline, accuracy_seeds=seeds, measured=m)
            if not outcome.ok:
                raise AutotuneError(
                    f"The baseline config failed its accuracy runs ({outcome.failure}): "
                    f"{outcome.message}."
                )
            spent += outcome.seconds
            guard = self._guard(tuple(r.metric for r in outcome.accuracy), samples)
            run_seconds = sum(r.seconds for r in outcome.accuracy)
            if not worth_growing(
                guard, plan, run_seconds=run_seconds, seconds_left=self._seconds_left()
            ):
                return samples, dataclasses.replace(outcome, seconds=spent)
            grown = plan.grown(samples)
            self.report(
                f"accuracy guard: at {samples} samples per run the baseline's "
                f"{guard.metric_name} varies by ±{guard.spread:.4f} over {guard.repeats} seeds, "
                f"too much to resolve a drop of {self.tolerance:g}: measuring again at {grown}"
            )
            samples = grown

    def _past_deadline(self, expected: float = 0.0) -> bool:
        """Whether a step expected to take ``expected`` seconds would end past the deadline by
        more than the small margin re-measuring and confirming may take beyond it (5% of the
        time budget, at least 2 s): a last trial that ran long must not leave the winner
        unconfirmed for want of a second, nor a rejected leader's successor overrun."""
        if self.deadline is None:
            return False
        margin = max(FINISH_GRACE_MIN, FINISH_GRACE_SHARE * (self.deadline - self.started))
        return time.time() + expected >= self.deadline + margin

    def _seconds_left(self) -> float | None:
        return None if self.deadline is None else max(1.0, self.deadline - time.time())

    def _guard(self, runs: tuple[float, ...], samples: int) -> AccuracyGuard:
        return AccuracyGuard(
            metric_name=self.workload.task.metric_name,
            higher_is_better=self.workload.task.higher_is_better,
            tolerance=self.tolerance,
            baseline_runs=runs,
            accuracy_samples=samples,
        )

    def _adopt_baseline(self, rec: dict[str, Any]) -> None:
        runs = tuple(float(r["metric"]) for r in rec["accuracy_runs"])
        self.budget = _with_accuracy_samples(self.budget, int(rec["accuracy_samples"]))
        self.guard = self._guard(runs, int(rec["accuracy_samples"]))
        self.baseline_time = float(rec["projected_time"])
        self.baseline_fingerprint = rec.get("fingerprint") or ""
        self.auto_limit = float(rec.get("trial_limit", 0.0)) or None
        # Confirming a winner takes (repeats - 1) more accuracy runs; candidates worth
        # confirming train faster than the baseline, so its own runs bound the time.
        seconds = [float(r["seconds"]) for r in rec["accuracy_runs"]]
        self.confirm_seconds = 1.2 * statistics.fmean(seconds) * (len(seconds) - 1)
        self.remeasure_seconds = float(rec.get("throughput_seconds", 0.0))
        self.confirm_reserve = self.confirm_seconds
        # ... and re-measuring the leaders with the baseline (throughput only).
        self.confirm_reserve += (RERANK_TOP + 1) * self.remeasure_seconds
        if not self.guard.reliable:
            self.report(f"accuracy guard: {self.guard.advice()}")

    def _enqueue_first_guess(self) -> None:
        """Start from the articles' rules of thumb (bigger batch with scaled LR and an annealed
        schedule, workers, reduced precision, channels_last); the sampler takes it from there."""
        if any(r["role"] == "candidate" for _, r in self._records()):
            return
        params: dict[str, Any] = {}
        k = self.space.knobs

        def pick(name: str, prefer: Callable[[Any], Any]) -> None:
            knob = k.get(name)
            if isinstance(knob, Choice) and len(knob.values) > 1:
                params[name] = max(knob.values, key=prefer)

        base_bs = self.baseline.batch_size
        pick("batch_size", lambda v: (v <= 4 * base_bs, v if v <= 4 * base_bs else -v))
        cpus = describe_device(self.baseline.device).cpu_count
        pick("num_workers", lambda v: (v <= max(1, cpus // 2), v if v <= max(1, cpus // 2) else -v))
        order = {Precision.BF16.value: 3, Precision.FP16.value: 2, Precision.TF32.value: 1}
        pick("precision", lambda v: order.get(v, 0))
        for flag in ("channels_last", "pin_memory", "cudnn_benchmark"):
            pick(flag, lambda v: v is True)
        pick("intra_op_threads", lambda v: v is None)
        pick("lr_schedule", lambda v: v == ScheduleKind.COSINE.value)
        pick("lr_batch_scaling", lambda v: v == "sqrt")
        if "lr_multiplier" in k:
            params["lr_multiplier"] = 1.0
        if "warmup_fraction" in k:
            params["warmup_fraction"] = 0.05
        if params:
            self.study.enqueue_trial(params, skip_if_exists=True)
        workers = k.get("num_workers")
        if params.get("num_workers") and isinstance(workers, Choice) and 0 in workers.values:
            # With few cores, loader workers compete with the model for them: try without too.
            self.study.enqueue_trial({**params, "num_workers": 0}, skip_if_exists=True)
        # The safe speedup: the baseline's batch and schedule (the same optimizer steps), only
        # precision and memory format changed. Where fewer, larger steps cost accuracy within
        # the accuracy budget (language models early in training), this is what still wins.
        safe = self.baseline
        if "precision" in params:
            safe = safe.replace(precision=Precision(params["precision"]))
        if params.get("channels_last"):
            safe = safe.replace(channels_last=True)
        if safe != self.baseline:
            self.study.enqueue_trial(self.space.params_of(safe, self.baseline), skip_if_exists=True)

    # -- Candidates ----------------------------------------------------------------------------

    def _waiting(self) -> bool:
        """Whether enqueued trials (first guesses, late variants, retries) are still waiting."""
        return bool(self.study.get_trials(deepcopy=False, states=[TrialState.WAITING]))

    def _run_candidate(self, space: SearchSpace) -> None:
        assert self.guard is not None
        if self.launcher is None and SETTINGS in self.study.user_attrs:
            reconcile_stale_trials(self.study)  # a worker elsewhere may have died mid-trial
        trial = self._ask()
        mark_owner(trial)
        try:
            cfg = space.suggest(trial, self.baseline)
        except ConfigError as exc:  # a combination the config itself rejects
            trial.set_user_attr("message", str(exc))
            self.study.tell(trial, state=TrialState.FAIL)
            return
        previous = self._find_same(cfg)
        if previous is not None:
            rec = dict(previous)
            rec["reused"] = True
            rec["role"] = "candidate"  # even when it repeats the baseline's config
            self._tell(trial, rec)
            self._announce(trial.number, rec)
            self.repeats += 1
            if self.repeats >= MAX_REPEATS:
                self.exhausted = True
                self.report(
                    f"the sampler proposed {MAX_REPEATS} configs in a row that were already "
                    "measured: the space looks exhausted"
                )
            return
        self.repeats = 0
        predicted = self._predicted_oom(cfg)
        if predicted is not None:
            rec = self._record(predicted, role="candidate", reused=False)
            self._tell(trial, rec)
            self._announce(trial.number, rec)
            return
        checked = cfg.numerics_key() != self.baseline.numerics_key()
        # Same batch size, precision and schedule train the same model: reuse its accuracy runs.
        known = self._accuracy_of_same_numerics(cfg) if checked else None
        seeds = (0,) if checked and known is None else ()
        pruned = False
        try:
            with heartbeat(self.study, trial):
                # Throughput first: a clearly slower candidate does not pay for accuracy runs.
                outcome = self._execute(cfg)
                if outcome.ok and seeds:
                    pruned = self.guided and self._should_prune(trial, outcome)
                    if not pruned:
                        timed = outcome.seconds
                        outcome = self._execute(
                            cfg, accuracy_seeds=seeds, measured=outcome.measurement
                        )
                        outcome = dataclasses.replace(outcome, seconds=outcome.seconds + timed)
        except KeyboardInterrupt:
            # The trial did not finish: fail it and let a resumed search run it again.
            self.study.tell(trial, state=TrialState.FAIL)
            retry_once(self.study, self.study.trials[trial.number])
            raise
        if known is not None and outcome.ok:
            outcome = dataclasses.replace(outcome, accuracy=known)
        self.durations.append(outcome.seconds)
        rec = self._record(outcome, role="candidate", reused=False)
        rec["pruned"] = pruned
        self._tell(trial, rec)
        self._announce(trial.number, rec)

    def _should_prune(self, trial: optuna.Trial, outcome: TrialOutcome) -> bool:
        """Optuna's pruner on the throughput phase's projected time, and clearly (beyond noise)
        slower than the best feasible config so far."""
        assert outcome.measurement is not None
        projected = outcome.measurement.projected_time(self.planned_samples, self.planned_epochs)
        trial.report(projected, step=0)
        best = self._best()
        if best is None:
            return False
        return bool(trial.should_prune()) and projected > PRUNE_MARGIN * self._projected(*best)

    def _accuracy_of_same_numerics(self, cfg: TrainingConfig) -> tuple[AccuracyRun, ...] | None:
        key = cfg.numerics_key()
        for _, rec in self._records():
            if rec["role"] != "candidate" or rec["failure"] is not None or not rec["accuracy_runs"]:
                continue
            if TrainingConfig.from_dict(rec["config"]).numerics_key() == key:
                return tuple(AccuracyRun(**r) for r in rec["accuracy_runs"])
        return None

    def _find_same(self, cfg: TrainingConfig) -> dict[str, Any] | None:
        wanted = cfg.to_dict()
        for _, rec in self._records():
            if rec["config"] == wanted and not rec.get("reused"):
                return rec
        return None

    def _record(self, outcome: TrialOutcome, *, role: str, reused: bool) -> dict[str, Any]:
        m = outcome.measurement
        projected = (
            m.projected_time(self.planned_samples, self.planned_epochs)
            if m is not None and outcome.ok
            else None
        )
        return {
            "role": role,
            "config": outcome.config.to_dict(),
            "measurement": m.to_dict() if m is not None else None,
            "accuracy_runs": [r.to_dict() for r in outcome.accuracy],
            "metric": outcome.metric,
            "failure": outcome.failure.value if outcome.failure is not None else None,
            "message": outcome.message,
            "seconds": outcome.seconds,
            "projected_time": projected,
            "reused": reused,
            "fingerprint": self.fingerprint,
        }

    def _tell(self, trial: optuna.Trial, rec: dict[str, Any]) -> None:
        """Store the record and the constraints, then complete the trial."""
        assert self.guard is not None or rec["role"] == "baseline"
        failed = rec["failure"] is not None
        if rec["metric"] is not None and self.guard is not None and rec["role"] == "candidate":
            violation = self.guard.violation(float(rec["metric"]))
        else:
            violation = 0.0 if rec["role"] == "baseline" else -self.tolerance
        if failed:
            violation = max(violation, 1.0)
        trial.set_user_attr(RECORD, rec)
        trial.set_user_attr(ROLE, rec["role"])
        trial.set_constraint(FAILED_CONSTRAINT, 1.0 if failed else 0.0)
        trial.set_constraint(ACCURACY_CONSTRAINT, min(violation, 1e9))
        if rec["projected_time"] is not None:
            value = float(rec["projected_time"])
        else:
            value = PENALTY * (self.baseline_time if math.isfinite(self.baseline_time) else 1.0)
        try:
            if rec.get("pruned"):
                self.study.tell(trial, state=TrialState.PRUNED)
            else:
                self.study.tell(trial, value)
        except RuntimeError as exc:
            # A sampler that has covered its whole grid (BruteForceSampler) calls study.stop(),
            # which Optuna only allows inside study.optimize; the trial is already stored.
            if "Study.stop" not in str(exc):
                raise
            if rec["role"] == "baseline":
                return  # the baseline has no parameters: no grid is exhausted by it
            self.exhausted = True
            self.report("the sampler has tried every config in the space")

    def _announce(self, number: int, rec: dict[str, Any]) -> None:
        n_done = sum(1 for _, r in self._records() if r["role"] == "candidate")
        total = f"/{self.n_trials}" if self.n_trials is not None else ""
        cfg = TrainingConfig.from_dict(rec["config"])
        if rec["failure"] is not None:
            outcome = f"failed ({rec['failure']}): {rec['message']}"
        elif rec.get("pruned"):
            speed = self.baseline_time / float(rec["projected_time"])
            outcome = f"{speed:.2f}x, pruned: clearly slower than the best, no accuracy run"
        else:
            speed = self.baseline_time / float(rec["projected_time"])
            metric = rec["metric"]
            acc = "" if metric is None else f", val {self.workload.task.metric_name} {metric:.4f}"
            ok = self._feasible(rec)
            outcome = f"{speed:.2f}x{acc}{'' if ok else ' (outside tolerance)'}"
        best = self._best()
        best_text = (
            f"best {self.baseline_time / float(best[1]['projected_time']):.2f}x (#{best[0].number})"
            if best is not None
            else "no feasible candidate yet"
        )
        failures: dict[str, int] = {}
        for _, r in self._records():
            if r["failure"] is not None:
                failures[r["failure"]] = failures.get(r["failure"], 0) + 1
        failed = ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "none"
        reused = " (same config as an earlier trial: reused)" if rec.get("reused") else ""
        self.report(
            f"trial {n_done}{total} [#{number}, {self.stage}] {cfg.describe()}: {outcome}"
            f"{reused} | {best_text} | failures: {failed} | {self._time_left()}"
        )

    def _comparable(self, rec: dict[str, Any]) -> bool:
        """Timings compare only between identical hardware and software (the fingerprint)."""
        theirs = rec.get("fingerprint")
        return not (theirs and self.baseline_fingerprint and theirs != self.baseline_fingerprint)

    def _feasible(self, rec: dict[str, Any]) -> bool:
        assert self.guard is not None
        confirmation = self._confirmation(rec) if rec["accuracy_runs"] else None
        return feasible(rec, self.guard, confirmation, comparable=self._comparable(rec))

    def _best(self) -> tuple[FrozenTrial, dict[str, Any]] | None:
        """The fastest feasible config; between configs whose difference is within their
        measured noise, the simpler one (no compile beats compile, fewer workers beat more)."""
        feasible = [(t, r) for t, r in self._records() if self._feasible(r)]
        if not feasible:
            return None
        fastest = min(feasible, key=lambda tr: self._projected(*tr))
        floor = self._projected(*fastest)
        equals = [
            tr
            for tr in feasible
            if self._projected(*tr) <= floor * (1 + max(self._noise(*fastest), self._noise(*tr)))
        ]
        return min(
            equals,
            key=lambda tr: (_complexity(tr[1]["config"], self.baseline), self._projected(*tr)),
        )

    # -- Noise-aware ranking: the leaders are measured again before one is declared ------------

    def _remeasured(self) -> dict[str, list[float]]:
        stored = self.study.user_attrs.get(REMEASURED, {})
        return stored if isinstance(stored, dict) else {}

    def _times(self, trial: FrozenTrial, rec: dict[str, Any]) -> list[float]:
        return [float(rec["projected_time"]), *self._remeasured().get(str(trial.number), [])]

    def _projected(self, trial: FrozenTrial, rec: dict[str, Any]) -> float:
        """Projected training time: the median over the trial's measurement and re-measurements."""
        times = self._times(trial, rec)
        return median_time(times[0], times[1:])

    def _noise(self, trial: FrozenTrial, rec: dict[str, Any]) -> float:
        """Relative timing noise of a trial: the range of its repeated measurements (at least
        TIE, at most MAX_NOISE: a wild outlier must not make every config 'equal')."""
        times = self._times(trial, rec)
        between = (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else 0
        return min(MAX_NOISE, max(TIE, between))

    def _rerank(self) -> None:
        """Measure the baseline and the leading candidates again, side by side, so the winner is
        not simply the luckiest single measurement."""
        assert self.guard is not None
        ranked = sorted(
            ((t, r) for t, r in self._records() if self._feasible(r) and r["role"] == "candidate"),
            key=lambda tr: self._projected(*tr),
        )
        seen: set[str] = set()
        leaders = []
        for t, r in ranked:
            key = json.dumps(r["config"], sort_keys=True)
            if key not in seen and not r.get("reused"):
                seen.add(key)
                leaders.append((t, r))
        leaders = leaders[:RERANK_TOP]
        done = self._remeasured()
        baseline = next((t, r) for t, r in self._records() if r["role"] == "baseline")
        plan = [tr for tr in [baseline, *leaders] if str(tr[0].number) not in done]
        if not leaders or not plan:
            return
        remeasured = dict(done)
        for trial, rec in plan:
            if self._past_deadline(self.remeasure_seconds):
                break
            outcome = self._execute(TrainingConfig.from_dict(rec["config"]))
            if outcome.ok and outcome.measurement is not None:
                projected = outcome.measurement.projected_time(
                    self.planned_samples, self.planned_epochs
                )
                remeasured.setdefault(str(trial.number), []).append(projected)
        self.study.set_user_attr(REMEASURED, remeasured)
        self.baseline_time = self._projected(*baseline)
        best = self._best()
        if best is not None:
            self.report(
                f"re-measured the baseline and the {len(leaders)} fastest candidates: best "
                f"{self.baseline_time / self._projected(*best):.2f}x (trial #{best[0].number}, "
                f"noise ±{self._noise(*best):.0%})"
            )

    # -- Confirmation: the winner's accuracy over as many seeds as the baseline's ---------------

    def _confirmations(self) -> dict[str, dict[str, Any]]:
        stored = self.study.user_attrs.get(CONFIRMATIONS, {})
        return stored if isinstance(stored, dict) else {}

    def _confirmation(self, rec: dict[str, Any]) -> dict[str, Any] | None:
        return self._confirmations().get(numerics_id(rec["config"]))

    def _confirm_winner(self) -> None:
        """Re-check the leading candidate's accuracy with the baseline's number of seeds and
        compare means; on failure the next candidate is tried, while the budget lasts."""
        assert self.guard is not None
        seeds = tuple(range(1, self.guard.repeats))
        if not seeds:
            return
        for _ in range(3):
            best = self._best()
            if best is None:
                return
            trial, rec = best
            if rec["role"] == "baseline" or not rec["accuracy_runs"]:
                return  # same numerics as the baseline: nothing to confirm
            if self._confirmation(rec) is not None:
                return  # already confirmed (passed, or _best would not return it)
            if self._past_deadline(self.confirm_seconds):
                self.report("no time left to confirm the winner's accuracy over several seeds")
                return
            cfg = TrainingConfig.from_dict(rec["config"])
            measured = Measurement.from_dict(rec["measurement"])
            outcome = self._execute(cfg, accuracy_seeds=seeds, measured=measured)
            if outcome.ok:
                runs = [float(rec["metric"]), *(r.metric for r in outcome.accuracy)]
                result = self.guard.confirm(runs)
            else:
                result = {"runs": [], "passed": False, "failure": outcome.message}
            result["trial"] = trial.number
            confirmations = dict(self._confirmations())
            confirmations[numerics_id(rec["config"])] = result
            self.study.set_user_attr(CONFIRMATIONS, confirmations)
            verdict = "confirmed" if result["passed"] else "rejected"
            detail = (
                f"mean {result['mean']:.4f} over {len(result['runs'])} seeds, drop "
                f"{result['drop']:+.4f} vs margin {result['margin']:.4f}"
                if "mean" in result
                else str(result.get("failure"))
            )
            self.report(f"confirmation of trial #{trial.number}: {verdict} ({detail})")
            if result["passed"]:
                return

    # -- Result --------------------------------------------------------------------------------

    def result(
        self,
        *,
        environment: dict[str, Any],
        seconds: float,
        interrupted: bool,
        extra: dict[str, Any],
    ) -> SearchResult:
        assert self.guard is not None
        records = self._records()
        trials = tuple(self._trial_record(t, r) for t, r in records)
        baseline = next(tr for tr in trials if tr.role == "baseline")
        best = self._best()
        winner = baseline
        if best is not None:
            winner = next(tr for tr in trials if tr.number == best[0].number)
        self.study.set_user_attr(WINNER, winner.number)  # for reports read from the storage
        search = dict(extra)
        search["seconds"] = seconds
        search["accuracy_samples"] = self.guard.accuracy_samples
        if self.memory is not None:
            search["memory_probe"] = self.memory.to_dict()
        foreign = [t.number for t, r in records if not self._comparable(r)]
        if foreign:
            search["not_ranked"] = {
                "trials": foreign,
                "reason": "measured on hardware or software other than the baseline's "
                f"(fingerprint {self.baseline_fingerprint}); timings do not compare",
            }
        return SearchResult(
            winner=winner,
            baseline_trial=baseline,
            trials=trials,
            guard=self.guard,
            environment=environment,
            search=search,
            planned_samples=self.planned_samples,
            interrupted=interrupted,
        )

    def _trial_record(self, trial: FrozenTrial, rec: dict[str, Any]) -> TrialRecord:
        m = rec.get("measurement")
        return TrialRecord(
            number=trial.number,
            role=rec["role"],
            config=TrainingConfig.from_dict(rec["config"]),
            measurement=Measurement.from_dict(m) if m else None,
            metric=rec["metric"],
            accuracy_checked=bool(rec["accuracy_runs"]),
            projected_time=self._projected(trial, rec) if rec["projected_time"] else None,
            feasible=self._feasible(rec),
            failure=rec["failure"],
            message=rec["message"],
            seconds=float(rec["seconds"]),
            reused=bool(rec.get("reused")),
            fingerprint=rec.get("fingerprint"),
            confirmation=self._confirmation(rec) if rec["accuracy_runs"] else None,
        )


def _with_accuracy_samples(budget: Budget, samples: int) -> Budget:
    return dataclasses.replace(budget, accuracy_samples=samples)


def _complexity(config: dict[str, Any], baseline: TrainingConfig) -> tuple[Any, ...]:
    """How far a config is from plain eager training: smaller is simpler."""
    cfg = TrainingConfig.from_dict(config)
    return (
        cfg.compile_mode.value != "none",
        cfg.checkpointing > 0,
        cfg.num_workers,
        cfg.intra_op_threads is not None,
        cfg.pin_memory,
        cfg.cudnn_benchmark,
        cfg.channels_last,
        cfg.precision != baseline.precision,
        cfg.batch_size != baseline.batch_size,
    )
