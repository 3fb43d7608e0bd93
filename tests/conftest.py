"""Shared fixtures: tiny models and datasets live in autotune.examples and here."""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any

# One intra-op thread per test process (and the trial workers it starts): on a busy 2-core
# machine OpenMP threads that spin-wait for each other make tiny steps 100x slower at random,
# which would turn timing-based assertions into coin flips.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

import autotune
from autotune.examples import tiny_data, tiny_model

torch.set_num_threads(1)

FAST_BUDGET = autotune.Budget(warmup_steps=1, timed_samples=64, min_timed_steps=3, chunks=3)

# Modules whose tests share one search (a module-scoped fixture): under pytest-xdist (the
# README's `-n 2 --dist loadgroup`) each runs on one worker, so its search is made once.
SHARED_SEARCH_MODULES = ("tests/test_report.py", "tests/test_verification.py")

try:
    from xdist.scheduler import LoadGroupScheduling
except ImportError:  # pytest-xdist (a test extra) not installed: the suite runs serially
    LoadGroupScheduling = None

if LoadGroupScheduling is not None:

    class _SharedSearchScheduling(LoadGroupScheduling):
        """loadgroup, with each module of SHARED_SEARCH_MODULES one group. Not through
        xdist_group marks: pytest-xdist 3.8 groups by rewriting node ids, which pytest 9.2 no
        longer lets it do (pytest-xdist issue 1386), and the marks are silently ignored."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in SHARED_SEARCH_MODULES else super()._split_scope(nodeid)

    @pytest.hookimpl(optionalhook=True)  # -p no:xdist leaves the hook unknown
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadgroup":
            return None  # another --dist: xdist's own
        return _SharedSearchScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is False here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap() -> None:
    """Every trial calls gc.collect() (to give its memory back, and before measuring memory).
    A full collection walks every object the process tracks, and a test process holds torch,
    transformers, lightning and each collected test: about 0.5 s of CPU per collection, the
    largest single cost of the plain suite. What is alive when a test module starts (imports,
    the test items, other modules' objects) is moved out of the collector's sight with
    gc.freeze(); what a test creates is collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def tiny() -> tuple[torch.nn.Module, torch.utils.data.Dataset]:
    return tiny_model(), tiny_data()


_OPTIONS = {f.name for f in dataclasses.fields(autotune.SearchOptions)}
_TASK = {f.name for f in dataclasses.fields(autotune.Task)}


def split_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A test's keywords as the entry points take them: SearchOptions' fields in ``options``,
    Task's in ``task`` (a metric on its own stays the ``metric`` keyword)."""
    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTIONS}
    task = {k: kwargs.pop(k) for k in list(kwargs) if k in _TASK and k != "metric"}
    if options:
        kwargs["options"] = autotune.SearchOptions(**options)
    if task:
        kwargs["task"] = autotune.Task(**task, metric=kwargs.pop("metric", "auto"))
    return kwargs


def find(model: Any, dataset: Any, **kwargs: Any) -> autotune.SearchResult:
    """``autotune.find_best`` with a test's keywords, split as :func:`split_keywords` says."""
    return autotune.find_best(model, dataset, **split_keywords(kwargs))


@pytest.fixture
def fast_kwargs() -> dict:
    """find_best options that keep a search to a few seconds on a CPU. Trials run in-process
    here so tests can watch them; tests/test_faults.py covers isolated workers."""
    return {"budget": FAST_BUDGET, "accuracy_samples": 2048, "device": "cpu", "isolation": "none"}
