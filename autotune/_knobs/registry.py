"""The knob registry: every knob autotune tunes, declared once.

A :class:`Knob` says what a space file may hold for it (type, rule, enum), which
:class:`~autotune.TrainingConfig` field it sets, whether it changes the optimisation maths
(``numerics``: candidates that change it pay for accuracy runs), whether it is tried late, on
top of a good config (compile's one-time cost, checkpointing's recompute), how simple its
values are (ties between equally fast configs go to the simpler one), when it cannot matter on
a device or model (the device rule), and how it maps to Hugging Face and Lightning.

Space parsing and restriction, building configs from sampled values, the config's own
validation, ranking ties, the report and the exports all read this table. Adding a knob means
one entry here, its field on the config, the line that applies it (:mod:`autotune._knobs.apply`)
and its test.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune._choices import (
    BatchScaling,
    CompileMode,
    LRSchedule,
    OptimizerImpl,
    Precision,
    ScheduleKind,
)
from autotune._knobs import knob_args as ex

if TYPE_CHECKING:
    from autotune._device import DeviceInfo
    from autotune._knobs.config import TrainingConfig

__all__ = [
    "KNOBS",
    "KNOB_NAMES",
    "Facts",
    "Knob",
    "ValueKind",
    "complexity",
    "config_from",
    "late_knobs",
    "numerics_free_knobs",
    "numerics_id",
    "numerics_key",
    "pair_arm",
    "pair_base",
    "values_of",
]


class ValueKind(str, enum.Enum):
    INT = "int"
    BOOL = "bool"
    FLOAT = "float"
    ENUM = "enum"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Facts:
    """What the device rules look at: the device, and facts about the model and data."""

    device: DeviceInfo
    has_conv: bool
    n_blocks: int  # repeated blocks that checkpointing can wrap
    n_train: int  # training samples
    current_threads: int  # torch's intra-op threads in this process
    # Optimizer implementations the user's optimizer factory takes and torch runs on the device.
    optimizer_impls: tuple[str, ...] = (OptimizerImpl.DEFAULT.value,)
    data_on_device: bool = False  # the dataset's items are already on the GPU
    # The optimizer scales its steps per parameter (Adam, AdamW, RMSprop, Adagrad, ...).
    adaptive_optimizer: bool = False
    # autotune's own loop trains the trials (a trainer's loop keeps the user's length).
    length_searchable: bool = True
    ranks: int = 1  # data-parallel processes per trial (DDP where > 1)
    has_buffers: bool = True  # the model has buffers (batch-norm statistics) DDP broadcasts


# (values kept, or None when the knob cannot matter at all; why, for the space's notes)
Restriction = tuple[tuple[Any, ...] | None, str]
Restrict = Callable[[tuple[Any, ...], Facts], Restriction]
Reader = Callable[["TrainingConfig", "TrainingConfig"], Any]


def _anything(value: Any) -> bool:
    return True


def _with_workers(cfg: TrainingConfig) -> bool:
    return cfg.num_workers > 0


def _compiled(cfg: TrainingConfig) -> bool:
    return cfg.compile_mode is not CompileMode.NONE


def _one_step(cfg: TrainingConfig) -> bool:
    """One micro-batch per optimizer step: no accumulation."""
    return cfg.gradient_accumulation_steps == 1


def _differs(value: Any, baseline: Any) -> float:
    return float(value != baseline)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Knob:
    """One knob: everything the rest of autotune asks about it."""

    name: str
    kind: ValueKind
    numerics: bool  # changes the optimisation maths: a candidate that changes it needs accuracy
    field: str | None  # the TrainingConfig field it sets (None: a part of the LR schedule)
    rule: str = ""  # what a valid value is, for error messages
    check: Callable[[Any], bool] = _anything
    enum: type[enum.Enum] | None = None
    nullable: bool = False
    powers_of_two: bool = False  # a range {low, high} in a space file means its powers of two
    late: bool = False  # tried on top of the best config, not sampled from the start
    # Where the knob exists at all (None: always): with DataLoader workers, with compile, with
    # (or without) accumulation. An absent knob is not sampled, not read back, and takes
    # its field's default in a config.
    exists: Callable[[TrainingConfig], bool] | None = None
    # Numerics-free and with no one-time cost: the accuracy guard's runs, both arms of every
    # pair, train with the safe answer's value (see :func:`pair_base`). Not loader workers
    # (each worker draws augmentation from its own stream, and which worker loads a sample
    # moves with the batch size: a batch candidate's pair would share less than at the
    # baseline's in-process loading), cuDNN benchmark (a fresh worker per run, an algorithm
    # chosen anew each run), compile (a compile per run) or DDP's knobs (one rank).
    shared: bool = False
    # Rank in the tie-break between equally fast configs (0 weighs most; None: not compared)
    # and how far a value is from plain eager training, given the baseline's value.
    simplicity: int | None = None
    cost: Callable[[Any, Any], float] = _differs
    restrict: Restrict | None = None  # the device/model rule
    reader: Reader | None = None  # the knob's value in a config; default: its field
    transformers: ex.ToTransformers = ex.hf_none
    lightning: ex.ToLightning = ex.pl_none

    def present(self, cfg: TrainingConfig) -> bool:
        """Whether this knob exists in ``cfg`` (see ``exists``)."""
        return self.exists is None or self.exists(cfg)

    def read(self, cfg: TrainingConfig, baseline: TrainingConfig) -> Any:
        """This knob's value in ``cfg`` (as a space file writes it; ``baseline`` for the knobs
        that are relative to it, such as the LR multiplier)."""
        if self.reader is not None:
            return self.reader(cfg, baseline)
        assert self.field is not None
        value = getattr(cfg, self.field)
        return value.value if isinstance(value, enum.Enum) else value

    def valid(self, value: Any) -> bool:
        return (value is None and self.nullable) or self.check(value)


# -- Device rules -------------------------------------------------------------------------------


def _keep(pred: Callable[[Any, Facts], bool], why: Callable[[Facts], str]) -> Restrict:
    def restrict(values: tuple[Any, ...], facts: Facts) -> Restriction:
        return tuple(v for v in values if pred(v, facts)), why(facts)

    return restrict


def _only_if(cond: Callable[[Facts], bool], why: str) -> Restrict:
    def restrict(values: tuple[Any, ...], facts: Facts) -> Restriction:
        return (values if cond(facts) else None), why

    return restrict


def _precision_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    d = facts.device
    supported = {
        Precision.FP32.value: True,
        # Without TF32 hardware strict fp32 is plain fp32: not a choice of its own there.
        Precision.FP32_STRICT.value: d.supports_tf32,
        Precision.TF32.value: d.supports_tf32,
        Precision.BF16.value: d.supports_bf16,
        Precision.FP16.value: d.supports_fp16,
    }
    return tuple(v for v in values if supported[v]), f"not supported natively by {d.name}"


def _compile_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    none = CompileMode.NONE.value
    if not facts.device.supports_compile:
        why = "torch.compile needs a C/C++ compiler and the Python headers"
        if facts.device.type == "cuda":
            why += ", and on a GPU compute capability 7.0 or newer"
        return tuple(v for v in values if v == none), why
    if facts.device.supports_cuda_graphs:
        return values, ""
    # CUDA graphs do not exist on this device: use the CPU-safe variant of max-autotune.
    swap = {CompileMode.MAX_AUTOTUNE.value: CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS.value}
    swapped = tuple(dict.fromkeys(swap.get(str(v), v) for v in values))
    kept = tuple(v for v in swapped if v != CompileMode.REDUCE_OVERHEAD.value)
    return kept, "reduce-overhead uses CUDA graphs"


def _threads_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.device.type != "cpu":
        return None, "CPU threads barely matter when an accelerator computes"
    cores, why = _cores_per_rank(facts)
    now = facts.current_threads if facts.ranks == 1 else cores  # what each rank starts with
    kept = tuple(v for v in values if v is None or (v <= cores and v != now))
    return kept, f"{why}; torch already uses {now} threads"


def _ddp_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.ranks == 1:
        return None, "a trial is one process (DDP knobs need SearchOptions(ranks=) > 1)"
    return values, ""


def _buffers_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.ranks == 1:
        return None, "a trial is one process (DDP knobs need SearchOptions(ranks=) > 1)"
    if not facts.has_buffers:
        return None, "the model has no buffers to broadcast"
    return values, ""


def _cores_per_rank(facts: Facts) -> tuple[int, str]:
    """The CPU cores one rank may use (all of them with one process), and how that reads."""
    cores = facts.device.cpu_count
    if facts.ranks == 1:
        return cores, f"{cores} CPU cores"
    share = max(1, cores // facts.ranks)
    return share, f"{cores} CPU cores shared by {facts.ranks} ranks: {share} each"


def _workers_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.data_on_device:
        # CUDA tensors cannot be made in (or sent from) forked DataLoader workers.
        return tuple(v for v in values if v == 0), "the dataset's items are already on the GPU"
    cores, why = _cores_per_rank(facts)
    return tuple(v for v in values if v <= cores), why


def _pin_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.device.type == "cpu":
        return None, "pinned memory only speeds up copies to an accelerator"
    if facts.data_on_device:
        return None, "the dataset's items are already on the GPU: there is nothing to pin"
    return values, ""


def _checkpointing_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.n_blocks == 0:
        return None, "the model has no repeated blocks to checkpoint"
    return tuple(v for v in values if v <= facts.n_blocks), f"the model has {facts.n_blocks} blocks"


def _optimizer_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    why = "the optimizer factory does not take the flag, or torch has no such kernel here"
    return tuple(v for v in values if v in facts.optimizer_impls), why


# -- Readers of the LR schedule's knobs ----------------------------------------------------------


def _lr_multiplier(cfg: TrainingConfig, baseline: TrainingConfig) -> float:
    s = cfg.lr_schedule
    scale = s.batch_scaling.factor(cfg.global_batch_size, baseline.global_batch_size)
    return s.peak_lr / (baseline.lr_schedule.peak_lr * scale)


KNOBS: tuple[Knob, ...] = (
    Knob(
        name="batch_size",
        kind=ValueKind.INT,
        numerics=True,
        field="batch_size",
        rule=">= 1",
        check=lambda v: v >= 1,
        powers_of_two=True,
        simplicity=11,
        restrict=_keep(
            lambda v, f: v <= f.n_train // f.ranks,
            lambda f: (
                f"the training set has {f.n_train} samples"
                + (f", {f.n_train // f.ranks} per rank" if f.ranks > 1 else "")
            ),
        ),
        transformers=ex.hf_batch_size,
        lightning=ex.pl_batch_size,
    ),
    Knob(
        name="gradient_accumulation_steps",
        kind=ValueKind.INT,
        numerics=True,  # alone, it changes the global batch (see numerics_key for a split)
        field="gradient_accumulation_steps",
        rule=">= 1",
        check=lambda v: v >= 1,
        simplicity=3,
        cost=lambda v, base: float(v != base),
        transformers=ex.hf_accumulation,
        lightning=ex.pl_accumulation,
    ),
    Knob(
        name="num_workers",
        kind=ValueKind.INT,
        numerics=False,
        field="num_workers",
        rule=">= 0",
        check=lambda v: v >= 0,
        simplicity=4,
        cost=lambda v, base: float(v),
        restrict=_workers_rule,
        transformers=ex.hf_workers,
        lightning=ex.pl_workers,
    ),
    Knob(
        name="persistent_workers",
        kind=ValueKind.BOOL,
        numerics=False,
        field="persistent_workers",
        rule="true or false",
        exists=_with_workers,
        transformers=ex.hf_persistent,
        lightning=ex.pl_persistent,
    ),
    Knob(
        name="prefetch_factor",
        kind=ValueKind.INT,
        numerics=False,
        field="prefetch_factor",
        rule=">= 1",
        check=lambda v: v >= 1,
        nullable=True,
        exists=_with_workers,
        transformers=ex.hf_prefetch,
        lightning=ex.pl_prefetch,
    ),
    Knob(
        name="pin_memory",
        kind=ValueKind.BOOL,
        numerics=False,
        shared=True,
        field="pin_memory",
        rule="true or false",
        simplicity=7,
        restrict=_pin_rule,
        transformers=ex.hf_pin,
        lightning=ex.pl_pin,
    ),
    Knob(
        name="precision",
        kind=ValueKind.ENUM,
        numerics=True,
        field="precision",
        enum=Precision,
        simplicity=10,
        restrict=_precision_rule,
        transformers=ex.hf_precision,
        lightning=ex.pl_precision,
    ),
    Knob(
        name="optimizer_impl",
        kind=ValueKind.ENUM,
        numerics=False,  # the same update, within float rounding (see README)
        shared=True,
        field="optimizer_impl",
        enum=OptimizerImpl,
        simplicity=6,
        cost=lambda v, base: float(v != OptimizerImpl.DEFAULT.value),
        restrict=_optimizer_rule,
        transformers=ex.hf_optimizer_impl,
        lightning=ex.pl_optimizer_impl,
    ),
    Knob(
        name="compile_mode",
        kind=ValueKind.ENUM,
        numerics=False,
        field="compile_mode",
        enum=CompileMode,
        late=True,
        simplicity=0,
        cost=lambda v, base: float(v != CompileMode.NONE.value),
        restrict=_compile_rule,
        transformers=ex.hf_compile,
        lightning=ex.pl_compile,
    ),
    Knob(
        name="compile_dynamic",
        kind=ValueKind.BOOL,
        numerics=False,
        field="compile_dynamic",
        rule="true or false",
        late=True,
        exists=_compiled,
        simplicity=1,
        restrict=_only_if(
            lambda f: f.device.supports_compile,
            "torch.compile needs a C/C++ compiler and the Python headers",
        ),
        lightning=ex.pl_compile_dynamic,
    ),
    Knob(
        name="cudnn_benchmark",
        kind=ValueKind.BOOL,
        numerics=False,
        field="cudnn_benchmark",
        rule="true or false",
        simplicity=8,
        restrict=_only_if(lambda f: f.device.has_cudnn, "no cuDNN on this device"),
        lightning=ex.pl_cudnn,
    ),
    Knob(
        name="checkpointing",
        kind=ValueKind.INT,
        numerics=False,
        field="checkpointing",
        rule="0 (none) or k >= 1 (every k-th block)",
        check=lambda v: v >= 0,
        late=True,
        simplicity=2,
        cost=lambda v, base: float(v > 0),
        restrict=_checkpointing_rule,
        transformers=ex.hf_checkpointing,
        lightning=ex.pl_checkpointing,
    ),
    Knob(
        name="channels_last",
        kind=ValueKind.BOOL,
        numerics=False,
        shared=True,
        field="channels_last",
        rule="true or false",
        simplicity=9,
        restrict=_only_if(lambda f: f.has_conv, "the model has no convolutions"),
        lightning=ex.pl_channels_last,
    ),
    Knob(
        name="intra_op_threads",
        kind=ValueKind.INT,
        numerics=False,
        shared=True,
        field="intra_op_threads",
        rule=">= 1 or null",
        check=lambda v: v >= 1,
        nullable=True,
        simplicity=5,
        cost=lambda v, base: float(v is not None),
        restrict=_threads_rule,
        lightning=ex.pl_threads,
    ),
    # DDP's own knobs (trials of ranks > 1; DDP's defaults otherwise). None changes the
    # numerics: buckets, views and the static graph change how the same all-reduced gradients
    # are gathered; no_sync all-reduces the accumulated sum once instead of each micro-batch's
    # part; the buffers rank 0 keeps (and evaluates, and a user saves) are its own either way.
    Knob(
        name="ddp_bucket_cap_mb",
        kind=ValueKind.INT,
        numerics=False,
        field="ddp_bucket_cap_mb",
        rule=">= 1 (MB) or null (DDP's default, 25)",
        check=lambda v: v >= 1,
        nullable=True,
        simplicity=12,
        cost=lambda v, base: float(v is not None),
        restrict=_ddp_rule,
        transformers=ex.hf_ddp_bucket,
        lightning=ex.pl_ddp,
    ),
    Knob(
        name="ddp_gradient_as_bucket_view",
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_gradient_as_bucket_view",
        rule="true or false",
        simplicity=13,
        restrict=_ddp_rule,
        transformers=ex.hf_ddp_accelerate_only,
    ),
    Knob(
        name="ddp_static_graph",
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_static_graph",
        rule="true or false",
        # DDP's static graph asserts in an iteration under no_sync, which Hugging Face's and
        # Lightning's accumulation use on its inner micro-batches: only without accumulation.
        exists=_one_step,
        simplicity=14,
        restrict=_ddp_rule,
        transformers=ex.hf_ddp_accelerate_only,
    ),
    Knob(
        name="ddp_broadcast_buffers",
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_broadcast_buffers",
        rule="true or false",
        simplicity=15,
        cost=lambda v, base: float(v != base),
        restrict=_buffers_rule,
        transformers=ex.hf_ddp_buffers,
    ),
    Knob(
        name="ddp_no_sync",
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_no_sync",
        rule="true or false",
        exists=lambda cfg: not _one_step(cfg),  # no inner micro-batches: nothing to skip
        simplicity=16,
        restrict=_ddp_rule,
        transformers=ex.hf_ddp_no_sync,
        lightning=ex.pl_ddp_no_sync,
    ),
    Knob(
        name="lr_schedule",
        kind=ValueKind.ENUM,
        numerics=True,
        field=None,
        enum=ScheduleKind,
        rule="constant, cosine, one_cycle or wsd (`trainer` is your own trainer's schedule, kept)",
        check=lambda v: ScheduleKind(v) is not ScheduleKind.TRAINER,
        reader=lambda cfg, base: cfg.lr_schedule.kind.value,
        transformers=ex.hf_schedule,  # the whole schedule: peak, shape, warm-up
        lightning=ex.pl_schedule,
    ),
    Knob(
        name="train_fraction",
        kind=ValueKind.FLOAT,
        numerics=True,
        field="train_fraction",
        rule="in (0, 1]",
        check=lambda v: 0 < v <= 1,
        restrict=_keep(
            lambda v, f: v == 1.0 or f.length_searchable,
            lambda f: (
                "the training length is searched in autotune's own loop (find_best): "
                "your trainer's epochs and max_steps are yours"
            ),
        ),
        transformers=ex.hf_length,
        lightning=ex.pl_length,
    ),
    Knob(
        name="lr_multiplier",
        kind=ValueKind.FLOAT,
        numerics=True,
        field=None,
        rule="> 0",
        check=lambda v: v > 0,
        reader=_lr_multiplier,
    ),
    Knob(
        name="warmup_fraction",
        kind=ValueKind.FLOAT,
        numerics=True,
        field=None,
        rule="in [0, 1)",
        check=lambda v: 0 <= v < 1,
        reader=lambda cfg, base: cfg.lr_schedule.warmup_fraction,
    ),
    Knob(
        name="lr_batch_scaling",
        kind=ValueKind.ENUM,
        numerics=True,
        field=None,
        enum=BatchScaling,
        restrict=_keep(
            lambda v, f: not (f.adaptive_optimizer and v == BatchScaling.LINEAR.value),
            lambda f: (
                "the optimizer adapts its steps (the Adam family): its rate follows the "
                "batch by sqrt, and linear scaling over-shoots it"
            ),
        ),
        reader=lambda cfg, base: cfg.lr_schedule.batch_scaling.value,
    ),
)

BY_NAME: Mapping[str, Knob] = {k.name: k for k in KNOBS}
KNOB_NAMES: tuple[str, ...] = tuple(BY_NAME)
# The config fields that decide the trained model's numerics (the LR schedule's knobs share
# the `lr_schedule` field).
NUMERIC_FIELDS: tuple[str, ...] = (
    "batch_size",
    "gradient_accumulation_steps",
    "precision",
    "lr_schedule",
    "train_fraction",
)
assert {k.field or "lr_schedule" for k in KNOBS if k.numerics} == set(NUMERIC_FIELDS)
assert not any(k.shared and (k.numerics or k.late or k.field is None) for k in KNOBS)


def late_knobs() -> frozenset[str]:
    """Knobs tried on top of the best config rather than sampled from the start."""
    return frozenset(k.name for k in KNOBS if k.late)


def numerics_free_knobs() -> tuple[str, ...]:
    """Knobs that leave the numerics alone and cost nothing up front: their values can be
    tried on a measured config as throughput-only trials."""
    return tuple(k.name for k in KNOBS if not k.numerics and not k.late)


def pair_base(baseline: TrainingConfig, safe: TrainingConfig) -> TrainingConfig:
    """The settings every accuracy run trains with beside ``baseline``'s numerics: the
    baseline's config with the ``shared`` knobs of ``safe`` (a measured config with the
    baseline's numerics, the safe answer), so that the guard's runs, both arms of every pair,
    lay out memory and step the optimizer as the fastest safe config does: the same for both
    arms, and about as cheap as a safe config makes them."""
    if numerics_key(safe) != numerics_key(baseline) or safe.device != baseline.device:
        return baseline
    return baseline.replace(
        **{k.field: getattr(safe, k.field) for k in KNOBS if k.shared and k.field}
    )


def pair_arm(cfg: TrainingConfig, baseline: TrainingConfig) -> TrainingConfig:
    """The config an accuracy run of ``cfg`` trains as one arm of a pair with ``baseline``'s
    run (``baseline``: the pair's settings, see :func:`pair_base`): ``baseline``'s settings
    with ``cfg``'s numerics (and its checkpointing, which only trades memory), so that the two
    runs of a pair differ only in the numerics being judged (not in workers, memory format,
    cuDNN or compile) and pay no compile or fresh worker."""
    changes = {name: getattr(cfg, name) for name in NUMERIC_FIELDS}
    return baseline.replace(**changes, checkpointing=cfg.checkpointing)


def numerics_key(cfg: TrainingConfig, *, split_free: bool = False) -> tuple[Any, ...]:
    """Equal keys train to the same model (same batch size and accumulation, precision, LR
    schedule and training length). ``split_free``: the model has no layer that sees the
    micro-batch on its own (batch norm), so only the global batch counts: 2 micro-batches of
    32 (loss scaled by 1/2, the same samples in the same order) make the optimizer step one
    batch of 64 makes, within float rounding."""
    key = tuple(getattr(cfg, name) for name in NUMERIC_FIELDS)
    if split_free:
        return (cfg.global_batch_size, *key[2:])
    return key


def numerics_id(cfg: TrainingConfig, *, split_free: bool = False) -> str:
    """:func:`numerics_key` as a string, the key confirmations are filed under."""
    values = [
        v.to_dict() if isinstance(v, LRSchedule) else v.value if isinstance(v, enum.Enum) else v
        for v in numerics_key(cfg, split_free=split_free)
    ]
    if cfg.train_fraction == 1.0:
        values.pop()  # the whole run: the id studies filed before the knob existed
    return json.dumps(values)


def complexity(cfg: TrainingConfig, baseline: TrainingConfig) -> tuple[float, ...]:
    """How far a config is from plain eager training: smaller is simpler. Compared in the
    knobs' simplicity order (compile first, then checkpointing, workers, ...)."""
    ranked = sorted((k.simplicity, k) for k in KNOBS if k.simplicity is not None)
    return tuple(k.cost(k.read(cfg, baseline), k.read(baseline, baseline)) for _, k in ranked)


def values_of(cfg: TrainingConfig, baseline: TrainingConfig) -> dict[str, Any]:
    """Every knob's value in ``cfg``, as a space file writes them (only the knobs that exist
    in it: see ``Knob.exists``)."""
    return {k.name: k.read(cfg, baseline) for k in KNOBS if k.present(cfg)}


def config_from(params: Mapping[str, Any], baseline: TrainingConfig) -> TrainingConfig:
    """The config that knob values ``params`` describe, on top of ``baseline``: knobs left out
    keep the baseline's values; the knobs that need workers are reset without them; the LR
    schedule's peak is the baseline's, scaled for the batch size and multiplied."""
    p = dict(params)
    workers = int(p.get("num_workers", baseline.num_workers))
    changes: dict[str, Any] = {}
    for knob in KNOBS:
        if knob.field is None or knob.name not in p:
            continue
        changes[knob.field] = p[knob.name]
    changes["num_workers"] = workers
    if workers > 0 and baseline.num_workers == 0:
        # Workers where the baseline has none: keep them alive between epochs unless told.
        changes.setdefault("persistent_workers", True)
    # Where the conditional knobs exist follows from the others; one that does not exist here
    # takes its field's default.
    defaults = {f.name: f.default for f in dataclasses.fields(baseline)}
    conditional = {k.field: defaults[k.field] for k in KNOBS if k.exists and k.field}
    shaped = baseline.replace(
        **{f: v for f, v in changes.items() if f not in conditional}, **conditional
    )
    for knob in KNOBS:
        if knob.field is not None and not knob.present(shaped):
            changes[knob.field] = defaults[knob.field]
    # The LR is scaled with the global batch (samples per optimizer step, over every rank),
    # not the micro-batch.
    global_batch = (
        int(changes.get("batch_size", baseline.batch_size))
        * int(changes.get("gradient_accumulation_steps", baseline.gradient_accumulation_steps))
        * baseline.ranks
    )
    reference = baseline.global_batch_size
    base = baseline.lr_schedule
    scaling = BatchScaling(p.get("lr_batch_scaling", base.batch_scaling))
    multiplier = float(p.get("lr_multiplier", 1.0))
    peak = base.peak_lr * scaling.factor(global_batch, reference) * multiplier
    schedule = LRSchedule(
        kind=p.get("lr_schedule", base.kind),
        peak_lr=peak,
        warmup_fraction=float(p.get("warmup_fraction", base.warmup_fraction)),
        batch_scaling=scaling,
        reference_batch_size=reference,
    )
    if schedule == dataclasses.replace(base, reference_batch_size=reference):
        schedule = base  # unchanged numerics compare equal to the baseline's
    return baseline.replace(lr_schedule=schedule, **changes)
