"""What to try next, ordered by expected gain per second of budget.

Guided, a search goes:

1. **safe**: the knobs that leave the numerics alone (loader workers and prefetch, threads,
   memory format, pinning, cuDNN benchmark), one at a time on the best safe config so far
   (coordinate descent). Throughput-only trials: no accuracy runs, so a safe win comes first
   and fast.
2. **fast**: candidates that change the numerics, on top of the best safe config: reduced
   precision alone (the same optimizer steps), then a bigger batch with a scaled LR and an
   annealed schedule, then the sampler over the numerics knobs. Each pays for accuracy runs.
3. **late**: compile (and ``dynamic=True`` where batch shapes changed under it) and
   checkpointing (where it lets a batch fit that did not), on the best answer so far; then, in a
   small space, every listed value of every knob not measured yet, on the best answer.
4. **explore**: the sampler over the whole space for what is left.

With the global batch kept on a model without batch norm, splitting it differently
(``batch_size`` x ``gradient_accumulation_steps``) leaves the numerics alone: the splits are
tried in the safe stage. A stage whose every config is measured (or whose sampler keeps
proposing measured ones) hands over to the next; the search ends only when the last one has
nothing left.

Unguided, the sampler has the whole space from the start. The policy derives where it is from
the study itself (what was measured), so a resumed search and workers on other hosts agree.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from collections.abc import Callable
from typing import Any

from autotune._choices import CompileMode, Precision, ScheduleKind
from autotune._errors import ConfigError
from autotune._guard.confirmation import Verdict
from autotune._knobs import registry
from autotune._knobs.config import TrainingConfig
from autotune._search import race
from autotune._search.ledger import Entry, Ledger
from autotune._search.warm import inside
from autotune._space import Choice, SearchSpace
from autotune._trial.probe import MemoryLimits

__all__ = [
    "AGAIN_ATTR",
    "FAST_SHARE",
    "STAGE_ATTR",
    "Stage",
    "StagePolicy",
    "Step",
    "coverage_variants",
    "fast_guesses",
    "late_variants",
    "longer_retries",
]

Params = dict[str, Any]
STAGE_ATTR = "autotune_stage"  # an enqueued trial's user attribute: the stage that queued it
AGAIN_ATTR = "autotune_again"  # and whether it draws a measured config a second time
FAST_SHARE = 0.75  # of the budget (time, or trials), by which the fast stage hands over
REDUCED = (Precision.BF16.value, Precision.FP16.value, Precision.TF32.value)  # fastest first
# A space of at most this many configs is small: every listed value is measured at least once,
# and a stage knows when it has measured all of its configs.
SMALL_SPACE = 256


class Stage(str, enum.Enum):
    SAMPLING = "sampling"  # unguided: the sampler alone
    SAFE = "safe"
    FAST = "fast"
    LATE = "late"
    EXPLORE = "explore"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Step:
    """The next candidates: enqueue ``enqueue`` (whole configs, which Optuna hands out first);
    with nothing to enqueue, the sampler proposes one with the knobs in ``pinned`` fixed (an
    enqueued trial with those parameters only: the rest are sampled, and every parameter is
    recorded, so a retry rebuilds the same config). ``needs_checks``: the stage changes the
    numerics, and the baseline's accuracy runs must be measured first. ``again``: the configs
    enqueued were measured, and each is measured once more (a race, see
    :mod:`autotune._search.race`)."""

    stage: Stage
    pinned: Params = dataclasses.field(default_factory=dict)
    enqueue: tuple[Params, ...] = ()
    needs_checks: bool = False
    again: bool = False  # ``enqueue`` holds measured configs, each to be drawn a second time


class StagePolicy:
    """Says what the next candidate is, from what the study has measured so far."""

    def __init__(
        self,
        space: SearchSpace,
        baseline: TrainingConfig,
        *,
        guided: bool,
        cpus: int,
        memory: MemoryLimits | None = None,
        split_free: bool = False,
        carried: tuple[TrainingConfig, ...] = (),
        order: tuple[str, ...] = (),
    ) -> None:
        self.space = space
        self.carried = carried  # a warm start's configs, measured first
        self.order = order  # a warm start's knobs, the most important there first
        self.baseline = baseline
        self.guided = guided
        self.cpus = cpus
        self.memory = memory
        self.numerics = frozenset(space.numerics_knobs(split_free=split_free))
        self.tried: set[TrainingConfig] = set()  # configs this policy enqueued
        self.raced: set[TrainingConfig] = set()  # configs it enqueued for a second draw
        self.exhausted: set[Stage] = set()  # stages whose sampler kept proposing measured configs

    def next(
        self, ledger: Ledger, *, used: float, checks: bool | None, fast_first: bool = False
    ) -> Step | None:
        """The step for the next candidate; None when every stage has nothing left. ``used``:
        the share of the budget spent (time, or trials); ``checks``: whether accuracy checks
        can be made (True: the baseline's accuracy runs are measured; False: they cannot be;
        None: not measured yet); ``fast_first``: the time kept for the accuracy question has
        come, so the fast stage goes before the safe variants still left (they follow it)."""
        if ledger.baseline is not None and self.carried:
            carried = self._carried_step(ledger, checks)
            if carried is not None:
                return carried
        if not self.guided:
            return Step(Stage.SAMPLING)
        base = ledger.baseline
        safe = ledger.best_safe() or base
        if base is None or safe is None:
            return Step(Stage.SAMPLING)
        # Compile and checkpointing only come on top of the best answer (the late stage): their
        # one-time cost and recompute do not pay on a random config.
        plain = self._plain_late()
        safe_pins = {**self._numerics_of(safe.config), **plain}
        # The time kept for the accuracy question is its own: past the fast stage's share of
        # the budget, it still makes the study's first check.
        first_check = fast_first and not ledger.confirmations
        fast = Stage.FAST not in self.exhausted and (used < FAST_SHARE or first_check)
        fast = fast and bool(self.numerics) and checks is not False
        if fast and fast_first:
            step = self._fast_step(ledger, safe, plain, checks)
            if step is not None:
                return step
        step = self._safe_step(ledger, base, safe, safe_pins)
        if step is not None:
            return step
        if fast and not fast_first:
            step = self._fast_step(ledger, safe, plain, checks)
            if step is not None:
                return step
        best = ledger.best() or safe
        step = self._variants(
            Stage.LATE, safe_pins, ledger, late_variants(self.space, best, ledger)
        )
        if step is None and self._size() <= SMALL_SPACE:
            # Without accuracy checks, a value that changes the numerics could not win anyway.
            skip = self.numerics if checks is False else frozenset()
            cover = coverage_variants(self.space, self.baseline, best, ledger, skip=skip)
            step = self._variants(Stage.LATE, safe_pins, ledger, cover)
        if step is not None:
            return step
        pins = plain if checks else safe_pins
        if Stage.EXPLORE in self.exhausted or self._all_measured(pins, ledger):
            return None
        return Step(Stage.EXPLORE, pins)

    # -- Helpers -------------------------------------------------------------------------------

    def _carried_step(self, ledger: Ledger, checks: bool | None) -> Step | None:
        """A warm start's configs before anything else (guided or not): those that leave the
        numerics alone at once; those that change them once the baseline's accuracy runs are
        measured (each then checked as any candidate is), and not where checks cannot be
        made. None when none is left."""
        memory, space = self.memory, self.space
        fits = [
            c
            for c in self.carried
            if (memory is None or memory.allows(c)) and inside(space, c, self.baseline)
        ]
        baseline = self._numerics_of(self.baseline)
        free = [c for c in fits if self._numerics_of(c) == baseline]
        step = self._variants(Stage.SAFE, {}, ledger, free)
        if step is not None or checks is False:
            return step
        changes = [c for c in fits if c not in free]
        left = [c for c in changes if ledger.measured(c) is None and c not in self.tried]
        if left and checks is None:
            return Step(Stage.FAST, {}, needs_checks=True)
        return self._variants(Stage.FAST, {}, ledger, changes)

    def _safe_step(self, ledger: Ledger, base: Entry, safe: Entry, pins: Params) -> Step | None:
        """The safe stage's next step: each knob on the baseline first; then a second draw of
        the best safe config where another is within the screening noise of it, and the pairs
        of the fastest single changes (:mod:`autotune._search.race`); then each knob on the
        best safe config (coordinate descent), the knobs whose single change gained most first.
        None when it has nothing left.

        The second draw and the pairs come before the descent, so that one high draw of a
        first win does not become the base of every later knob while a faster single change
        goes unmeasured."""
        for variants in self._safe_variants(base):
            step = self._variants(Stage.SAFE, pins, ledger, variants)
            if step is not None:
                return step
        doubt = race.contender(ledger, self.space, self.baseline)
        if doubt is not None and doubt.config not in self.raced:
            self.raced.add(doubt.config)
            params = (self.space.params_of(doubt.config, self.baseline),)
            return Step(Stage.SAFE, pins, params, again=True)
        pairs = race.pairs(ledger, self.space, self.baseline)
        step = self._variants(Stage.SAFE, pins, ledger, pairs)
        if step is not None or safe.config == base.config:
            return step
        gains = [knob for knob, _ in race.single_gains(ledger, self.space, self.baseline)]
        for variants in self._safe_variants(safe, first=gains):
            step = self._variants(Stage.SAFE, pins, ledger, variants)
            if step is not None:
                return step
        return None

    def _fast_step(
        self, ledger: Ledger, safe: Entry, plain: Params, checks: bool | None
    ) -> Step | None:
        """The fast stage's next step on the best safe config: the baseline's accuracy runs
        first (``checks`` None), then the guesses, then the sampler; None when it has nothing
        left."""
        fast_pins = {**self._safe_of(safe.config), **plain}
        if checks is None:
            return Step(Stage.FAST, fast_pins, needs_checks=True)
        guesses = fast_guesses(self.space, self.baseline, safe.config, self.memory)
        step = self._variants(Stage.FAST, fast_pins, ledger, guesses)
        if step is not None:
            return step
        longer = [c for c in longer_retries(self.space, ledger) if c not in self.tried]
        step = self._variants(Stage.FAST, fast_pins, ledger, longer[:1])
        if step is not None:
            return step
        if not self._all_measured(fast_pins, ledger):
            return Step(Stage.FAST, fast_pins)
        return None

    def _safe_variants(
        self, safe: Entry, *, first: list[str] | None = None
    ) -> list[list[TrainingConfig]]:
        """The safe stage's variants of the best safe config: each numerics-free knob's other
        values, one knob at a time (the knobs in ``first`` first, in its order; then the
        threads); then the other splits of its global batch, where they leave the numerics
        alone."""
        # The CPU thread count first (the space has it on a CPU only): it sets every step's
        # cost, most of all where other work holds cores, so the stage must not run out of
        # time before it comes to them.
        # A warm start's order, where it has one: what moved the earlier search's time most.
        names = sorted(
            registry.numerics_free_knobs(),
            key=lambda n: (
                first.index(n) if first and n in first else len(first or ()),
                self.order.index(n) if n in self.order else len(self.order),
                n != "intra_op_threads",
            ),
        )
        out = [self._one_knob(safe, name) for name in names]
        if self.space.global_batch_size is not None and "batch_size" not in self.numerics:
            out.append(self._one_knob(safe, "batch_size"))
        return out

    def _size(self) -> float:
        """How many configs the space holds (inf with a continuous knob)."""
        sizes = [self.space.knobs[n] for n in self.space.searched()]
        return math.prod(len(k.values) if isinstance(k, Choice) else math.inf for k in sizes)

    def _all_measured(self, pins: Params, ledger: Ledger) -> bool:
        """Whether every config the sampler could propose with ``pins`` fixed was measured (or
        enqueued): then its stage has nothing left. Only known in a small, discrete space."""
        free = [n for n in self.space.searched() if n not in pins]
        knobs = [self.space.knobs[n] for n in free]
        if not all(isinstance(k, Choice) for k in knobs):
            return False
        choices = [k.values for k in knobs if isinstance(k, Choice)]
        if math.prod(len(c) for c in choices) > SMALL_SPACE:
            return False
        for combo in itertools.product(*choices):
            try:
                cfg = self.space.build(
                    {**pins, **dict(zip(free, combo, strict=True))}, self.baseline
                )
            except ConfigError:
                continue  # a combination the config rejects is never proposed twice
            if ledger.measured(cfg) is None and cfg not in self.tried:
                return False
        return True

    def _variants(
        self, stage: Stage, pins: Params, ledger: Ledger, configs: list[TrainingConfig]
    ) -> Step | None:
        """A step enqueueing the configs not yet measured nor tried; None when there are none."""
        missing = [c for c in configs if ledger.measured(c) is None and c not in self.tried]
        if not missing:
            return None
        self.tried.update(missing)
        return Step(stage, pins, tuple(self.space.params_of(c, self.baseline) for c in missing))

    def _pins(self, values: Params) -> Params:
        """``values`` of the knobs the space samples (the others are fixed anyway)."""
        searched = set(self.space.searched())
        return {k: v for k, v in values.items() if k in searched}

    def _plain_late(self) -> Params:
        """The late knobs at the baseline's values: no compile, no checkpointing."""
        values = registry.values_of(self.baseline, self.baseline)
        return self._pins({k: v for k, v in values.items() if k in registry.late_knobs()})

    def _one_knob(self, entry: Entry, name: str) -> list[TrainingConfig]:
        """``entry``'s config with each other value of knob ``name``."""
        knob = self.space.knobs.get(name)
        if not isinstance(knob, Choice) or len(knob.values) < 2:
            return []
        params = self.space.params_of(entry.config, self.baseline)
        if name not in params:
            return []  # a knob that needs workers, on a config without them
        return [
            self.space.build({**params, name: v}, self.baseline)
            for v in knob.values
            if v != params[name]
        ]

    def _numerics_of(self, cfg: TrainingConfig) -> Params:
        """The values of ``cfg``'s knobs that change the numerics (pinned in the safe stage)."""
        values = registry.values_of(cfg, self.baseline)
        return self._pins({k: v for k, v in values.items() if k in self.numerics})

    def _safe_of(self, cfg: TrainingConfig) -> Params:
        """The values of ``cfg``'s knobs that leave the numerics alone: pinned in the fast
        stage."""
        values = registry.values_of(cfg, self.baseline)
        return self._pins({k: v for k, v in values.items() if k not in self.numerics})


def fast_guesses(
    space: SearchSpace,
    baseline: TrainingConfig,
    safe: TrainingConfig,
    memory: MemoryLimits | None,
) -> list[TrainingConfig]:
    """On the best safe config: each reduced precision alone (the same optimizer steps: where
    fewer, larger steps cost accuracy, this still wins), then the articles' rule of thumb, a
    batch up to 4x larger that fits, its LR scaled by the square root, a cosine schedule with
    a short warm-up, in the fastest reduced precision; then that guess trained for a shorter
    share of the epochs with a one-cycle schedule, where the space searches the length."""
    out: list[TrainingConfig] = []
    params = space.params_of(safe, baseline)
    precision = space.knobs.get("precision")
    reduced = [p for p in REDUCED if isinstance(precision, Choice) and p in precision.values]
    for p in reduced:
        if p != safe.precision.value:
            out.append(space.build({**params, "precision": p}, baseline))
    bold = dict(params)
    if reduced:
        bold["precision"] = reduced[0]
    batch = space.knobs.get("batch_size")
    if isinstance(batch, Choice):
        fits = [
            int(b)  # type: ignore[arg-type]
            for b in batch.values
            if int(b) <= 4 * baseline.batch_size  # type: ignore[arg-type]
            and (memory is None or memory.allows(safe.replace(batch_size=int(b))))  # type: ignore[arg-type]
        ]
        if fits and max(fits) > safe.batch_size:
            bold["batch_size"] = max(fits)
    pick: dict[str, Callable[[Any], bool]] = {
        "lr_schedule": lambda v: v == ScheduleKind.COSINE.value,
        "lr_batch_scaling": lambda v: v == "sqrt",
    }
    for name, want in pick.items():
        knob = space.knobs.get(name)
        if isinstance(knob, Choice) and any(want(v) for v in knob.values):
            bold[name] = next(v for v in knob.values if want(v))
    if "warmup_fraction" in space.knobs:
        bold["warmup_fraction"] = 0.05
    if "lr_multiplier" in space.knobs:
        bold["lr_multiplier"] = 1.0
    candidate = space.build(bold, baseline)
    if candidate != safe and candidate not in out:
        out.append(candidate)
    short = _shorter(space, bold)
    if short is not None:
        candidate = space.build(short, baseline)
        if candidate not in out:
            out.append(candidate)
    return out


def _shorter(space: SearchSpace, bold: Params) -> Params | None:
    """The bold guess trained for the shortest listed share of the epochs that is at least
    half, with a one-cycle schedule where the space has it (an annealed schedule reaches in
    fewer epochs what a constant rate reaches in more: super-convergence); None where the
    space searches no length."""
    length = space.knobs.get("train_fraction")
    if not isinstance(length, Choice):
        return None
    shorter = [float(v) for v in length.values if 0.5 <= float(v) < 1.0]  # type: ignore[arg-type]
    if not shorter:
        return None
    short = {**bold, "train_fraction": min(shorter)}
    schedule = space.knobs.get("lr_schedule")
    if isinstance(schedule, Choice) and ScheduleKind.ONE_CYCLE.value in schedule.values:
        short["lr_schedule"] = ScheduleKind.ONE_CYCLE.value
    return short


def longer_retries(space: SearchSpace, ledger: Ledger) -> list[TrainingConfig]:
    """Until a shorter run holds at the horizon (passes its screening, its check not
    rejected): each config trained for a share of the epochs that failed its screening or
    whose check rejected it, at the listed share nearest halfway from its own to the whole
    run (0.5 -> 0.8 in the default space), the fastest failure first. At a short horizon,
    half the epochs is judged at half the horizon's samples against the whole of them, and
    fails where a milder cut holds; without the retry the sampler may propose half-length
    schedules one after another and make no check."""
    length = space.knobs.get("train_fraction")
    if not isinstance(length, Choice):
        return []
    shares = sorted(float(v) for v in length.values if 0.0 < float(v) < 1.0)  # type: ignore[arg-type]
    failed: list[tuple[float, TrainingConfig]] = []
    for e in ledger.candidates:
        cfg = e.config
        screened = ledger.screened(e)
        if e.record.reused or screened is None or cfg.train_fraction >= 1.0:
            continue
        check = ledger.confirmation(e)
        if screened and (check is None or check.verdict is not Verdict.REJECTED):
            return []  # a shorter run that holds at the horizon: the sampler goes on from it
        failed.append((e.record.projected_time or math.inf, cfg))
    out: list[TrainingConfig] = []
    for _, cfg in sorted(failed, key=lambda pair: pair[0]):
        above = [v for v in shares if v > cfg.train_fraction]
        if not above:
            continue
        halfway = (cfg.train_fraction + 1.0) / 2
        share = min(above, key=lambda v: (abs(v - halfway), -v))
        retry = cfg.replace(train_fraction=share)
        if ledger.measured(retry) is None and retry not in out:
            out.append(retry)
    return out


def coverage_variants(
    space: SearchSpace,
    baseline: TrainingConfig,
    best: Entry,
    ledger: Ledger,
    *,
    skip: frozenset[str] = frozenset(),
) -> list[TrainingConfig]:
    """On the best answer so far: each listed value of each knob (but ``skip``) that no trial
    has measured yet (a user who lists a value expects to see it tried)."""
    seen: dict[str, set[Any]] = {}
    for e in ledger.entries:
        if e.record.reused:
            continue
        for name, value in registry.values_of(e.config, baseline).items():
            seen.setdefault(name, set()).add(value)
    params = space.params_of(best.config, baseline)
    out: list[TrainingConfig] = []
    for name in space.searched():
        knob = space.knobs[name]
        if not isinstance(knob, Choice) or name not in params or name in skip:
            continue  # a range, or a knob that needs workers (or compile) the config lacks
        for value in knob.values:
            if value in seen.get(name, set()):
                continue
            try:
                cfg = space.build({**params, name: value}, baseline)
            except ConfigError:
                continue
            if cfg != best.config and cfg not in out:
                out.append(cfg)
    return out


def late_variants(space: SearchSpace, best: Entry, ledger: Ledger) -> list[TrainingConfig]:
    """On the best answer so far: each compile mode; ``dynamic=True`` where a compiled trial
    recompiled as batch shapes changed; checkpointing where it lets a larger batch fit (one
    that ran out of memory without it)."""
    cfg = best.config
    out: list[TrainingConfig] = []
    compile_knob = space.knobs.get("compile_mode")
    if isinstance(compile_knob, Choice):
        none = CompileMode.NONE.value
        out += [cfg.replace(compile_mode=m) for m in compile_knob.values if m != none]
    dynamic_knob = space.knobs.get("compile_dynamic")
    if isinstance(dynamic_knob, Choice) and True in dynamic_knob.values:
        for e in ledger.candidates:
            m = e.record.measurement
            if m is not None and m.recompiles and not e.config.compile_dynamic:
                dynamic = e.config.replace(compile_dynamic=True)
                if dynamic not in out:
                    out.append(dynamic)
    ckpt = space.knobs.get("checkpointing")
    bigger = [b for b in ledger.oom_batch_sizes() if b > cfg.batch_size]
    if isinstance(ckpt, Choice) and bigger:
        every = min((v for v in ckpt.values if isinstance(v, int) and v > 0), default=0)
        if every:
            out.append(cfg.replace(checkpointing=every, batch_size=bigger[0]))
    return [c for c in out if c != cfg]
