"""cfg.to_transformers() and cfg.to_lightning() against the real libraries' signatures: a renamed
argument upstream fails here first."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

from autotune import ConfigError, TrainingConfig
from autotune._knobs.trainer_args import transformers_kwargs
from autotune.examples import tiny_data

transformers = pytest.importorskip("transformers")
pl = pytest.importorskip("lightning.pytorch")

CPU_CONFIGS = {
    "defaults": TrainingConfig(),
    "bf16-workers-cosine-ckpt": TrainingConfig(
        batch_size=64,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        precision="bf16",
        checkpointing=2,
        compile_mode="default",
        lr_schedule={"kind": "cosine", "peak_lr": 3e-3, "warmup_fraction": 0.1},
    ),
    "fp16-one-cycle-compile": TrainingConfig(
        batch_size=128,
        num_workers=1,
        precision="fp16",
        compile_mode="max-autotune",
        channels_last=True,
        intra_op_threads=1,
        lr_schedule={"kind": "one_cycle", "peak_lr": 1e-2, "warmup_fraction": 0.2},
    ),
    "constant-warmup": TrainingConfig(
        batch_size=16,
        lr_schedule={"kind": "constant", "peak_lr": 5e-4, "warmup_fraction": 0.05},
    ),
    "accumulated-fused": TrainingConfig(
        batch_size=16,
        gradient_accumulation_steps=4,
        optimizer_impl="fused",
        lr_schedule={"kind": "cosine", "peak_lr": 1e-3},
    ),
}
GPU_CONFIG = TrainingConfig(
    device="cuda:1",
    batch_size=256,
    num_workers=4,
    pin_memory=True,
    persistent_workers=True,
    precision="tf32",
    cudnn_benchmark=True,
    compile_mode="reduce-overhead",
)
ALL_CONFIGS = [*CPU_CONFIGS.values(), GPU_CONFIG]


def _training_arguments(tmp_path, cfg: TrainingConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "torchdynamo speedups need a GPU"
        return transformers.TrainingArguments(
            output_dir=str(tmp_path), report_to="none", **cfg.to_transformers()
        )


# -- Hugging Face -------------------------------------------------------------------------------


def test_every_transformers_key_is_a_training_arguments_parameter() -> None:
    names = set(inspect.signature(transformers.TrainingArguments).parameters)
    used = {key for cfg in ALL_CONFIGS for key in cfg.to_transformers()}
    assert used <= names, f"not TrainingArguments parameters: {sorted(used - names)}"
    # The knobs the issue names are all there for a config that sets them.
    assert {
        "per_device_train_batch_size",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "bf16",
        "fp16",
        "tf32",
        "torch_compile",
        "torch_compile_mode",
        "learning_rate",
        "lr_scheduler_type",
        "gradient_accumulation_steps",
        "optim",
    } <= used


@pytest.mark.parametrize("name", CPU_CONFIGS)
def test_training_arguments_take_the_config(tmp_path, name: str) -> None:
    cfg = CPU_CONFIGS[name]
    args = _training_arguments(tmp_path, cfg)
    assert args.per_device_train_batch_size == cfg.batch_size  # the micro-batch
    assert args.gradient_accumulation_steps == cfg.gradient_accumulation_steps
    fused = cfg.optimizer_impl.value == "fused"
    assert args.optim == ("adamw_torch_fused" if fused else "adamw_torch")
    assert args.dataloader_num_workers == cfg.num_workers
    assert args.dataloader_persistent_workers == cfg.persistent_workers
    assert args.dataloader_prefetch_factor == cfg.prefetch_factor
    assert args.dataloader_pin_memory is False  # a CPU config: nothing to pin for
    assert args.use_cpu is True
    assert args.bf16 == (cfg.precision.value == "bf16")
    assert args.fp16 == (cfg.precision.value == "fp16")
    assert args.learning_rate == cfg.lr_schedule.peak_lr
    compiling = cfg.compile_mode.value != "none"
    assert args.torch_compile == compiling
    if compiling:
        assert args.torch_compile_mode == cfg.compile_mode.value
    ckpt = getattr(args, "activation_checkpointing", None)
    if ckpt is None:
        ckpt = args.gradient_checkpointing
    assert bool(ckpt) == (cfg.checkpointing > 0)
    if cfg.checkpointing and hasattr(args, "activation_checkpointing_kwargs"):
        assert args.activation_checkpointing_kwargs["every_n_layers"] == cfg.checkpointing


def test_tf32_gpu_config_is_accepted_up_to_the_hardware_check(tmp_path) -> None:
    kwargs = GPU_CONFIG.to_transformers()
    assert kwargs["tf32"] is True and kwargs["dataloader_pin_memory"] is True
    assert "use_cpu" not in kwargs
    if torch.cuda.is_available():
        _training_arguments(tmp_path, GPU_CONFIG)
        return
    # On a CPU machine every argument is accepted; only the TF32 hardware check refuses.
    with pytest.raises(ValueError, match="tf32"):
        _training_arguments(tmp_path, GPU_CONFIG)
    # fp32 is PyTorch's default (the Trainer leaves the TF32 flags alone); strict fp32 is off.
    assert _training_arguments(tmp_path, GPU_CONFIG.replace(precision="fp32")).tf32 is None
    strict = GPU_CONFIG.replace(precision="fp32_strict")
    assert _training_arguments(tmp_path, strict).tf32 is False
    assert any("TF32 off" in note for note in strict.to_lightning().notes)


def _lr_curve(scheduler, optimizer, steps: int) -> list[float]:
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("name", ["defaults", "bf16-workers-cosine-ckpt", "constant-warmup"])
def test_hugging_face_builds_the_same_lr_schedule(tmp_path, name: str) -> None:
    cfg = CPU_CONFIGS[name]
    args = _training_arguments(tmp_path, cfg)
    steps = 200
    ours_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ours = _lr_curve(cfg.lr_scheduler(ours_opt, steps), ours_opt, steps)
    hf_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    hf_sched = transformers.get_scheduler(
        args.lr_scheduler_type,
        hf_opt,
        num_warmup_steps=args.get_warmup_steps(steps),
        num_training_steps=steps,
    )
    theirs = _lr_curve(hf_sched, hf_opt, steps)
    peak = cfg.lr_schedule.peak_lr
    warmup = round(cfg.lr_schedule.warmup_fraction * steps)
    # HF's linear warm-up starts at 0, autotune's at one step in: one warm-up step apart.
    slack = peak / warmup if warmup else 1e-9
    assert max(abs(a - b) for a, b in zip(ours, theirs, strict=True)) <= slack + 1e-9


def test_one_cycle_maps_to_cosine_with_its_warm_up_share(tmp_path) -> None:
    cfg = CPU_CONFIGS["fp16-one-cycle-compile"]
    args = _training_arguments(tmp_path, cfg)
    assert args.lr_scheduler_type.value == "cosine"
    steps = 100
    assert args.get_warmup_steps(steps) == 20  # OneCycleLR's pct_start for warmup 0.2
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ours = _lr_curve(cfg.lr_scheduler(opt, steps), opt, steps)
    assert max(range(steps), key=ours.__getitem__) in (19, 20)  # the same peak step


def test_a_warm_up_stable_decay_schedule_exports_its_decay_in_the_trainers_steps(
    tmp_path,
) -> None:
    """Hugging Face's "warmup_stable_decay" decays over a number of steps, which a config alone
    cannot know: without the run's epochs and items it is an error naming both, never a guess;
    with them, the Trainer's LR follows the schedule the search measured, step for step."""
    cfg = TrainingConfig(
        batch_size=32,
        gradient_accumulation_steps=2,
        lr_schedule={"kind": "wsd", "peak_lr": 1e-2, "warmup_fraction": 0.1},
    )
    with pytest.raises(ConfigError, match=r"pass planned_epochs= .* and train_size="):
        cfg.to_transformers(planned_epochs=3)
    kwargs = cfg.to_transformers(planned_epochs=3, train_size=1000)
    # 1000 items in 32 batches of 32, 16 optimizer steps an epoch, 48 in 3 epochs: 20% decay.
    assert kwargs["lr_scheduler_type"] == "warmup_stable_decay"
    assert kwargs["lr_scheduler_kwargs"] == {"num_decay_steps": 10}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)
    steps = 48
    ours_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ours = _lr_curve(cfg.lr_scheduler(ours_opt, steps), ours_opt, steps)
    hf_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    hf_sched = transformers.get_scheduler(
        args.lr_scheduler_type, hf_opt, num_warmup_steps=args.get_warmup_steps(steps),
        num_training_steps=steps, scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )  # fmt: skip
    theirs = _lr_curve(hf_sched, hf_opt, steps)
    warmup = 5  # HF's warm-up starts at 0, autotune's one step in: one warm-up step apart
    assert max(abs(a - b) for a, b in zip(ours[:warmup], theirs[:warmup], strict=True)) <= 2e-3
    assert ours[warmup:] == pytest.approx(theirs[warmup:], abs=1e-12)
    assert ours[warmup:39] == pytest.approx([1e-2] * 34)  # held at the peak until the decay
    assert ours[39] < 1e-2 and ours[-1] < 1e-3  # then decays over the last 10 steps


def test_older_transformers_names_are_used_where_only_they_exist() -> None:
    cfg = CPU_CONFIGS["bf16-workers-cosine-ckpt"]
    old = {
        "per_device_train_batch_size",
        "warmup_ratio",
        "warmup_steps",
        "gradient_checkpointing",
        "use_cpu",
    }
    kwargs = transformers_kwargs(cfg, accepted=old)
    assert kwargs["warmup_ratio"] == 0.1 and "warmup_steps" not in kwargs
    assert kwargs["gradient_checkpointing"] is True
    assert "activation_checkpointing" not in kwargs


def test_the_trainers_arguments_unset_what_the_tuned_config_does_not_have(tmp_path) -> None:
    """The arguments `tune` exports are those that differ from yours; one of yours that the
    tuned config does not have (a prefetch factor without workers, a compile mode without
    compile, a warm-up of 0) goes back to its default. It used to be left out: your prefetch
    factor stayed beside 0 workers (TrainingArguments refuses it) and your compile mode turned
    compile back on."""
    from autotune._knobs.trainer_args import trainer_settings

    yours = TrainingConfig(
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        compile_mode="reduce-overhead",
        lr_schedule={"kind": "trainer", "peak_lr": 1e-3, "warmup_fraction": 0.1},
    )
    tuned = TrainingConfig(lr_schedule={"kind": "trainer", "peak_lr": 1e-3})
    changed = trainer_settings("transformers", tuned, yours)["training_arguments"]
    assert changed == {
        "dataloader_num_workers": 0,
        "dataloader_persistent_workers": False,
        "dataloader_prefetch_factor": None,
        "torch_compile": False,
        "torch_compile_mode": None,
        "warmup_steps": 0,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path), report_to="none", **{**yours.to_transformers(), **changed}
        )
    assert args.dataloader_prefetch_factor is None and args.torch_compile is False
    assert args.get_warmup_steps(100) == 0


# -- Lightning ----------------------------------------------------------------------------------


def test_every_lightning_key_is_a_trainer_or_dataloader_parameter() -> None:
    trainer_names = set(inspect.signature(pl.Trainer.__init__).parameters)
    loader_names = set(inspect.signature(DataLoader.__init__).parameters)
    from lightning.fabric.connector import _PRECISION_INPUT_STR

    precisions = set(_PRECISION_INPUT_STR.__args__)
    for cfg in ALL_CONFIGS:
        s = cfg.to_lightning()
        assert set(s.trainer) <= trainer_names, sorted(set(s.trainer) - trainer_names)
        assert set(s.dataloader) <= loader_names, sorted(set(s.dataloader) - loader_names)
        assert s.trainer["precision"] in precisions


@pytest.mark.parametrize(
    ("name", "precision"),
    [
        ("defaults", "32-true"),
        ("bf16-workers-cosine-ckpt", "bf16-mixed"),
        ("constant-warmup", "32-true"),
        ("accumulated-fused", "32-true"),
    ],
)
def test_lightning_trainer_and_dataloader_take_the_config(name: str, precision: str) -> None:
    cfg = CPU_CONFIGS[name]
    s = cfg.to_lightning()
    saved = torch.backends.cudnn.benchmark
    try:
        trainer = pl.Trainer(
            **s.trainer,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        assert trainer.precision == precision
        assert trainer.accumulate_grad_batches == cfg.gradient_accumulation_steps
        assert type(trainer.accelerator).__name__ == "CPUAccelerator"
        assert torch.backends.cudnn.benchmark == cfg.cudnn_benchmark
    finally:
        torch.backends.cudnn.benchmark = saved
    loader = DataLoader(tiny_data(64), **s.dataloader)
    assert loader.batch_size == cfg.batch_size and loader.num_workers == cfg.num_workers
    if cfg.num_workers:
        assert loader.persistent_workers == cfg.persistent_workers
        assert loader.prefetch_factor == (cfg.prefetch_factor or 2)


def test_lightning_notes_cover_what_the_trainer_cannot_take() -> None:
    plain = CPU_CONFIGS["defaults"].to_lightning()
    assert len(plain.notes) == 1 and "configure_optimizers" in plain.notes[0]
    busy = CPU_CONFIGS["fp16-one-cycle-compile"].to_lightning()
    text = "\n".join(busy.notes)
    assert "cfg.prepare" in text and "channels_last" in text and "max-autotune" in text
    assert "cfg.backends()" in text and "1 intra-op CPU threads" in text
    assert "'16-mixed' as 'bf16-mixed'" in text  # what Lightning does with fp16 on a CPU
    fused = CPU_CONFIGS["accumulated-fused"].to_lightning()
    assert any("fused=True" in note for note in fused.notes)
    gpu = GPU_CONFIG.to_lightning()
    assert gpu.trainer == {
        "accelerator": "cuda",
        "devices": [1],
        "accumulate_grad_batches": 1,
        "precision": "32-true",
        "benchmark": True,
    }
    assert gpu.dataloader["pin_memory"] is True
    assert any("TF32" in note for note in gpu.notes)
    assert gpu.to_dict()["trainer"] == gpu.trainer
