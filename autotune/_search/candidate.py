"""One candidate trial: ask the sampler, skip what is already known, measure throughput first,
pay for an accuracy run only where the numerics change and the candidate could still win, and
confirm a candidate that passed screening while it leads, so the study always holds a verified
answer."""

from __future__ import annotations

import contextlib
import dataclasses

import optuna
from optuna.trial import TrialState

from autotune._choices import CompileMode
from autotune._errors import ConfigError, DeviceError
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._search import derived, ranking, rebase, storage
from autotune._search.baseline import SLACK, Baseline, measurement_seconds
from autotune._search.bench import Bench
from autotune._search.evidence import confirm
from autotune._search.ledger import (
    Entry,
    Ledger,
    away,
    could_win_bar,
    fastest_verified,
    promise,
    step_draws,
)
from autotune._search.policy import AGAIN_ATTR, STAGE_ATTR, Stage, Step
from autotune._search.record import NoRun, Record, Role
from autotune._search.status import search_status, trial_line
from autotune._space import SearchSpace
from autotune._trial.failures import FailureReason
from autotune._trial.outcome import Budget, TrialOutcome
from autotune._trial.probe import MemoryLimits

__all__ = ["CandidateRun", "expected_seconds", "first_compile", "run_candidate"]


@dataclasses.dataclass(frozen=True)
class CandidateRun:
    """How a candidate trial went, for the loop's bookkeeping."""

    seconds: float | None = None  # how long it ran (None: it did not run)
    repeated: bool = False  # the sampler proposed a config already measured
    exhausted: bool = False  # the sampler has covered its whole space


def expected_seconds(
    cfg: TrainingConfig, ledger: Ledger, baseline: Baseline, budget: Budget
) -> float:
    """How long measuring ``cfg``'s throughput is expected to take: its warm-up and timed
    steps at the baseline's speed, plus the baseline's fixed overhead (a bigger batch does
    fewer, larger steps of the same samples); for a compiled config, as long as the slowest
    compiled trial so far (one stopped at its limit: at least that long). Before any compiled
    trial, a compile's cost is unknown (seconds for an MLP, minutes for a large model): the
    steady-state part is returned, and :func:`first_compile` says how the first one runs."""
    typical = baseline.measure_seconds
    rate = baseline.throughput  # as its latest measurement read: the machine now
    if baseline.record.measurement is not None and rate:
        # Per-rank batches (a DDP measurement's batch_size is every rank's together).
        base = baseline.record.config
        base_cost = measurement_seconds(
            base.batch_size, budget, rate, 0.0, base.gradient_accumulation_steps, base.ranks
        )
        overhead = max(0.0, baseline.measure_seconds / SLACK - base_cost)
        k = cfg.gradient_accumulation_steps
        steps = measurement_seconds(cfg.batch_size, budget, rate, overhead, k, cfg.ranks)
        typical = SLACK * steps
    if cfg.compile_mode is CompileMode.NONE:
        return typical
    compiled = _compiled_seconds(ledger)
    return max(max(compiled), typical) if compiled else typical


def _compiled_seconds(ledger: Ledger) -> list[float]:
    """How long each compiled trial ran: measured, or stopped at its limit (a lower bound)."""
    out = []
    for e in ledger.entries:
        if e.config.compile_mode is CompileMode.NONE or e.record.reused:
            continue
        seconds = e.record.measure_seconds or (
            e.record.seconds if e.record.failure is FailureReason.TIMEOUT else 0.0
        )
        if seconds:
            out.append(float(seconds))
    return out


def first_compile(cfg: TrainingConfig, ledger: Ledger) -> bool:
    """Whether ``cfg`` is the study's first compiled trial: its compile cost is measured by
    running it, with what is left of the budget (less the time kept for pending work) as its
    limit, rather than skipped on a guess."""
    return cfg.compile_mode is not CompileMode.NONE and not _compiled_seconds(ledger)


def run_candidate(
    bench: Bench,
    step: Step,
    space: SearchSpace,
    *,
    baseline: Baseline,
    memory: MemoryLimits | None,
    reserve: float,
    behind: float = 0.0,
) -> CandidateRun:
    """Run the next candidate: the next enqueued trial (the loop enqueues ``step``'s configs,
    or its pinned parameters for the sampler to complete), built from ``space``.
    ``reserve``: seconds kept back for pending work (confirming a leader, the side-by-side
    rounds), which no phase may eat into; ``behind``: kept back too from the check of one
    that does not lead the fastest verified answer beyond a tie (see
    :func:`_confirm_if_leading`)."""
    trial = bench.ask()
    try:
        # The heartbeat from the start: a process that dies at any point leaves a stale beat,
        # by which the others fail its trial and retry it.
        with storage.heartbeat(bench.study, trial):
            run = _run(bench, trial, step, space, baseline, memory, reserve)
    except DeviceError as exc:
        # In process, a CUDA error ended the search: the trial is failed with its reason (not
        # left running to be retried, when it would poison the process again).
        if trial.number not in {e.number for e in bench.ledger().entries}:
            bench.fail(trial, str(exc))
        raise
    except KeyboardInterrupt:
        # The trial did not finish: fail it and let a resumed search run it again.
        if trial.number not in {e.number for e in bench.ledger().entries}:
            bench.study.tell(trial, state=TrialState.FAIL)
            storage.retry_once(bench.study, bench.study.trials[trial.number])
        raise
    if bench.settings.guided and run.seconds is not None:
        _confirm_if_leading(bench, baseline, trial.number, reserve, behind)
    return run


def _run(
    bench: Bench,
    trial: optuna.Trial,
    step: Step,
    space: SearchSpace,
    baseline: Baseline,
    memory: MemoryLimits | None,
    reserve: float,
) -> CandidateRun:
    stage = trial.user_attrs.get(STAGE_ATTR)  # the stage that queued it
    step = dataclasses.replace(step, stage=Stage(stage) if stage else step.stage)
    bench.report.trial(f"trial #{trial.number} [{step.stage.value}]")
    try:
        cfg = space.suggest(trial, bench.settings.baseline)
    except ConfigError as exc:  # a combination the config itself rejects
        bench.fail(trial, str(exc))
        return CandidateRun()
    oversized = cfg.batch_exceeds(bench.settings.n_train)  # batch_size alone: the space's
    if oversized is not None:
        why = f"not started: {oversized}"
        failed = bench.study.get_trials(deepcopy=False, states=[TrialState.FAIL])
        if not any(t.user_attrs.get("message") == why for t in failed):  # said once
            bench.report(f"skipped {cfg.describe()}: {oversized}")
        bench.fail(trial, why)
        return CandidateRun()
    ledger = bench.ledger()
    previous = ledger.measured(cfg)
    again = bool(trial.user_attrs.get(AGAIN_ATTR))  # a race's second draw
    if previous is not None and not again and not _measure_anew(ledger, previous):
        # Its record again, as a candidate (even when it repeats the baseline's config).
        record = dataclasses.replace(previous.record, reused=True, role=Role.CANDIDATE)
        return _finish(bench, trial, record, baseline, step, repeated=True)
    predicted = _predicted_oom(cfg, memory)
    if predicted is not None:
        return _finish(bench, trial, bench.record(predicted, role=Role.CANDIDATE), baseline, step)
    expected = expected_seconds(cfg, ledger, baseline, bench.settings.budget)
    if not bench.deadline.fits(expected + reserve):
        why = f"expected to take ~{expected:.0f} s"
        if cfg.compile_mode is not CompileMode.NONE and not first_compile(cfg, ledger):
            why += " (as long as the longest compiled trial so far)"
        said = _skipped_for_time(bench)  # the story says it once, the detail each
        bench.fail(trial, f"not started: {why}, more than was left")
        line = (
            f"skipped {cfg.describe()}: {why}, and "
            f"{bench.deadline.describe()} with {reserve:.0f} s kept for pending work"
        )
        if said:
            storage.add_note(bench.study, line)
        else:
            bench.report(line)
        return CandidateRun()
    record = _measure(bench, trial, cfg, baseline, ledger, reserve)
    return _finish(bench, trial, record, baseline, step, seconds=record.seconds)


def _skipped_for_time(bench: Bench) -> bool:
    """Whether a trial was not started already for the time it would take: the story says
    so once, the detail each time."""
    failed = bench.study.get_trials(deepcopy=False, states=[TrialState.FAIL])
    return any(
        str(t.user_attrs.get("message", "")).startswith("not started: expected to take")
        for t in failed
    )


def _measure_anew(ledger: Ledger, previous: Entry) -> bool:
    """Whether a config measured before is measured again rather than its record reused:
    where its one measurement was taken while the machine was busy and the baseline has been
    measured free since (:func:`autotune._search.ledger.away`): its ratio then is of another
    state. Once only: a second measurement is kept, busy or not."""
    own = [e for e in ledger.entries if e.config == previous.config and not e.record.reused]
    return len(own) == 1 and away(ledger, previous)


def _measure(
    bench: Bench,
    trial: optuna.Trial,
    cfg: TrainingConfig,
    baseline: Baseline,
    ledger: Ledger,
    reserve: float,
) -> Record:
    """Throughput first; then, where the numerics change, an accuracy run (seed 0) unless the
    candidate cannot win or there is no time for it."""
    budget = bench.settings.budget
    # The limit is on the steady-state part; compilation has its own allowance (Bench). No run
    # eats into the time kept for pending work, nor into the deadline's grace (kept for the
    # last short steps, which a late first compile would take whole): a first compile runs
    # with what is left.
    eager = cfg.replace(compile_mode=CompileMode.NONE, compile_dynamic=False)
    expected = expected_seconds(eager, ledger, baseline, budget)
    outcome = bench.execute(cfg, expected=expected, keep=reserve + bench.deadline.grace)
    measured, load = outcome.seconds, outcome.load
    if outcome.ok:
        # Where it ran in another state of the machine than every baseline measurement (or
        # the last is old), the baseline is measured again first: its ratio, the decisions
        # below and its progress line compare like with like.
        rebase.recheck(bench, load, reserve=reserve, trial=trial.number)
        ledger = bench.ledger()
    if not outcome.ok or ledger.same_numerics(cfg, baseline.record.config):
        return bench.record(outcome, role=Role.CANDIDATE, measure_seconds=measured)
    known = ledger.accuracy_of_numerics(cfg)
    if known is not None:  # the same trained model: its accuracy runs carry over
        outcome = dataclasses.replace(outcome, accuracy=known)
        return bench.record(
            outcome,
            role=Role.CANDIDATE,
            measure_seconds=measured,
            accuracy_samples=baseline.check.samples if baseline.check else None,
        )
    skip = _no_accuracy_run(bench, trial, outcome, baseline, ledger, reserve)
    if skip is not None:
        return bench.record(
            dataclasses.replace(outcome, message=skip[1]),
            role=Role.CANDIDATE,
            measure_seconds=measured,
            pruned=True,
            no_run=skip[0],
        )
    assert baseline.accuracy is not None and outcome.measurement is not None
    check = baseline.check_of(cfg, (0,))
    outcome = bench.execute(
        cfg,
        accuracy=check,
        measured=outcome.measurement,
        expected=baseline.run_seconds(outcome),
        keep=reserve,
    )
    outcome = dataclasses.replace(outcome, seconds=outcome.seconds + measured, load=load)
    return bench.record(
        outcome, role=Role.CANDIDATE, measure_seconds=measured, accuracy_samples=check.samples
    )


def set_aside_queued(bench: Bench, space: SearchSpace) -> list[TrainingConfig]:
    """Fail the enqueued trials still waiting (a safe knob's other values), each "not
    started: set aside", and return their configs for the policy to enqueue again after the
    changes of the numerics: the accuracy question's time has come, and they waited in front
    of it (run first, they could take the time its check and the rounds need)."""
    waiting = bench.study.get_trials(deepcopy=False, states=[TrialState.WAITING])
    if any(t.user_attrs.get(STAGE_ATTR) != Stage.SAFE.value for t in waiting):
        return []  # a retry of a trial that died, or another stage's: they run as queued
    aside: list[TrainingConfig] = []
    while bench.waiting():
        trial = bench.ask()
        with contextlib.suppress(ConfigError):  # a rejected combination: never proposed again
            aside.append(space.suggest(trial, bench.settings.baseline))
        bench.fail(trial, "not started: set aside for the accuracy question, to come after it")
    return aside


def _no_accuracy_run(
    bench: Bench,
    trial: optuna.Trial,
    outcome: TrialOutcome,
    baseline: Baseline,
    ledger: Ledger,
    reserve: float,
) -> tuple[NoRun, str] | None:
    """Why a candidate that changes the numerics gets no accuracy run, in a word and in words,
    or None when it does:
    there is no guard (no time was left for the baseline's runs), it could not win (slower
    than the best verified answer beyond a tie: one measurement is noisy, and the best verified
    answer is the best of several, so a candidate within the tie gets its chance; the
    side-by-side rounds decide), it makes the steps a verified answer makes (only its LR
    schedule differs), or its run does not fit the budget. (An unguided search, a grid,
    checks every config.)"""
    assert outcome.measurement is not None
    if baseline.check is None:
        return NoRun.NO_GUARD, "no accuracy check: the baseline's accuracy runs were not measured"
    s = bench.settings
    # In the machine's latest state, as every draw it is compared with (Ledger.normalized).
    projected = ledger.normalized(bench.record(outcome, role=Role.CANDIDATE))
    assert projected is not None
    trial.report(projected, step=0)  # Optuna's intermediate value: the throughput phase
    # Each by every screening draw of its steps, not one: one high draw of a safe config
    # would rule out every change of the numerics, even a shorter schedule of its own steps.
    bar = could_win_bar(ledger) if s.guided else None
    mine = [*step_draws(ledger, outcome.config), projected]
    if bar is not None and ranking.median_time(mine) > bar[1]:
        return NoRun.COULD_NOT_WIN, (
            f"slower than the best verified config (trial #{bar[0].number}): no accuracy "
            "run, it could not win"
        )
    same = _same_speed_answer(ledger, outcome.config) if s.guided else None
    if same is not None:
        what = (
            "only its LR schedule differs"
            if outcome.config.train_fraction == same.config.train_fraction
            else "only its LR schedule and a longer run differ"
        )
        return NoRun.COULD_NOT_WIN, (
            f"it makes the steps of trial #{same.number}, an answer already ({what}, which "
            "changes no step's cost): no accuracy run, it could not win"
        )
    run = baseline.run_seconds(outcome)
    if not bench.deadline.fits(run + reserve):
        return NoRun.NO_TIME, f"no time left for its accuracy run (~{run:.0f} s)"
    check = baseline.confirm_seconds(outcome)
    unchecked = ledger.confirmations.get(ledger.numerics_id(outcome.config)) is None
    checked = baseline.guard is not None and baseline.guard.repeats >= 2
    if unchecked and checked and not bench.deadline.fits(run + check):
        # Screening alone makes no answer: a run whose check cannot follow it is time lost.
        return NoRun.NO_TIME, (
            f"no time left for its accuracy run and the check after it (~{run:.0f} s and "
            f"~{check:.0f} s)"
        )
    return None


def _same_speed_answer(ledger: Ledger, cfg: TrainingConfig) -> Entry | None:
    """A verified answer (safe or confirmed) that makes ``cfg``'s steps (see
    :func:`registry.step_key`: only the LR schedule, or the run's length, differs) and no more
    of them: the same steps at the same cost, so ``cfg`` cannot be faster, whatever one noisy
    measurement says, and checking it would spend budget on no gain."""
    key = registry.step_key(cfg)
    for entry in ledger.entries:
        other = entry.config
        same_steps = other != cfg and registry.step_key(other) == key
        if same_steps and cfg.train_fraction >= other.train_fraction and ledger.feasible(entry):
            return entry
    return None


def _confirm_if_leading(
    bench: Bench, baseline: Baseline, number: int, reserve: float, behind: float = 0.0
) -> None:
    """Confirm a candidate that passed screening and leads the answers so far, at once: the
    study then holds it as a verified answer should the search be cut off. One screened no
    faster than the fastest verified answer beyond a tie (worth checking only within the
    screening's noise) also leaves ``behind`` seconds (the fewest rounds that measure the
    answers side by side) where they fit, as the search's last check does, so that checking
    a slower config cannot take the time the rounds need to measure either answer. Where the
    rounds no longer fit anyway, the check takes the time."""
    ledger = bench.ledger()
    leader = ledger.pending()
    if leader is None or leader.number != number or baseline.guard is None:
        return
    if baseline.guard.repeats < 2:
        return
    if behind > 0.0 and not bench.deadline.past(reserve + behind):  # the rounds fit without it
        fastest = fastest_verified(ledger)
        speedup = derived.speedup(fastest[1], promise(ledger, leader)) if fastest else None
        if speedup is not None and speedup <= 1.0 + ranking.TIE:
            reserve += behind  # it waits for the end
    cost = baseline.confirm_seconds(leader.record)
    if not bench.deadline.fits(cost + reserve):
        # Not "no time": the search's last time may still hold it (finish.confirm_pending);
        # the row says "screened ok", the check's verdict or the summary says the rest.
        bench.detail(
            f"trial #{number} passed screening; its check (~{cost:.0f} s) does not fit now "
            f"beside the {reserve:.0f} s kept for pending work: it is made at the end if the "
            "time left then holds it"
        )
        return
    confirm(bench, baseline, leader, keep=reserve)


def _predicted_oom(cfg: TrainingConfig, memory: MemoryLimits | None) -> TrialOutcome | None:
    if memory is None or memory.allows(cfg):
        return None
    peak = memory.predicted_peak(cfg)
    need = f" (needs ~{peak / 2**30:.2f} GiB" if peak else " ("
    return TrialOutcome(
        config=cfg,
        failure=FailureReason.OOM,
        message=(
            f"out of memory, predicted by the memory probe: batch {cfg.batch_size} is above "
            f"{memory.limit(cfg)}, the largest that fits with {cfg.precision.value} and "
            f"checkpointing={cfg.checkpointing}{need} of "
            f"{memory.capacity / 2**30:.2f} GiB usable); not run"
        ),
    )


def _finish(
    bench: Bench,
    trial: optuna.Trial,
    record: Record,
    baseline: Baseline,
    step: Step,
    *,
    repeated: bool = False,
    seconds: float | None = None,
) -> CandidateRun:
    before = bench.ledger()
    if record.accuracy and not record.reused:  # the verdict its row says, kept as a fact
        record = dataclasses.replace(
            record, screened_then=before.screened(Entry(trial.number, record))
        )
    exhausted = bench.tell(
        trial,
        record,
        baseline.guard,
        before.normalized(baseline.record),
        value=before.normalized(record),
    )
    ledger = bench.ledger()
    entry = next(e for e in ledger.entries if e.number == trial.number)
    if not repeated:  # a proposal of a config measured already runs nothing: not a line
        bench.report(
            trial_line(
                ledger,
                entry,
                # a race's second draw of a measured config says so in its stage column
                stage="again" if trial.user_attrs.get(AGAIN_ATTR) else step.stage.value,
                left=bench.deadline.left(),
                n_trials=bench.settings.n_trials,
            )
        )
    bench.report.status(
        search_status(ledger, n_trials=bench.settings.n_trials, deadline=bench.settings.deadline)
    )
    if exhausted:
        bench.report("the sampler has tried every config in the space")
    return CandidateRun(seconds=seconds, repeated=repeated, exhausted=exhausted)
