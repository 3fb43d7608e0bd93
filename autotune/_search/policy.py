"""What to try next: the stage policy, the rules-of-thumb first guesses and the late variants.

Guided, a search goes through three stages: (1) the sampler over every knob but the late ones
(compile's one-time cost and checkpointing's recompute only pay on top of a good config), until
stage one has had its share of the budget; (2) on the best config so far, every other value of
each knob that leaves the numerics alone, then compile, then checkpointing where it lets a
larger batch fit; (3) the whole space for what is left. Unguided, the sampler has the whole
space from the start.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from autotune import _knobs
from autotune._choices import Precision, ScheduleKind
from autotune._config import TrainingConfig
from autotune._search.ledger import Ledger
from autotune._space import Choice, SearchSpace

__all__ = ["Stage", "StagePolicy", "Step", "first_guesses", "late_variants"]

Params = dict[str, Any]


class Stage(str, enum.Enum):
    SAMPLING = "sampling"  # unguided: the sampler alone
    FIRST = "stage 1: sampling"
    REFINE = "stage 2: refining the best"
    WHOLE = "stage 3: whole space"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Step:
    """The next candidate: enqueue ``enqueue`` (Optuna asks for enqueued trials first), then
    sample from ``space``."""

    stage: Stage
    space: SearchSpace
    enqueue: tuple[Params, ...] = ()


class StagePolicy:
    """The stage machine. ``split()`` says when stage one has had its share of the budget."""

    def __init__(
        self,
        space: SearchSpace,
        baseline: TrainingConfig,
        *,
        guided: bool,
        split: Callable[[], bool],
    ) -> None:
        self.space = space
        self.baseline = baseline
        self.split = split
        self.stage = Stage.FIRST if guided else Stage.SAMPLING

    def next(self, ledger: Ledger, *, waiting: bool) -> Step:
        """The step for the next candidate, given the study so far and whether enqueued trials
        are still waiting."""
        if self.stage is Stage.FIRST:
            if not self.split():
                return Step(Stage.FIRST, self.space.without(_knobs.late_knobs()))
            self.stage = Stage.REFINE
            best = ledger.best()
            cfg = best.config if best is not None else self.baseline
            variants = late_variants(self.space, self.baseline, cfg, ledger.oom_batch_sizes())
            return Step(Stage.REFINE, self.space, tuple(variants))
        if self.stage is Stage.REFINE and not waiting:
            self.stage = Stage.WHOLE
        return Step(self.stage, self.space)


def late_variants(
    space: SearchSpace, baseline: TrainingConfig, cfg: TrainingConfig, oom_sizes: list[int]
) -> list[Params]:
    """On ``cfg``: each other value of each knob that leaves the numerics alone
    (throughput-only trials: the accuracy runs carry over), then compile, then checkpointing
    where it lets a larger batch fit (one that ran out of memory without it)."""
    params = space.params_of(cfg, baseline)
    out: list[Params] = []
    for name in _knobs.numerics_free_knobs():
        knob = space.knobs.get(name)
        if name not in params or not isinstance(knob, Choice):
            continue
        out += [{**params, name: v} for v in knob.values if v != params[name]]
    variants: list[TrainingConfig] = []
    compile_knob = space.knobs.get("compile_mode")
    if isinstance(compile_knob, Choice):
        variants += [
            cfg.replace(compile_mode=m) for m in compile_knob.values if m != cfg.compile_mode
        ]
    ckpt = space.knobs.get("checkpointing")
    bigger = [b for b in oom_sizes if b > cfg.batch_size]
    if isinstance(ckpt, Choice) and bigger:
        every = min((v for v in ckpt.values if isinstance(v, int) and v > 0), default=0)
        if every:
            variants.append(cfg.replace(checkpointing=every, batch_size=bigger[0]))
    return out + [space.params_of(v, baseline) for v in variants]


def first_guesses(space: SearchSpace, baseline: TrainingConfig, cpus: int) -> list[Params]:
    """The articles' rules of thumb: a bigger batch with a scaled LR and an annealed schedule,
    loader workers, reduced precision, channels_last (and the same without workers: on few
    cores they compete with the model); then the safe one, the baseline's batch and schedule
    with only precision and memory format changed (the same optimizer steps: where fewer,
    larger steps cost accuracy, this is what still wins)."""
    params: Params = {}
    k = space.knobs

    def pick(name: str, prefer: Callable[[Any], Any]) -> None:
        knob = k.get(name)
        if isinstance(knob, Choice) and len(knob.values) > 1:
            params[name] = max(knob.values, key=prefer)

    base_bs = baseline.batch_size
    pick("batch_size", lambda v: (v <= 4 * base_bs, v if v <= 4 * base_bs else -v))
    half = max(1, cpus // 2)
    pick("num_workers", lambda v: (v <= half, v if v <= half else -v))
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
    out = [params] if params else []
    workers = k.get("num_workers")
    if params.get("num_workers") and isinstance(workers, Choice) and 0 in workers.values:
        out.append({**params, "num_workers": 0})
    safe = baseline
    if "precision" in params:
        safe = safe.replace(precision=Precision(params["precision"]))
    if params.get("channels_last"):
        safe = safe.replace(channels_last=True)
    if safe != baseline:
        out.append(space.params_of(safe, baseline))
    return out
