"""A LightningDataModule as the data: its datasets and collate function are used, and what is
not (its DataLoader settings, which autotune tunes) is said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import _refs
from autotune._cli import main
from autotune._trial.data import unpack_data
from autotune.examples import TokenSequences, hf_collate, hf_model

from conftest import FAST_BUDGET, find

pytest.importorskip("lightning")
pytest.importorskip("transformers")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "hf_search.py"
NOTE = (
    "data: TokenData (a LightningDataModule): its training dataset, its validation dataset and "
    "its collate function are used; its own DataLoader settings (batch_size=64, num_workers=0, "
    "pin_memory=False, persistent_workers=False) are not, they are what autotune tunes (pass "
    "them as baseline= to measure against them)"
)


def _data_module():
    return _refs.load(f"{EXAMPLE}:TokenData")()


def test_its_datasets_and_collate_function_are_used_after_setup() -> None:
    module = _data_module()
    assert module.train is None  # datasets are made in setup("fit"), as Lightning calls it
    data = unpack_data(module, None, None)
    assert isinstance(data.train, TokenSequences) and len(data.train) == 512
    assert isinstance(data.val, TokenSequences) and len(data.val) == 128
    assert data.collate_fn is hf_collate
    assert data.note == NOTE


def test_an_explicit_validation_set_and_collate_function_win() -> None:
    mine = TokenSequences(64, seed=5)

    def collate(items):
        return hf_collate(items)

    data = unpack_data(_data_module(), mine, collate)
    assert data.val is mine and data.collate_fn is collate
    assert data.note is not None and "its training dataset is used;" in data.note


def test_a_search_takes_a_data_module_from_the_api(tmp_path) -> None:
    lines: list[str] = []
    result = find(
        hf_model(),
        _data_module(),
        space={"knobs": {"batch_size": [16, 32]}},
        n_trials=1,
        budget=FAST_BUDGET,
        accuracy_samples=128,
        device="cpu",
        isolation="none",
        progress=lines.append,
    )
    assert NOTE in lines
    assert result.baseline_metrics["throughput"] > 0


@pytest.mark.slow
def test_a_search_takes_a_data_module_factory_from_the_cli(tmp_path, capsys) -> None:
    out = tmp_path / "best.json"
    code = main(
        [
            "search", "--model", "autotune.examples:hf_model",
            "--data", f"{EXAMPLE}:token_datamodule",
            "--space", "quick", "--timed-seconds", "0.5", "--trials", "1",
            "--accuracy-samples", "128",
            "--storage", f"sqlite:///{tmp_path / 'dm.db'}", "--out", str(out),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert err.count(NOTE) == 1
    assert json.loads(out.read_text())["search"]["trials"] == 2
