"""The knob registry: each knob declared once, and everything else reads that declaration."""

from __future__ import annotations

import dataclasses
import random

import pytest

from autotune import ConfigError, TrainingConfig, load_space
from autotune._knobs.registry import (
    BY_NAME,
    KNOBS,
    Where,
    complexity,
    config_from,
    knobs_where,
    late_knobs,
    numerics_free_knobs,
    numerics_id,
    values_of,
)
from autotune._space import Choice, FloatRange


def test_every_knob_names_a_field_of_the_config_or_the_lr_schedule() -> None:
    fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    for knob in KNOBS:
        assert knob.field is None or knob.field in fields, knob.name
        if knob.field is None:
            assert knob.reader is not None and knob.numerics, knob.name  # the LR schedule's


def test_what_the_search_asks_about_knobs_comes_from_the_registry() -> None:
    assert late_knobs() == {"compile_mode", "compile_dynamic", "checkpointing"}
    assert numerics_free_knobs() == (
        "num_workers",
        "persistent_workers",
        "prefetch_factor",
        "pin_memory",
        "optimizer_impl",
        "cudnn_benchmark",
        "channels_last",
        "intra_op_threads",
        "ddp_bucket_cap_mb",
        "ddp_gradient_as_bucket_view",
        "ddp_static_graph",
        "ddp_broadcast_buffers",
        "ddp_no_sync",
    )
    numeric = {k.name for k in KNOBS if k.numerics}
    assert numeric == {
        "batch_size",
        "gradient_accumulation_steps",
        "precision",
        "lr_schedule",
        "lr_multiplier",
        "warmup_fraction",
        "lr_batch_scaling",
        "train_fraction",
    }


def test_the_config_checks_itself_against_the_registry() -> None:
    with pytest.raises(ConfigError, match=r"`num_workers` must be >= 0, but got -1"):
        TrainingConfig(num_workers=-1)
    with pytest.raises(ConfigError, match=r"`intra_op_threads` must be >= 1 or null"):
        TrainingConfig(intra_op_threads=0)
    with pytest.raises(ConfigError, match=r"`compile_mode` must be one of none, default"):
        TrainingConfig(compile_mode="fast")


def _random_point(space, rng: random.Random) -> dict:
    params = {}
    for name, knob in space.knobs.items():
        if isinstance(knob, Choice):
            params[name] = rng.choice(knob.values)
        else:
            assert isinstance(knob, FloatRange)
            params[name] = rng.uniform(knob.low, knob.high)
    return params


def test_a_config_built_from_knob_values_reads_back_the_same_values() -> None:
    """config_from and values_of are inverses over the default space (the space build and
    params_of, the report's knob values and the sampler all rely on it)."""
    space = load_space("default")
    baseline = TrainingConfig(batch_size=32, lr_schedule={"peak_lr": 3e-3})
    rng = random.Random(0)
    for _ in range(200):
        params = _random_point(space, rng)
        cfg = config_from(params, baseline)
        values = values_of(cfg, baseline)
        for name, value in params.items():
            if not BY_NAME[name].present(cfg):
                assert name not in values
            elif isinstance(value, float):
                assert values[name] == pytest.approx(value), name
            else:
                assert values[name] == value, name


def test_equal_numerics_share_a_confirmation_key_and_simpler_means_fewer_extras() -> None:
    base = TrainingConfig()
    same = base.replace(num_workers=2, persistent_workers=True, compile_mode="default")
    assert numerics_id(same) == numerics_id(base)
    assert numerics_id(base.replace(batch_size=64)) != numerics_id(base)
    assert complexity(base, base) < complexity(base.replace(num_workers=1), base)
    # compile weighs most: one compiled config is less simple than many workers.
    assert complexity(base.replace(num_workers=8), base) < complexity(
        base.replace(compile_mode="default"), base
    )


def test_a_split_of_the_global_batch_keeps_the_numerics_where_the_model_allows() -> None:
    """(32, k=2) and (64, k=1) make the same optimizer steps on a model without batch norm
    (split_free), their LR scaled alike by the global batch; not with batch norm, nor a
    bigger global batch."""
    base = TrainingConfig(batch_size=64, lr_schedule={"peak_lr": 1e-3})
    split = config_from({"batch_size": 32, "gradient_accumulation_steps": 2}, base)
    assert split.lr_schedule == base.lr_schedule  # the same global batch: the same LR
    assert numerics_id(split, split_free=True) == numerics_id(base, split_free=True)
    assert numerics_id(split) != numerics_id(base)
    bigger = config_from(
        {"gradient_accumulation_steps": 2, "lr_batch_scaling": "linear"}, base
    )  # 64 x 2: the LR follows the global batch
    assert bigger.global_batch_size == 128
    assert bigger.lr_schedule.peak_lr == pytest.approx(2e-3)
    assert numerics_id(bigger, split_free=True) != numerics_id(base, split_free=True)
    assert values_of(bigger, base)["lr_multiplier"] == pytest.approx(1.0)
    # Accumulation is one more thing to get right: between equally fast configs, none wins.
    assert complexity(base, base) < complexity(split, base)


def test_the_trainers_trials_read_what_they_apply_from_the_registry() -> None:
    # The lists once kept by hand beside the registry, now derived from each knob's `where`
    # and mappings: a Hugging Face trial applies the TrainingArguments of these knobs...
    from autotune._trial import hf_loop, lightning_loop

    assert hf_loop.APPLIED == (
        "batch_size",
        "gradient_accumulation_steps",
        "num_workers",
        "persistent_workers",
        "prefetch_factor",
        "pin_memory",
        "precision",
        "compile_mode",
        "checkpointing",
        "lr_schedule",
    )
    # ... cannot take these model changes (no TrainingArguments field) ...
    model_only = {k.name for k in knobs_where(Where.MODEL) if not k.maps_to_transformers}
    assert model_only == {"channels_last", "compile_dynamic"}
    # ... and a Lightning trial keeps the user's optimizer and schedule shape.
    assert set(lightning_loop._NOT_APPLIED) == {"optimizer_impl", "lr_schedule", "warmup_fraction"}
