from __future__ import annotations

import dataclasses
import json

import pytest

import autotune
from autotune import ConfigError, LRSchedule, TrainingConfig
from autotune._knobs.registry import KNOBS, Knob


def full_config() -> TrainingConfig:
    return TrainingConfig(
        device="cpu",
        batch_size=256,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=4,
        pin_memory=True,
        precision="bf16",
        compile_mode="max-autotune-no-cudagraphs",
        cudnn_benchmark=True,
        checkpointing=2,
        channels_last=True,
        intra_op_threads=1,
        lr_schedule=LRSchedule(
            kind="one_cycle",
            peak_lr=0.0123,
            warmup_fraction=0.1,
            batch_scaling="sqrt",
            reference_batch_size=32,
        ),
    )


def test_json_round_trip_is_exact() -> None:
    cfg = full_config()
    text = cfg.to_json()
    back = TrainingConfig.from_json(text)
    assert back == cfg
    assert back.to_json() == text
    assert json.loads(text)["precision"] == "bf16"
    assert json.loads(text)["lr_schedule"]["kind"] == "one_cycle"


def test_defaults_are_pytorch_defaults() -> None:
    cfg = TrainingConfig()
    assert (cfg.batch_size, cfg.num_workers, cfg.precision.value, cfg.compile_mode.value) == (
        32,
        0,
        "fp32",
        "none",
    )
    assert cfg.checkpointing == 0 and not cfg.pin_memory
    assert cfg.lr_schedule.kind.value == "constant"


def test_config_is_frozen() -> None:
    cfg = TrainingConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 64  # type: ignore[misc]
    assert cfg.replace(batch_size=64).batch_size == 64 and cfg.batch_size == 32


def test_unknown_keys_are_rejected_with_the_known_ones() -> None:
    data = TrainingConfig().to_dict() | {"batchsize": 64}
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) 'batchsize' in `config`.*batch_size"):
        TrainingConfig.from_dict(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"precision": "fp8"},
            r"`precision` must be one of fp32, fp32_strict, tf32, bf16, fp16, but got 'fp8'",
        ),
        ({"batch_size": 0}, r"`batch_size` must be >= 1, but got 0"),
        ({"batch_size": "32"}, r"`batch_size` must be an int, but got '32'"),
        ({"pin_memory": 1}, r"`pin_memory` must be true or false"),
        ({"persistent_workers": True}, r"need `num_workers` > 0"),
        ({"checkpointing": -1}, r"`checkpointing` must be 0 \(none\) or k >= 1"),
    ],
)
def test_invalid_values_name_field_rule_and_value(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainingConfig(**change)


def test_invalid_lr_schedule() -> None:
    with pytest.raises(ConfigError, match=r"`lr_schedule.warmup_fraction` must be in \[0, 1\)"):
        LRSchedule(warmup_fraction=1.5)
    with pytest.raises(ConfigError, match=r"`lr_schedule.peak_lr` must be > 0"):
        LRSchedule(peak_lr=0.0)


def test_load_config_reads_result_and_bare_config(tmp_path) -> None:
    cfg = full_config()
    bare = tmp_path / "cfg.json"
    bare.write_text(cfg.to_json())
    assert autotune.load_config(bare) == cfg
    wrapped = tmp_path / "best.json"
    wrapped.write_text(json.dumps({"schema_version": 1, "config": cfg.to_dict()}))
    assert autotune.load_config(wrapped) == cfg


def test_load_config_refuses_other_schema_versions(tmp_path) -> None:
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"schema_version": 99, "config": {}}))
    with pytest.raises(ConfigError, match="schema_version 99"):
        autotune.load_config(path)


def test_load_config_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="Cannot read config file"):
        autotune.load_config(tmp_path / "nope.json")


def test_a_value_for_a_knob_that_does_not_exist_is_refused_naming_it_and_why() -> None:
    # The combination DDP asserts on: a static graph where accumulation uses no_sync.
    with pytest.raises(
        ConfigError,
        match=r"`ddp_static_graph` does not exist in this config: DDP's static graph asserts "
        r"under no_sync.*needs `gradient_accumulation_steps` = 1, but got "
        r"gradient_accumulation_steps=4, ddp_static_graph=true\. Set ddp_static_graph to false",
    ):
        TrainingConfig(ranks=2, gradient_accumulation_steps=4, ddp_static_graph=True)
    with pytest.raises(ConfigError, match=r"`ddp_no_sync` does not exist.*> 1, but got"):
        TrainingConfig(ranks=2, ddp_no_sync=True)


def _absent_in(knob: Knob) -> TrainingConfig:
    """A config in which ``knob`` does not exist (every knob's rule is one of these)."""
    for cfg in (TrainingConfig(), TrainingConfig(ranks=2, gradient_accumulation_steps=4)):
        if not knob.present(cfg):
            return cfg
    raise AssertionError(f"no config here lacks {knob.name}")


CONDITIONAL = [k for k in KNOBS if k.exists is not None]


@pytest.mark.parametrize("knob", CONDITIONAL, ids=[k.name for k in CONDITIONAL])
def test_the_config_follows_each_knobs_existence_rule(knob: Knob) -> None:
    assert knob.field is not None
    cfg = _absent_in(knob)
    default = getattr(cfg, knob.field)
    other = 2 if default is None else not default
    # A value where the knob does not exist: the registry's rule, said in the error.
    with pytest.raises(ConfigError, match=rf"`{knob.field}` does not exist in this config"):
        TrainingConfig(**(cfg.to_dict() | {knob.field: other}))
    with pytest.raises(ConfigError, match=rf"`{knob.field}` does not exist"):
        cfg.replace(**{knob.field: other})
    # Its default is no value: such a config, and its JSON (every field written), still load.
    assert TrainingConfig.from_json(cfg.to_json()) == cfg
    # Where the rule holds, the value is taken; a copy in which the knob stops existing, and
    # that does not name it, takes its default (the sampler's configs do the same).
    present = next(
        c
        for c in (
            TrainingConfig(num_workers=2, compile_mode="default"),
            TrainingConfig(ranks=2, gradient_accumulation_steps=4, num_workers=2),
        )
        if knob.present(c)
    )
    given = present.replace(**{knob.field: other})
    assert getattr(given, knob.field) == other
    moved = given.replace(**{f: getattr(cfg, f) for f in ("num_workers", "compile_mode")})
    moved = moved.replace(gradient_accumulation_steps=cfg.gradient_accumulation_steps)
    assert not knob.present(moved) and getattr(moved, knob.field) == default
