"""The search loop: memory probe, baseline, candidates as the stage policy says, then the leaders
re-measured and the winner's accuracy confirmed.

Data flow: search space -> trial runner -> measurement -> study -> exported config. The study is
a normal Optuna study: each trial's record lives in its user attributes (see
:mod:`autotune._search.storage`), so a resumed search (same storage and study name), a worker on
another host and a report all rebuild everything from the storage.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import optuna

from autotune._device import describe_device
from autotune._errors import AutotuneError
from autotune._search import storage
from autotune._search.baseline import Baseline, measure_baseline
from autotune._search.bench import Bench
from autotune._search.candidate import run_candidate
from autotune._search.deadline import Deadline
from autotune._search.finish import RERANK_TOP, confirm_leader, remeasure_leaders
from autotune._search.ledger import Ledger
from autotune._search.policy import StagePolicy, first_guesses
from autotune._search.settings import SearchSettings
from autotune._space import Choice
from autotune._trial.isolation import TrialExecutor
from autotune._trial.probe import MemoryLimits, probe_memory, usable_memory

__all__ = ["DEFAULT_TIMEOUT", "Search"]

DEFAULT_TIMEOUT = 600.0
STAGE_ONE_SHARE = 0.55  # of the time left after the baseline (or 60% of the trials)
STAGE_ONE_TRIALS = 0.6
MAX_REPEATS = 25  # consecutive proposals of measured configs before the space counts as exhausted
PROBE_LIMIT = 120.0  # seconds a memory-probe run may take (a few steps) unless trial_timeout


class Search:
    """One process's part in a search: the coordinator's (:meth:`run`) or a worker's
    (:meth:`run_worker`)."""

    def __init__(
        self,
        *,
        study: optuna.Study,
        settings: SearchSettings,
        executor: TrialExecutor,
        report: Callable[[str], None],
        fingerprint: str,
        launcher: Callable[[optuna.Study], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        deadline = Deadline(settings.started, settings.deadline, clock)
        self.bench = Bench(
            study=study,
            settings=settings,
            executor=executor,
            deadline=deadline,
            report=report,
            fingerprint=fingerprint,
        )
        self.launcher = launcher
        self.space = settings.space
        self.memory: MemoryLimits | None = None
        self.baseline: Baseline | None = None
        self.durations: list[float] = []

    @property
    def settings(self) -> SearchSettings:
        return self.bench.settings

    def ledger(self) -> Ledger:
        return self.bench.ledger()

    def run(self) -> bool:
        """Run baseline and candidates until the budget is spent. Returns True if interrupted."""
        self._reconcile()
        study = self.bench.study
        try:
            # Before any trial enters the study: Optuna's categorical distributions are fixed
            # once used, so the batch sizes that cannot fit are removed first.
            self._probe_memory()
            self._adopt(measure_baseline(self.bench, self.space))
            self._publish()
            if self.settings.guided and not self.ledger().candidates:
                cpus = describe_device(self.settings.baseline.device).cpu_count
                for params in first_guesses(self.space, self.settings.baseline, cpus):
                    study.enqueue_trial(params, skip_if_exists=True)
            if self.launcher is not None:
                self.launcher(study)  # workers run the candidates; back when they are done
                self._reconcile()
            else:
                self.candidates()
            assert self.baseline is not None
            remeasure_leaders(self.bench, self.baseline)
            confirm_leader(self.bench, self.baseline)
        except KeyboardInterrupt:
            if self.baseline is None:
                raise  # no baseline yet: there is nothing to report
            self.bench.report("interrupted: finishing with the best config found so far")
            return True
        return False

    def run_worker(self) -> None:
        """Join the study as a worker: the coordinator measured the baseline; run candidates."""
        self._reconcile()
        baseline = Baseline.of(self.ledger())
        if baseline is None:
            raise AutotuneError(
                f"Study {self.bench.study.study_name!r} has no baseline yet: start the search "
                "with `autotune search` first, then add workers with `autotune worker`."
            )
        expected, mine = baseline.record.fingerprint, self.bench.fingerprint
        if expected and mine and expected != mine:
            raise AutotuneError(
                f"This worker's hardware and software (fingerprint {mine}) differ "
                f"from those the study's baseline was measured on ({expected}): its timings "
                "could not be ranked against the baseline. Run workers on identical machines "
                "(same device, CPU share, torch and driver), or start a separate study here."
            )
        self.memory = storage.read_memory(self.bench.study)
        self._apply_memory_limits()
        self._adopt(baseline)
        try:
            self.candidates()
        except KeyboardInterrupt:
            self.bench.report("worker interrupted")

    def candidates(self) -> None:
        """Candidates as the stage policy says, while the budget lasts. Workers run this too."""
        if not self.space.searched():
            self.bench.report("the space has a single config (the baseline's): nothing to search")
            return
        assert self.baseline is not None
        study = self.bench.study
        policy = StagePolicy(
            self.space, self.settings.baseline, guided=self.settings.guided, split=self._split()
        )
        repeats = 0
        exhausted = False
        while not exhausted and self._has_budget():
            step = policy.next(self.ledger(), waiting=self.bench.waiting())
            for params in step.enqueue:
                study.enqueue_trial(params, skip_if_exists=True)
            storage.reconcile_stale_trials(study)  # a worker elsewhere may have died mid-trial
            run = run_candidate(
                self.bench,
                step.space,
                baseline=self.baseline,
                memory=self.memory,
                guided=self.settings.guided,
                stage=step.stage.value,
            )
            if run.seconds is not None:
                self.durations.append(run.seconds)
            repeats = repeats + 1 if run.repeated else 0
            exhausted = run.exhausted
            if repeats >= MAX_REPEATS:
                self.bench.report(
                    f"the sampler proposed {MAX_REPEATS} configs in a row that were already "
                    "measured: the space looks exhausted"
                )
                exhausted = True

    # -- Budget --------------------------------------------------------------------------------

    def _has_budget(self) -> bool:
        n_trials = self.settings.n_trials
        if n_trials is not None and len(self.ledger().candidates) >= n_trials:
            return False
        assert self.baseline is not None
        expected = statistics.median(self.durations) if self.durations else 0.0
        # Keep back what re-measuring the leaders and confirming the winner will take.
        reserve = self.baseline.confirm_seconds + (RERANK_TOP + 1) * self.baseline.remeasure_seconds
        return self.bench.deadline.fits(expected + reserve)

    def _split(self) -> Callable[[], bool]:
        """A test for 'stage one has had its share': 55% of the time after the baseline, or 60%
        of the trials left."""
        deadline = self.bench.deadline
        at = self.settings.stage_split_at
        if at is not None:
            return lambda: deadline.now() >= at
        n_trials = self.settings.n_trials
        start = len(self.ledger().candidates)
        quota = math.ceil(STAGE_ONE_TRIALS * max(0, (n_trials or 0) - start))
        return lambda: len(self.ledger().candidates) - start >= quota

    # -- Set-up --------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        stale = storage.reconcile_stale_trials(self.bench.study)
        if stale:
            self.bench.report(
                f"trials {', '.join(f'#{n}' for n in stale)} were left running by a process that "
                "is gone: marked failed, and retried once"
            )

    def _probe_memory(self) -> None:
        """Find the largest batch that fits per precision and checkpointing (once per study)."""
        study = self.bench.study
        self.memory = storage.read_memory(study)
        if self.memory is None:
            s = self.settings
            self.memory = probe_memory(
                self.bench.executor,
                s.baseline,
                self.space,
                capacity=usable_memory(s.baseline.device),
                report=self.bench.report,
                time_limit=s.trial_timeout or PROBE_LIMIT,
            )
            if self.memory is not None:
                storage.write_memory(study, self.memory)
        self._apply_memory_limits()

    def _apply_memory_limits(self) -> None:
        knob = self.space.knobs.get("batch_size")
        if self.memory is None or not self.memory.limits or not isinstance(knob, Choice):
            return
        top = max(self.memory.limits.values())
        keep = self.settings.baseline.batch_size
        kept = tuple(v for v in knob.values if int(v) <= top or v == keep)  # type: ignore[arg-type]
        if kept != knob.values:
            self.space = self.space.with_choice("batch_size", kept)

    def _adopt(self, baseline: Baseline) -> None:
        self.baseline = baseline
        self.bench.auto_limit = baseline.record.trial_limit
        if not baseline.guard.reliable:
            self.bench.report(f"accuracy guard: {baseline.guard.advice()}")

    def _publish(self) -> None:
        """Publish the settings (with the stage schedule, wall clock) for workers and reports."""
        s = self.settings
        deadline = self.bench.deadline
        split = None
        if deadline.end is not None:
            now = deadline.now()
            split = now + STAGE_ONE_SHARE * (deadline.end - now)
        self.bench.settings = dataclasses.replace(s, stage_split_at=split)
        storage.publish_settings(self.bench.study, self.bench.settings)
