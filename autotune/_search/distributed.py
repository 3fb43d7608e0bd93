"""Many workers, one study: Optuna is the distributed engine, autotune adds the plumbing.

The coordinator (``autotune search``) measures the baseline, publishes what workers need in the
study's user attributes, then either runs candidates itself or starts ``autotune worker``
processes (``--processes N`` / ``--devices``), one per device (``CUDA_VISIBLE_DEVICES``) or per
share of the CPU cores. Workers on other hosts join the same study through a shared storage
(PostgreSQL). The coordinator confirms the winner and writes the JSON; workers only run trials.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import optuna
import torch
from torch import nn
from torch.utils.data import Dataset

from autotune._device import describe_device, environment, resolve_device
from autotune._display import reporter
from autotune._errors import ArgumentError, AutotuneError
from autotune._search.loop import Search
from autotune._search.settings import SearchSettings
from autotune._search.storage import (
    FINISHED,
    OWNER,
    open_study,
    read_settings,
    redact,
    refuse_other_model,
    resolve,
)
from autotune._trial.data import DataModuleLike
from autotune._trial.executors import make_executor
from autotune._trial.fingerprint import model_fingerprint
from autotune._trial.isolation import worker_env
from autotune._trial.measure import machine_meter
from autotune._trial.workload import prepare_workload

__all__ = [
    "cpu_shares",
    "gpu_shares",
    "join_search",
    "launch_local_workers",
    "restricted_to",
    "visible_devices",
]

log = logging.getLogger("autotune")

CPU_SET_ENV = "AUTOTUNE_CPU_SET"  # the cores a local worker is pinned to, e.g. "2,3"


def cpu_shares(n: int) -> list[list[int]]:
    """Split this process's CPU cores into ``n`` disjoint, contiguous shares."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not cores:
        cores = list(range(os.cpu_count() or 1))
    if n > len(cores):
        raise ArgumentError(
            f"`--processes` is {n}, but this process may use {len(cores)} CPU core(s): each "
            "search process needs at least one. Use fewer processes, or GPUs (--devices)."
        )
    size = len(cores) // n
    return [cores[i * size : (i + 1) * size] for i in range(n)]


def visible_devices(requested: Sequence[str], inherited: str | None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` values for the GPUs ``--devices`` names. Where a scheduler
    (Slurm, Kubernetes) already set ``CUDA_VISIBLE_DEVICES`` (``inherited``), ``--devices``
    counts within the GPUs it made visible: ``--devices 0,1`` under ``4,5`` is GPUs 4 and 5,
    never GPUs 0 and 1 that belong to another job."""
    parent = [d.strip() for d in (inherited or "").split(",") if d.strip()]
    if inherited is None:
        return list(requested)
    out = []
    for device in requested:
        if not device.isdigit():
            if device not in parent:
                raise ArgumentError(
                    f"`--devices` names {device!r}, which CUDA_VISIBLE_DEVICES={inherited!r} "
                    "does not make visible. Name GPUs by their index among the visible ones."
                )
            out.append(device)
            continue
        index = int(device)
        if index >= len(parent):
            raise ArgumentError(
                f"`--devices` names GPU {index}, but CUDA_VISIBLE_DEVICES={inherited!r} makes "
                f"{len(parent)} GPU(s) visible: use indices 0..{len(parent) - 1} among them."
            )
        out.append(parent[index])
    return out


def gpu_shares(n: int) -> list[list[int]] | None:
    """CPU cores for ``n`` GPU workers, split evenly (each loads its own batches), or None
    when there are fewer cores than workers."""
    try:
        return cpu_shares(n)
    except ArgumentError:
        return None


@contextlib.contextmanager
def restricted_to(cores: Sequence[int]) -> Iterator[None]:
    """Pin this process (and the processes it starts) to ``cores`` and match torch's threads."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    saved, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, set(cores))
    torch.set_num_threads(len(cores))
    describe_device.cache_clear()  # its cpu_count is the share now
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)
        torch.set_num_threads(threads)
        describe_device.cache_clear()


def pin_from_env() -> None:
    """In a local worker: apply the CPU share the coordinator chose (AUTOTUNE_CPU_SET)."""
    value = os.environ.get(CPU_SET_ENV)
    if value and hasattr(os, "sched_setaffinity"):
        cores = {int(c) for c in value.split(",") if c.strip()}
        os.sched_setaffinity(0, cores)
        torch.set_num_threads(len(cores))
        describe_device.cache_clear()


def launch_local_workers(
    *,
    n: int,
    storage: str,
    model_spec: str,
    data_spec: str,
    devices: Sequence[str] | None,
    shares: Sequence[Sequence[int]] | None,
    report: Callable[[str], None],
    extra_args: Sequence[str] = (),
) -> Callable[[optuna.Study], None]:
    """A launcher for find_best: starts ``n`` ``autotune worker`` processes on this host, each
    on its own device or CPU share, and waits for them."""

    def launch(study: optuna.Study) -> None:
        processes = []
        for i in range(n):
            env = dict(os.environ)
            device = "cpu"
            if devices:
                env["CUDA_VISIBLE_DEVICES"] = devices[i]
                device = "cuda:0"
            if shares:
                env[CPU_SET_ENV] = ",".join(str(c) for c in shares[i])
            cmd = [
                sys.executable, "-m", "autotune", "worker",
                "--storage", storage, "--study", study.study_name,
                "--model", model_spec, "--data", data_spec,
                "--device", device, "--seed-offset", str(i + 1), *extra_args,
            ]  # fmt: skip
            processes.append(subprocess.Popen(cmd, env=env))
            where = f"GPU {devices[i]}" if devices else f"CPU cores {env.get(CPU_SET_ENV)}"
            report(f"worker {i + 1}/{n} started (pid {processes[-1].pid}, {where})")
        try:
            for i, process in enumerate(processes):
                code = process.wait()
                if code != 0:
                    report(f"worker {i + 1} exited with code {code}; its trials are kept")
        except KeyboardInterrupt:
            for process in processes:
                process.send_signal(2)  # SIGINT: each ends its trial cleanly
            for process in processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
            raise

    return launch


def join_search(
    model: nn.Module,
    dataset: Dataset[Any] | DataModuleLike,
    *,
    storage: str,
    study_name: str,
    val_dataset: Dataset[Any] | None = None,
    device: str | None = None,
    isolation: str | None = None,
    seed_offset: int = 1,
    wait_for_baseline: float = 600.0,
    progress: Callable[[str], None] = print,
) -> int:
    """Run candidate trials of an existing study until its budget is spent; returns how many
    trials this worker ran. The study must have been started by ``find_best``/``autotune
    search``, which measures the baseline and publishes the settings: the worker guards the
    same metric with the same hooks (loaded by reference) and splits the data the same way."""
    study, settings = _wait_for_settings(storage, study_name, wait_for_baseline, seed_offset)
    if settings.trainer is not None:
        raise AutotuneError(
            f"Study {study_name!r} tunes a {settings.trainer} trainer: its trials run that "
            "trainer's loop in the search's own process and trial workers, and take no "
            "`autotune worker`."
        )
    device_str = resolve_device(device)
    report = reporter(progress)
    prepared = prepare_workload(
        model,
        dataset,
        val_dataset,
        settings.hooks.load(higher_is_better=settings.higher_is_better),
        val_fraction=settings.val_fraction,
        seed=settings.seed,
        eval_batch_size=settings.validation_batch_size,
        planned_samples=settings.planned_samples,  # a stream's run, as the search planned it
    )
    mine = settings.replace(
        model_fingerprint=model_fingerprint(model), data_fingerprint=prepared.data_fingerprint
    )
    refuse_other_model(study, settings, mine, worker=True)  # before any trial
    if prepared.note:
        report(prepared.note)
    # Trials of a data-parallel study are jobs of as many ranks here, on this host's devices.
    executor, fallback = make_executor(
        prepared.workload,
        isolation or settings.isolation,
        env=worker_env(),
        ranks=settings.baseline.ranks,
        device=device_str,
    )
    if fallback:
        report(fallback)
    settings = settings.replace(baseline=settings.baseline.replace(device=device_str))
    search = Search(
        study=study,
        settings=settings,
        executor=executor,
        report=report,
        fingerprint=environment(device_str)["fingerprint"],
        load_meter=machine_meter(device_str),
    )
    try:
        search.run_worker()
    finally:
        executor.close()
    me = os.getpid()
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=FINISHED)
        if t.user_attrs.get(OWNER, {}).get("pid") == me
    )


def _wait_for_settings(
    storage: str, study_name: str, wait: float, seed_offset: int
) -> tuple[optuna.Study, SearchSettings]:
    deadline = time.time() + wait
    backend = resolve(storage)  # one resolver: journal:// files too
    while True:
        try:
            study = optuna.load_study(study_name=study_name, storage=backend)
        except KeyError:
            study = None
        settings = read_settings(study) if study is not None else None
        if settings is not None:
            # Each worker samples with its own seed, or they would all propose the same configs.
            return open_study(storage, study_name, settings.seed + seed_offset), settings
        if time.time() >= deadline:
            raise AutotuneError(
                f"Study {study_name!r} in {redact(storage)!r} has no measured baseline after "
                f"{wait:.0f} s: start it with `autotune search` first (it measures the baseline "
                "and publishes the settings workers need)."
            )
        time.sleep(1.0)
