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
from autotune._guard.words import unsettleable_words
from autotune._load import Meter
from autotune._search import coverage, rebase, storage, words
from autotune._search.baseline import (
    Baseline,
    calibrate,
    measure_baseline,
    split_to_fit,
)
from autotune._search.bench import Bench
from autotune._search.candidate import expected_seconds, run_candidate, set_aside_queued
from autotune._search.finish import (
    confirm_pending,
    least_rounds_seconds,
    side_by_side,
    side_by_side_seconds,
)
from autotune._search.ledger import Ledger, trials_counted
from autotune._search.policy import AGAIN_ATTR, STAGE_ATTR, Stage, StagePolicy, Step
from autotune._search.question import AccuracyQuestion
from autotune._search.settings import SearchSettings
from autotune._search.state import LoopState
from autotune._search.status import search_status
from autotune._trial.isolation import TrialExecutor
from autotune._trial.probe import MemoryLimits, probe_memory, usable_memory

__all__ = ["Search"]

PROBE_SHARE = 0.10  # of the budget, the most the memory probe may take
GUARD_WAIT = 600.0  # seconds a worker waits for the coordinator's accuracy guard, at most
# Consecutive proposals of measured configs before a stage counts as exhausted: the time goes
# to the next stage's questions (the open checks, the rounds), not to asking again.
MAX_REPEATS = 8
PROBE_LIMIT = 120.0  # seconds a memory-probe run may take (a few steps) unless trial_timeout


class Search:
    """One process's part in a search: the coordinator's (:meth:`run`) or a worker's
    (:meth:`run_worker`). What changes while it runs is its :class:`LoopState`."""

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
        load_meter: Meter | None = None,
    ) -> None:
        self.state = LoopState.start(settings, clock)
        self.bench = Bench(
            study=study,
            state=self.state,
            executor=executor,
            report=report,
            fingerprint=fingerprint,
            load_meter=load_meter,
        )
        self.launcher = launcher
        self.worker = False  # joined a coordinator's study: it owns the baseline's accuracy runs
        self.question = AccuracyQuestion(self.bench, self.state, self._reserve)

    @property
    def settings(self) -> SearchSettings:
        """The settings as they stand: after the set-up, the ones the study publishes."""
        return self.state.settings

    @property
    def memory(self) -> MemoryLimits | None:
        """The memory probe's limits, which the result reports (None: none known)."""
        return self.state.memory

    def ledger(self) -> Ledger:
        return self.bench.ledger()

    def run(self) -> bool:
        """Run baseline and candidates until the budget is spent. Returns True if interrupted."""
        self._reconcile()
        study = self.bench.study
        try:
            storage.refuse_other_settings(study, self.settings)  # before anything runs
            # Before any trial enters the study: Optuna's categorical distributions are fixed
            # once used, so the batch sizes that cannot fit are removed first.
            self.state.use_memory(_memory_limits(self.bench))
            self._adopt_stored_settings()
            self._measure_baseline()
            storage.publish_settings(study, self.settings)
            self._status()
            if self.launcher is not None or not self.settings.guided:
                # Workers and unguided samplers meet changes of the numerics from the start.
                self._accuracy_check()
            else:
                self.question.plan(worker=self.worker)  # the time the question keeps
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
            if self.state.baseline is None:
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
        self.state.use_memory(storage.read_memory(self.bench.study))
        self.state.measured(baseline)
        self.worker = True
        self._status()
        try:
            self.candidates()
        except KeyboardInterrupt:
            self.bench.report("worker interrupted")

    def candidates(self) -> None:
        """Candidates as the stage policy says, while the budget lasts. Workers run this too.

        Each turn: read the study; stop at the trial limit (once no other process's trial is
        still running); run the trials already enqueued, or else ask the policy for its next
        step (none left: stop); stop where not even a throughput measurement fits before the
        pending work; run one candidate; hand a stage the sampler has exhausted over to the
        next one."""
        state, study = self.state, self.bench.study
        if not state.space.searched():
            self.bench.report("the space has a single config (the baseline's): nothing to search")
            return
        policy = self._policy()
        self.bench.report(words.trial_header())
        while True:
            ledger = self.ledger()
            baseline = Baseline.of(ledger) or state.baseline
            assert baseline is not None
            state.measured(baseline)  # with the guard, once the coordinator measured it
            if self._trials_done(ledger):
                if storage.running_elsewhere(study) and state.waited < storage.GRACE_PERIOD + 5:
                    self._wait()  # for a running trial to finish or be found dead (and retried)
                    continue
                return
            queued = self.bench.waiting()  # enqueued trials run before the policy's next step
            queued = queued or rebase.requeue(self.bench, state.space, state.again)
            due = self.question.due(ledger, baseline, worker=self.worker)
            if due:
                state.guard_due()
                self.bench.detail(  # the rows' stage column shows the change
                    "accuracy guard: the time kept for the accuracy question has come: the "
                    "changes of the numerics go first, the safe knobs left after them"
                )
            if due and queued:  # the question first (see set_aside_queued)
                aside = set_aside_queued(self.bench, state.space)
                policy.tried.difference_update(aside)
                policy.raced.difference_update(aside)
                queued = False
            if not queued:
                step = policy.next(
                    ledger,
                    used=self._used(ledger),
                    checks=self._checks(ledger),
                    fast_first=state.fast_first,
                )
                if step is None and self._guard_coming(ledger):
                    self._wait()  # numerics-free configs all measured: wait for the guard
                    continue
                if step is None:
                    self.bench.report(coverage.nothing_left(ledger, state.space, self.bench))
                    return
                state.take(step)
                if step.needs_checks:
                    self._accuracy_check()  # the first candidate that changes the numerics
                    continue
            reserve, behind = self._reserve(ledger), 0.0
            if (
                state.fast_first
                and state.step.stage is Stage.FAST
                and not ledger.confirmations
                and self._first_check_fits(ledger, baseline)
            ):
                # The accuracy question's time, before its first check: that check comes before
                # the rounds that measure answers where it may make a faster one; only a pending
                # confirmation is kept from it (and, from a check of one that does not lead,
                # the fewest rounds: `behind`). Later candidates leave the rounds their time.
                reserve = self.question.confirm_reserve(ledger)
                behind = least_rounds_seconds(ledger, baseline)
            elif state.step.stage is Stage.FAST and ledger.guard is not None:
                # A change of the numerics may make an answer; rounds beyond the fewest only
                # sharpen a figure, so they are not kept from it.
                reserve = least_rounds_seconds(ledger, baseline) + self.question.confirm_reserve(
                    ledger
                )
            cheapest = expected_seconds(
                state.settings.baseline, ledger, baseline, state.settings.budget
            )
            if not self.bench.deadline.fits(cheapest + reserve):
                return  # not even a throughput measurement fits before the pending work
            if not queued:
                enqueue(self.bench, state.step)
            storage.reconcile_stale_trials(study)  # a worker elsewhere may have died mid-trial
            run = run_candidate(
                self.bench, state.step, state.space, baseline=baseline, memory=state.memory,
                reserve=reserve, behind=behind,
            )  # fmt: skip
            state.count(repeated=run.repeated)
            if run.exhausted or state.repeats >= MAX_REPEATS:
                if state.repeats >= MAX_REPEATS:
                    self.bench.report(
                        f"the sampler proposed {MAX_REPEATS} configs in a row that were "
                        f"already measured: the {state.step.stage} stage looks exhausted"
                    )
                if state.step.stage in (Stage.SAMPLING, Stage.EXPLORE):
                    return
                policy.exhausted.add(state.step.stage)  # the next stage, not the end
                state.next_stage()

    def finish(self) -> None:
        """Confirm a leader still pending, then the answers side by side with the baseline."""
        baseline = Baseline.of(self.ledger())
        if baseline is None:
            return
        confirm_pending(self.bench, baseline)
        side_by_side(self.bench, baseline)

    # -- The candidates loop's parts -----------------------------------------------------------

    def _policy(self) -> StagePolicy:
        s = self.settings
        return StagePolicy(
            s.space, s.baseline, guided=s.guided, cpus=describe_device(s.baseline.device).cpu_count,
            memory=self.state.memory, split_free=s.split_free, carried=s.carried,
            order=s.knob_order)  # fmt: skip

    def _trials_done(self, ledger: Ledger) -> bool:
        """Whether the trial limit (repeats counted: :func:`trials_counted`) is reached, and
        no retry of a trial that died with its process is waiting (retried once, beyond it)."""
        n_trials = self.settings.n_trials
        return (
            n_trials is not None
            and trials_counted(ledger) >= n_trials
            and not storage.retry_waiting(self.bench.study)
        )

    def _checks(self, ledger: Ledger) -> bool | None:
        """Whether the policy may plan candidates that change the numerics: True where the
        guard is measured, False where checks were ruled out, None where not known yet (a
        worker: whether the coordinator measured the guard). Checks that cannot settle at this
        budget are ruled out here, and it is said once."""
        state = self.state
        why = ledger.checks_unsettleable
        if why is not None and not state.no_checks:
            assert ledger.guard is not None
            said = unsettleable_words(why, ledger.guard)
            state.drop_checks()
            self.bench.report(
                f"accuracy guard: its checks cannot settle a change of the numerics ({said}): "
                "the rest of the budget goes to knobs that leave the numerics alone"
            )
        if self.worker:  # the coordinator measures the baseline's accuracy, not a worker
            return ledger.guard is not None and not self.question.failed()
        if state.no_checks:
            return False
        return True if ledger.guard else None

    def _guard_coming(self, ledger: Ledger) -> bool:
        """Whether a worker should wait for the coordinator's accuracy guard (the space changes
        the numerics, and the guard is not measured yet) rather than end."""
        numerics = self.state.space.numerics_knobs(split_free=self.settings.split_free)
        coming = ledger.guard is None and not self.question.failed()  # (its runs may fail)
        return self.worker and self.state.waited < GUARD_WAIT and coming and bool(numerics)

    def _wait(self) -> None:
        time.sleep(1.0)
        self.state.wait(1.0)
        self._reconcile()

    # -- Budget --------------------------------------------------------------------------------

    def _used(self, ledger: Ledger) -> float:
        """The share of the budget spent: of the time, or of the trials."""
        s = self.settings
        used = self.bench.deadline.used()
        if used is not None:
            return used
        if s.n_trials:
            return len(ledger.candidates) / s.n_trials
        return 0.0

    def _reserve(self, ledger: Ledger) -> float:
        """Seconds kept back for work that is pending: confirming the leader that passed
        screening, and the side-by-side rounds of the answers so far."""
        baseline = self.state.baseline
        assert baseline is not None
        return side_by_side_seconds(ledger, baseline) + self.question.confirm_reserve(ledger)

    def _first_check_fits(self, ledger: Ledger, baseline: Baseline) -> bool:
        """Whether the search's first check can still come (before the rounds, whose time it
        may take): a leader waits for it, or the question has not been asked yet (its plan
        keeps its own time), or a candidate screened now (its screening run, then a check's
        first look, priced at the baseline's runs) would still fit in the time left. Once none
        fits, screening alone cannot make an answer that changes the numerics, and the rounds
        keep their time."""
        if ledger.pending() is not None or baseline.accuracy is None:
            return True
        return self.bench.deadline.fits(baseline.run_seconds() + baseline.confirm_seconds())

    def _accuracy_check(self) -> None:
        """The baseline's accuracy runs, now (see :class:`AccuracyQuestion`)."""
        self.question.ask()

    def _status(self) -> None:
        s = self.settings
        self.bench.report.status(
            search_status(self.ledger(), n_trials=s.n_trials, deadline=s.deadline)
        )

    # -- Set-up --------------------------------------------------------------------------------

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
        self.state.resume(stored)

    def _measure_baseline(self) -> None:
        """A new study's first runs: a baseline batch the memory probe says cannot fit split
        (with the global batch kept), the calibration, then the baseline's throughput; a
        resumed study's baseline is read back. Where the baseline asked for did not fit, the
        split that was measured is the search's baseline, and the space's notes say so."""
        state = self.state
        asked = self.settings.baseline
        needs = 0.0
        if Baseline.of(self.ledger()) is None:
            state.split_baseline(split_to_fit(self.bench, state.space, state.memory))
            if self.settings.calibrate:
                calibration = calibrate(self.bench, state.space)
                state.split_baseline(calibration.baseline)
                state.calibrated(calibration.budget, calibration.space)
                needs = calibration.seconds
        baseline = measure_baseline(self.bench, state.space, needs=needs)
        state.measured(baseline)
        split = baseline.record.config
        if split != asked:
            state.split_baseline(split)
            state.note(
                f"baseline: batch {asked.batch_size} x {asked.gradient_accumulation_steps} "
                f"does not fit in memory; measured as {split.batch_size} x "
                f"{split.gradient_accumulation_steps}, the same global batch"
            )


def _memory_limits(bench: Bench) -> MemoryLimits | None:
    """The largest batch that fits per precision and checkpointing: the study's, or probed
    (and stored) within the probe's share of the budget."""
    study, s = bench.study, bench.settings
    memory = storage.read_memory(study)
    if memory is not None:
        return memory
    bench.report.trial("memory probe")
    cuda = s.baseline.device.startswith("cuda")
    memory = probe_memory(
        bench.executor,
        s.baseline,
        s.space,
        # On a GPU the trial worker reads it, its own CUDA context already made.
        capacity=None if cuda else usable_memory(s.baseline.device),
        report=bench.report,
        # Each probe run ends by the search's deadline too (a loaded machine).
        time_limit=bench.deadline.trial_limit(s.trial_timeout or PROBE_LIMIT),
        seconds=bench.deadline.share(PROBE_SHARE),
        # On a GPU a step is fast and an out-of-memory error is clean: check the
        # prediction. On a CPU the process's memory already shows what fits.
        verify=cuda,
    )
    if memory is not None:
        storage.write_memory(study, memory)
    return memory


def enqueue(bench: Bench, step: Step) -> None:
    """Queue the step's configs; with none left waiting, its pinned knobs for the sampler
    to complete."""
    study = bench.study
    label: dict[str, object] = {STAGE_ATTR: step.stage.value}
    if step.again:  # measured configs, each drawn a second time (a race)
        label[AGAIN_ATTR] = True
        bench.detail(
            "race: the best safe config so far measured again before the search builds on "
            "it (another is within the screening noise of it)"
        )
    for params in step.enqueue:
        study.enqueue_trial(params, user_attrs=label, skip_if_exists=not step.again)
    if step.pinned and not bench.waiting():
        study.enqueue_trial(step.pinned, user_attrs=label)
