"""autotune.tune: the trainer you already have, measured by its own loop (a Lightning Trainer
and LightningModule; a Hugging Face Trainer), with the same guard, limits, failures, resume
and report as find_best."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
import torch

import autotune
from autotune._search.storage import read_baseline_accuracy
from autotune._speed import stats
from autotune._trial import lightning_loop

import lightning_tasks as lt
from conftest import FAST_BUDGET

pytestmark = pytest.mark.filterwarnings("ignore")

# In-process trials (so the tests can see what the module's hooks saw), a short measurement.
FAST = {"budget": FAST_BUDGET, "accuracy_samples": 256, "isolation": "none"}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_TEST_RECORD", "1")
    for seen in (lt.SEEN_LOSSES, lt.SEEN_LRS, lt.BUILT):
        seen.clear()


def _tune_lightning(module=None, space=None, **options) -> autotune.SearchResult:  # type: ignore[no-untyped-def]
    return autotune.tune(
        lt.lightning_trainer(),
        module or lt.SmoothedSGD(),
        datamodule=lt.NoisyData(),
        metric="val_acc",
        space={"knobs": space or {"batch_size": [32, 64]}},
        tolerance=0.05,
        options=autotune.SearchOptions(**{**FAST, **options}),
    )


def test_a_lightning_module_is_tuned_through_its_own_training_step_and_optimizer(
    recorded, tmp_path: Path
) -> None:
    """The label-smoothing/SGD module: what autotune measured and guarded is its training, not
    `module(x)` with cross-entropy and AdamW."""
    storage = f"sqlite:///{tmp_path / 'own.db'}"
    result = _tune_lightning(n_trials=1, storage=storage, study_name="own")
    assert result.metric_name == "val_acc" and result.higher_is_better
    assert result.guard is not None  # a batch change is guarded by the logged val_acc
    assert set(lt.BUILT) == {"SGD"}  # every fit built the module's own optimizer
    # The accuracy runs' final losses are losses the module's training_step computed (with
    # label smoothing, which autotune's default loss does not use).
    accuracy = read_baseline_accuracy(optuna.load_study(study_name="own", storage=storage))
    assert accuracy is not None
    finals = [run.final_loss for run in accuracy.runs]
    assert finals and all(any(abs(f - seen) < 1e-6 for seen in lt.SEEN_LOSSES) for f in finals)
    assert {lr for batch, lr in lt.SEEN_LRS if batch == 32} == {0.05}
    assert result.baseline.lr_schedule.kind.value == "trainer"
    assert result.baseline.lr_schedule.peak_lr == 0.05
    assert result.search["planned_epochs"] == 3.0  # the trainer's max_epochs


def test_a_batch_change_scales_the_learning_rate_of_the_modules_own_optimizer(recorded) -> None:
    """LR scaling goes through the user's optimizer and scheduler: an accuracy run of batch 64
    at twice the baseline's peak trains with SGD at 0.1 (its scheduler's base rate too)."""
    from autotune._trial.lightning_setup import prepare_lightning

    setup = prepare_lightning(
        lt.lightning_trainer(), lt.SmoothedSGD(), datamodule=lt.NoisyData(), metric="val_acc"
    )
    work, base = setup.prepared.workload, setup.baseline
    assert base.lr_schedule.peak_lr == 0.05
    doubled = base.replace(
        batch_size=64, lr_schedule=dataclasses.replace(base.lr_schedule, peak_lr=0.1)
    )
    lt.SEEN_LRS.clear()
    run = work.loop.accuracy_run(doubled, work, 128, seed=0)
    assert [(64, pytest.approx(0.1))] == lt.SEEN_LRS
    assert run.samples == 128 and 0.0 <= run.metric <= 1.0


def test_the_result_exports_the_trainer_and_datamodule_settings() -> None:
    result = _tune_lightning(space={"batch_size": [32, 64], "num_workers": [0, 1]}, n_trials=3)
    exported = result.trainer_settings()
    cfg = result.config
    assert exported["kind"] == "lightning"
    assert exported["dataloader"]["batch_size"] == cfg.batch_size
    assert exported["dataloader"]["num_workers"] == cfg.num_workers
    assert exported["trainer"]["precision"] == "32-true"
    assert exported["trainer"]["accumulate_grad_batches"] == cfg.gradient_accumulation_steps
    assert json.loads(result.to_json())["trainer"]["kind"] == "lightning"


def test_an_out_of_memory_error_inside_training_step_is_found_by_the_memory_probe() -> None:
    """The probe's runs are fits of the module too: the batch whose training_step runs out of
    memory leaves the space before any candidate is tried with it."""
    result = _tune_lightning(lt.SmoothedSGD(oom_above=32), n_trials=2)
    probe = result.search["memory_probe"]
    assert probe["limits"] == {"fp32/ckpt0": 32}
    assert "out of memory already at batch 64" in probe["notes"][0]
    assert all(t.config.batch_size == 32 for t in result.trials)
    assert result.baseline_trial.failure is None


@pytest.mark.slow
def test_a_hang_inside_training_step_is_stopped_at_the_trial_limit() -> None:
    """In a trial worker: the module is importable, so trials are isolated."""
    result = _tune_lightning(
        lt.SmoothedSGD(hang_with_workers=True), space={"num_workers": [0, 1]}, n_trials=1,
        isolation="process", trial_timeout=12.0,
    )  # fmt: skip
    hung = [t for t in result.trials if t.config.num_workers == 1]
    assert hung and hung[0].failure == "timeout"
    assert "ran past its 12 s limit" in hung[0].message
    assert result.search["isolation"] == "process"
    assert result.config.num_workers == 0


def test_a_resumed_lightning_study_reuses_its_baseline_and_reports(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 't.db'}"
    first = _tune_lightning(n_trials=1, storage=storage, study_name="pl")
    lines: list[str] = []
    second = autotune.tune(
        lt.lightning_trainer(),
        lt.SmoothedSGD(),
        datamodule=lt.NoisyData(),
        metric="val_acc",
        space={"knobs": {"batch_size": [32, 64]}},
        tolerance=0.05,
        progress=lines.append,
        options=autotune.SearchOptions(**FAST, n_trials=2, storage=storage, study_name="pl"),
    )
    assert any("baseline: reusing trial 0" in line for line in lines)
    assert second.baseline_trial.number == first.baseline_trial.number == 0
    page = second.report(tmp_path / "report.html")
    assert "val_acc" in page.read_text()
    with pytest.raises(autotune.StorageError, match=r"metric \(--metric\): 'val_acc' stored"):
        autotune.tune(
            lt.lightning_trainer(), lt.SmoothedSGD(), datamodule=lt.NoisyData(),
            metric="val_loss", options=autotune.SearchOptions(**FAST, storage=storage,
            study_name="pl"),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"metric": "val_f1"},
            autotune.DataError,
            r"logged no 'val_f1' \(it logged val_acc, val_loss\)",
        ),
        (
            {"datamodule": None, "train_dataloaders": "x"},
            autotune.DataError,
            r"`train_dataloaders` must be one torch DataLoader",
        ),
        ({"metric": "val_thing"}, autotune.DataError, r"logged no 'val_thing'"),
        ({"timeout": -1}, ValueError, r"`timeout` must be > 0 seconds"),
    ],
)
def test_bad_lightning_input_is_named_before_any_trial(kwargs, error, message) -> None:
    args = {"datamodule": lt.NoisyData(), "metric": "val_acc"} | kwargs
    with pytest.raises(error, match=message):
        autotune.tune(lt.lightning_trainer(), lt.SmoothedSGD(), **args)


def test_a_trainer_of_neither_kind_is_refused() -> None:
    with pytest.raises(TypeError, match=r"lightning.pytorch.Trainer or a transformers.Trainer"):
        autotune.tune(object())


def test_ctrl_c_inside_a_lightning_fit_stays_a_keyboard_interrupt() -> None:
    """Lightning turns it into sys.exit(1) and ignores SIGINT from then on."""
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), lightning_loop._interrupts_kept():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sys.exit(1)
    assert signal.getsignal(signal.SIGINT) is handler


# -- Hugging Face ----------------------------------------------------------------------------


def test_a_hugging_face_trainer_is_tuned_and_its_eval_accuracy_guarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    trainer = lt.hf_trainer(str(tmp_path), batch_size=16)
    result = autotune.tune(
        trainer,
        metric="eval_accuracy",
        space={"knobs": {"batch_size": [16, 32], "num_workers": [0, 1]}},
        tolerance=0.2,
        options=autotune.SearchOptions(**FAST, n_trials=3),
    )
    assert result.metric_name == "eval_accuracy" and result.higher_is_better
    assert result.trainer == "transformers"
    assert result.baseline.batch_size == 16
    assert result.baseline.lr_schedule.peak_lr == pytest.approx(5e-4)
    exported = result.trainer_settings()
    assert exported["kind"] == "transformers"
    changed = exported["training_arguments"]
    if result.config.batch_size != 16:
        assert changed["per_device_train_batch_size"] == result.config.batch_size
    else:
        assert "per_device_train_batch_size" not in changed
    assert "max_grad_norm" not in changed  # the trainer's own clipping stayed on, measured
    assert result.search["planned_epochs"] == 2.0  # num_train_epochs
    # Every trial's trainer had an output directory of its own; none is left behind.
    assert not list(scratch.glob("autotune-hf-*"))


def test_evaluation_memory_is_part_of_a_hugging_face_trial(tmp_path: Path) -> None:
    """A batch that trains but runs out of memory in evaluation does not fit."""
    from transformers import Trainer, TrainingArguments

    from autotune.examples import hf_collate, hf_data

    train, val = hf_data(128)
    trainer = Trainer(
        model=lt.EvalHungry(limit=16),
        args=TrainingArguments(
            output_dir=str(tmp_path), per_device_train_batch_size=16, use_cpu=True,
            report_to="none", save_strategy="no", disable_tqdm=True,
            remove_unused_columns=False, label_names=["labels"],
        ),
        train_dataset=train, eval_dataset=val, data_collator=hf_collate,
    )  # fmt: skip
    result = autotune.tune(
        trainer,
        space={"knobs": {"batch_size": [16, 32]}},
        options=autotune.SearchOptions(**FAST, n_trials=1),
    )
    # The memory probe's runs evaluate after training: batch 32 trains but does not evaluate.
    assert result.search["memory_probe"]["limits"] == {"fp32/ckpt0": 16}
    assert all(t.config.batch_size == 16 for t in result.trials)
    assert result.metric_name == "eval_loss" and result.higher_is_better is False


def test_a_hugging_face_trial_whose_loss_turns_nan_fails_at_that_step(tmp_path: Path) -> None:
    """The Hugging Face path checked the loss only at the end of a run; like the plain loop it
    now checks each step's: a candidate whose loss turns NaN at its 3rd step fails as
    diverged, the step named, and the search goes on with the baseline."""
    from transformers import Trainer, TrainingArguments

    from autotune.examples import hf_collate, hf_data

    train, val = hf_data(128)
    model = lt.NanAbove(limit=16)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(tmp_path), per_device_train_batch_size=16, use_cpu=True,
            report_to="none", save_strategy="no", disable_tqdm=True,
            remove_unused_columns=False, label_names=["labels"], learning_rate=5e-3,
        ),
        train_dataset=train, eval_dataset=val, data_collator=hf_collate,
    )  # fmt: skip
    result = autotune.tune(
        trainer,
        space={"knobs": {"batch_size": [16, 32]}},
        options=autotune.SearchOptions(**{**FAST, "accuracy_samples": 1024}, n_trials=1),
    )
    failed = [t for t in result.trials if t.config.batch_size == 32]
    assert failed and failed[0].failure == "diverged", [t.to_dict() for t in result.trials]
    assert "diverged: loss became nan by step 3 under precision fp32" in (failed[0].message or "")
    assert result.config.batch_size == 16


def test_a_hugging_face_trainer_holds_its_own_model_and_data(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"leave out model"):
        autotune.tune(lt.hf_trainer(str(tmp_path)), torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_the_cli_tunes_a_trainer_from_a_factory(tmp_path: Path) -> None:
    out = tmp_path / "best.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "autotune", "search",
            "--trainer", "lightning_tasks:make_lightning",
            "--metric", "val_acc", "--trials", "1", "--space", str(_space(tmp_path)),
            "--storage", f"sqlite:///{tmp_path / 'cli.db'}", "--out", str(out), "--quiet",
            "--isolation", "none", "--accuracy-samples", "256", "--timed-seconds", "0.5",
        ],
        capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parent)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["trainer"]["kind"] == "lightning" and data["validation"]["metric"] == "val_acc"
    assert done.stdout.startswith("autotune result:")  # the summary alone: --quiet says no more
    # verify, through the same trainer factory (the winner made a bigger batch to compare).
    data["config"] = {**data["baseline"]["config"], "batch_size": 64}
    out.write_text(json.dumps(data))
    checked = subprocess.run(
        [
            sys.executable, "-m", "autotune", "verify", str(out),
            "--trainer", "lightning_tasks:make_lightning", "--rounds", "2", "--json",
        ],
        capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parent)},
    )  # fmt: skip
    assert checked.returncode in (0, 1), checked.stderr[-3000:]  # 1: not faster here
    verified = json.loads(checked.stdout)
    assert verified["winner"]["batch_size"] == 64 and not verified["failures"], verified


def _space(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text("name: small\nknobs:\n  batch_size: [32, 64]\n")
    return path


# -- verify through the trainer -------------------------------------------------------------


def _with_winner(result: autotune.SearchResult, tmp_path: Path, **changes: object) -> Path:
    """``result`` saved with its winner changed (a tiny CPU model seldom beats its baseline,
    and verify has nothing to compare then)."""
    data = result.to_dict()
    data["config"] = {**data["baseline"]["config"], **changes}
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    return path


def test_a_tune_result_is_verified_through_the_users_own_trainer(tmp_path: Path) -> None:
    """`autotune verify` refused a result of tune (it would have re-measured with autotune's
    own loop). Given the trainer, it measures both configs through it, side by side, as the
    search did; without it, it says what to pass."""
    trainer = lt.hf_trainer(str(tmp_path), batch_size=16)
    result = autotune.tune(
        trainer,
        metric="eval_accuracy",
        space={"knobs": {"batch_size": [16, 64]}},
        tolerance=1.0,
        # One candidate: the space has no other, and the winner is set by hand below anyway.
        options=autotune.SearchOptions(**FAST, n_trials=1),
    )
    path = _with_winner(result, tmp_path, batch_size=64)
    with pytest.raises(autotune.ArgumentError, match=r"pass it, as tune took it"):
        autotune.verify(str(path), torch.nn.Linear(2, 2), [])
    lines: list[str] = []
    report = autotune.verify(
        str(path), trainer=lt.hf_trainer(str(tmp_path), batch_size=16), rounds=2,
        budget=FAST_BUDGET, progress=lines.append,
    )  # fmt: skip
    assert not report.failures, report.failures
    assert len(report.winner_measurements) == len(report.baseline_measurements) == 2
    assert report.median_speedup is not None and report.median_speedup > 0
    assert report.winner.batch_size == 64 and report.baseline.batch_size == 16
    seed = f"verify:{json.loads(Path(path).read_text())['search']['study_name']}"
    drawn = [stats.round_order(["baseline", "winner"], seed, r) for r in range(2)]
    assert [line.split()[2] for line in lines if line.startswith("round")] == [
        name for names in drawn for name in names
    ]


@pytest.mark.slow
def test_a_lightning_tune_result_is_verified_through_its_trainer(tmp_path: Path) -> None:
    result = _tune_lightning(n_trials=1)
    path = _with_winner(result, tmp_path, batch_size=64)
    report = autotune.verify(
        str(path), lt.SmoothedSGD(), lt.NoisyData(), trainer=lt.lightning_trainer(), rounds=2,
        budget=FAST_BUDGET,
    )  # fmt: skip
    assert not report.failures, report.failures
    assert len(report.winner_measurements) == len(report.baseline_measurements) == 2
    with pytest.raises(autotune.ArgumentError, match=r"searched through a lightning one"):
        autotune.verify(str(path), trainer=lt.hf_trainer(str(tmp_path)))
