"""The tuned config as arguments of other trainers: Hugging Face ``TrainingArguments`` and
Lightning's ``Trainer``, put together from each knob's mapping (the registry names it, see
:mod:`autotune._knobs.knob_args`).

What each trainer cannot take is applied around it in a few lines, which the notes spell out;
``with cfg.backends():`` around ``fit``/``train`` covers cuDNN benchmark, TF32 and CPU threads for
both.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from autotune._choices import ScheduleKind, wsd_decay_steps
from autotune._device import device_type, is_accelerator
from autotune._errors import ConfigError
from autotune._knobs import knob_args as ex
from autotune._knobs import registry

if TYPE_CHECKING:
    from autotune._knobs.config import TrainingConfig

__all__ = [
    "LightningSettings",
    "lightning_settings",
    "stream_steps",
    "trainer_settings",
    "transformers_kwargs",
]


def _training_arguments_names() -> frozenset[str] | None:
    """The parameter names of the installed ``transformers.TrainingArguments``; None when
    transformers is not installed (the newest names are used then)."""
    try:
        from transformers import TrainingArguments
    except Exception:  # not installed, or broken: fall back to the current names
        return None
    return frozenset(inspect.signature(TrainingArguments).parameters)


def _training_arguments_defaults() -> dict[str, Any]:
    """The defaults of the installed ``transformers.TrainingArguments``; empty when
    transformers is not installed (None for each, then)."""
    try:
        from transformers import TrainingArguments
    except Exception:  # not installed, or broken, as above
        return {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TrainingArguments):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def transformers_kwargs(
    cfg: TrainingConfig,
    accepted: Collection[str] | None = None,
    *,
    planned_epochs: float | None = None,
    train_size: int | None = None,
    planned_samples: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``transformers.TrainingArguments`` for ``cfg``.

    ``accepted`` is the set of names ``TrainingArguments`` takes (read from the installed
    version when None): transformers 5 replaced ``warmup_ratio`` by a fractional
    ``warmup_steps`` and ``gradient_checkpointing`` by ``activation_checkpointing`` (with
    ``every_n_layers``), and the older names are used where only they exist. A config that
    trains a share of the planned epochs sets ``num_train_epochs`` to that share of
    ``planned_epochs``, which it then needs. A warm-up / stable / decay schedule decays over a
    number of steps (``lr_scheduler_kwargs={"num_decay_steps": ...}``), counted as the Trainer
    counts its optimizer steps from ``planned_epochs`` and ``train_size``, which it then needs.

    A run over a stream is counted in samples: ``planned_samples`` (over as many passes of the
    stream as they take: the Trainer reads it again from its start) sets ``max_steps``
    instead, the optimizer steps of the config's global batch that read the config's share of
    them (:func:`stream_steps`); no epochs.
    """
    names = frozenset(accepted) if accepted is not None else _training_arguments_names()
    out: dict[str, Any] = {}
    for knob in registry.KNOBS:
        out.update(knob.transformers(cfg, names))
    if planned_samples is not None:
        if planned_epochs is not None:
            raise ConfigError(
                "Pass planned_epochs= (a map-style dataset's run) or planned_samples= (a "
                "stream's run, in samples), not both."
            )
        steps = stream_steps(cfg, planned_samples)
        out["max_steps"] = steps
        if cfg.lr_schedule.kind is ScheduleKind.WSD:
            out["lr_scheduler_kwargs"] = {"num_decay_steps": wsd_decay_steps(steps)}
    elif cfg.train_fraction != 1.0:
        if planned_epochs is None:
            raise ConfigError(
                f"This config trains {cfg.train_fraction:.0%} of the epochs you planned: pass "
                "planned_epochs= (the num_train_epochs you train now) so that "
                "num_train_epochs can be set to its share (planned_samples= for a stream)."
            )
        out["num_train_epochs"] = cfg.epochs(planned_epochs)
    elif planned_epochs is not None:
        out["num_train_epochs"] = planned_epochs
    if cfg.lr_schedule.kind is ScheduleKind.WSD and planned_samples is None:
        if planned_epochs is None or train_size is None:
            raise ConfigError(
                "This config's LR schedule is warm-up / stable / decay, which Hugging Face's "
                '"warmup_stable_decay" decays over a number of optimizer steps: pass '
                "planned_epochs= (the num_train_epochs you train now) and "
                "train_size=len(train_dataset) so that they can be counted."
            )
        total = _hf_optimizer_steps(cfg, cfg.epochs(planned_epochs), train_size)
        out["lr_scheduler_kwargs"] = {"num_decay_steps": wsd_decay_steps(total)}
    if not is_accelerator(cfg.device):
        out["use_cpu"] = True
    return out


def stream_steps(cfg: TrainingConfig, planned_samples: int) -> int:
    """The optimizer steps (a Hugging Face Trainer's or Lightning's ``max_steps``) in which
    ``cfg`` reads its share (``train_fraction``) of a stream's ``planned_samples``: a stream
    has no epochs, so a run over one is counted in steps of the config's global batch."""
    if planned_samples < 1:
        raise ConfigError(f"`planned_samples` must be >= 1, but got {planned_samples!r}.")
    return max(1, math.ceil(cfg.train_fraction * planned_samples / cfg.global_batch_size))


def _hf_optimizer_steps(cfg: TrainingConfig, epochs: float, train_size: int) -> int:
    """The optimizer steps a Hugging Face ``Trainer`` makes in ``epochs`` over ``train_size``
    items with ``cfg``'s batch on each of its ranks (its ``max_steps``)."""
    if train_size < 1:
        raise ConfigError(f"`train_size` must be >= 1 (items), but got {train_size!r}.")
    batches = math.ceil(math.ceil(train_size / cfg.ranks) / cfg.batch_size)
    per_epoch = max(1, math.ceil(batches / cfg.gradient_accumulation_steps))
    return max(1, math.ceil(epochs * per_epoch))


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

    A stream (an ``IterableDataset``) orders itself: ``DataLoader(stream, **s.dataloader)``,
    no ``shuffle=`` or sampler, and ``cfg.to_lightning(planned_samples=n)`` sets ``max_steps``.
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


def lightning_settings(
    cfg: TrainingConfig,
    *,
    planned_epochs: float | None = None,
    planned_samples: int | None = None,
    passes: float | None = None,
) -> LightningSettings:
    """The Trainer and DataLoader arguments for ``cfg``, and notes for the rest; with
    ``planned_epochs`` (the epochs you train now), ``max_epochs``: the config's share of them
    (a whole number; otherwise a note says the steps to stop at); with ``planned_samples`` (a
    stream's run), ``max_steps`` (:func:`stream_steps`), or, where the run is ``passes``
    whole passes over the stream (each epoch reads it again from its start), ``max_epochs``:
    the config's share of them, where that is a whole number too."""
    kind = device_type(cfg.device)
    trainer: dict[str, Any] = {
        "accelerator": kind,
        "devices": [int(cfg.device.partition(":")[2] or 0)] if kind == "cuda" else 1,
    }  # with ranks > 1, the DDP knob's part sets the devices and the strategy
    length: list[str] = []
    if planned_samples is not None:
        if planned_epochs is not None:
            raise ConfigError(
                "Pass planned_epochs= (a map-style dataset's run) or planned_samples= (a "
                "stream's run, in samples), not both."
            )
        share = None if passes is None else cfg.epochs(passes)
        if passes is not None and passes > 1 and share is not None and share.is_integer():
            trainer["max_epochs"] = int(share)
        else:
            trainer["max_steps"] = stream_steps(cfg, planned_samples)
    elif planned_epochs is not None:
        epochs = cfg.epochs(planned_epochs)
        if float(epochs).is_integer():
            trainer["max_epochs"] = int(epochs)
        else:
            length.append(
                f"Length: {epochs:g} epochs is not a whole number: set max_steps to "
                f"{epochs:g} x your optimizer steps per epoch."
            )
    loader: dict[str, Any] = {}
    model: list[str] = []
    backends: list[str] = []
    own: list[str] = []
    for knob in registry.KNOBS:
        part = knob.lightning(cfg)
        trainer.update(part.trainer)
        loader.update(part.dataloader)
        model += [part.model] if part.model else []
        backends += [part.backends] if part.backends else []
        own += part.notes
    notes: list[str] = []
    if model:
        notes.append(
            f"Model: {', '.join(model)} are not Trainer arguments; "
            "`model = cfg.prepare(lightning_module)` applies them (Trainer.fit accepts the "
            "compiled LightningModule it returns)."
        )
    if backends:
        joined = " and ".join(backends)
        notes.append(
            f"{joined[:1].upper()}{joined[1:]}: not Trainer arguments; run "
            "`with cfg.backends(): trainer.fit(...)`."
        )
    return LightningSettings(trainer=trainer, dataloader=loader, notes=(*notes, *own, *length))


def trainer_settings(
    kind: str,
    cfg: TrainingConfig,
    baseline: TrainingConfig,
    planned_samples: int | None = None,
    passes: float | None = None,
) -> dict[str, Any]:
    """What to change in the trainer ``autotune.tune`` measured, to train as ``cfg`` did: for a
    Hugging Face ``Trainer`` the ``TrainingArguments`` that differ from the baseline's (your
    own), for Lightning the ``Trainer`` and ``DataLoader`` arguments and the notes, with the
    factor the trials multiplied your learning rates by. Both come from the mappings the trials
    applied, so they reproduce what was measured. ``planned_samples``: the run over a stream
    (``passes`` over it), whose ``max_steps`` then read those samples with ``cfg``'s batch
    (where it changes); Lightning's ``max_epochs`` its whole passes, where they are."""
    if kind == "transformers":
        tuned = transformers_kwargs(cfg, planned_samples=planned_samples)
        yours = transformers_kwargs(baseline, planned_samples=planned_samples)
        # An argument of yours that the tuned config does not set (a prefetch factor where it
        # has no workers, a compile mode where it does not compile, a warm-up where it has
        # none) goes back to its default: left out, yours would stay, and a compile mode alone
        # turns compile back on.
        defaults = _training_arguments_defaults()
        target = {**{k: defaults.get(k) for k in yours}, **tuned}
        return {
            "training_arguments": {
                k: v for k, v in target.items() if yours.get(k, defaults.get(k)) != v
            },
            "backends": "with cfg.backends(): trainer.train()  # cuDNN benchmark, TF32, threads",
        }
    settings = lightning_settings(cfg, planned_samples=planned_samples, passes=passes).to_dict()
    # Trials convert the module (cfg.prepare), never the batches a training_step receives.
    inputs = ex.pl_channels_last(cfg).notes
    settings["notes"] = [n for n in settings["notes"] if n not in inputs]
    factor = cfg.lr_schedule.peak_lr / baseline.lr_schedule.peak_lr
    if abs(factor - 1.0) > 1e-12:
        settings["notes"].append(
            f"LR: multiply every learning rate configure_optimizers sets by {factor:.4g} (the "
            "trials scaled your optimizer's parameter groups and schedulers by it)."
        )
    settings["lr_factor"] = factor
    return settings
