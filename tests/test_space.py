from __future__ import annotations

import dataclasses

import optuna
import pytest

from autotune import SearchSpaceError, TrainingConfig, builtin_spaces, load_space
from autotune._device import DeviceInfo
from autotune._knobs.registry import KNOB_NAMES, KNOBS, Facts
from autotune._space import Choice, FloatRange, parse_space

CPU = DeviceInfo(
    device="cpu",
    type="cpu",
    name="Test CPU",
    supports_bf16=False,
    supports_fp16=False,
    supports_tf32=False,
    has_cudnn=False,
    supports_compile=True,
    supports_cuda_graphs=False,
    cpu_count=2,
    memory_bytes=2**34,
)
GPU = dataclasses.replace(
    CPU,
    device="cuda:0",
    type="cuda",
    name="Test GPU",
    supports_bf16=True,
    supports_fp16=True,
    supports_tf32=True,
    has_cudnn=True,
    supports_cuda_graphs=True,
    cpu_count=16,
)


def restrict(space, info, **kw):
    args = {"has_conv": True, "n_blocks": 4, "n_train": 10_000, "current_threads": 2}
    return space.restrict(Facts(device=info, **(args | kw)))


def test_builtin_spaces_are_shipped_and_valid() -> None:
    names = builtin_spaces()
    assert {"default", "quick", "throughput"} <= set(names)
    for name in names:
        assert load_space(name).knobs


def test_default_space_has_every_knob() -> None:
    """The default space searches every knob the registry declares."""
    assert set(load_space("default").knobs) == set(KNOB_NAMES)


# What each built-in space promises, in the registry's terms: a knob added to the registry
# fails here until every space whose promise covers it lists it.
SPACE_PROMISES = {
    "default": lambda k: True,  # every knob
    "throughput": lambda k: not k.numerics,  # every knob that leaves the numerics alone
    "quick": None,  # a choice of knobs, none of them late (no one-time cost in a short run)
}


@pytest.mark.parametrize("name", sorted(builtin_spaces()))
def test_each_builtin_space_keeps_its_promise_against_the_registry(name: str) -> None:
    assert name in SPACE_PROMISES, f"search_spaces/{name}.yaml: say what it promises here"
    space = load_space(builtin_spaces()[name])  # parsed by the registry's types and rules
    assert set(space.knobs) <= set(KNOB_NAMES)
    promise = SPACE_PROMISES[name]
    if promise is not None:
        assert set(space.knobs) == {k.name for k in KNOBS if promise(k)}
    else:
        assert not {k.name for k in KNOBS if k.late} & set(space.knobs)


def test_unknown_space_name_lists_the_builtins() -> None:
    with pytest.raises(
        SearchSpaceError,
        match=r"Unknown search space 'defualt'. Did you mean "
        r"'default'\? Built-in spaces are: .*default.*Pass a path",
    ):
        load_space("defualt")


def test_missing_space_file() -> None:
    with pytest.raises(SearchSpaceError, match=r"Search space file 'nope/x.yaml' does not exist"):
        load_space("nope/x.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("knobs:\n  batchsize: [32]\n", r"Unknown knob 'batchsize'.*Did you mean 'batch_size'"),
        ("knobs:\n  batch_size: [32, 'big']\n", r"'batch_size'.*must hold integers, but got 'big'"),
        ("knobs:\n  batch_size: []\n", r"'batch_size'.*has no values"),
        ("knobs:\n  pin_memory: [yes, 2]\n", r"'pin_memory'.*true/false values, but got 2"),
        ("knobs:\n  precision: [fp32, fp8]\n", r"'fp8'; allowed values are: fp32, fp32_strict"),
        ("knobs:\n  lr_multiplier: {low: 2.0, high: 1.0}\n", r"empty range: low=2.0 must be <= "),
        (
            "knobs:\n  warmup_fraction: {low: 0, high: 0.1, log: true}\n",
            r"log-scaled, so low must be",
        ),
        ("knobs:\n  warmup_fraction: [0.5, 1.5]\n", r"value 1.5; every value must be in \[0, 1\)"),
        ("knobs:\n  batch_size: {low: 33, high: 63}\n", r"no power of two in \[33, 63\]"),
        ("knobs: {}\n", r"`knobs`.*must be a non-empty mapping"),
        ("just a string\n", r"must be a mapping with a `knobs` key"),
        ("knobs:\n  batch_size: [32\n", r"is not valid YAML"),
    ],
)
def test_space_file_errors_name_the_problem(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SearchSpaceError, match=message):
        load_space(str(path))


def test_ranges_expand() -> None:
    space = load_space(
        {
            "knobs": {
                "batch_size": {"low": 16, "high": 100},
                "num_workers": {"low": 0, "high": 2},
                "lr_multiplier": {"low": 0.5, "high": 2.0, "log": True},
            }
        }
    )
    assert space.knobs["batch_size"] == Choice((16, 32, 64))
    assert space.knobs["num_workers"] == Choice((0, 1, 2))
    assert space.knobs["lr_multiplier"] == FloatRange(0.5, 2.0, True)


def test_cpu_drops_knobs_that_cannot_matter() -> None:
    space = restrict(load_space("default"), CPU)
    assert "pin_memory" not in space.knobs
    assert "cudnn_benchmark" not in space.knobs
    assert space.knobs["precision"] == Choice(("fp32",))  # no native bf16/fp16/tf32 here
    assert space.knobs["num_workers"] == Choice((0, 1, 2))
    assert space.knobs["compile_mode"] == Choice(("none", "default", "max-autotune-no-cudagraphs"))
    assert space.knobs["intra_op_threads"] == Choice((None, 1))
    notes = "\n".join(space.notes)
    assert "pin_memory: not searched" in notes and "precision: dropped tf32, bf16, fp16" in notes


def test_gpu_keeps_them() -> None:
    space = restrict(load_space("default"), GPU)
    assert space.knobs["pin_memory"] == Choice((False, True))
    assert space.knobs["cudnn_benchmark"] == Choice((False, True))
    assert space.knobs["precision"] == Choice(("fp32", "tf32", "bf16", "fp16"))
    assert "reduce-overhead" in space.knobs["compile_mode"].values
    assert "intra_op_threads" not in space.knobs


def test_model_facts_restrict_channels_last_checkpointing_and_batch() -> None:
    space = restrict(load_space("default"), GPU, has_conv=False, n_blocks=0, n_train=100)
    assert "channels_last" not in space.knobs
    assert "checkpointing" not in space.knobs
    assert space.knobs["batch_size"] == Choice((16, 32, 64))
    two = restrict(load_space("default"), GPU, n_blocks=1)
    assert two.knobs["checkpointing"] == Choice((0, 1))


def test_suggest_builds_a_config_with_scaled_lr() -> None:
    space = load_space(
        {
            "knobs": {
                "batch_size": [128],
                "num_workers": [2],
                "prefetch_factor": [4],
                "lr_schedule": ["cosine"],
                "lr_batch_scaling": ["linear"],
                "lr_multiplier": [1.5],
            }
        }
    )
    baseline = TrainingConfig()
    study = optuna.create_study()
    cfg = space.suggest(study.ask(), baseline)
    assert cfg.batch_size == 128 and cfg.num_workers == 2
    assert cfg.persistent_workers is True and cfg.prefetch_factor == 4
    assert cfg.lr_schedule.kind.value == "cosine"
    assert cfg.lr_schedule.peak_lr == pytest.approx(1e-3 * 4 * 1.5)
    assert cfg.lr_schedule.reference_batch_size == 32


def test_unchanged_numerics_equal_the_baseline() -> None:
    space = load_space({"knobs": {"num_workers": [0, 1]}})
    baseline = TrainingConfig()
    cfg = space.build({"num_workers": 1}, baseline)
    assert cfg.numerics_key() == baseline.numerics_key()
    assert cfg.lr_schedule is baseline.lr_schedule


def test_keeping_the_global_batch_derives_the_accumulation_steps() -> None:
    """keep_global_batch: batch_size is the baseline's global batch over each listed number of
    accumulation steps that divides it; the steps follow from it, never sampled on their own."""
    base = TrainingConfig(batch_size=64)
    listed = {"batch_size": [16, 128], "gradient_accumulation_steps": [1, 2, 3, 4, 8]}
    space = load_space({"knobs": listed}).keeping_global_batch(base)
    assert space.knobs["batch_size"] == Choice((64, 32, 16, 8))  # 3 does not divide 64
    assert space.searched() == ["batch_size"]
    built = [space.build({"batch_size": b}, base) for b in (64, 32, 16, 8)]
    assert [c.gradient_accumulation_steps for c in built] == [1, 2, 4, 8]
    assert all(c.global_batch_size == 64 and c.lr_schedule is base.lr_schedule for c in built)
    cfg = space.suggest(optuna.create_study().ask(), base)
    assert cfg.global_batch_size == 64
    assert space.params_of(built[2], base) == {"batch_size": 16}  # not the derived steps
    # Splits leave the numerics alone, unless the model has batch norm.
    assert space.numerics_knobs(split_free=True) == []
    assert space.numerics_knobs(split_free=False) == ["batch_size"]
    assert "global batch of 64 samples" in space.notes[-1]
    # The study's settings keep it: the space read back still keeps the global batch.
    back = parse_space(space.to_dict(), name="back")
    assert back.global_batch_size == 64 and back.searched() == ["batch_size"]


def test_a_dataset_already_on_the_gpu_is_neither_pinned_nor_loaded_in_workers() -> None:
    space = restrict(load_space("default"), GPU, data_on_device=True)
    assert "pin_memory" not in space.knobs  # only CPU tensors can be pinned
    assert space.knobs["num_workers"] == Choice((0,))  # no CUDA in forked loader workers
    notes = "\n".join(space.notes)
    assert "pin_memory: not searched (the dataset's items are already on the GPU" in notes


def test_strict_fp32_is_a_choice_only_where_tf32_exists() -> None:
    space = load_space({"knobs": {"precision": ["fp32", "fp32_strict", "tf32"]}})
    assert restrict(space, GPU).knobs["precision"] == Choice(("fp32", "fp32_strict", "tf32"))
    assert restrict(space, CPU).knobs["precision"] == Choice(("fp32",))


@pytest.mark.parametrize(
    ("major", "bf16", "compiles"), [(6, False, False), (7, False, True), (8, True, True)]
)
def test_a_gpu_gets_bf16_only_natively_and_compile_from_volta_on(
    monkeypatch, major: int, bf16: bool, compiles: bool
) -> None:
    """bf16 emulated on a pre-Ampere GPU is slower than fp32, and Inductor's Triton kernels
    need compute capability 7.0: a P100 searches neither."""
    import contextlib
    import types

    import torch

    from autotune import _device

    props = types.SimpleNamespace(major=major, minor=0, name=f"sm{major}0", total_memory=2**34)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev=None: props)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    # Emulated bf16 exists everywhere; native bf16 from compute capability 8.0.
    monkeypatch.setattr(
        torch.cuda,
        "is_bf16_supported",
        lambda including_emulation=True: including_emulation or major >= 8,
    )
    monkeypatch.setattr(_device, "_compiler_available", lambda: True)
    _device.describe_device.cache_clear()
    try:
        info = _device.describe_device("cuda:0")
    finally:
        _device.describe_device.cache_clear()
    assert (info.supports_bf16, info.supports_compile) == (bf16, compiles)
    space = restrict(load_space("default"), info)
    assert ("bf16" in space.knobs["precision"].values) == bf16
    assert ("compile_mode" in space.knobs and len(space.knobs["compile_mode"].values) > 1) == (
        compiles
    )
    if not compiles:
        assert "compute capability 7.0" in "\n".join(space.notes)
