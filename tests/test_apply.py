"""Each knob is really applied by the same functions the trial runner trains through
(autotune._knobs.apply)."""

from __future__ import annotations

import contextlib
import itertools
import math

import pytest
import torch
from torch import nn

import autotune
from autotune import LRSchedule, TrainingConfig
from autotune._knobs import apply as knobs
from autotune.examples import SmallCNN, tiny_data, tiny_model


def test_dataloader_really_has_the_workers_and_settings() -> None:
    cfg = TrainingConfig(batch_size=64, num_workers=2, persistent_workers=True, prefetch_factor=4)
    loader = cfg.dataloader(tiny_data())
    assert loader.batch_size == 64
    assert loader.num_workers == 2
    assert loader.persistent_workers is True
    assert loader.prefetch_factor == 4
    batch = next(iter(loader))  # the workers really produce batches
    assert batch[0].shape == (64, 8)


def test_pin_memory_only_pins_for_an_accelerator() -> None:
    assert TrainingConfig(pin_memory=True).dataloader(tiny_data()).pin_memory is False
    cuda_cfg = TrainingConfig(device="cuda:0", pin_memory=True)
    assert cuda_cfg.dataloader(tiny_data()).pin_memory is True


@pytest.mark.parametrize(
    ("precision", "dtype"), [("bf16", torch.bfloat16), ("fp32", torch.float32)]
)
def test_autocast_really_runs_in_the_chosen_dtype(precision: str, dtype: torch.dtype) -> None:
    cfg = TrainingConfig(precision=precision)
    layer = nn.Linear(4, 4)
    with cfg.autocast():
        out = layer(torch.randn(2, 4))
    assert out.dtype == dtype


def test_grad_scaler_only_for_fp16() -> None:
    assert TrainingConfig(precision="fp16").grad_scaler().is_enabled()
    assert not TrainingConfig(precision="bf16").grad_scaler().is_enabled()


def test_checkpointing_really_wraps_every_kth_block(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = torch.utils.checkpoint.checkpoint

    def counting(fn, *args, **kwargs):
        calls.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(knobs.torch_checkpoint, "checkpoint", counting)
    model = SmallCNN(width=4)
    assert len(knobs.find_repeated_blocks(model)) == 3
    every_two = TrainingConfig(checkpointing=2).prepare(model)
    assert [type(b).__name__ for b in knobs.checkpointed_blocks(every_two)] == ["ConvBlock"] * 2
    assert knobs.checkpointed_blocks(every_two)[0] is every_two.blocks[0]
    assert knobs.checkpointed_blocks(every_two)[1] is every_two.blocks[2]
    every_two(torch.randn(2, 3, 32, 32)).sum().backward()
    assert len(calls) == 2  # blocks 0 and 2 recompute in backward
    # No checkpointing (and no recompute) under no_grad, as in validation.
    calls.clear()
    with torch.no_grad():
        every_two(torch.randn(2, 3, 32, 32))
    assert calls == []
    # state_dict keys are unchanged, so a user's saved weights still load.
    assert set(every_two.state_dict()) == set(model.state_dict())


def test_checkpointed_model_computes_the_same_gradients() -> None:
    model = SmallCNN(width=4).eval()  # eval: BatchNorm statistics do not change between calls
    x = torch.randn(2, 3, 32, 32)
    plain = TrainingConfig().prepare(model)
    ckpt = TrainingConfig(checkpointing=1).prepare(model)
    plain(x).sum().backward()
    ckpt(x).sum().backward()
    for a, b in zip(plain.parameters(), ckpt.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_prepare_copies_by_default_and_applies_channels_last() -> None:
    model = SmallCNN(width=4)
    prepared = TrainingConfig(channels_last=True).prepare(model)
    assert prepared is not model
    conv = prepared.blocks[0].conv.weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert not model.blocks[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    batch = TrainingConfig(channels_last=True).to_device((torch.randn(2, 3, 8, 8), torch.zeros(2)))
    assert batch[0].is_contiguous(memory_format=torch.channels_last)


def test_compile_mode_is_passed_to_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def fake_compile(model, mode=None, dynamic=None):
        seen.append((mode, dynamic))
        return model

    monkeypatch.setattr(knobs.torch, "compile", fake_compile)
    TrainingConfig(compile_mode="max-autotune-no-cudagraphs").prepare(tiny_model())
    TrainingConfig(compile_mode="default", compile_dynamic=True).prepare(tiny_model())
    TrainingConfig(compile_mode="none").prepare(tiny_model())
    # dynamic=None is torch's own default: static shapes until one changes.
    assert seen == [("max-autotune-no-cudagraphs", None), (None, True)]


def test_backend_flags_are_set_and_restored() -> None:
    before = (torch.backends.cudnn.benchmark, knobs.fp32_precisions(), torch.get_num_threads())
    cfg = TrainingConfig(cudnn_benchmark=True, precision="tf32", intra_op_threads=1)
    with cfg.backends():
        assert torch.backends.cudnn.benchmark is True
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.get_num_threads() == 1
    after = (torch.backends.cudnn.benchmark, knobs.fp32_precisions(), torch.get_num_threads())
    assert after == before


@pytest.mark.parametrize(
    ("precision", "matmul", "conv"),
    [("fp32", "ieee", "tf32"), ("fp32_strict", "ieee", "ieee"), ("tf32", "tf32", "tf32")],
)
def test_fp32_is_what_a_plain_script_runs_and_strict_fp32_is_its_own_choice(
    precision: str, matmul: str, conv: str
) -> None:
    """The fp32 baseline keeps PyTorch's default, TF32 in cuDNN convolutions (turning it off
    made a conv net's baseline slower than the user's own script, inflating every speedup);
    fp32_strict turns it off. Only the new fp32_precision API is used: after the flags are
    restored, the legacy readers still work (mixing the two APIs raises on torch 2.13)."""
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # PyTorch's default
    with TrainingConfig(precision=precision).backends():
        assert torch.backends.cuda.matmul.fp32_precision == matmul
        assert torch.backends.cudnn.conv.fp32_precision == conv
        assert torch.backends.cudnn.rnn.fp32_precision == conv
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    assert torch.get_float32_matmul_precision() == "highest"  # no mixed-API error


def test_backend_flags_restored_after_an_exception() -> None:
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), TrainingConfig(intra_op_threads=1).backends():
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def _lrs(cfg: TrainingConfig, steps: int) -> list[float]:
    opt = cfg.optimizer(nn.Linear(2, 2).parameters())
    sched = cfg.lr_scheduler(opt, total_steps=steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_cosine_schedule_warms_up_then_anneals_to_zero() -> None:
    cfg = TrainingConfig(lr_schedule=LRSchedule(kind="cosine", peak_lr=0.1, warmup_fraction=0.1))
    lrs = _lrs(cfg, 100)
    assert lrs[0] == pytest.approx(0.01)  # first of 10 warm-up steps
    assert lrs[9] == pytest.approx(0.1)
    assert max(lrs) == pytest.approx(0.1)
    assert lrs[-1] < 0.001


def test_one_cycle_peaks_at_peak_lr() -> None:
    cfg = TrainingConfig(
        lr_schedule=LRSchedule(kind="one_cycle", peak_lr=0.05, warmup_fraction=0.2)
    )
    lrs = _lrs(cfg, 50)
    assert max(lrs) == pytest.approx(0.05, rel=1e-3)
    assert lrs.index(max(lrs)) == 10 - 1 or lrs.index(max(lrs)) == 10
    assert lrs[-1] < 0.001


def test_warm_up_stable_decay_holds_the_peak_then_decays_over_the_last_fifth() -> None:
    cfg = TrainingConfig(lr_schedule=LRSchedule(kind="wsd", peak_lr=0.1, warmup_fraction=0.1))
    lrs = _lrs(cfg, 100)
    assert lrs[0] == pytest.approx(0.01)  # first of 10 warm-up steps
    assert lrs[9:80] == pytest.approx([0.1] * 71)  # stable until the last 20 steps
    assert lrs[80] == pytest.approx(0.1) and lrs[81] < 0.1  # the decay's first step is the peak
    assert all(a > b for a, b in itertools.pairwise(lrs[80:]))
    assert lrs[-1] < 0.001
    # A shorter run (train_fraction) compresses the whole shape: its decay is its own last 20%.
    assert _lrs(cfg, 50)[40] == pytest.approx(0.1) and _lrs(cfg, 50)[41] < 0.1


def test_constant_schedule_is_constant() -> None:
    lrs = _lrs(TrainingConfig(lr_schedule=LRSchedule(peak_lr=0.003)), 10)
    assert all(math.isclose(v, 0.003) for v in lrs)


# -- Gradient accumulation and the optimizer implementation -----------------------------------


def _sgd(params, lr, **impl):
    """Momentum SGD: its update is linear in the gradient, so float rounding stays rounding
    (Adam's first steps are about the gradient's sign, which rounding can flip near zero)."""
    return torch.optim.SGD(params, lr=lr, momentum=0.9, **impl)


def _workload(model: nn.Module | None = None, *, optimizer=None):
    from autotune._trial.task import default_optimizer, make_task
    from autotune._trial.workload import Workload

    task = make_task(autotune.Task(metric="accuracy"))
    return Workload(
        model=model or tiny_model(),
        train=tiny_data(),
        val=tiny_data(64),
        task=task,
        optimizer=optimizer or default_optimizer,
    )


def _trained(cfg: TrainingConfig, batches: int, workload=None) -> nn.Module:
    """A trainer's model after ``batches`` batches of cfg's own loader (seeded order)."""
    from autotune._trial.runner import Trainer

    workload = workload or _workload()
    trainer = Trainer(cfg, workload, batches)
    loader = cfg.dataloader(workload.train, generator=torch.Generator().manual_seed(0))
    for _, batch in zip(range(batches), loader, strict=False):
        trainer.step(batch)
    return trainer.model


def test_k_micro_batches_really_make_one_optimizer_step() -> None:
    from autotune._trial.runner import Trainer

    cfg = TrainingConfig(
        batch_size=16,
        gradient_accumulation_steps=4,
        lr_schedule=LRSchedule(kind="cosine", peak_lr=0.1),
    )
    trainer = Trainer(cfg, _workload(), total_steps=8)  # 8 micro-batches: 2 optimizer steps
    weight = next(trainer.model.parameters())

    def adam_steps() -> int:  # AdamW counts its own updates
        state = trainer.optimizer.state.get(weight, {})
        return int(state["step"]) if "step" in state else 0

    before = weight.detach().clone()
    batches = iter(cfg.dataloader(tiny_data()))
    for _ in range(3):
        trainer.step(next(batches))
    assert adam_steps() == 0 and trainer.step_count == 0  # gradients accumulate, weights wait
    assert torch.equal(before, weight)
    trainer.step(next(batches))
    assert adam_steps() == 1 and trainer.step_count == 1
    assert not torch.equal(before, weight)
    for _ in range(4):
        trainer.step(next(batches))
    assert adam_steps() == 2
    # The schedule counts optimizer steps: 2 of 2, so the cosine has annealed to zero.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def _labels(cfg: TrainingConfig, data, *, drop_last: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [y for _, y in cfg.dataloader(data, generator=g, drop_last=drop_last)]


def test_micro_batches_split_the_global_batches_of_the_same_order() -> None:
    data = tiny_data(100)
    whole = TrainingConfig(batch_size=32)
    split = TrainingConfig(batch_size=8, gradient_accumulation_steps=4)
    for drop_last, micro_batches in ((True, 12), (False, 13)):
        ours = _labels(split, data, drop_last=drop_last)
        theirs = _labels(whole, data, drop_last=drop_last)
        assert torch.equal(torch.cat(ours), torch.cat(theirs))  # the same samples, in order
        assert [len(y) for y in ours][:4] == [8, 8, 8, 8]
        # 3 global batches of 4 micro-batches; without drop_last, the 4 left over: 1 more.
        assert len(ours) == micro_batches == len(split.dataloader(data, drop_last=drop_last))


def test_the_global_batch_really_is_kept() -> None:
    """4 micro-batches of 16, the loss scaled by 1/4, train what batches of 64 train."""
    base = TrainingConfig(batch_size=64, lr_schedule=LRSchedule(kind="cosine", peak_lr=0.05))
    split = base.replace(batch_size=16, gradient_accumulation_steps=4)
    assert split.global_batch_size == base.global_batch_size == 64
    assert split.numerics_key(split_free=True) == base.numerics_key(split_free=True)
    assert split.numerics_key() != base.numerics_key()  # batch norm would tell them apart
    ours = _trained(split, 4 * 3, _workload(optimizer=_sgd))
    theirs = _trained(base, 3, _workload(optimizer=_sgd))
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # Batch norm sees each micro-batch alone: a split does change its running statistics.
    cnn = _workload(SmallCNN())
    assert any(isinstance(m, nn.BatchNorm2d) for m in cnn.model.modules())


def test_the_optimizer_really_is_fused_or_foreach() -> None:
    from autotune._trial.runner import Trainer

    params = nn.Linear(2, 2).parameters()
    assert TrainingConfig(optimizer_impl="fused").optimizer(params).defaults["fused"] is True
    for impl in ("foreach", "fused"):
        cfg = TrainingConfig(optimizer_impl=impl)
        trainer = Trainer(cfg, _workload(), 4)
        assert trainer.optimizer.defaults[impl] is True  # the trial's optimizer, as searched
    default = Trainer(TrainingConfig(), _workload(), 4).optimizer.defaults
    assert not default["fused"] and default["foreach"] is None  # torch's own choice


def test_a_fused_optimizer_trains_what_the_default_one_trains() -> None:
    """PyTorch documents fused/foreach as the same update (float rounding aside): the knob
    leaves the numerics alone."""
    cfg = TrainingConfig(lr_schedule=LRSchedule(peak_lr=0.01))
    for optimizer, steps in ((None, 1), (_sgd, 5)):  # AdamW, then momentum SGD
        plain = _trained(cfg, steps, _workload(optimizer=optimizer))
        for impl in ("foreach", "fused"):
            other = _trained(
                cfg.replace(optimizer_impl=impl), steps, _workload(optimizer=optimizer)
            )
            for a, b in zip(plain.parameters(), other.parameters(), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_only_the_implementations_a_factory_takes_are_searched() -> None:
    from autotune._trial.task import default_optimizer

    assert knobs.supported_optimizer_impls(default_optimizer, "cpu") == (
        "default",
        "foreach",
        "fused",
    )

    def sgd(params, lr):  # no **kwargs: it cannot take the flag
        return torch.optim.SGD(params, lr=lr)

    assert knobs.supported_optimizer_impls(sgd, "cpu") == ("default",)

    assert knobs.supported_optimizer_impls(_sgd, "cpu") == ("default", "foreach", "fused")


def test_each_trial_runs_with_its_device_as_the_current_cuda_device(monkeypatch) -> None:
    """Pinned memory and the bf16 check use CUDA's current device: a cuda:1 trial makes
    cuda:1 current (torch.cuda.device), and a CPU trial leaves CUDA alone."""
    seen: list[torch.device] = []

    def device(dev: torch.device):
        seen.append(dev)
        return contextlib.nullcontext()

    monkeypatch.setattr(torch.cuda, "device", device)
    with knobs.current_device("cuda:1"), knobs.current_device("cpu"):
        pass
    assert seen == [torch.device("cuda:1")]


def test_a_cpu_copy_of_a_model_is_independent_and_keeps_its_structure() -> None:
    from autotune._trial.task import cpu_copy

    model = SmallCNN(width=4)
    model.head.weight.requires_grad_(False)
    copied = cpu_copy(model)
    for (name, p), q in zip(model.named_parameters(), copied.parameters(), strict=True):
        assert torch.equal(p, q) and p is not q and q.device.type == "cpu", name
        assert q.requires_grad == p.requires_grad
    tied = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    tied[1].weight = tied[0].weight
    twin = cpu_copy(tied)
    assert twin[1].weight is twin[0].weight  # shared parameters stay shared


@pytest.mark.parametrize("warmup", [0.0, 0.05, 0.25, 0.5])
def test_a_one_cycle_schedule_steps_through_any_number_of_optimizer_steps(warmup) -> None:
    """A short measurement counted in optimizer steps (batch 64 with accumulation: 2 to 20
    steps) made OneCycleLR divide by a zero-length warm-up (ZeroDivisionError)."""
    from autotune import LRSchedule
    from autotune._knobs.apply import lr_scheduler

    for total in range(1, 60):
        param = nn.Parameter(torch.zeros(2))
        optimizer = torch.optim.AdamW([param], lr=1e-3)
        schedule = LRSchedule(kind="one_cycle", peak_lr=1e-3, warmup_fraction=warmup)
        scheduler = lr_scheduler(schedule, optimizer, total)
        for _ in range(total):
            optimizer.step()
            scheduler.step() if scheduler.last_epoch < scheduler.total_steps - 1 else None
        assert all(math.isfinite(g["lr"]) for g in optimizer.param_groups)


def test_an_adam_family_optimizer_never_scales_its_rate_linearly_with_the_batch() -> None:
    """Adam's steps are normalised per parameter: a rate scaled linearly with the batch
    over-shoots it (a BERT candidate was tried at lr 0.053). The built-in spaces keep linear
    scaling for SGD-like optimizers and drop it, with a note, for adaptive ones."""
    from autotune._run import restrict_space
    from autotune._space import load_space
    from autotune._trial.task import default_optimizer

    class Adam8bit(torch.optim.SGD):  # another library's Adam, known only by its name
        pass

    def other_adam(params, lr):
        return Adam8bit(params, lr=lr)

    assert knobs.adapts_steps(default_optimizer)  # AdamW
    assert knobs.adapts_steps(other_adam)
    assert not knobs.adapts_steps(_sgd)

    def scalings(optimizer) -> tuple[str, ...]:
        space = restrict_space(
            load_space("default"), _workload(optimizer=optimizer), TrainingConfig(), "cpu"
        )
        return tuple(space.knobs["lr_batch_scaling"].values)

    assert scalings(None) == ("none", "sqrt")
    assert scalings(_sgd) == ("none", "sqrt", "linear")
    space = restrict_space(load_space("default"), _workload(), TrainingConfig(), "cpu")
    assert any("linear scaling over-shoots it" in note for note in space.notes)
