"""When a knob can matter: the device and model facts each knob's device rule looks at, and the
rules (values kept, or none at all, and why, for the space's notes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune._choices import CompileMode, OptimizerImpl, Precision

if TYPE_CHECKING:
    from autotune._device import DeviceInfo

__all__ = ["Facts", "Restrict", "Restriction"]


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
    # The most DataLoader workers the training stream can feed (its shards), and why; None: a
    # map-style dataset, or a stream that sets no limit.
    stream_workers: int | None = None
    stream_why: str = ""


# (values kept, or None when the knob cannot matter at all; why, for the space's notes)
Restriction = tuple[tuple[Any, ...] | None, str]
Restrict = Callable[[tuple[Any, ...], Facts], Restriction]


def keep(pred: Callable[[Any, Facts], bool], why: Callable[[Facts], str]) -> Restrict:
    def restrict(values: tuple[Any, ...], facts: Facts) -> Restriction:
        return tuple(v for v in values if pred(v, facts)), why(facts)

    return restrict


def only_if(cond: Callable[[Facts], bool], why: str) -> Restrict:
    def restrict(values: tuple[Any, ...], facts: Facts) -> Restriction:
        return (values if cond(facts) else None), why

    return restrict


def precision_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
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


def compile_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
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


def threads_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.device.type != "cpu":
        return None, "CPU threads barely matter when an accelerator computes"
    cores, why = _cores_per_rank(facts)
    now = facts.current_threads if facts.ranks == 1 else cores  # what each rank starts with
    kept = tuple(v for v in values if v is None or (v <= cores and v != now))
    return kept, f"{why}; torch already uses {now} threads"


def ddp_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.ranks == 1:
        return None, "a trial is one process (DDP knobs need SearchOptions(ranks=) > 1)"
    return values, ""


def buffers_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
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


def workers_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.data_on_device:
        # CUDA tensors cannot be made in (or sent from) forked DataLoader workers.
        return tuple(v for v in values if v == 0), "the dataset's items are already on the GPU"
    cores, why = _cores_per_rank(facts)
    kept = tuple(v for v in values if v <= cores)
    if facts.stream_workers is not None and any(v > facts.stream_workers for v in kept):
        return tuple(v for v in kept if v <= facts.stream_workers), facts.stream_why
    return kept, why


def pin_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.device.type == "cpu":
        return None, "pinned memory only speeds up copies to an accelerator"
    if facts.data_on_device:
        return None, "the dataset's items are already on the GPU: there is nothing to pin"
    return values, ""


def checkpointing_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    if facts.n_blocks == 0:
        return None, "the model has no repeated blocks to checkpoint"
    return tuple(v for v in values if v <= facts.n_blocks), f"the model has {facts.n_blocks} blocks"


def optimizer_rule(values: tuple[Any, ...], facts: Facts) -> Restriction:
    why = "the optimizer factory does not take the flag, or torch has no such kernel here"
    return tuple(v for v in values if v in facts.optimizer_impls), why
