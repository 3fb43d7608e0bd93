"""How each knob of a :class:`~autotune.TrainingConfig` is applied.

The trial runner trains through exactly these functions, so what was measured is what a user gets
when they apply the exported config in their own loop.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils import checkpoint as torch_checkpoint
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from autotune._choices import CompileMode, LRSchedule, OptimizerImpl, Precision, ScheduleKind
from autotune._device import device_type
from autotune._errors import ArgumentError, ConfigError
from autotune._stream import is_stream, source_of

if TYPE_CHECKING:
    from autotune._knobs.config import TrainingConfig

__all__ = [
    "MicroBatchSampler",
    "autocast",
    "backend_flags",
    "changes_batches",
    "checkpointed_blocks",
    "current_device",
    "data_parallel",
    "ddp_kwargs",
    "ddp_module",
    "find_repeated_blocks",
    "grad_scaler",
    "lr_scheduler",
    "make_dataloader",
    "make_item_loader",
    "make_optimizer",
    "optimizer_steps",
    "prepare_model",
    "set_epoch",
    "split_by_node",
    "supported_optimizer_impls",
    "to_device",
    "unwrap_compiled",
    "uses_cuda_graphs",
    "wrap_ddp",
]

_CKPT_ATTR = "_autotune_checkpointed"


def current_device(device: str) -> AbstractContextManager[Any]:
    """``device`` as CUDA's current device while the context lasts: pinned memory, the bf16
    check and bare ``.cuda()`` calls use the current device, not the config's."""
    if device_type(device) != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(torch.device(device))


# -- Data parallelism ---------------------------------------------------------------------------


def data_parallel(cfg: TrainingConfig) -> bool:
    """Whether this process is one of ``cfg.ranks`` > 1 data-parallel ranks: a process group of
    that size is initialized (by ``torchrun`` and ``init_process_group``). A config of more
    ranks used in a single process trains as one rank; a process group of another size is an
    error that names both."""
    if cfg.ranks == 1 or not (dist.is_available() and dist.is_initialized()):
        return False
    world = dist.get_world_size()
    if world != cfg.ranks:
        raise ConfigError(
            f"The config was tuned for {cfg.ranks} data-parallel ranks (its batch_size is per "
            f"rank, its global batch {cfg.global_batch_size}), but this process group has "
            f"{world}: launch it with `torchrun --nproc-per-node {cfg.ranks}`, or search "
            f"again with {world} ranks."
        )
    return True


def wrap_ddp(
    cfg: TrainingConfig, model: nn.Module, *, device_ids: list[int] | None = None
) -> nn.Module:
    """``model`` in DistributedDataParallel with the config's DDP knobs."""
    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigError(
            "wrap_ddp needs an initialized process group: run under `torchrun` and call "
            "torch.distributed.init_process_group() first."
        )
    if device_ids is None and device_type(cfg.device) == "cuda":
        index = torch.device(cfg.device).index
        device_ids = [torch.cuda.current_device() if index is None else index]
    return DistributedDataParallel(model, device_ids=device_ids, **ddp_kwargs(cfg))


def ddp_kwargs(cfg: TrainingConfig) -> dict[str, Any]:
    """The ``DistributedDataParallel`` arguments the DDP knobs set that differ from DDP's
    defaults (what :func:`wrap_ddp` passes, and Lightning's ``DDPStrategy`` forwards)."""
    out: dict[str, Any] = {}
    if cfg.ddp_bucket_cap_mb is not None:
        out["bucket_cap_mb"] = cfg.ddp_bucket_cap_mb
    if cfg.ddp_gradient_as_bucket_view:
        out["gradient_as_bucket_view"] = True
    if cfg.ddp_static_graph:
        out["static_graph"] = True
    if not cfg.ddp_broadcast_buffers:
        out["broadcast_buffers"] = False
    return out


def ddp_module(model: nn.Module) -> DistributedDataParallel | None:
    """The DistributedDataParallel wrapper of ``model`` (under a compile wrapper), if any."""
    inner = getattr(model, "_orig_mod", model)
    return inner if isinstance(inner, DistributedDataParallel) else None


def average_gradients(model: nn.Module) -> None:
    """Average every gradient over the process group, as DDP's all-reduce does: for an
    optimizer step whose micro-batches all ran under ``no_sync`` (an epoch's last window)."""
    world = dist.get_world_size()
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad.div_(world)


def set_epoch(loader: DataLoader[Any], epoch: int) -> None:
    """Tell a loader's DistributedSampler (directly or under the micro-batch sampler) which
    epoch starts, so that each epoch is shuffled anew, as a DistributedSampler needs."""
    sampler: Any = loader.sampler
    batches = getattr(loader, "batch_sampler", None)
    if isinstance(batches, MicroBatchSampler):
        sampler = batches.sampler
    if isinstance(sampler, DistributedSampler):
        sampler.set_epoch(epoch)


def _sampler(
    cfg: TrainingConfig,
    dataset: Dataset[Any],
    *,
    shuffle: bool,
    drop_last: bool,
    generator: torch.Generator | None,
    shard: bool,
) -> Sampler[int]:
    if shard:
        # Each rank its share: the same shuffled order on every rank, from the same seed.
        seed = generator.initial_seed() if generator is not None else 0
        return DistributedSampler(dataset, shuffle=shuffle, seed=seed % 2**63, drop_last=drop_last)
    if shuffle:
        return RandomSampler(dataset, generator=generator)  # type: ignore[arg-type]
    return SequentialSampler(dataset)  # type: ignore[arg-type]


# -- DataLoader ---------------------------------------------------------------------------------


def make_dataloader(
    cfg: TrainingConfig,
    dataset: Dataset[Any],
    *,
    shuffle: bool = True,
    drop_last: bool = False,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    generator: torch.Generator | None = None,
    batch_size: int | None = None,
    shard: bool | None = None,
) -> DataLoader[Any]:
    # Sharded across the ranks where a process group of the config's ranks is up (None), or
    # as told (a validation set that every rank scores whole: False).
    shard = data_parallel(cfg) if shard is None else shard and data_parallel(cfg)
    workers = cfg.num_workers
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs["persistent_workers"] = cfg.persistent_workers
        if cfg.prefetch_factor is not None:
            kwargs["prefetch_factor"] = cfg.prefetch_factor
    # Pinning only means something when batches are copied to an accelerator.
    pin = cfg.pin_memory and device_type(cfg.device) != "cpu"
    # What every loader below shares: the workers, pinning, batching function and seed.
    kwargs.update(num_workers=workers, pin_memory=pin, collate_fn=collate_fn, generator=generator)
    source = source_of(dataset)
    if is_stream(source):
        # A stream orders itself (its shards, its shuffle buffer): no sampler, no shuffle=.
        # Micro-batches of gradient accumulation are its consecutive batches.
        return DataLoader(
            split_by_node(source) if shard else source,
            batch_size=batch_size if batch_size is not None else cfg.batch_size,
            drop_last=drop_last,
            **kwargs,
        )
    k = cfg.gradient_accumulation_steps
    # The order of the samples: shuffled from ``generator`` (what DataLoader(shuffle=True)
    # builds), in order, or each rank its share (DistributedSampler).
    sampler = _sampler(
        cfg, dataset, shuffle=shuffle, drop_last=drop_last, generator=generator, shard=shard
    )
    if k > 1 and batch_size is None:
        # Micro-batches that split the global batches a loader of batch_size * k would yield:
        # the same samples in the same order, whatever the split.
        return DataLoader(
            dataset,
            batch_sampler=MicroBatchSampler(sampler, cfg.batch_size, k, drop_last=drop_last),
            **kwargs,
        )
    return DataLoader(
        dataset,
        batch_size=batch_size if batch_size is not None else cfg.batch_size,
        sampler=sampler,
        drop_last=drop_last,
        **kwargs,
    )


def make_item_loader(
    cfg: TrainingConfig,
    stream: Dataset[Any],
    *,
    generator: torch.Generator | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
) -> DataLoader[Any]:
    """A stream's items one at a time, loaded by the config's workers (each prefetching a
    batch's worth, each started by the user's ``worker_init_fn`` where their loader has one),
    unbatched: what an accuracy run batches itself, so that the order of the items does not
    depend on the batch size (see the runner's accuracy runs)."""
    kwargs: dict[str, Any] = {}
    if cfg.num_workers > 0:
        kwargs["persistent_workers"] = False
        kwargs["prefetch_factor"] = (cfg.prefetch_factor or 2) * cfg.batch_size
        kwargs["worker_init_fn"] = worker_init_fn
    source = source_of(stream)
    return DataLoader(
        split_by_node(source) if data_parallel(cfg) else source,
        batch_size=None,
        num_workers=cfg.num_workers,
        generator=generator,
        **kwargs,
    )


def split_by_node(stream: Dataset[Any]) -> Dataset[Any]:
    """This rank's part of a stream: a Hugging Face stream through its own
    ``split_dataset_by_node`` (its shards, or every world-th item, per rank); any other stream
    as it is, splitting itself (WebDataset's ``split_by_node`` reads the process group)."""
    if type(stream).__module__.startswith("datasets."):
        from datasets.distributed import split_dataset_by_node  # a Hugging Face stream's own

        return split_dataset_by_node(  # type: ignore[no-any-return]
            stream, rank=dist.get_rank(), world_size=dist.get_world_size()
        )
    return stream


class MicroBatchSampler(Sampler[list[int]]):
    """Global batches of ``micro * steps`` indices, each yielded as ``steps`` micro-batches of
    ``micro``. ``drop_last`` drops an incomplete global batch (as a loader of the global batch
    size would); otherwise its micro-batches come as they are, the last one shorter."""

    def __init__(self, sampler: Iterable[int], micro: int, steps: int, *, drop_last: bool) -> None:
        self.sampler, self.micro, self.steps, self.drop_last = sampler, micro, steps, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        size = self.micro * self.steps
        window: list[int] = []
        for index in self.sampler:
            window.append(index)
            if len(window) == size:
                yield from self._split(window)
                window = []
        if window and not self.drop_last:
            yield from self._split(window)

    def _split(self, window: list[int]) -> Iterator[list[int]]:
        for start in range(0, len(window), self.micro):
            yield window[start : start + self.micro]

    def __len__(self) -> int:
        n = len(self.sampler) if isinstance(self.sampler, Sized) else 0
        size = self.micro * self.steps
        full, rest = divmod(n, size)
        return full * self.steps + (0 if self.drop_last else math.ceil(rest / self.micro))


def optimizer_steps(cfg: TrainingConfig, batches: int) -> int:
    """Optimizer steps that ``batches`` micro-batches make (an incomplete last window steps
    too, as :func:`autotune.train` and Hugging Face's Trainer do at the end of an epoch)."""
    return math.ceil(batches / cfg.gradient_accumulation_steps)


def to_device(batch: Any, device: str, *, non_blocking: bool = False) -> Any:
    """Move every tensor in a nested batch structure to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return type(batch)(  # type: ignore[call-arg]
            {k: to_device(v, device, non_blocking=non_blocking) for k, v in batch.items()}
        )
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device, non_blocking=non_blocking) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device, non_blocking=non_blocking) for v in batch)
    return batch


def changes_batches(cfg: TrainingConfig) -> bool:
    """Whether ``cfg`` converts the batches themselves (channels_last), not only moves them."""
    return cfg.channels_last


def to_channels_last(batch: Any) -> Any:
    """Image-shaped (4-D floating) tensors in ``batch`` in channels_last memory format."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 4 and batch.is_floating_point():
            return batch.contiguous(memory_format=torch.channels_last)
        return batch
    if isinstance(batch, Mapping):
        return type(batch)({k: to_channels_last(v) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, list | tuple) and not hasattr(batch, "_fields"):
        return type(batch)(to_channels_last(v) for v in batch)
    return batch


# -- Model --------------------------------------------------------------------------------------


def find_repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the children of the ``ModuleList``/``Sequential`` that holds
    the most parameters in two or more non-leaf children of one class (transformer layers, ResNet
    stages, the conv blocks of a CNN). Empty when the model has no such container."""
    best: list[nn.Module] = []
    best_params = 0
    for module in model.modules():
        if not isinstance(module, nn.ModuleList | nn.Sequential):
            continue
        children = list(module.children())
        if len(children) < 2 or len({type(c) for c in children}) != 1:
            continue
        if not any(True for _ in children[0].children()):
            continue  # a run of bare layers (Linear, Conv2d) is not a block structure
        params = sum(p.numel() for c in children for p in c.parameters())
        if params > best_params:
            best, best_params = children, params
    return best


class _CheckpointedForward:
    """Replaces a block's ``forward`` so that, while training, its activations are recomputed in
    the backward pass instead of stored (``torch.utils.checkpoint``, non-reentrant)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return torch_checkpoint.checkpoint(self.forward, *args, use_reentrant=False, **kwargs)
        return self.forward(*args, **kwargs)


def apply_checkpointing(model: nn.Module, every: int) -> int:
    """Checkpoint every ``every``-th repeated block (0: none). Returns how many were wrapped."""
    if every <= 0:
        return 0
    wrapped = 0
    for i, block in enumerate(find_repeated_blocks(model)):
        if i % every == 0 and not getattr(block, _CKPT_ATTR, False):
            # An instance attribute shadows the class's forward and keeps state_dict keys intact.
            block.forward = _CheckpointedForward(block.forward)
            setattr(block, _CKPT_ATTR, True)
            wrapped += 1
    return wrapped


def checkpointed_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of ``model`` that :func:`apply_checkpointing` wrapped."""
    return [m for m in unwrap_compiled(model).modules() if getattr(m, _CKPT_ATTR, False)]


def unwrap_compiled(model: nn.Module) -> nn.Module:
    """The eager module behind a ``torch.compile`` wrapper and a DistributedDataParallel one
    (shares the same parameters; its forward runs no collective)."""
    inner = getattr(model, "_orig_mod", None)
    model = inner if isinstance(inner, nn.Module) else model
    return model.module if isinstance(model, DistributedDataParallel) else model


def prepare_model(cfg: TrainingConfig, model: nn.Module, *, inplace: bool = False) -> nn.Module:
    if not inplace:
        model = copy.deepcopy(model)
    model = model.to(cfg.device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    apply_checkpointing(model, cfg.checkpointing)
    if data_parallel(cfg):
        model = wrap_ddp(cfg, model)  # before compile: DDP's optimizer splits the graphs
    if cfg.compile_mode is not CompileMode.NONE:
        mode = None if cfg.compile_mode is CompileMode.DEFAULT else cfg.compile_mode.value
        # dynamic=None: torch's default, static shapes until one changes.
        dynamic = True if cfg.compile_dynamic else None
        model = torch.compile(model, mode=mode, dynamic=dynamic)  # type: ignore[assignment]
    return model


# -- Optimizer ----------------------------------------------------------------------------------


def make_optimizer(
    cfg: TrainingConfig, factory: Callable[..., torch.optim.Optimizer], params: Iterable[Any]
) -> torch.optim.Optimizer:
    """``factory(params, peak_lr)``, with ``foreach=True`` or ``fused=True`` as the config's
    optimizer implementation says (nothing for ``default``)."""
    impl = cfg.optimizer_impl.kwargs()
    try:
        return factory(params, cfg.lr_schedule.peak_lr, **impl)
    except TypeError as exc:
        if not impl or f"'{cfg.optimizer_impl.value}'" not in str(exc):
            raise
        flag = f"{cfg.optimizer_impl.value}=True"
        raise ArgumentError(
            f"The `optimizer` factory does not take `{flag}`, which the config's "
            f"optimizer_impl={cfg.optimizer_impl.value!r} asks for ({exc}). Let it take "
            "**kwargs and pass them to the optimizer, or set optimizer_impl to 'default'."
        ) from None


def supported_optimizer_impls(
    factory: Callable[..., torch.optim.Optimizer], device: str
) -> tuple[str, ...]:
    """The optimizer implementations ``factory`` takes and torch runs on ``device``: each is
    tried on one parameter (built, then one step), so a factory without ``**kwargs`` for the
    flag, or an optimizer or device without the kernel, leaves it out."""
    kept = [OptimizerImpl.DEFAULT.value]
    for impl in (OptimizerImpl.FOREACH, OptimizerImpl.FUSED):
        try:
            param = nn.Parameter(torch.zeros(4, device=device))
            optimizer = factory([param], 1e-3, **impl.kwargs())
            if not optimizer.defaults.get(impl.value):
                continue  # it took the flag and dropped it: nothing would change
            param.grad = torch.ones_like(param)
            optimizer.step()
        except Exception:  # a TypeError for the flag, a RuntimeError for the device: unsupported
            continue
        kept.append(impl.value)
    return tuple(kept)


_ADAPTIVE = (
    torch.optim.Adam,
    torch.optim.AdamW,
    torch.optim.Adamax,
    torch.optim.NAdam,
    torch.optim.RAdam,
    torch.optim.Adagrad,
    torch.optim.Adadelta,
    torch.optim.RMSprop,
)


def adapts_steps(factory: Callable[..., torch.optim.Optimizer]) -> bool:
    """Whether ``factory`` builds an optimizer that scales its steps per parameter (the Adam
    family, RMSprop, Adagrad; by class, or by a name with "adam" in it for other libraries'):
    the rule for scaling its rate with the batch is sqrt, not linear. False where it cannot
    be built on one parameter."""
    try:
        optimizer = factory([nn.Parameter(torch.zeros(4))], 1e-3)
    except Exception:  # the user's factory, built outside a trial: unknown, not adaptive
        return False
    return isinstance(optimizer, _ADAPTIVE) or "adam" in type(optimizer).__name__.lower()


def uses_cuda_graphs(cfg: TrainingConfig) -> bool:
    """Whether the config's compile mode records CUDA graphs (on a CUDA device)."""
    graphs = (CompileMode.REDUCE_OVERHEAD, CompileMode.MAX_AUTOTUNE)
    return cfg.compile_mode in graphs and device_type(cfg.device) == "cuda"


# -- Precision ----------------------------------------------------------------------------------


_AUTOCAST_DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}


def autocast(cfg: TrainingConfig) -> AbstractContextManager[Any]:
    dtype = _AUTOCAST_DTYPES.get(cfg.precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type(cfg.device), dtype=dtype)


def grad_scaler(cfg: TrainingConfig) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(device_type(cfg.device), enabled=cfg.precision is Precision.FP16)


# Where fp32 maths may use TF32, per precision, through the ``fp32_precision`` API only (on
# torch 2.13, reading the legacy ``allow_tf32`` / matmul-precision flags after the new API has
# set them differently raises). ``fp32`` is PyTorch's own default, what a plain script runs:
# cuBLAS matmuls in IEEE fp32, cuDNN convolutions and RNNs in TF32.
_FP32_PRECISION = ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn")
_TF32_SETTINGS: dict[Precision, tuple[str, str, str]] = {
    Precision.FP32: ("ieee", "tf32", "tf32"),
    Precision.FP32_STRICT: ("ieee", "ieee", "ieee"),
    Precision.TF32: ("tf32", "tf32", "tf32"),
    Precision.BF16: ("ieee", "tf32", "tf32"),  # outside autocast: as a plain script
    Precision.FP16: ("ieee", "tf32", "tf32"),
}


def fp32_precisions() -> tuple[str, ...]:
    """The current (matmul, cuDNN conv, cuDNN RNN) fp32 precisions, read with the new API."""
    return tuple(torch._C._get_fp32_precision_getter(b, op) for b, op in _FP32_PRECISION)


def _set_fp32_precisions(values: tuple[str, ...]) -> None:
    for (backend, op), value in zip(_FP32_PRECISION, values, strict=True):
        torch._C._set_fp32_precision_setter(backend, op, value)


@contextlib.contextmanager
def backend_flags(cfg: TrainingConfig) -> Iterator[None]:
    """cuDNN benchmark, TF32 and intra-op threads for the config, restored on exit.

    ``fp32`` is PyTorch's default (TF32 in cuDNN convolutions, not in matmuls), ``tf32`` adds
    matmuls, ``fp32_strict`` turns TF32 off everywhere.
    """
    saved = (torch.backends.cudnn.benchmark, fp32_precisions(), torch.get_num_threads())
    try:
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
        _set_fp32_precisions(_TF32_SETTINGS[cfg.precision])
        if cfg.intra_op_threads is not None:
            torch.set_num_threads(cfg.intra_op_threads)
        yield
    finally:
        torch.backends.cudnn.benchmark = saved[0]
        _set_fp32_precisions(saved[1])
        torch.set_num_threads(saved[2])


# -- LR schedule --------------------------------------------------------------------------------


def lr_scheduler(
    schedule: LRSchedule, optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    if schedule.kind is ScheduleKind.TRAINER:
        raise ConfigError(
            "This config was tuned through your own trainer (autotune.tune): its LR schedule is "
            f"your trainer's, at a peak of {schedule.peak_lr:.4g}. Keep your scheduler and set "
            "that learning rate, or export it with cfg.to_lightning() / cfg.to_transformers()."
        )
    total = max(1, int(total_steps))
    for group in optimizer.param_groups:
        group["lr"] = schedule.peak_lr
    if schedule.kind is ScheduleKind.ONE_CYCLE:
        defaults = optimizer.defaults
        cycle_momentum = "betas" in defaults or float(defaults.get("momentum", 0.0) or 0.0) > 0
        # OneCycleLR divides by its warm-up's length in steps (pct_start * total - 1): it must
        # not be zero, as in a short measurement counted in optimizer steps (ZeroDivisionError).
        total = max(total, 3)
        pct = min(0.5, max(schedule.warmup_fraction, 0.05))
        if pct * total < 2:
            pct = min(0.5, 2 / total)
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=schedule.peak_lr,
            total_steps=total,
            pct_start=pct,
            cycle_momentum=cycle_momentum,
        )
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(_lr_factor, schedule, total)
    )


def _lr_factor(schedule: LRSchedule, total: int, step: int) -> float:
    return schedule.lr_factor(step, total)
