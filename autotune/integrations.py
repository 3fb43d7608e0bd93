"""The tuned config as arguments of other trainers: Hugging Face ``TrainingArguments`` and
Lightning's ``Trainer``.

Nothing here imports either library (they are optional); the argument names are checked against
the real signatures in ``tests/test_integrations.py``, so a rename upstream fails there first.

What each trainer cannot take is applied around it in a few lines, which the notes spell out;
``with cfg.backends():`` around ``fit``/``train`` covers cuDNN benchmark, TF32 and CPU threads for
both.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from autotune.config import CompileMode, Precision, ScheduleKind

if TYPE_CHECKING:
    from autotune.config import TrainingConfig

__all__ = ["LightningSettings", "lightning_settings", "transformers_kwargs"]

# OneCycleLR's warm-up share, as autotune.knobs.lr_scheduler builds it.
_ONE_CYCLE_MIN_PCT, _ONE_CYCLE_MAX_PCT = 0.05, 0.5


def _one_cycle_pct(warmup_fraction: float) -> float:
    return min(_ONE_CYCLE_MAX_PCT, max(warmup_fraction, _ONE_CYCLE_MIN_PCT))


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


# -- Hugging Face transformers ----------------------------------------------------------------


def _training_arguments_names() -> frozenset[str] | None:
    """The parameter names of the installed ``transformers.TrainingArguments``; None when
    transformers is not installed (the newest names are used then)."""
    try:
        from transformers import TrainingArguments
    except Exception:  # not installed, or broken: fall back to the current names
        return None
    return frozenset(inspect.signature(TrainingArguments).parameters)


def transformers_kwargs(
    cfg: TrainingConfig, accepted: Collection[str] | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``transformers.TrainingArguments`` for ``cfg``.

    ``accepted`` is the set of names ``TrainingArguments`` takes (read from the installed
    version when None): transformers 5 replaced ``warmup_ratio`` by a fractional
    ``warmup_steps`` and ``gradient_checkpointing`` by ``activation_checkpointing`` (with
    ``every_n_layers``), and the older names are used where only they exist.
    """
    names = frozenset(accepted) if accepted is not None else _training_arguments_names()

    def takes(name: str) -> bool:
        return names is None or name in names

    on_accelerator = _device_type(cfg.device) != "cpu"
    out: dict[str, Any] = {
        "per_device_train_batch_size": cfg.batch_size,
        "dataloader_num_workers": cfg.num_workers,
        # autotune pins only where batches are copied to an accelerator; so does this.
        "dataloader_pin_memory": cfg.pin_memory and on_accelerator,
        "dataloader_persistent_workers": cfg.persistent_workers,
        "bf16": cfg.precision is Precision.BF16,
        "fp16": cfg.precision is Precision.FP16,
        # autotune's fp32 is strict fp32 (TF32 off), as are bf16/fp16 outside autocast.
        "tf32": cfg.precision is Precision.TF32,
        "torch_compile": cfg.compile_mode is not CompileMode.NONE,
        "learning_rate": cfg.lr_schedule.peak_lr,
    }
    if not on_accelerator:
        out["use_cpu"] = True
    if cfg.num_workers > 0 and cfg.prefetch_factor is not None:
        out["dataloader_prefetch_factor"] = cfg.prefetch_factor
    if cfg.compile_mode is not CompileMode.NONE:
        # Setting a mode switches compilation on, so it is only given when compiling.
        out["torch_compile_mode"] = cfg.compile_mode.value

    if takes("activation_checkpointing"):
        out["activation_checkpointing"] = cfg.checkpointing > 0
        if cfg.checkpointing > 0:
            out["activation_checkpointing_kwargs"] = {"every_n_layers": cfg.checkpointing}
    else:
        # Older transformers checkpoint every layer or none: the nearest to "every k-th".
        out["gradient_checkpointing"] = cfg.checkpointing > 0

    schedule = cfg.lr_schedule
    warmup = schedule.warmup_fraction
    if schedule.kind is ScheduleKind.CONSTANT:
        out["lr_scheduler_type"] = "constant_with_warmup" if warmup > 0 else "constant"
    elif schedule.kind is ScheduleKind.COSINE:
        out["lr_scheduler_type"] = "cosine"
    else:
        # OneCycleLR warms up (cosine, from peak/25) for pct_start of the run, then anneals to
        # ~0: the nearest Hugging Face schedule is linear warm-up for that share, then cosine.
        out["lr_scheduler_type"] = "cosine"
        warmup = _one_cycle_pct(warmup)
    if warmup > 0:
        if names is not None and "warmup_ratio" in names:
            out["warmup_ratio"] = warmup
        else:
            out["warmup_steps"] = warmup  # a float in [0, 1) is a share of the steps
    return out


# -- Lightning --------------------------------------------------------------------------------

_LIGHTNING_PRECISION = {
    Precision.FP32: "32-true",
    Precision.TF32: "32-true",  # TF32 is a matmul setting, not a Lightning precision
    Precision.BF16: "bf16-mixed",
    Precision.FP16: "16-mixed",  # Lightning adds the GradScaler itself
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LightningSettings:
    """``cfg.to_lightning()``: what goes to ``lightning.pytorch.Trainer``, what goes to your
    ``DataLoader`` (Lightning does not build it), and what to apply yourself.

    ::

        s = cfg.to_lightning()
        trainer = lightning.pytorch.Trainer(max_epochs=10, **s.trainer)
        loader = DataLoader(train_set, shuffle=True, **s.dataloader)  # or cfg.dataloader(...)
        for note in s.notes:
            print(note)
    """

    trainer: dict[str, Any]
    dataloader: dict[str, Any]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "trainer": dict(self.trainer),
            "dataloader": dict(self.dataloader),
            "notes": list(self.notes),
        }


def lightning_settings(cfg: TrainingConfig) -> LightningSettings:
    """The Trainer and DataLoader arguments for ``cfg``, and notes for the rest."""
    device_type = _device_type(cfg.device)
    trainer: dict[str, Any] = {
        "accelerator": device_type,
        "devices": [_device_index(cfg.device)] if device_type == "cuda" else 1,
        "precision": _LIGHTNING_PRECISION[cfg.precision],
        "benchmark": cfg.cudnn_benchmark,
    }
    loader: dict[str, Any] = {
        "batch_size": cfg.batch_size,
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory and device_type != "cpu",
    }
    if cfg.num_workers > 0:
        loader["persistent_workers"] = cfg.persistent_workers
        if cfg.prefetch_factor is not None:
            loader["prefetch_factor"] = cfg.prefetch_factor

    notes: list[str] = []
    model_knobs = []
    if cfg.channels_last:
        model_knobs.append("channels_last")
    if cfg.checkpointing:
        model_knobs.append(f"checkpointing (one in every {cfg.checkpointing} repeated blocks)")
    if cfg.compile_mode is not CompileMode.NONE:
        model_knobs.append(f"torch.compile (mode {cfg.compile_mode.value!r})")
    if model_knobs:
        notes.append(
            f"Model: {', '.join(model_knobs)} are not Trainer arguments; "
            "`model = cfg.prepare(lightning_module)` applies them (Trainer.fit accepts the "
            "compiled LightningModule it returns)."
        )
    if cfg.channels_last:
        notes.append(
            "channels_last inputs: in training_step, `batch = cfg.to_device(batch)` converts "
            "image batches to channels_last (batches already on the device stay there)."
        )
    if cfg.precision is Precision.TF32 or cfg.intra_op_threads is not None:
        what = []
        if cfg.precision is Precision.TF32:
            what.append("TF32 matmuls/convolutions")
        if cfg.intra_op_threads is not None:
            what.append(f"{cfg.intra_op_threads} intra-op CPU threads")
        joined = " and ".join(what)
        notes.append(
            f"{joined[:1].upper()}{joined[1:]}: not Trainer arguments; run "
            "`with cfg.backends(): trainer.fit(...)`."
        )
    if cfg.precision is Precision.FP16 and device_type == "cpu":
        notes.append(
            "fp16 on a CPU: Lightning runs precision '16-mixed' as 'bf16-mixed' there; use "
            "autotune.train or your own loop with cfg.autocast() to train in fp16 as measured."
        )
    schedule = cfg.lr_schedule
    notes.append(
        f"LR schedule ({schedule.kind.value}, peak {schedule.peak_lr:.3g}, warm-up "
        f"{schedule.warmup_fraction:g}): in configure_optimizers, "
        "`opt = cfg.optimizer(self.parameters())` and return {'optimizer': opt, "
        "'lr_scheduler': {'scheduler': cfg.lr_scheduler(opt, "
        "self.trainer.estimated_stepping_batches), 'interval': 'step'}}."
    )
    return LightningSettings(trainer=trainer, dataloader=loader, notes=tuple(notes))
