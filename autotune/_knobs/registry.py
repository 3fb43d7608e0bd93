"""The knob registry: every knob autotune tunes, declared once.

A :class:`Knob` says what a space file may hold for it (type, rule, enum), which
:class:`~autotune.TrainingConfig` field it sets, whether it changes the optimisation maths
(``numerics``: candidates that change it pay for accuracy runs), whether it is tried late, on
top of a good config (compile's one-time cost, checkpointing's recompute), how simple its
values are (ties between equally fast configs go to the simpler one), when it cannot matter on
a device or model (the device rule), what its value changes (``where``), how it reads in a
config's one-line description, and how it maps to Hugging Face and Lightning.

Space parsing and restriction, building configs from sampled values, the config's own
validation, ranking ties, the report, the exports, ``describe()`` and the trainers' trials all
read this table. Adding a knob: ARCHITECTURE.md's "Adding a knob" names every file it touches.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
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
from autotune._knobs import apply, rules
from autotune._knobs import knob_args as ex
from autotune._knobs.rules import Facts, Restrict

if TYPE_CHECKING:
    from autotune._knobs.config import TrainingConfig

__all__ = [
    "KNOBS",
    "KNOB_NAMES",
    "Change",
    "Exists",
    "Facts",
    "Knob",
    "ValueKind",
    "Where",
    "changes",
    "complexity",
    "config_from",
    "describe",
    "knobs_where",
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


class Where(str, enum.Enum):
    """What a knob's value changes, as :mod:`autotune._knobs.apply` applies it: what a trainer
    that builds some of these parts itself can take of it (see :func:`applied_to`)."""

    LOADER = "loader"  # the DataLoader (cfg.dataloader)
    MODEL = "model"  # the model's memory format, wrappers and compilation (cfg.prepare)
    DDP = "ddp"  # the DistributedDataParallel wrapper and its step (ranks > 1)
    STEP = "step"  # the training step: accumulation, autocast and the scaler
    BACKENDS = "backends"  # process-wide flags (cfg.backends())
    OPTIMIZER = "optimizer"  # the optimizer's implementation (cfg.optimizer)
    LR_PEAK = "lr peak"  # the learning rate's peak (scaled in a trainer's own optimizer)
    LR_SHAPE = "lr shape"  # the schedule's shape over the run (cfg.lr_scheduler)
    LENGTH = "length"  # how much of the planned run is trained (cfg.epochs)


Reader = Callable[["TrainingConfig", "TrainingConfig"], Any]
Words = Callable[["TrainingConfig"], "str | None"]


def _anything(value: Any) -> bool:
    return True


@dataclasses.dataclass(frozen=True)
class Exists:
    """Where a knob exists at all: ``test`` on a config, and the rule in words for the config's
    error where a value is given for a knob that does not exist (``reads``: the fields the
    test reads, shown in that error)."""

    test: Callable[[TrainingConfig], bool]
    rule: str
    reads: str

    def __call__(self, cfg: TrainingConfig) -> bool:
        return self.test(cfg)


_WITH_WORKERS = Exists(
    lambda cfg: cfg.num_workers > 0,
    "the DataLoader's worker options need `num_workers` > 0",
    "num_workers",
)
_COMPILED = Exists(
    lambda cfg: cfg.compile_mode is not CompileMode.NONE,
    "it is an option of torch.compile: it needs `compile_mode` other than none",
    "compile_mode",
)
# DDP's static graph asserts in an iteration under no_sync, which Hugging Face's and
# Lightning's accumulation use on its inner micro-batches: only without accumulation.
_ONE_STEP = Exists(
    lambda cfg: cfg.gradient_accumulation_steps == 1,
    "DDP's static graph asserts under no_sync, which accumulation's inner micro-batches use: "
    "it needs `gradient_accumulation_steps` = 1",
    "gradient_accumulation_steps",
)
_ACCUMULATING = Exists(
    lambda cfg: cfg.gradient_accumulation_steps > 1,
    "with one micro-batch per optimizer step there is no inner micro-batch to skip the "
    "all-reduce on: it needs `gradient_accumulation_steps` > 1",
    "gradient_accumulation_steps",
)


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
    exists: Exists | None = None
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
    where: Where  # what its value changes (see Where)
    # How it reads in TrainingConfig.describe() (None: nothing of its own, or nothing at this
    # value), and where in that line (smaller first; RANKS_SHOWN is the ranks' place).
    words: Words | None = None
    shown: int = 0
    transformers: ex.ToTransformers = ex.hf_none
    lightning: ex.ToLightning = ex.pl_none

    @property
    def maps_to_transformers(self) -> bool:
        """Whether it has a ``TrainingArguments`` mapping of its own."""
        return self.transformers is not ex.hf_none

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

# -- Readers of the LR schedule's knobs ----------------------------------------------------------


def _lr_multiplier(cfg: TrainingConfig, baseline: TrainingConfig) -> float:
    s = cfg.lr_schedule
    scale = s.batch_scaling.factor(cfg.global_batch_size, baseline.global_batch_size)
    return s.peak_lr / (baseline.lr_schedule.peak_lr * scale)


# -- How each knob reads in TrainingConfig.describe() --------------------------------------------

RANKS_SHOWN = 100  # the ranks and the global batch: after the other knobs, before DDP's own


def _batch_words(cfg: TrainingConfig) -> str:
    batch = f"batch={cfg.batch_size}"
    if cfg.gradient_accumulation_steps > 1:
        batch += f"x{cfg.gradient_accumulation_steps}"  # micro-batch x accumulation steps
    return batch


def _flag(field: str, words: str | None = None) -> Words:
    """A boolean knob named (as ``words``, else its field) where it is on."""

    def read(cfg: TrainingConfig) -> str | None:
        return (words or field) if getattr(cfg, field) else None

    return read


def _prefetch_words(cfg: TrainingConfig) -> str | None:
    return None if cfg.prefetch_factor is None else f"prefetch={cfg.prefetch_factor}"


def _optimizer_words(cfg: TrainingConfig) -> str | None:
    impl = cfg.optimizer_impl
    return None if impl is OptimizerImpl.DEFAULT else f"{impl.value} optimizer"


def _threads_words(cfg: TrainingConfig) -> str | None:
    return None if cfg.intra_op_threads is None else f"threads={cfg.intra_op_threads}"


def _lr_words(cfg: TrainingConfig) -> str:
    s = cfg.lr_schedule
    return f"lr={s.kind.value}@{s.peak_lr:.3g}"


def _length_words(cfg: TrainingConfig) -> str | None:
    return None if cfg.train_fraction == 1.0 else f"{cfg.train_fraction:.0%} of the epochs"


def _ddp_words(argument: str) -> Words:
    """A DDP argument that differs from DDP's default, as ``argument=value`` (several ranks)."""

    def read(cfg: TrainingConfig) -> str | None:
        kwargs = apply.ddp_kwargs(cfg)
        return f"{argument}={kwargs[argument]}" if cfg.ranks > 1 and argument in kwargs else None

    return read


def _no_sync_words(cfg: TrainingConfig) -> str | None:
    return "no_sync" if cfg.ranks > 1 and cfg.ddp_no_sync else None


KNOBS: tuple[Knob, ...] = (
    Knob(
        name="batch_size",
        where=Where.LOADER,
        words=_batch_words,
        shown=0,
        kind=ValueKind.INT,
        numerics=True,
        field="batch_size",
        rule=">= 1",
        check=lambda v: v >= 1,
        powers_of_two=True,
        simplicity=11,
        restrict=rules.keep(
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
        where=Where.STEP,
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
        where=Where.LOADER,
        words=lambda cfg: f"workers={cfg.num_workers}",
        shown=1,
        kind=ValueKind.INT,
        numerics=False,
        field="num_workers",
        rule=">= 0",
        check=lambda v: v >= 0,
        simplicity=4,
        cost=lambda v, base: float(v),
        restrict=rules.workers_rule,
        transformers=ex.hf_workers,
        lightning=ex.pl_workers,
    ),
    Knob(
        name="persistent_workers",
        where=Where.LOADER,
        kind=ValueKind.BOOL,
        numerics=False,
        field="persistent_workers",
        rule="true or false",
        exists=_WITH_WORKERS,
        words=_flag("persistent_workers", "persistent"),
        shown=2,
        transformers=ex.hf_persistent,
        lightning=ex.pl_persistent,
    ),
    Knob(
        name="prefetch_factor",
        where=Where.LOADER,
        kind=ValueKind.INT,
        numerics=False,
        field="prefetch_factor",
        rule=">= 1",
        check=lambda v: v >= 1,
        nullable=True,
        exists=_WITH_WORKERS,
        words=_prefetch_words,
        shown=3,
        transformers=ex.hf_prefetch,
        lightning=ex.pl_prefetch,
    ),
    Knob(
        name="pin_memory",
        where=Where.LOADER,
        words=_flag("pin_memory"),
        shown=7,
        kind=ValueKind.BOOL,
        numerics=False,
        shared=True,
        field="pin_memory",
        rule="true or false",
        simplicity=7,
        restrict=rules.pin_rule,
        transformers=ex.hf_pin,
        lightning=ex.pl_pin,
    ),
    Knob(
        name="precision",
        where=Where.STEP,
        words=lambda cfg: f"precision={cfg.precision.value}",
        shown=4,
        kind=ValueKind.ENUM,
        numerics=True,
        field="precision",
        enum=Precision,
        simplicity=10,
        restrict=rules.precision_rule,
        transformers=ex.hf_precision,
        lightning=ex.pl_precision,
    ),
    Knob(
        name="optimizer_impl",
        where=Where.OPTIMIZER,
        words=_optimizer_words,
        shown=13,
        kind=ValueKind.ENUM,
        numerics=False,  # the same update, within float rounding (docs/search-space.md)
        shared=True,
        field="optimizer_impl",
        enum=OptimizerImpl,
        simplicity=6,
        cost=lambda v, base: float(v != OptimizerImpl.DEFAULT.value),
        restrict=rules.optimizer_rule,
        transformers=ex.hf_optimizer_impl,
        lightning=ex.pl_optimizer_impl,
    ),
    Knob(
        name="compile_mode",
        where=Where.MODEL,
        words=lambda cfg: f"compile={cfg.compile_mode.value}",
        shown=5,
        kind=ValueKind.ENUM,
        numerics=False,
        field="compile_mode",
        enum=CompileMode,
        late=True,
        simplicity=0,
        cost=lambda v, base: float(v != CompileMode.NONE.value),
        restrict=rules.compile_rule,
        transformers=ex.hf_compile,
        lightning=ex.pl_compile,
    ),
    Knob(
        name="compile_dynamic",
        where=Where.MODEL,
        words=_flag("compile_dynamic", "dynamic shapes"),
        shown=10,
        kind=ValueKind.BOOL,
        numerics=False,
        field="compile_dynamic",
        rule="true or false",
        late=True,
        exists=_COMPILED,
        simplicity=1,
        restrict=rules.only_if(
            lambda f: f.device.supports_compile,
            "torch.compile needs a C/C++ compiler and the Python headers",
        ),
        lightning=ex.pl_compile_dynamic,
    ),
    Knob(
        name="cudnn_benchmark",
        where=Where.BACKENDS,
        words=_flag("cudnn_benchmark", "cudnn.benchmark"),
        shown=8,
        kind=ValueKind.BOOL,
        numerics=False,
        field="cudnn_benchmark",
        rule="true or false",
        simplicity=8,
        restrict=rules.only_if(lambda f: f.device.has_cudnn, "no cuDNN on this device"),
        lightning=ex.pl_cudnn,
    ),
    Knob(
        name="checkpointing",
        where=Where.MODEL,
        words=lambda cfg: f"checkpoint every {cfg.checkpointing}" if cfg.checkpointing else None,
        shown=11,
        kind=ValueKind.INT,
        numerics=False,
        field="checkpointing",
        rule="0 (none) or k >= 1 (every k-th block)",
        check=lambda v: v >= 0,
        late=True,
        simplicity=2,
        cost=lambda v, base: float(v > 0),
        restrict=rules.checkpointing_rule,
        transformers=ex.hf_checkpointing,
        lightning=ex.pl_checkpointing,
    ),
    Knob(
        name="channels_last",
        where=Where.MODEL,
        words=_flag("channels_last"),
        shown=9,
        kind=ValueKind.BOOL,
        numerics=False,
        shared=True,
        field="channels_last",
        rule="true or false",
        simplicity=9,
        restrict=rules.only_if(lambda f: f.has_conv, "the model has no convolutions"),
        lightning=ex.pl_channels_last,
    ),
    Knob(
        name="intra_op_threads",
        where=Where.BACKENDS,
        words=_threads_words,
        shown=12,
        kind=ValueKind.INT,
        numerics=False,
        shared=True,
        field="intra_op_threads",
        rule=">= 1 or null",
        check=lambda v: v >= 1,
        nullable=True,
        simplicity=5,
        cost=lambda v, base: float(v is not None),
        restrict=rules.threads_rule,
        lightning=ex.pl_threads,
    ),
    # DDP's own knobs (trials of ranks > 1; DDP's defaults otherwise). None changes the
    # numerics: buckets, views and the static graph change how the same all-reduced gradients
    # are gathered; no_sync all-reduces the accumulated sum once instead of each micro-batch's
    # part; the buffers rank 0 keeps (and evaluates, and a user saves) are its own either way.
    Knob(
        name="ddp_bucket_cap_mb",
        where=Where.DDP,
        words=_ddp_words("bucket_cap_mb"),
        shown=RANKS_SHOWN + 1,
        kind=ValueKind.INT,
        numerics=False,
        field="ddp_bucket_cap_mb",
        rule=">= 1 (MB) or null (DDP's default, 25)",
        check=lambda v: v >= 1,
        nullable=True,
        simplicity=12,
        cost=lambda v, base: float(v is not None),
        restrict=rules.ddp_rule,
        transformers=ex.hf_ddp_bucket,
        lightning=ex.pl_ddp,
    ),
    Knob(
        name="ddp_gradient_as_bucket_view",
        where=Where.DDP,
        words=_ddp_words("gradient_as_bucket_view"),
        shown=RANKS_SHOWN + 2,
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_gradient_as_bucket_view",
        rule="true or false",
        simplicity=13,
        restrict=rules.ddp_rule,
        transformers=ex.hf_ddp_accelerate_only,
    ),
    Knob(
        name="ddp_static_graph",
        where=Where.DDP,
        words=_ddp_words("static_graph"),
        shown=RANKS_SHOWN + 3,
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_static_graph",
        rule="true or false",
        exists=_ONE_STEP,
        simplicity=14,
        restrict=rules.ddp_rule,
        transformers=ex.hf_ddp_accelerate_only,
    ),
    Knob(
        name="ddp_broadcast_buffers",
        where=Where.DDP,
        words=_ddp_words("broadcast_buffers"),
        shown=RANKS_SHOWN + 4,
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_broadcast_buffers",
        rule="true or false",
        simplicity=15,
        cost=lambda v, base: float(v != base),
        restrict=rules.buffers_rule,
        transformers=ex.hf_ddp_buffers,
    ),
    Knob(
        name="ddp_no_sync",
        where=Where.DDP,
        words=_no_sync_words,
        shown=RANKS_SHOWN + 5,
        kind=ValueKind.BOOL,
        numerics=False,
        field="ddp_no_sync",
        rule="true or false",
        exists=_ACCUMULATING,
        simplicity=16,
        restrict=rules.ddp_rule,
        transformers=ex.hf_ddp_no_sync,
        lightning=ex.pl_ddp_no_sync,
    ),
    Knob(
        name="lr_schedule",
        where=Where.LR_SHAPE,
        words=_lr_words,
        shown=6,
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
        where=Where.LENGTH,
        words=_length_words,
        shown=14,
        kind=ValueKind.FLOAT,
        numerics=True,
        field="train_fraction",
        rule="in (0, 1]",
        check=lambda v: 0 < v <= 1,
        restrict=rules.keep(
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
        where=Where.LR_PEAK,
        kind=ValueKind.FLOAT,
        numerics=True,
        field=None,
        rule="> 0",
        check=lambda v: v > 0,
        reader=_lr_multiplier,
    ),
    Knob(
        name="warmup_fraction",
        where=Where.LR_SHAPE,
        kind=ValueKind.FLOAT,
        numerics=True,
        field=None,
        rule="in [0, 1)",
        check=lambda v: 0 <= v < 1,
        reader=lambda cfg, base: cfg.lr_schedule.warmup_fraction,
    ),
    Knob(
        name="lr_batch_scaling",
        where=Where.LR_PEAK,
        kind=ValueKind.ENUM,
        numerics=True,
        field=None,
        enum=BatchScaling,
        restrict=rules.keep(
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
_SHOWN = [k.shown for k in KNOBS if k.words is not None]
assert len(set(_SHOWN)) == len(_SHOWN) and RANKS_SHOWN not in _SHOWN


def describe(cfg: TrainingConfig) -> str:
    """One line naming ``cfg``'s knobs (each knob's words, in their ``shown`` order)."""
    shown = [(k.shown, k.words(cfg)) for k in KNOBS if k.words is not None]
    if cfg.ranks > 1:
        shown.append((RANKS_SHOWN, f"{cfg.ranks} ranks (global batch {cfg.global_batch_size})"))
    return " ".join(words for _, words in sorted(shown, key=lambda pair: pair[0]) if words)


@dataclasses.dataclass(frozen=True)
class Change:
    """One knob that differs between two configs, as a person reads it: its ``label``
    (``precision``, ``workers``, ``channels_last``), its value ``before`` and ``after``, and
    ``words``, how ``describe()`` names the new value (``precision=bf16``, ``no pin_memory``)."""

    label: str
    before: str
    after: str
    words: str


def _label_value(words: str) -> tuple[str, str]:
    """A knob's words split into what it is and its value: ``workers=2`` -> (workers, 2);
    ``fused optimizer`` -> (optimizer, fused); a flag's name -> (it, on)."""
    if "=" in words:
        label, value = words.split("=", 1)
        return label, value
    if words.endswith(" optimizer"):
        return "optimizer", words.removesuffix(" optimizer")
    if words.endswith(" of the epochs"):
        return "length", words.removesuffix(" of the epochs")
    return words, "on"


_UNSET = {"optimizer": "default", "length": "100%", "threads": "default", "prefetch": "default"}


def changes(cfg: TrainingConfig, base: TrainingConfig) -> tuple[Change, ...]:
    """What ``cfg`` changes of ``base``, knob by knob, in ``describe()``'s order (nothing for
    a knob whose words read alike in both)."""
    out: list[tuple[int, Change]] = []
    seen: set[str] = set()
    for knob in KNOBS:
        if knob.words is None:
            continue
        now, was = knob.words(cfg), knob.words(base)
        if now == was or (now or "") + "|" + (was or "") in seen:
            continue
        seen.add((now or "") + "|" + (was or ""))
        label, after = _label_value(now) if now else (None, None)
        label_was, before = _label_value(was) if was else (None, None)
        name = label or label_was or knob.name
        unset = _UNSET.get(name, "off")
        words = now or (f"{name}={unset}" if name in _UNSET else f"no {name}")
        out.append((knob.shown, Change(name, before or unset, after or unset, words)))
    return tuple(change for _, change in sorted(out, key=lambda pair: pair[0]))


def reset_absent(cfg: TrainingConfig, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` to ``cfg``, with the default of every knob that does not exist once they
    are made and that they do not name (see ``Knob.exists``): a config made from another
    keeps no value for a knob that is not there."""
    defaults = field_defaults(cfg)
    conditional = {k.field for k in KNOBS if k.exists and k.field}
    # Where the conditional knobs exist follows from the other fields alone.
    shaped = dataclasses.replace(
        cfg,
        **{f: v for f, v in changes.items() if f not in conditional},
        **{f: defaults[f] for f in conditional},
    )
    out = dict(changes)
    for knob in KNOBS:
        if knob.field and knob.field not in changes and not knob.present(shaped):
            out[knob.field] = defaults[knob.field]
    return out


def field_defaults(cfg: TrainingConfig) -> dict[str, Any]:
    """Each field's default in ``cfg``'s class (the LR schedule's is left out: no knob
    exists or not on its own)."""
    return {f.name: f.default for f in dataclasses.fields(cfg) if f.name != "lr_schedule"}


def knobs_where(*where: Where) -> tuple[Knob, ...]:
    """The knobs whose values change one of ``where`` (what a trainer that builds that part
    itself cannot take)."""
    return tuple(k for k in KNOBS if k.where in where)


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


# What a knob changes that leaves each training step's cost alone: the learning rate's peak and
# shape (a scheduler's step is free) and how much of the run is trained (fewer steps, each
# as costly).
COSTLESS = frozenset({Where.LR_PEAK, Where.LR_SHAPE, Where.LENGTH})


@functools.lru_cache(maxsize=4096)
def step_key(cfg: TrainingConfig) -> TrainingConfig:
    """``cfg`` with every knob that changes no step's cost (see :data:`COSTLESS`) at its
    default: configs with equal keys make steps of the same cost, so every measurement of one
    is a draw of the others' speed (only their run's length differs). Cached: the ledger
    asks it of every trial for every candidate it weighs."""
    fields = {k.field or "lr_schedule" for k in KNOBS if k.where in COSTLESS}
    plain = type(cfg)()
    return dataclasses.replace(cfg, **{name: getattr(plain, name) for name in fields})


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
