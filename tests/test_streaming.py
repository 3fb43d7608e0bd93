"""Data that streams: real WebDataset JPEG shards and a Hugging Face dataset loaded with
``streaming=True`` from local files, searched as they load; the errors a stream can give before
any trial; and the guarantees the accuracy guard needs of a stream (the same samples in the
same order in both arms, whatever their batch sizes)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import autotune
from autotune._errors import ArgumentError, DataError, ModelError
from autotune._stream import PASS_STRIDE, Stream, StreamEnded
from autotune._trial import runner, streaming
from autotune._trial.outcome import AccuracyCheck
from autotune._trial.streaming import Items, make_stream, worker_limit
from autotune._trial.workload import prepare_workload, stream_note

from conftest import FAST_BUDGET, find

pytest.importorskip("webdataset")
datasets = pytest.importorskip("datasets")
pytest.importorskip("PIL.Image")

from jpeg_shards import jpeg_stream, small_cnn, write_shards  # noqa: E402

# -- streams of our own (picklable: trials run in worker processes) ----------------------------


class Blobs(IterableDataset[Any]):
    """``n`` (features, label) pairs of 4 Gaussian blobs, drawn from ``seed``; each DataLoader
    worker yields its own items (every k-th), as a stream should."""

    def __init__(self, n: int = 1024, seed: int = 0, *, length: bool = True, split: bool = True):
        self.n, self.seed, self.has_length, self.split = n, seed, length, split

    def __len__(self) -> int:
        if not self.has_length:
            raise TypeError("no length")
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        centers = 3 * torch.randn(4, 8, generator=torch.Generator().manual_seed(99))
        info = get_worker_info()
        w, k = (0, 1) if info is None or not self.split else (info.id, info.num_workers)
        for i in range(self.n):
            y = int(torch.randint(0, 4, (), generator=g))
            x = centers[y] + torch.randn(8, generator=g)
            if i % k == w:
                yield x, y


class Endless(Blobs):
    def __init__(self) -> None:
        super().__init__(n=10**12, length=False)


class Lying(Blobs):
    """Says it holds 4,096 items; gives 100."""

    def __init__(self) -> None:
        super().__init__(n=100)

    def __len__(self) -> int:
        return 4096


class OneShot(IterableDataset[Any]):
    """A stream whose ``__iter__`` returns one generator object: read once, then empty."""

    def __init__(self, inner: IterableDataset[Any]) -> None:
        self.items = iter(inner)

    def __iter__(self):
        return self.items


class EpochShuffled(Blobs):
    """Reshuffles its items from the value ``set_epoch`` was told (as a Hugging Face stream
    reshuffles from its seed plus the epoch), and records each value."""

    def __init__(self, n: int = 64) -> None:
        super().__init__(n)
        self.epoch, self.told = 0, []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.told.append(epoch)

    def __iter__(self):
        items = list(super().__iter__())
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(self.epoch))
        yield from (items[i] for i in order.tolist())


class OnceOnly(Blobs):
    """Says it holds 100 items, and gives them on its first read only."""

    def __init__(self) -> None:
        super().__init__(n=100)
        self.reads = 0

    def __iter__(self):
        self.reads += 1
        return super().__iter__() if self.reads == 1 else iter(())


class PyRandomFlips(Blobs):
    """Augments from Python's own generator (as many image pipelines do): replays wherever
    ``random`` is seeded, as an accuracy run seeds it."""

    def __iter__(self):
        for x, y in super().__iter__():
            yield (x.flip(0) if random.random() < 0.5 else x), y


class Unseeded(Blobs):
    """Shuffles from the operating system's entropy: no two reads alike."""

    def __iter__(self):
        items = list(super().__iter__())
        random.SystemRandom().shuffle(items)
        yield from items


def blob_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    train = write_shards(tmp_path_factory.mktemp("train"), 4, 96, seed=0)
    return train, write_shards(tmp_path_factory.mktemp("val"), 1, 128, seed=1)


def test_a_search_over_webdataset_jpeg_shards_completes_and_its_loader_settings_reload(
    shards, tmp_path
) -> None:
    train_urls, val_urls = shards
    result = find(
        small_cnn(),
        jpeg_stream(train_urls),
        val_dataset=jpeg_stream(val_urls),
        planned_samples=384,
        timeout=25,
        budget=FAST_BUDGET,
        device="cpu",
        isolation="none",
        space={
            "knobs": {"batch_size": [16, 32], "num_workers": [0, 1, 2], "prefetch_factor": [2, 4]}
        },
    )
    assert result.baseline is not None and result.trials
    # Every trial read the stream: none failed on it.
    assert not [t.message for t in result.trials if t.failure]
    data = result.to_dict()
    note = data["search"]["data"]
    assert "a stream (WebDataset), read as far as the run (" in note and "384 samples" in note
    assert "validation: 128 items of the stream `val_dataset` (WebDataset)" in note
    assert data["metrics"]["planned_samples"] == 384
    path = result.save(tmp_path / "best.json")
    cfg = autotune.load_config(path)
    assert cfg == result.config
    loader = cfg.dataloader(jpeg_stream(train_urls), collate_fn=None)
    assert loader.num_workers == cfg.num_workers and loader.batch_size == cfg.batch_size
    batches = list(loader)  # a stream's loader: no sampler, every item once
    assert sum(len(b[1]) for b in batches) == 384
    assert batches[0][0].shape[1:] == (3, 16, 16)


def test_a_search_over_webdataset_shards_trains_several_passes(shards) -> None:
    """The shards hold 384 items and say no length; the planned run reads four passes, as a
    plain loop over the shards for four epochs does: the search learns the length from one
    whole read, and every trial (accuracy runs past a pass's end too) completes."""
    train_urls, val_urls = shards
    result = find(
        small_cnn(),
        jpeg_stream(train_urls),
        val_dataset=jpeg_stream(val_urls),
        planned_samples=4 * 384,
        n_trials=3,  # no deadline: the accuracy runs are made, however busy the machine
        budget=FAST_BUDGET,
        device="cpu",
        isolation="none",
        accuracy_samples=512,  # past the end of a pass
        space={"knobs": {"batch_size": [32, 64], "num_workers": [0, 2]}},
    )
    assert not [t.message for t in result.trials if t.failure]
    assert result.guard is not None and result.guard.accuracy_samples == 512
    data = result.to_dict()
    note = data["search"]["data"]
    assert "a stream (WebDataset) of 384 items, read whole to learn it (" in note, note
    assert "1,536 samples, 4 passes, each read again from the stream's start" in note, note
    assert data["search"]["planned_epochs"] == 4.0
    assert data["metrics"]["planned_samples"] == 4 * 384
    cfg = result.config
    assert cfg.to_lightning(planned_samples=4 * 384, passes=4.0).trainer["max_epochs"] == 4
    steps = cfg.to_transformers(planned_samples=4 * 384)["max_steps"]
    assert steps == 4 * 384 // cfg.global_batch_size


def test_a_resampled_webdataset_with_epochs_is_searched_for_several_of_them(shards) -> None:
    """WebDataset's docs recommend resampled=True with with_epoch(n) for several epochs: each
    epoch is n samples drawn from the shards, and planned_epochs=3 trains three."""
    wds = pytest.importorskip("webdataset")
    from jpeg_shards import to_tensor

    train_urls, val_urls = shards
    stream = (
        wds.WebDataset(train_urls, resampled=True, shardshuffle=False, empty_check=False)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(to_tensor, int)
        .with_epoch(192)
    )
    result = find(
        small_cnn(),
        stream,
        val_dataset=jpeg_stream(val_urls),
        planned_epochs=3,
        timeout=20,
        budget=FAST_BUDGET,
        device="cpu",
        isolation="none",
        space={"knobs": {"batch_size": [32], "num_workers": [0, 1]}},
    )
    assert not [t.message for t in result.trials if t.failure]
    data = result.to_dict()
    assert data["search"]["planned_epochs"] == 3.0
    assert data["metrics"]["planned_samples"] == 3 * 192
    lightning = result.config.to_lightning(planned_samples=3 * 192, passes=3.0)
    assert lightning.trainer["max_epochs"] == 3
    # The exported loader reads an epoch of with_epoch's samples, three times over.
    loader = result.config.dataloader(stream, collate_fn=None)
    assert sum(len(b[1]) for _ in range(3) for b in loader) >= 3 * 192 - 32 * max(
        1, result.config.num_workers
    )


def test_a_stream_with_fewer_shards_than_workers_searches_only_the_workers_it_can_feed(
    shards,
) -> None:
    _, one_shard = shards
    stream = make_stream(jpeg_stream(one_shard), 128)
    assert stream.workers == 1
    assert "has 1 shard: a worker beyond them would idle" in stream.workers_why
    result = find(
        small_cnn(),
        jpeg_stream(one_shard),
        val_dataset=jpeg_stream(one_shard),
        planned_samples=128,
        n_trials=1,
        budget=FAST_BUDGET,
        device="cpu",
        isolation="none",
        space={"knobs": {"num_workers": [0, 1, 2, 4]}},
    )
    notes = result.to_dict()["search"]["space_notes"]
    assert any("has 1 shard" in n for n in notes), notes
    assert {t.config.num_workers for t in result.trials} <= {0, 1}


# -- a Hugging Face dataset streamed from local JSON files -----------------------------------


def write_json_parts(folder: Path, parts: int, rows: int, seed: int) -> list[str]:
    """Token sequences of a toy task (class = whether token 7 occurs) in JSON lines files."""
    rng = random.Random(seed)
    files = []
    for p in range(parts):
        path = folder / f"part-{seed}-{p}.jsonl"
        with path.open("w") as f:
            for _ in range(rows):
                ids = [rng.randrange(8, 60) for _ in range(12)]
                label = rng.randrange(2)
                if label:
                    ids[rng.randrange(12)] = 7
                f.write(json.dumps({"input_ids": ids, "labels": label}) + "\n")
        files.append(str(path))
    return files


def hf_stream(files: list[str]) -> Any:
    ds = datasets.load_dataset("json", data_files=files, split="train", streaming=True)
    return ds.with_format("torch")


def tiny_bert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        num_labels=2,
    )
    return transformers.BertForSequenceClassification(config)


def test_a_search_over_a_hugging_face_stream_from_local_json_completes(tmp_path) -> None:
    train = write_json_parts(tmp_path, 3, 128, seed=0)
    val = write_json_parts(tmp_path, 1, 96, seed=1)
    result = find(
        tiny_bert(),
        hf_stream(train),
        val_dataset=hf_stream(val),
        planned_samples=384,  # a Hugging Face stream says no length: the run's is given
        n_trials=2,
        budget=FAST_BUDGET,
        accuracy_samples=256,
        device="cpu",
        isolation="none",
        space={"knobs": {"batch_size": [16, 32], "num_workers": [0, 2, 4]}},
    )
    assert not [t.message for t in result.trials if t.failure]
    data = result.to_dict()
    assert "a stream (IterableDataset)" in data["search"]["data"]
    assert "96 items of the stream `val_dataset`" in data["search"]["data"]
    assert result.to_dict()["validation"]["metric"] == "accuracy"
    cfg = autotune.TrainingConfig.from_json(result.config.to_json())
    loader = cfg.dataloader(hf_stream(train))
    assert sum(len(b["labels"]) for b in loader) == 384
    # Three JSON files are three shards: a fourth worker would idle.
    assert make_stream(hf_stream(train), 384).workers == 3


# -- errors before any trial, each naming the problem ----------------------------------------


@pytest.mark.parametrize(
    ("dataset", "kwargs", "error", "words"),
    [
        (Endless(), {}, DataError, "with no length: say how many samples"),
        (
            Endless(),
            {"planned_epochs": 2},
            DataError,
            "planned_epochs=2 with `dataset`, a stream (Endless) with no length: read whole to "
            "learn it, it gave",
        ),
        (
            Blobs(512, length=False),
            {"planned_epochs": 2, "planned_samples": 600},
            ArgumentError,
            "planned_epochs=2 and planned_samples=600 with a stream: give one",
        ),
        (
            Blobs(16),
            {"planned_samples": 600},
            DataError,
            "The stream (Blobs) holds 16 items, fewer than one batch of the baseline's (32)",
        ),
        (
            OneShot(Blobs(96, length=False)),
            {"planned_samples": 200},
            DataError,
            "`dataset` (OneShot) gave no items when read again from its start",
        ),
        (Blobs(0), {}, DataError, "is a stream that gave no items"),
    ],
    ids=["endless", "endless-epochs", "both", "shorter-than-a-batch", "one-shot", "empty"],
)
def test_a_stream_that_cannot_plan_a_run_is_refused_before_any_trial(
    dataset, kwargs, error, words, monkeypatch
) -> None:
    monkeypatch.setattr(streaming, "LENGTH_SECONDS", 0.5)  # an endless read is cut at once
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        find(blob_model(), dataset, val_dataset=Blobs(64, seed=1), n_trials=1, **kwargs)


def test_a_stream_needs_a_validation_set_and_a_map_style_set_no_planned_samples() -> None:
    with pytest.raises(DataError, match="give val_dataset= too"):
        find(blob_model(), Blobs(256), n_trials=1)
    with pytest.raises(ArgumentError, match="the dataset is map-style: give planned_epochs="):
        find(blob_model(), autotune.examples.tiny_data(), n_trials=1, planned_samples=100)


def test_a_stream_whose_items_the_model_cannot_take_is_refused_naming_the_batch() -> None:
    with pytest.raises(ModelError, match=r"on a batch of 2 items \(tensor\(2, 8\)"):
        find(nn.Linear(5, 4), Blobs(256), val_dataset=Blobs(64, seed=1), n_trials=1)


def test_an_accuracy_run_past_the_end_of_a_stream_reads_it_again_from_its_start() -> None:
    """Lying says it holds 4,096 items and gives 100: a run of 1,024 reads it over 11 passes,
    as a trainer would, rather than failing at its end."""
    prepared = prepare_workload(
        blob_model(), Lying(), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    cfg = autotune.TrainingConfig(batch_size=32)
    outcome = runner.run_trial(
        cfg,
        prepared.workload,
        FAST_BUDGET,
        accuracy=AccuracyCheck(samples=1024, seeds=(0,)),
    )
    assert outcome.ok, outcome.message
    assert outcome.accuracy[0].samples == 1024


def test_a_stream_whose_next_pass_gives_nothing_says_how_many_items_it_gave() -> None:
    stream = Stream(OnceOnly(), samples=1024, length=100)
    cfg = autotune.TrainingConfig(batch_size=32)
    with pytest.raises(StreamEnded, match=r"again from its start \(pass 2\), after 100: this"):
        list(runner.stream_items(cfg, stream, 0, 1024))


def test_a_long_stream_read_past_its_cap_keeps_one_pass_and_says_its_passes_are_not_known(
    monkeypatch,
) -> None:
    monkeypatch.setattr(streaming, "LOOKAHEAD_SECONDS", 0.2)
    stream = make_stream(Endless(), 10**9, workers=False)
    assert stream.length is None and stream.passes == 1.0 and stream.read is not None
    assert not stream.read.ended and 0 < stream.read.items < 10**9
    assert "without an end: how many passes the run takes is not known" in stream_note(stream)
    # One that holds the run is read only as far as it: one pass.
    held = make_stream(Blobs(512, length=False), 300, workers=False)
    assert (held.length, held.passes, held.read.items) == (None, 1.0, 300)
    assert "read as far as the run" in stream_note(held)


def test_the_planned_run_over_several_passes_counts_each_restart() -> None:
    """A run of two passes starts the stream again once: its measurement prices that start,
    workers or none (one pass never pays it)."""
    prepared = prepare_workload(
        blob_model(), Blobs(256), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0,
        planned_samples=512,
    )  # fmt: skip
    assert prepared.workload.train.passes == 2.0
    cfg = autotune.TrainingConfig(batch_size=32)
    m = runner.run_trial(cfg, prepared.workload, FAST_BUDGET).measurement
    assert m is not None and m.epoch_restart and m.restart_seconds is not None
    assert m.projected_time(512, 2.0) == m.projected_time(512, 1.0) + m.restart_cost
    one = prepare_workload(
        blob_model(), Blobs(256), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    single = runner.run_trial(cfg, one.workload, FAST_BUDGET).measurement
    assert single is not None and not single.epoch_restart


def test_two_accuracy_seeds_over_a_two_pass_stream_read_different_data_in_each_pass() -> None:
    """Each (seed, pass) is told its own set_epoch value: seed 1's first pass is not seed 0's
    second, and no two of the four passes read the items in one order."""
    source = EpochShuffled(64)
    stream = make_stream(source, 128, workers=False)
    assert (stream.length, stream.passes, len(stream)) == (64, 2.0, 64)
    cfg = autotune.TrainingConfig(batch_size=16)
    source.told.clear()
    passes = {}
    for seed in (0, 1):
        items = torch.stack([x for x, _ in runner.stream_items(cfg, stream, seed, 128)])
        passes[seed, 0], passes[seed, 1] = items[:64], items[64:]
    assert source.told == [0, PASS_STRIDE, 1, 1 + PASS_STRIDE]
    for a, b in itertools.combinations(passes, 2):
        assert not torch.equal(passes[a], passes[b]), (a, b)
    # ... each pass the whole stream: every item once.
    for items in passes.values():
        assert torch.allclose(items.sum(0), passes[0, 0].sum(0))


# -- what the guard needs of a stream --------------------------------------------------------


def _items(cfg: autotune.TrainingConfig, workload: Any, seed: int, steps: int) -> torch.Tensor:
    return torch.cat([b[0] for b in runner._training_batches(cfg, workload, seed, steps)])


@pytest.mark.parametrize("workers", [0, 2])
def test_two_arms_of_one_seed_read_a_stream_in_the_same_order_whatever_their_batch_sizes(
    workers,
) -> None:
    prepared = prepare_workload(
        blob_model(), Blobs(512), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    small = autotune.TrainingConfig(batch_size=8, num_workers=workers)
    large = autotune.TrainingConfig(batch_size=32, num_workers=workers)
    a = _items(small, prepared.workload, seed=3, steps=32)
    b = _items(large, prepared.workload, seed=3, steps=8)
    assert a.shape == b.shape == (256, 8)
    assert torch.equal(a, b)
    # ... and the first items are the stream's own first items, in its order.
    first = torch.stack([x for x, _ in itertools.islice(iter(Blobs(512)), 8)])
    if workers == 0:
        assert torch.equal(a[:8], first)


def test_a_stream_that_does_not_replay_its_order_is_said_to_weaken_the_pairs() -> None:
    replaying = prepare_workload(
        blob_model(), Blobs(256), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    assert isinstance(replaying.workload.train, Stream) and replaying.workload.train.replays
    assert "does not replay" not in (replaying.note or "")
    flips = make_stream(PyRandomFlips(256), None)
    assert flips.replays  # random is seeded as an accuracy run seeds it: it replays
    shuffled = prepare_workload(
        blob_model(), Unseeded(256), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    assert not shuffled.workload.train.replays
    assert "it does not replay its order" in shuffled.note
    assert "the accuracy guard's pairs cannot see the same samples in the same order" in (
        shuffled.note
    )


def test_a_stream_that_gives_every_seed_the_same_items_is_said_to_show_no_data_order_spread():
    # Blobs yields one fixed sequence: accuracy runs of seeds 0, 1, 2 train on the same data.
    fixed = prepare_workload(
        blob_model(), Blobs(256), Blobs(64, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    assert isinstance(fixed.workload.train, Stream)
    assert fixed.workload.train.replays and not fixed.workload.train.seeded
    assert "the same items in the same order at every data-order seed" in fixed.note
    assert "shows no effect of the data order" in fixed.note
    # Flips drawn from the seeded generator: each seed's run sees other items.
    flips = make_stream(PyRandomFlips(256), None)
    assert flips.replays and flips.seeded
    assert "at every data-order seed" not in stream_note(flips)
    # A stream that does not replay is said to be that, not this.
    unseeded = make_stream(Unseeded(256), None)
    assert not unseeded.replays and "at every data-order seed" not in stream_note(unseeded)


def test_a_stream_that_gives_every_worker_all_of_itself_is_searched_with_one_worker() -> None:
    limit, why = worker_limit(Blobs(64, split=False))
    assert limit == 1
    assert "gives every DataLoader worker all of itself" in why
    assert worker_limit(Blobs(64)) == (None, "")


def test_validation_from_a_stream_is_its_first_items_in_order() -> None:
    prepared = prepare_workload(
        blob_model(), Blobs(256), Blobs(3000, seed=1), autotune.Task(), val_fraction=0.1, seed=0
    )
    val = prepared.workload.val
    assert isinstance(val, Items) and len(val) == 2048
    first = next(iter(Blobs(3000, seed=1)))
    assert torch.equal(val[0][0], first[0]) and val[0][1] == first[1]
    assert "validation: the first 2,048 items of the stream `val_dataset` (Blobs)" in (
        prepared.note
    )


def test_a_loader_over_a_stream_has_no_sampler_and_keeps_the_tuned_settings() -> None:
    cfg = autotune.TrainingConfig(
        batch_size=16, num_workers=2, prefetch_factor=4, gradient_accumulation_steps=2
    )
    loader = cfg.dataloader(Blobs(256))
    assert isinstance(loader, DataLoader)
    assert loader.batch_size == 16 and loader.num_workers == 2 and loader.prefetch_factor == 4
    assert sum(len(y) for _, y in loader) == 256  # each item once, split across the workers


# -- the command line and verify -------------------------------------------------------------

FACTORY = """
import torch
from torch import nn
from torch.utils.data import IterableDataset, get_worker_info


class Blobs(IterableDataset):
    def __init__(self, n, seed=0, length=True):
        self.n, self.seed, self.length = n, seed, length

    def __len__(self):
        if not self.length:
            raise TypeError("a stream with no length")
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        centers = 3 * torch.randn(4, 8, generator=torch.Generator().manual_seed(99))
        info = get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(self.n):
            y = int(torch.randint(0, 4, (), generator=g))
            x = centers[y] + torch.randn(8, generator=g)
            if i % k == w:
                yield x, y


def model():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def data():
    return Blobs(1024, length=False), Blobs(128, seed=1)
"""


def test_the_command_line_searches_a_stream_and_verify_remeasures_its_answer(
    tmp_path, capsys
) -> None:
    from autotune._cli import main

    factory = tmp_path / "streams.py"
    factory.write_text(FACTORY)
    out = tmp_path / "best.json"
    args = [
        "search",
        "--model",
        f"{factory}:model",
        "--data",
        f"{factory}:data",
        "--trials",
        "1",
        "--space",
        "quick",
        "--timed-seconds",
        "0.5",
        "--accuracy-samples",
        "256",
        "--storage",
        f"sqlite:///{tmp_path / 'a.db'}",
        "--out",
        str(out),
        "--quiet",
    ]
    # A stream with no length and no planned run: refused before any trial, naming the flag.
    assert main(args) == 2
    assert "--planned-samples N" in capsys.readouterr().err
    assert main([*args, "--planned-samples", "768"]) == 0
    result = json.loads(out.read_text())
    assert result["metrics"]["planned_samples"] == 768
    assert "the planned run reads 768 samples" in result["search"]["data"]
    capsys.readouterr()
    verify = ["verify", str(out), "--model", f"{factory}:model", "--data", f"{factory}:data"]
    assert main([*verify, "--rounds", "1", "--timed-samples", "128", "--quiet"]) == 0


def test_train_runs_a_stream_with_a_length_and_refuses_one_without() -> None:
    cfg = autotune.TrainingConfig(batch_size=32, num_workers=2)
    report = autotune.train(blob_model(), Blobs(256), cfg, epochs=2, val_dataset=Blobs(64, 1))
    assert [e.samples for e in report.epochs] == [256, 256]
    with pytest.raises(ArgumentError, match=r"a stream \(Blobs\) with no length: train\(\)"):
        autotune.train(blob_model(), Blobs(256, length=False), cfg)


def test_trials_that_differ_in_prefetching_read_differently() -> None:
    """Configs that differ only in the loader's prefetching or persistence printed the same
    line (``workers=2``) with different speed-ups: the line names them where they are set."""
    cfg = autotune.TrainingConfig(num_workers=2)
    assert "workers=2 " in cfg.describe() + " " and "prefetch" not in cfg.describe()
    tuned = cfg.replace(prefetch_factor=8, persistent_workers=True)
    assert "workers=2 persistent prefetch=8 " in tuned.describe()
