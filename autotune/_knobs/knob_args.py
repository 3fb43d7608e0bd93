"""How each knob maps to other trainers: Hugging Face ``TrainingArguments`` and Lightning.

One function per knob and trainer; the knob registry (:mod:`autotune._knobs`) names which one
each knob uses, and :mod:`autotune._knobs.trainer_args` puts them together. Nothing here imports
either library (they are optional); the names are checked against the real signatures in
``tests/test_integrations.py``, so a rename upstream fails there first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from autotune._choices import CompileMode, OptimizerImpl, Precision, ScheduleKind
from autotune._device import is_accelerator
from autotune._knobs.apply import ddp_kwargs

if TYPE_CHECKING:
    from autotune._knobs.config import TrainingConfig

__all__ = ["LightningPart", "ToLightning", "ToTransformers"]

# OneCycleLR's warm-up share, as the LR scheduler builds it.
ONE_CYCLE_MIN_PCT, ONE_CYCLE_MAX_PCT = 0.05, 0.5


def one_cycle_pct(warmup_fraction: float) -> float:
    return min(ONE_CYCLE_MAX_PCT, max(warmup_fraction, ONE_CYCLE_MIN_PCT))


@dataclasses.dataclass(frozen=True)
class LightningPart:
    """What one knob contributes to Lightning: ``Trainer`` and ``DataLoader`` arguments, a
    model change (applied by ``cfg.prepare``), a backend setting (applied by
    ``cfg.backends()``), and notes of its own."""

    trainer: dict[str, Any] = dataclasses.field(default_factory=dict)
    dataloader: dict[str, Any] = dataclasses.field(default_factory=dict)
    model: str | None = None
    backends: str | None = None
    notes: tuple[str, ...] = ()


# ``names`` is the set of parameters the installed TrainingArguments takes (None: the newest).
ToTransformers = Callable[["TrainingConfig", "Collection[str] | None"], dict[str, Any]]
ToLightning = Callable[["TrainingConfig"], LightningPart]


def _takes(names: Collection[str] | None, name: str) -> bool:
    return names is None or name in names


# -- Hugging Face transformers ----------------------------------------------------------------


def hf_batch_size(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    return {"per_device_train_batch_size": cfg.batch_size}


def hf_accumulation(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    return {"gradient_accumulation_steps": cfg.gradient_accumulation_steps}


def hf_optimizer_impl(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    # The search's default optimizer is torch's AdamW: "adamw_torch_fused" when fused, else
    # "adamw_torch" (torch's own choice, foreach on a GPU), always said, since Hugging Face
    # defaults to the fused one on torch >= 2.8.
    fused = cfg.optimizer_impl is OptimizerImpl.FUSED
    return {"optim": "adamw_torch_fused" if fused else "adamw_torch"}


def hf_workers(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    return {"dataloader_num_workers": cfg.num_workers}


def hf_persistent(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    return {"dataloader_persistent_workers": cfg.persistent_workers}


def hf_prefetch(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    if cfg.num_workers > 0 and cfg.prefetch_factor is not None:
        return {"dataloader_prefetch_factor": cfg.prefetch_factor}
    return {}


def hf_pin(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    # autotune pins only where batches are copied to an accelerator; so does this.
    return {"dataloader_pin_memory": cfg.pin_memory and is_accelerator(cfg.device)}


_HF_TF32 = {Precision.TF32: True, Precision.FP32_STRICT: False}


def hf_precision(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    return {
        "bf16": cfg.precision is Precision.BF16,
        "fp16": cfg.precision is Precision.FP16,
        # fp32 is PyTorch's default (None: Trainer leaves the flags alone); strict fp32 is
        # TF32 off, which `tf32=False` sets for matmuls and cuDNN alike.
        "tf32": _HF_TF32.get(cfg.precision),
    }


def hf_compile(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"torch_compile": cfg.compile_mode is not CompileMode.NONE}
    if cfg.compile_mode is not CompileMode.NONE:
        # Setting a mode switches compilation on, so it is only given when compiling.
        out["torch_compile_mode"] = cfg.compile_mode.value
    return out


def hf_checkpointing(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    if _takes(names, "activation_checkpointing"):
        out: dict[str, Any] = {"activation_checkpointing": cfg.checkpointing > 0}
        if cfg.checkpointing > 0:
            out["activation_checkpointing_kwargs"] = {"every_n_layers": cfg.checkpointing}
        return out
    # Older transformers checkpoint every layer or none: the nearest to "every k-th".
    return {"gradient_checkpointing": cfg.checkpointing > 0}


def hf_schedule(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """Peak learning rate, schedule and warm-up: the whole LR schedule at once."""
    schedule = cfg.lr_schedule
    out: dict[str, Any] = {"learning_rate": schedule.peak_lr}
    warmup = schedule.warmup_fraction
    if schedule.kind is ScheduleKind.TRAINER:
        pass  # the trainer's own lr_scheduler_type, at this peak and warm-up
    elif schedule.kind is ScheduleKind.CONSTANT:
        out["lr_scheduler_type"] = "constant_with_warmup" if warmup > 0 else "constant"
    elif schedule.kind is ScheduleKind.COSINE:
        out["lr_scheduler_type"] = "cosine"
    elif schedule.kind is ScheduleKind.WSD:
        # Its decay is a number of steps: transformers_kwargs sets it from the run's length.
        out["lr_scheduler_type"] = "warmup_stable_decay"
    else:
        # OneCycleLR warms up (cosine, from peak/25) for pct_start of the run, then anneals to
        # ~0: the nearest Hugging Face schedule is linear warm-up for that share, then cosine.
        out["lr_scheduler_type"] = "cosine"
        warmup = one_cycle_pct(warmup)
    if warmup > 0:
        if names is not None and "warmup_ratio" in names:
            out["warmup_ratio"] = warmup
        else:
            out["warmup_steps"] = warmup  # a float in [0, 1) is a share of the steps
    return out


def hf_length(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """The training length: ``num_train_epochs``, which needs the epochs you planned; see
    :func:`autotune._knobs.trainer_args.transformers_kwargs`."""
    return {}


def hf_ddp_bucket(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    if cfg.ranks == 1 or cfg.ddp_bucket_cap_mb is None:
        return {}
    return {"ddp_bucket_cap_mb": cfg.ddp_bucket_cap_mb}


def hf_ddp_buffers(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """Also ``find_unused_parameters`` as the trials ran it (DDP's default, off): the Trainer
    turns it on by itself unless activation checkpointing is on, a walk of the graph each
    step that the measured speed did not pay."""
    if cfg.ranks == 1:
        return {}
    out: dict[str, Any] = {"ddp_broadcast_buffers": cfg.ddp_broadcast_buffers}
    if _takes(names, "ddp_find_unused_parameters"):
        out["ddp_find_unused_parameters"] = False
    return out


def hf_ddp_accelerate_only(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """``static_graph`` is ``ddp_static_graph`` where TrainingArguments takes it;
    ``gradient_as_bucket_view`` is not a TrainingArguments field (see ``to_transformers``)."""
    if cfg.ranks == 1 or not cfg.ddp_static_graph or not _takes(names, "ddp_static_graph"):
        return {}
    return {"ddp_static_graph": True}


def hf_ddp_no_sync(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """Hugging Face's Trainer skips the all-reduce on accumulation's inner steps itself."""
    return {}


def hf_none(cfg: TrainingConfig, names: Collection[str] | None) -> dict[str, Any]:
    """Not a TrainingArguments field: ``with cfg.backends(): trainer.train()`` or the model."""
    return {}


# -- Lightning --------------------------------------------------------------------------------

_LIGHTNING_PRECISION = {
    Precision.FP32: "32-true",
    Precision.FP32_STRICT: "32-true",  # TF32 off is a backend flag (cfg.backends())
    Precision.TF32: "32-true",  # TF32 is a matmul setting, not a Lightning precision
    Precision.BF16: "bf16-mixed",
    Precision.FP16: "16-mixed",  # Lightning adds the GradScaler itself
}


def pl_batch_size(cfg: TrainingConfig) -> LightningPart:
    return LightningPart(dataloader={"batch_size": cfg.batch_size})


def pl_accumulation(cfg: TrainingConfig) -> LightningPart:
    return LightningPart(trainer={"accumulate_grad_batches": cfg.gradient_accumulation_steps})


def pl_optimizer_impl(cfg: TrainingConfig) -> LightningPart:
    if cfg.optimizer_impl is OptimizerImpl.DEFAULT:
        return LightningPart()
    return LightningPart(
        notes=(
            f"{cfg.optimizer_impl.value} optimizer: `cfg.optimizer(self.parameters())` in "
            f"configure_optimizers passes {cfg.optimizer_impl.value}=True (or pass it to "
            "your own optimizer class).",
        )
    )


def pl_workers(cfg: TrainingConfig) -> LightningPart:
    return LightningPart(dataloader={"num_workers": cfg.num_workers})


def pl_persistent(cfg: TrainingConfig) -> LightningPart:
    if cfg.num_workers == 0:
        return LightningPart()
    return LightningPart(dataloader={"persistent_workers": cfg.persistent_workers})


def pl_prefetch(cfg: TrainingConfig) -> LightningPart:
    if cfg.num_workers == 0 or cfg.prefetch_factor is None:
        return LightningPart()
    return LightningPart(dataloader={"prefetch_factor": cfg.prefetch_factor})


def pl_pin(cfg: TrainingConfig) -> LightningPart:
    return LightningPart(dataloader={"pin_memory": cfg.pin_memory and is_accelerator(cfg.device)})


_PL_BACKENDS = {
    Precision.TF32: "TF32 matmuls/convolutions",
    Precision.FP32_STRICT: "strict fp32 (TF32 off in cuDNN convolutions too)",
}


def pl_precision(cfg: TrainingConfig) -> LightningPart:
    notes: tuple[str, ...] = ()
    if cfg.precision is Precision.FP16 and not is_accelerator(cfg.device):
        notes = (
            "fp16 on a CPU: Lightning runs precision '16-mixed' as 'bf16-mixed' there; use "
            "autotune.train or your own loop with cfg.autocast() to train in fp16 as measured.",
        )
    return LightningPart(
        trainer={"precision": _LIGHTNING_PRECISION[cfg.precision]},
        backends=_PL_BACKENDS.get(cfg.precision),
        notes=notes,
    )


def pl_compile(cfg: TrainingConfig) -> LightningPart:
    if cfg.compile_mode is CompileMode.NONE:
        return LightningPart()
    return LightningPart(model=f"torch.compile (mode {cfg.compile_mode.value!r})")


def pl_compile_dynamic(cfg: TrainingConfig) -> LightningPart:
    if cfg.compile_mode is CompileMode.NONE or not cfg.compile_dynamic:
        return LightningPart()
    return LightningPart(model="dynamic shapes (torch.compile(dynamic=True))")


def pl_cudnn(cfg: TrainingConfig) -> LightningPart:
    return LightningPart(trainer={"benchmark": cfg.cudnn_benchmark})


def pl_checkpointing(cfg: TrainingConfig) -> LightningPart:
    if not cfg.checkpointing:
        return LightningPart()
    return LightningPart(model=f"checkpointing (one in every {cfg.checkpointing} repeated blocks)")


def pl_channels_last(cfg: TrainingConfig) -> LightningPart:
    if not cfg.channels_last:
        return LightningPart()
    return LightningPart(
        model="channels_last",
        notes=(
            "channels_last inputs: in training_step, `batch = cfg.to_device(batch)` converts "
            "image batches to channels_last (batches already on the device stay there).",
        ),
    )


def pl_threads(cfg: TrainingConfig) -> LightningPart:
    if cfg.intra_op_threads is None:
        return LightningPart()
    return LightningPart(backends=f"{cfg.intra_op_threads} intra-op CPU threads")


def pl_schedule(cfg: TrainingConfig) -> LightningPart:
    s = cfg.lr_schedule
    if s.kind is ScheduleKind.TRAINER:
        return LightningPart(
            notes=(
                f"LR: your configure_optimizers' own optimizer and schedule, its first "
                f"parameter group's learning rate at {s.peak_lr:.4g} (scale every group "
                "alike: autotune.tune's trials multiplied each group's LR by the same "
                "factor).",
            )
        )
    return LightningPart(
        notes=(
            f"LR schedule ({s.kind.value}, peak {s.peak_lr:.3g}, warm-up "
            f"{s.warmup_fraction:g}): in configure_optimizers, "
            "`opt = cfg.optimizer(self.parameters())` and return {'optimizer': opt, "
            "'lr_scheduler': {'scheduler': cfg.lr_scheduler(opt, "
            "self.trainer.estimated_stepping_batches), 'interval': 'step'}}.",
        )
    )


def pl_length(cfg: TrainingConfig) -> LightningPart:
    if cfg.train_fraction == 1.0:
        return LightningPart()
    return LightningPart(
        notes=(
            f"Length: train {cfg.train_fraction:.0%} of the epochs you planned "
            "(`cfg.epochs(planned)`; `cfg.to_lightning(planned_epochs=...)` sets max_epochs), "
            "the LR schedule over those steps (estimated_stepping_batches).",
        )
    )


def pl_ddp(cfg: TrainingConfig) -> LightningPart:
    """Every DDP knob at once (the strategy carries them all): ``strategy="ddp"`` on
    ``ranks`` devices, or a ``DDPStrategy`` with the tuned arguments."""
    if cfg.ranks == 1:
        return LightningPart()
    kwargs = ddp_kwargs(cfg)
    trainer: dict[str, Any] = {"devices": cfg.ranks, "num_nodes": 1}
    if not kwargs:
        return LightningPart(trainer={**trainer, "strategy": "ddp"})
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return LightningPart(
        trainer={**trainer, "strategy": "ddp"},
        notes=(
            f"DDP: pass strategy=lightning.pytorch.strategies.DDPStrategy({args}) in place of "
            "strategy='ddp' (it forwards them to DistributedDataParallel).",
        ),
    )


def pl_ddp_no_sync(cfg: TrainingConfig) -> LightningPart:
    """Lightning skips the all-reduce on accumulation's inner steps itself."""
    return LightningPart()


def pl_none(cfg: TrainingConfig) -> LightningPart:
    """Part of another knob's mapping (the LR schedule's fields)."""
    return LightningPart()
