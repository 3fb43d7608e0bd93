"""The search loop, anytime: memory probe, baseline, candidates in the order the stage policy
gives (safe knobs first, then changes of the numerics, each paying for its accuracy check, then
compile and checkpointing, then the whole space), then the answers measured again side by side.

Every phase is held to the budget: a trial is started only where its expected cost fits before
the time kept for pending work (a leader's confirmation, the side-by-side rounds), and time is
kept only for work that is really pending. Cut off at any point (timeout, Ctrl-C, kill -9 and
the same command again), the study holds the best verified answer so far.

Data flow: search space -> trial runner -> measurement -> study -> exported config. The study is
a normal Optuna study: each trial's record lives in its user attributes (see
:mod:`autotune._search.storage`), so a resumed search, a worker on another host and a report
all rebuild everything from the storage.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna

from autotune._device import describe_device
from autotune._errors import AutotuneError
from autotune._search import coverage, storage
from autotune._search.baseline import (
    Baseline,
    accuracy_plan_seconds,
    calibrate,
    lengthen_until_learned,
    measure_baseline,
    measure_baseline_accuracy,
    smaller_split,
)
from autotune._search.bench import Bench
from autotune._search.candidate import expected_seconds, run_candidate
from autotune._search.deadline import Deadline
from autotune._search.finish import confirm_pending, side_by_side, side_by_side_seconds
from autotune._search.ledger import Ledger
from autotune._search.policy import STAGE_ATTR, Stage, StagePolicy, Step
from autotune._search.settings import SearchSettings
from autotune._search.status import search_status
from autotune._space import Choice
from autotune._trial.isolation import TrialExecutor
from autotune._trial.probe import MemoryLimits, probe_memory, usable_memory

__all__ = ["DEFAULT_TIMEOUT", "Search"]

DEFAULT_TIMEOUT = 600.0
PROBE_SHARE = 0.10  # of the budget, the most the memory probe may take
GUARD_WAIT = 600.0  # seconds a worker waits for the coordinator's accuracy guard, at most
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
        self.no_checks = False  # the accuracy check was found not to fit the budget
        self.worker = False  # joined a coordinator's study: it owns the baseline's accuracy runs

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
            storage.refuse_other_settings(study, self.settings)  # before anything runs
            self._probe_memory()
            self._adopt_stored_settings()
            asked = self.settings.baseline
            if Baseline.of(self.ledger()) is None:
                self._split_baseline_to_fit()
                self.space = calibrate(self.bench, self.space)
            self.baseline = measure_baseline(self.bench, self.space)
            split = self.settings.baseline
            if split != asked:
                self.space = self.space.with_note(
                    f"baseline: batch {asked.batch_size} x {asked.gradient_accumulation_steps} "
                    f"does not fit in memory; measured as {split.batch_size} x "
                    f"{split.gradient_accumulation_steps}, the same global batch"
                )
            self.bench.settings = self.settings.replace(space=self.space)
            storage.publish_settings(study, self.settings)
            self._status()
            if self.launcher is not None or not self.settings.guided:
                # Workers and unguided samplers meet changes of the numerics from the start.
                self._accuracy_check()
            if self.launcher is not None:
                # This process's trial worker holds a CUDA context on the first GPU, which
                # worker 1 uses: close it (a later trial starts a new one).
                self.bench.executor.close()
                self.launcher(study)  # workers run the candidates; back when they are done
                self._reconcile()
            else:
                self.candidates()
            self.finish()
        except KeyboardInterrupt:
            if self.baseline is None:
                raise  # no baseline yet: there is nothing to report
            self.bench.report("interrupted: finishing with the best answer found so far")
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
        self.baseline = baseline
        self.worker = True
        self._status()
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
        cpus = describe_device(self.settings.baseline.device).cpu_count
        policy = StagePolicy(
            self.space, self.settings.baseline, guided=self.settings.guided, cpus=cpus,
            memory=self.memory, split_free=self.settings.split_free,
        )  # fmt: skip
        repeats = 0
        waited = 0.0
        step = Step(Stage.SAMPLING)
        while True:
            ledger = self.ledger()
            n_trials = self.settings.n_trials
            if n_trials is not None and len(ledger.candidates) >= n_trials:
                # Done, but for trials that died elsewhere: they are retried once, so wait a
                # heartbeat's grace period for a running one to finish or be found dead.
                if self._retry_waiting():
                    pass
                elif self._others_running() and waited < storage.GRACE_PERIOD + 5:
                    time.sleep(1.0)
                    waited += 1.0
                    self._reconcile()
                    continue
                else:
                    return
            fresh = not self.bench.waiting()  # enqueued trials first, then the policy's next step
            if fresh:
                if ledger.checks_hopeless and not self.no_checks:
                    self.no_checks = True
                    why = (
                        "its metric got worse as the baseline trained"
                        if ledger.guard is not None and ledger.guard.wrong_way
                        else "the baseline did not learn measurably in its accuracy budget"
                    )
                    self.bench.report(
                        f"accuracy guard: its checks cannot settle a change of the numerics at "
                        f"this budget ({why}): the rest of the budget goes to knobs that leave "
                        "the numerics alone"
                    )
                checks = False if self.no_checks else (True if ledger.guard else None)
                if self.worker:  # the coordinator measures the baseline's accuracy, not a worker
                    checks = ledger.guard is not None
                next_step = policy.next(ledger, used=self._used(ledger), checks=checks)
                if next_step is None and _guard_coming(self, ledger, waited):
                    time.sleep(1.0)  # numerics-free configs all measured: wait for the guard
                    waited += 1.0
                    self._reconcile()
                    continue
                if next_step is None:
                    self.bench.report(coverage.nothing_left(ledger, self.space, self.bench))
                    return
                step = next_step
                if step.needs_checks:
                    self._accuracy_check()  # the first candidate that changes the numerics
                    continue
            reserve = self._reserve(ledger)
            cheapest = expected_seconds(
                self.settings.baseline, ledger, self.baseline, self.settings.budget
            )
            if not self.bench.deadline.fits(cheapest + reserve):
                return  # not even a throughput measurement fits before the pending work
            if fresh:
                label = {STAGE_ATTR: step.stage.value}
                for params in step.enqueue:
                    study.enqueue_trial(params, user_attrs=label, skip_if_exists=True)
                if step.pinned and not self.bench.waiting():
                    # The sampler's turn, with the step's knobs fixed.
                    study.enqueue_trial(step.pinned, user_attrs=label)
            storage.reconcile_stale_trials(study)  # a worker elsewhere may have died mid-trial
            self.baseline = Baseline.of(ledger) or self.baseline
            run = run_candidate(
                self.bench, step, self.space, baseline=self.baseline, memory=self.memory,
                reserve=reserve,
            )  # fmt: skip
            repeats = repeats + 1 if run.repeated else 0
            if run.exhausted or repeats >= MAX_REPEATS:
                if repeats >= MAX_REPEATS:
                    self.bench.report(
                        f"the sampler proposed {MAX_REPEATS} configs in a row that were "
                        f"already measured: the {step.stage} stage looks exhausted"
                    )
                if step.stage in (Stage.SAMPLING, Stage.EXPLORE):
                    return
                policy.exhausted.add(step.stage)  # the next stage, not the end
                repeats = 0

    def finish(self) -> None:
        """Confirm a leader still pending, then the answers side by side with the baseline."""
        baseline = Baseline.of(self.ledger())
        if baseline is None:
            return
        confirm_pending(self.bench, baseline)
        side_by_side(self.bench, baseline)

    # -- Budget --------------------------------------------------------------------------------

    def _used(self, ledger: Ledger) -> float:
        """The share of the budget spent: of the time, or of the trials."""
        s = self.settings
        left = self.bench.deadline.left()
        if left is not None and s.timeout:
            return 1.0 - left / s.timeout
        if s.n_trials:
            return len(ledger.candidates) / s.n_trials
        return 0.0

    def _reserve(self, ledger: Ledger) -> float:
        """Seconds kept back for work that is pending: confirming the leader that passed
        screening, and the side-by-side rounds of the answers so far."""
        assert self.baseline is not None
        reserve = side_by_side_seconds(ledger, self.baseline)
        leader = ledger.pending()
        if leader is not None:
            m = leader.record.measurement
            reserve += self.baseline.confirm_seconds(m.throughput if m is not None else None)
        return reserve

    def _accuracy_check(self) -> None:
        """Measure the baseline's accuracy runs where the space changes the numerics and they
        fit the budget with a candidate's check after them; otherwise say that only the knobs
        that leave the numerics alone are searched."""
        assert self.baseline is not None
        if self.baseline.guard is not None or self.no_checks:
            return
        if not self.space.numerics_knobs(split_free=self.settings.split_free):
            self.no_checks = True
            return
        ledger = self.ledger()
        _, seconds, _ = accuracy_plan_seconds(self.bench, self.baseline)
        # The baseline's runs, one candidate's run and its confirmation: about twice the former.
        need = 2 * seconds + self._reserve(ledger)
        if not self.bench.deadline.fits(need):
            self.no_checks = True
            timeout = self.settings.timeout or 0.0
            more = timeout + need - float(self.bench.deadline.left() or 0.0)
            self.bench.report(
                f"accuracy guard: no time for accuracy checks (~{need:.0f} s for the baseline's "
                "runs and one candidate's): only the knobs that leave the numerics alone are "
                f"searched; a timeout of {more:.0f} s or more would allow them"
            )
            return
        self.baseline = measure_baseline_accuracy(self.bench, self.baseline)
        self.baseline = lengthen_until_learned(self.bench, self.baseline, self._reserve(ledger))

    def _status(self) -> None:
        s = self.settings
        self.bench.report.status(
            search_status(self.ledger(), n_trials=s.n_trials, deadline=s.deadline)
        )

    # -- Set-up --------------------------------------------------------------------------------

    def _others_running(self) -> bool:
        """Whether trials of other processes are running (a dead one's heartbeat goes stale)."""
        return storage.running_elsewhere(self.bench.study)

    def _retry_waiting(self) -> bool:
        return storage.retry_waiting(self.bench.study)

    def _reconcile(self) -> None:
        stale = storage.reconcile_stale_trials(self.bench.study)
        if stale:
            self.bench.report(
                f"trials {', '.join(f'#{n}' for n in stale)} were left running by a process that "
                "is gone: marked failed, and retried once"
            )

    def _adopt_stored_settings(self) -> None:
        """Resuming a study: every trial is measured with the budget the first run calibrated,
        in the space it narrowed."""
        stored = storage.read_settings(self.bench.study)
        if stored is None or Baseline.of(self.ledger()) is None:
            return
        # The stored baseline: where the one asked for did not fit, the split that was measured.
        self.bench.settings = self.settings.replace(
            budget=stored.budget, calibrate=False, baseline=stored.baseline
        )
        self.space = stored.space
        self._apply_memory_limits()

    def _probe_memory(self) -> None:
        """Find the largest batch that fits per precision and checkpointing (once per study),
        within its share of the budget."""
        study = self.bench.study
        self.memory = storage.read_memory(study)
        if self.memory is None:
            s = self.settings
            self.bench.report.trial("memory probe")
            cuda = s.baseline.device.startswith("cuda")
            self.memory = probe_memory(
                self.bench.executor,
                s.baseline,
                self.space,
                # On a GPU the trial worker reads it, its own CUDA context already made.
                capacity=None if cuda else usable_memory(s.baseline.device),
                report=self.bench.report,
                # Each probe run ends by the search's deadline too (a loaded machine).
                time_limit=self.bench.deadline.trial_limit(s.trial_timeout or PROBE_LIMIT),
                seconds=None if s.timeout is None else PROBE_SHARE * s.timeout,
                # On a GPU a step is fast and an out-of-memory error is clean: check the
                # prediction. On a CPU the process's memory already shows what fits.
                verify=cuda,
            )
            if self.memory is not None:
                storage.write_memory(study, self.memory)
        self._apply_memory_limits()

    def _apply_memory_limits(self) -> None:
        """Batch sizes that cannot fit leave the space; the largest that fits between two
        listed sizes joins it (a batch of 100 where 128 does not fit, rather than 64)."""
        knob = self.space.knobs.get("batch_size")
        if self.memory is None or not self.memory.limits or not isinstance(knob, Choice):
            return
        top = max(self.memory.limits.values())
        keep = self.settings.baseline.batch_size
        kept = [v for v in knob.values if int(v) <= top or v == keep]  # type: ignore[arg-type]
        if self.space.global_batch_size is None:
            kept += sorted({b for b in self.memory.limits.values() if b > 0} - set(kept))
        if tuple(kept) != knob.values:
            self.space = self.space.with_choice("batch_size", tuple(kept))

    def _split_baseline_to_fit(self) -> None:
        """With the global batch kept: a baseline batch the memory probe says cannot fit is
        split into smaller micro-batches until it can, before anything runs."""
        cfg = self.settings.baseline
        while self.memory is not None and not self.memory.allows(cfg):
            split = smaller_split(self.space, cfg)
            if split is None:
                return
            self.bench.report(
                f"baseline: batch {cfg.batch_size} does not fit in memory (the memory probe); "
                f"splitting the global batch of {cfg.global_batch_size} into {split.batch_size}"
                f" x {split.gradient_accumulation_steps}"
            )
            cfg = split
            self.bench.settings = self.settings.replace(baseline=cfg)


def _guard_coming(search: Search, ledger: Ledger, waited: float) -> bool:
    """Whether a worker should wait for the coordinator's accuracy guard (the space changes the
    numerics, and the guard is not measured yet) rather than end."""
    numerics = search.space.numerics_knobs(split_free=search.settings.split_free)
    return search.worker and waited < GUARD_WAIT and ledger.guard is None and bool(numerics)
