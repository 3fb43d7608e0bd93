"""Streams through the trainers users already have (issue 39): a Hugging Face ``Trainer``
whose ``train_dataset`` streams, a Lightning ``Trainer`` whose loaders stream, the exports of a
run counted in samples rather than epochs, and data-parallel ranks each reading their own part
of a stream."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import pytest
import torch
from test_streaming import hf_stream, tiny_bert, write_json_parts
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import autotune
from autotune._errors import DataError
from autotune._knobs.trainer_args import trainer_settings
from autotune._stream import Stream
from autotune._trial.executors import make_executor
from autotune._trial.hf_setup import prepare_hf
from autotune._trial.isolation import worker_env
from autotune._trial.lightning_setup import prepare_lightning
from autotune._trial.runner import accuracy_data
from autotune._trial.task import make_task
from autotune._trial.workload import Workload
from autotune.examples import tiny_model

import lightning_tasks as lt
from conftest import FAST_BUDGET

datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore")

TESTS = Path(__file__).parent
# In-process trials (the tests watch them), a short measurement.
FAST = {"budget": FAST_BUDGET, "accuracy_samples": 128, "isolation": "none"}


# -- streams of our own --------------------------------------------------------------------


class NoisyStream(IterableDataset[Any]):
    """``lt.noisy_data``'s (features, label) items as a stream, each DataLoader worker its own
    share (every k-th item); a length where ``length``."""

    def __init__(
        self, n: int = 512, seed: int = 0, *, length: bool = True, open_seconds: float = 0.0
    ) -> None:
        self.n, self.seed, self.has_length = n, seed, length
        self.open_seconds = open_seconds  # what each read from its start costs (its shards)

    def __len__(self) -> int:
        if not self.has_length:
            raise TypeError("no length")
        return self.n

    def __iter__(self):  # type: ignore[no-untyped-def]
        time.sleep(self.open_seconds)
        data = lt.noisy_data(self.n, seed=self.seed)
        info = get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(self.n):
            if i % k == w:
                yield data[i]


class TokenStream(IterableDataset[Any]):
    """Dict items a tiny BERT takes (12 token ids, a label), with a length."""

    def __init__(self, n: int = 256) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(0)
        for _ in range(self.n):
            yield {"input_ids": torch.randint(8, 60, (12,), generator=g), "labels": 1}


class StreamData(pl.LightningDataModule):
    """A data module whose training loader (and validation loader, where ``val_stream``)
    streams."""

    def __init__(
        self,
        *,
        length: bool = True,
        val_stream: bool = True,
        open_seconds: float = 0.0,
        items: int = 512,
    ) -> None:
        super().__init__()
        self.length, self.val_stream, self.open_seconds = length, val_stream, open_seconds
        self.items = items

    def train_dataloader(self) -> DataLoader[Any]:
        stream = NoisyStream(self.items, length=self.length, open_seconds=self.open_seconds)
        return DataLoader(stream, batch_size=32)

    def val_dataloader(self) -> DataLoader[Any]:
        val = NoisyStream(256, seed=1) if self.val_stream else lt.noisy_data(256, seed=1)
        return DataLoader(val, batch_size=64)


# -- Hugging Face ----------------------------------------------------------------------------


def write_easy_parts(folder: Path, parts: int, rows: int, seed: int) -> list[str]:
    """Token sequences whose class is which half of the vocabulary their tokens come from (a
    task a tiny BERT learns in a few steps), in JSON lines files."""
    rng = random.Random(seed)
    files = []
    for p in range(parts):
        path = folder / f"easy-{seed}-{p}.jsonl"
        rows_ = []
        for _ in range(rows):
            label = rng.randrange(2)
            ids = [rng.randrange(8, 34) + 26 * label for _ in range(12)]
            rows_.append(json.dumps({"input_ids": ids, "labels": label}) + "\n")
        path.write_text("".join(rows_))
        files.append(str(path))
    return files


def hf_stream_trainer(folder: Path, *, val_stream: bool = True, **args: Any) -> Any:
    """A tiny BERT's Trainer over a Hugging Face stream of 3 local JSON files (384 items)."""
    train = hf_stream(write_easy_parts(folder, 3, 128, seed=0))
    val_files = write_easy_parts(folder, 1, 96, seed=1)
    val = (
        hf_stream(val_files)
        if val_stream
        else datasets.load_dataset("json", data_files=val_files, split="train").with_format("torch")
    )
    arguments = transformers.TrainingArguments(
        output_dir=str(folder / "out"),
        per_device_train_batch_size=16,
        learning_rate=2e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        **{"max_steps": 24, **args},
    )
    torch.manual_seed(0)  # the same untrained model every time
    return transformers.Trainer(
        model=tiny_bert(),
        args=arguments,
        train_dataset=train,
        eval_dataset=val,
        compute_metrics=lt.accuracy,
    )


@pytest.mark.slow  # ~30 s: a search through a Hugging Face Trainer, its accuracy runs too
def test_a_hugging_face_trainer_over_a_stream_is_tuned_for_its_max_steps(tmp_path) -> None:
    result = autotune.tune(
        hf_stream_trainer(tmp_path),
        metric="eval_accuracy",
        space={"knobs": {"batch_size": [16, 32]}},
        tolerance=0.2,
        options=autotune.SearchOptions(**FAST, n_trials=2),
    )
    assert not [t.message for t in result.trials if t.failure]
    assert result.trainer == "transformers"
    assert {t.config.batch_size for t in result.trials} == {16, 32}
    # The batch change was screened: accuracy runs read the stream through the user's Trainer.
    assert result.guard is not None
    search = result.to_dict()["search"]
    assert search["planned_epochs"] == 1.0  # the stream holds the planned samples: one pass
    # max_steps=24 optimizer steps of 16: 384 samples, read from the stream's start.
    assert "the planned run reads 384 samples" in search["data"]
    assert "96 items of the stream `eval_dataset`" in search["data"]
    # The export keeps the run's samples: max_steps of the chosen batch (24 of 16, 12 of 32).
    changed = result.trainer_settings()["training_arguments"]
    if result.config.batch_size == 32:
        assert changed["max_steps"] == 12 and changed["per_device_train_batch_size"] == 32
    else:
        assert "max_steps" not in changed


@pytest.mark.slow  # ~40 s: a search through a Hugging Face Trainer, three passes of its stream
def test_a_hugging_face_trainer_whose_max_steps_cover_three_passes_is_tuned(tmp_path) -> None:
    """max_steps=72 of 16 read 1,152 samples of a 384-item stream loaded with
    streaming=True: the Trainer reads it again from its start twice, and so do the trials."""
    result = autotune.tune(
        hf_stream_trainer(tmp_path, max_steps=72),
        metric="eval_accuracy",
        space={"knobs": {"batch_size": [16, 32]}},
        tolerance=0.2,
        options=autotune.SearchOptions(**{**FAST, "accuracy_samples": 512}, n_trials=2),
    )
    assert not [t.message for t in result.trials if t.failure]
    search = result.to_dict()["search"]
    assert search["planned_epochs"] == 3.0
    assert "1,152 samples, 3 passes" in search["data"], search["data"]
    changed = result.trainer_settings()["training_arguments"]
    steps = changed.get("max_steps", 72)
    assert steps * result.config.global_batch_size == 1152
    # ... settings the Trainer accepts.
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "export"), report_to="none", use_cpu=True, **changed
    )
    assert args.max_steps == steps or "max_steps" not in changed


def _hf_items(loop: Any, cfg: autotune.TrainingConfig, workload: Any, seed: int) -> torch.Tensor:
    """The input ids a Hugging Face accuracy run of 128 samples trains on, in order."""
    data, loading = accuracy_data(cfg, workload, seed, 128)
    with loop.trainer(loading, workload, data, None, max_steps=1, seed=seed) as trainer:
        return torch.cat([b["input_ids"] for b in trainer.get_train_dataloader()])


@pytest.mark.parametrize("workers", [0, 2])
def test_both_arms_of_a_hugging_face_pair_read_the_stream_in_one_order(tmp_path, workers) -> None:
    start = prepare_hf(hf_stream_trainer(tmp_path), metric=None, higher_is_better=None)
    workload, loop = start.prepared.workload, start.prepared.workload.loop
    small = start.baseline.replace(batch_size=8, num_workers=workers)
    large = start.baseline.replace(batch_size=32, num_workers=workers)
    a, b = _hf_items(loop, small, workload, 3), _hf_items(loop, large, workload, 3)
    assert a.shape == b.shape == (128, 12)
    assert torch.equal(a, b)


def test_a_hugging_face_eval_set_may_be_map_style_beside_a_training_stream(tmp_path) -> None:
    start = prepare_hf(
        hf_stream_trainer(tmp_path, val_stream=False, max_steps=10),
        metric=None,
        higher_is_better=None,
        planned_samples=200,  # the options' planned_samples speak over max_steps
    )
    assert len(start.prepared.workload.train) == 200
    assert len(start.prepared.workload.val) == 96
    assert start.planned_epochs is None  # a stream's: its passes, from its planned samples
    notes = (start.prepared.note or "").split("; ")
    assert not [n for n in notes if n.startswith("validation")]  # the set as it is
    assert any("the planned run reads 200 samples" in n for n in notes), notes
    # Read without .shuffle(), a Hugging Face stream gives every seed the same items: said.
    assert any("the same items in the same order at every data-order seed" in n for n in notes)


def test_a_hugging_face_stream_trained_for_epochs_plans_its_passes(tmp_path) -> None:
    from autotune.examples import hf_collate

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=16, num_train_epochs=3,
        use_cpu=True, report_to="none", save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=tiny_bert(), args=args, train_dataset=TokenStream(), eval_dataset=TokenStream(32),
        data_collator=hf_collate,
    )  # fmt: skip
    start = prepare_hf(trainer, metric=None, higher_is_better=None)
    stream = start.prepared.workload.train
    assert (stream.samples, stream.length, stream.passes) == (768, 256, 3.0)


# -- Lightning -------------------------------------------------------------------------------


def test_a_lightning_datamodule_that_streams_is_tuned_for_the_trainers_max_steps() -> None:
    result = autotune.tune(
        lt.lightning_trainer(max_epochs=None, max_steps=16),
        lt.SmoothedSGD(),
        datamodule=StreamData(length=False),
        metric="val_acc",
        space={"knobs": {"batch_size": [32, 64]}},
        tolerance=0.05,
        # The whole planned run per accuracy run: 128 samples are 4 steps, too few to learn.
        options=autotune.SearchOptions(**{**FAST, "accuracy_samples": 512}, n_trials=2),
    )
    assert not [t.message for t in result.trials if t.failure]
    assert {t.config.batch_size for t in result.trials} == {32, 64}
    search = result.to_dict()["search"]
    assert search["planned_epochs"] == 1.0  # the stream holds the planned samples
    # max_steps=16 optimizer steps of the loader's 32: 512 samples.
    assert "the planned run reads 512 samples" in search["data"]
    assert "256 items of the stream `val_dataloaders` (NoisyStream)" in search["data"]
    settings = result.trainer_settings()
    assert settings["trainer"]["max_steps"] == 512 // result.config.global_batch_size
    assert "shuffle" not in settings["dataloader"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_lightning_measurement_times_one_pass_of_a_stream(workers) -> None:
    """The trainer's own loop is timed as the runner's is: the timed steps fit into one pass
    of the stream (its 16 batches; opening a pass costs 1 s here), after the batches the
    workers may have queued ahead of the warm-up and a few settling steps."""
    from autotune import Budget

    start = prepare_lightning(
        lt.lightning_trainer(max_epochs=None, max_steps=16), lt.SmoothedSGD(),
        datamodule=StreamData(open_seconds=1.0), metric="val_acc",
    )  # fmt: skip
    workload, loop = start.prepared.workload, start.prepared.workload.loop
    cfg = start.baseline.replace(
        num_workers=workers, persistent_workers=workers > 0, prefetch_factor=2 if workers else None
    )
    m = loop.measure(cfg, workload, Budget())
    assert m.timed_steps >= 3
    assert max(m.chunk_times) < 1.0, m.chunk_times


class SlowItems(torch.utils.data.Dataset[Any]):
    """4,096 of ``lt.noisy_data``'s items, each taking 2 ms to read (a disk, a decoder), so
    that ``w`` loader workers make at most ``w / 0.002`` items a second."""

    def __init__(self) -> None:
        self.data = lt.noisy_data(4096)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        time.sleep(0.002)
        return self.data[i]


class SlowItemsData(StreamData):
    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(SlowItems(), batch_size=64, shuffle=True)


class SlowFirstSteps(lt.SmoothedSGD):
    """The first three training steps take 0.3 s each (a compile, a lazy initialisation),
    while the loader's workers run ahead."""

    def __init__(self) -> None:
        super().__init__()
        self.slow = 3

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.slow > 0:
            self.slow -= 1
            time.sleep(0.3)
        return super().training_step(batch, batch_idx)


def test_a_lightning_measurement_does_not_time_the_batches_its_workers_queued() -> None:
    """As in the runner (600b741): 4 workers queue up to 4 x 8 batches during the slow first
    steps, and a timed phase served from that queue measured the model, not the pipeline (a
    lent H100 read 16,799 samples/s where loops over the same stream read 6,000-6,800)."""
    from autotune import Budget

    start = prepare_lightning(
        lt.lightning_trainer(max_epochs=None, max_steps=16), SlowFirstSteps(),
        datamodule=SlowItemsData(val_stream=False), metric="val_acc",
    )  # fmt: skip
    workload, loop = start.prepared.workload, start.prepared.workload.loop
    cfg = start.baseline.replace(num_workers=4, prefetch_factor=8, persistent_workers=True)
    m = loop.measure(cfg, workload, Budget())
    most = 4 / 0.002  # samples/s: the workers cannot make more
    assert m.throughput <= 1.15 * most, (m.throughput, m.chunk_times)
    assert m.data_wait_fraction > 0.5  # the pipeline, not the model, sets the pace


class SlowSteps(lt.SmoothedSGD):
    """Every training step takes 0.1 s (a model far slower than its loader); counts them."""

    steps: ClassVar[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps.append(batch_idx)
        time.sleep(0.1)
        return super().training_step(batch, batch_idx)


def test_a_lightning_measurement_steps_through_at_most_a_second_of_the_workers_queue() -> None:
    """The trainer owns its loop, so the batches its workers may queue (here 4 x 8) are
    stepped through, not dropped: they train. As the runner drops for at most a second, they
    are stepped through for at most a second, not 32 steps of 0.1 s."""
    from autotune import Budget

    start = prepare_lightning(
        lt.lightning_trainer(max_epochs=None, max_steps=16), SlowSteps(),
        datamodule=SlowItemsData(val_stream=False), metric="val_acc",
    )  # fmt: skip
    workload, loop = start.prepared.workload, start.prepared.workload.loop
    cfg = start.baseline.replace(num_workers=4, prefetch_factor=8, persistent_workers=True)
    SlowSteps.steps.clear()
    budget = Budget(warmup_steps=3, timed_samples=64 * 6, chunks=3, min_timed_seconds=0)
    m = loop.measure(cfg, workload, budget)
    untimed = len(SlowSteps.steps) - m.timed_steps
    assert untimed <= 3 + 12 + 3, untimed  # warm-up, ~1 s of the queue, settling


def test_both_arms_of_a_lightning_pair_read_the_stream_in_one_order() -> None:
    start = prepare_lightning(
        lt.lightning_trainer(max_epochs=None, max_steps=16), lt.SmoothedSGD(),
        datamodule=StreamData(), metric="val_acc",
    )  # fmt: skip
    workload, loop = start.prepared.workload, start.prepared.workload.loop

    def items(batch_size: int) -> torch.Tensor:
        cfg = start.baseline.replace(batch_size=batch_size, num_workers=2)
        data, loading = accuracy_data(cfg, workload, 5, 256)
        return torch.cat([x for x, _ in loop.train_loader(loading, data, shuffle=True, seed=5)])

    a, b = items(8), items(64)
    assert a.shape == b.shape == (256, 8)
    assert torch.equal(a, b)


WORKER_LOG: list[Path] = []


def log_worker(worker_id: int) -> None:
    """A user's worker_init_fn: each worker that starts writes its id to the test's file."""
    with WORKER_LOG[0].open("a") as f:
        f.write(f"{worker_id}\n")


class LoggedData(StreamData):
    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(NoisyStream(512), batch_size=32, worker_init_fn=log_worker)


def test_a_lightning_accuracy_run_starts_the_stream_workers_with_the_users_worker_init_fn(
    tmp_path, monkeypatch
) -> None:
    # An accuracy run loads a stream item by item through loader workers of autotune's own (so
    # that both arms read one order); a user's worker_init_fn (seeding, opening a shard index)
    # starts each of them, as it starts the workers of the user's loader and of timed trials.
    monkeypatch.setattr(sys.modules[__name__], "WORKER_LOG", [tmp_path / "workers.txt"])
    start = prepare_lightning(
        lt.lightning_trainer(max_epochs=None, max_steps=16), lt.SmoothedSGD(),
        datamodule=LoggedData(), metric="val_acc",
    )  # fmt: skip
    workload, loop = start.prepared.workload, start.prepared.workload.loop
    run = loop.accuracy_run(start.baseline.replace(num_workers=2), workload, 64, seed=5)
    assert run.samples == 64
    assert sorted((tmp_path / "workers.txt").read_text().split()) == ["0", "1"]


def test_a_lightning_trainer_with_max_epochs_over_a_stream_is_tuned_for_its_passes() -> None:
    """max_epochs=3 over an IterableDataset with no length: Lightning reads it three times,
    so the planned run is three passes of its 512 items (its length read whole once), and the
    export sets max_epochs=3, which the Trainer accepts and trains."""
    result = autotune.tune(
        lt.lightning_trainer(max_epochs=3),
        lt.SmoothedSGD(),
        datamodule=StreamData(length=False),
        metric="val_acc",
        space={"knobs": {"batch_size": [32, 64]}},
        tolerance=0.05,
        options=autotune.SearchOptions(**{**FAST, "accuracy_samples": 768}, n_trials=2),
    )
    assert not [t.message for t in result.trials if t.failure]
    search = result.to_dict()["search"]
    assert search["planned_epochs"] == 3.0
    assert "a stream (NoisyStream) of 512 items, read whole to learn it" in search["data"]
    assert "1,536 samples, 3 passes" in search["data"]
    settings = result.trainer_settings()
    assert settings["trainer"]["max_epochs"] == 3 and "max_steps" not in settings["trainer"]
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, **settings["trainer"])
    loader = DataLoader(NoisyStream(512, length=False), batch_size=result.config.batch_size)
    trainer.fit(lt.SmoothedSGD(), train_dataloaders=loader)
    assert trainer.current_epoch == 3


@pytest.mark.parametrize(
    ("trainer", "data", "options", "words"),
    [
        (
            {"max_epochs": None},
            {"length": False},
            {},
            "loads a stream (NoisyStream) with no length, and your Trainer sets neither "
            "max_steps nor max_epochs",
        ),
        (
            {"max_epochs": None},
            {"items": 16},
            {"planned_samples": 5000},
            "The stream (NoisyStream) holds 16 items, fewer than one batch of the baseline's (32)",
        ),
    ],
)
def test_a_lightning_stream_without_a_planned_run_is_refused_before_any_trial(
    trainer, data, options, words
) -> None:
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(")", r"\)")):
        autotune.tune(
            lt.lightning_trainer(**trainer),
            lt.SmoothedSGD(),
            datamodule=StreamData(**data),
            metric="val_acc",
            options=autotune.SearchOptions(**FAST, n_trials=1, **options),
        )


# -- Exports of a run counted in samples -----------------------------------------------------


def test_a_streams_run_exports_max_steps_that_the_trainers_accept(tmp_path) -> None:
    cfg = autotune.TrainingConfig(batch_size=32, gradient_accumulation_steps=2)
    kwargs = cfg.to_transformers(planned_samples=384)
    assert kwargs["max_steps"] == 6 and "num_train_epochs" not in kwargs
    # A Hugging Face Trainer refuses a stream without max_steps: these arguments are enough.
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none", **kwargs)
    stream = hf_stream(write_json_parts(tmp_path, 3, 128, seed=0))
    trainer = transformers.Trainer(model=tiny_bert(), args=args, train_dataset=stream)
    assert trainer.args.max_steps == 6
    # A share of the run (train_fraction) is a share of the steps.
    assert cfg.replace(train_fraction=0.5).to_transformers(planned_samples=384)["max_steps"] == 3
    with pytest.raises(autotune.ConfigError, match="not both"):
        cfg.to_transformers(planned_samples=384, planned_epochs=2)
    # What tune says to change in a Trainer over a stream: the batch, and the steps that keep
    # the run's samples (24 steps of 16 are 12 of 32).
    yours, tuned = autotune.TrainingConfig(batch_size=16), autotune.TrainingConfig(batch_size=32)
    changed = trainer_settings("transformers", tuned, yours, 384)["training_arguments"]
    assert changed["max_steps"] == 12 and changed["per_device_train_batch_size"] == 32
    assert (
        "max_steps" not in trainer_settings("transformers", yours, yours, 384)["training_arguments"]
    )

    s = autotune.TrainingConfig(batch_size=32, num_workers=2).to_lightning(planned_samples=512)
    assert s.trainer["max_steps"] == 16 and "max_epochs" not in s.trainer
    assert "shuffle" not in s.dataloader
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, **s.trainer)
    loader = DataLoader(NoisyStream(512, length=False), **s.dataloader)  # no sampler, no shuffle
    trainer.fit(lt.SmoothedSGD(), train_dataloaders=loader)
    assert trainer.global_step == 16


# -- Data-parallel ranks ---------------------------------------------------------------------


def _write_ids(folder: Path, shards: int, rows: int) -> list[str]:
    files = []
    for s in range(shards):
        path = folder / f"ids-{s}.jsonl"
        path.write_text("".join(json.dumps({"id": s * rows + i}) + "\n" for i in range(rows)))
        files.append(str(path))
    return files


@pytest.mark.slow
@pytest.mark.parametrize("shards", [3, 4])
def test_two_ranks_read_disjoint_parts_of_a_hugging_face_stream(tmp_path, shards) -> None:
    files = _write_ids(tmp_path, shards, 40)
    out = tmp_path / "read.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(TESTS / "ddp_stream.py"), str(out), *files],
        env=env, check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    read = json.loads(out.read_text())
    everything = set(range(shards * 40))
    for loader in ("throughput", "accuracy"):
        rank0, rank1 = (set(ids) for ids in read[loader])
        assert len(read[loader][0]) == len(rank0)  # no item twice on one rank
        assert not rank0 & rank1, f"{loader}: both ranks read {sorted(rank0 & rank1)[:5]}"
        assert rank0 | rank1 == everything  # together, the whole stream: each sample once


class RankSplit(NoisyStream):
    """A stream of our own that reads its rank's part (every world-th item) where a process
    group is up."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        for i, item in enumerate(super().__iter__()):
            if i % world == rank:
                yield item


def _stream_workload(stream: IterableDataset[Any]) -> Workload:
    task = make_task(autotune.Task(metric="accuracy"))
    train = Stream(stream, samples=256, length=256)
    return Workload(model=tiny_model(), train=train, val=lt.noisy_data(64, seed=1), task=task)


@pytest.mark.slow  # two 2-rank jobs started: ~60 s here
def test_a_stream_that_gives_every_rank_all_of_itself_is_refused_before_any_trial() -> None:
    with pytest.raises(ValueError, match=r"gives every one of the 2 data-parallel ranks all of"):
        make_executor(_stream_workload(NoisyStream(256)), "auto", env=worker_env(), ranks=2)
    # One that splits itself by rank starts its ranks.
    executor, _ = make_executor(_stream_workload(RankSplit(256)), "auto", env=worker_env(), ranks=2)
    executor.close()


def test_verify_reads_a_streams_tune_result_for_the_run_it_was_searched_for() -> None:
    """A search given planned_samples (not the trainer's max_steps) is verified for the same
    run: verify rebuilds the trainer's workload with the result's planned samples."""
    from autotune._verify.workload import trainer_workload as _trainer_workload

    data = {
        "search": {"streams": True, "seed": 0},
        "metrics": {"planned_samples": 384},  # the trainer's max_steps would say 512
        "validation": {"metric": "val_acc", "higher_is_better": True},
    }
    trainer = lt.lightning_trainer(max_epochs=None, max_steps=16)
    workload = _trainer_workload(data, "lightning", trainer, lt.SmoothedSGD(), StreamData(), None)
    assert isinstance(workload.train, Stream) and len(workload.train) == 384
    data["search"]["streams"] = False  # a map-style search's result: the trainer's own run
    workload = _trainer_workload(data, "lightning", trainer, lt.SmoothedSGD(), StreamData(), None)
    assert len(workload.train) == 512
