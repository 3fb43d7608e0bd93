"""One rank of a data-parallel trial job: ``torchrun ... -m autotune._trial.ddp_worker DIR``
(started by :class:`autotune._trial.ddp.DDPExecutor` through PyTorch's elastic launcher).

Every rank loads the pickled workload from ``DIR``, joins the process group (gloo on the CPU,
NCCL on GPUs, with a gloo group beside it for control messages), and runs each trial that rank
0 receives from the search process over the Unix socket in ``DIR`` and hands to all ranks. A
trial trains through the runner, as any trial does: the model in ``DistributedDataParallel``
(``cfg.prepare``), each rank's share of the data through a ``DistributedSampler``
(``cfg.dataloader``), or each rank's part of a stream (checked once, before any trial: a stream
that gives every rank all of itself is an error naming it).

Faults agree across ranks: a rank whose trial fails (an OOM, a NaN, any error) writes what
failed, with its rank and the time, to ``DIR`` and exits at once; the launcher then stops every
other rank (they may be waiting in a collective that will never complete), and the executor
reads the first failure. Ranks whose trials succeed gather their outcomes on the control group
before rank 0 answers, so an answer always means every rank finished: its times are the slowest
rank's, its memory the largest rank's, its throughput the global samples per second.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import multiprocessing.connection
import os
import pickle
import signal
import socket
import sys
import threading
import time
from typing import Any

import psutil
import torch
import torch.distributed as dist

from autotune._stream import Stream
from autotune._trial.ddp import FAILURE_FILE, PID_FILE, SEARCH_PID, SOCKET_FILE, WORKLOAD_FILE
from autotune._trial.failures import FailureReason, classify
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, TrialOutcome
from autotune._trial.runner import reporting_steps, run_trial
from autotune._trial.streaming import check_rank_parts
from autotune._trial.worker import _preload, _StepSender, _watch_parent, warm_up

# A rank waits between trials (and for the slowest rank) as long as the search lasts; a rank
# that died is stopped by the launcher, not by this timeout.
IDLE_TIMEOUT = datetime.timedelta(days=7)


def rank_device(device: str, local_rank: int) -> str:
    """A rank's own device: ``cuda`` (any index) becomes ``cuda:LOCAL_RANK``; the CPU stays."""
    return f"cuda:{local_rank}" if torch.device(device).type == "cuda" else device


def merge(outcomes: list[TrialOutcome], original: Any, *, measured: bool = True) -> TrialOutcome:
    """One outcome of a trial that succeeded on every rank: rank 0's accuracy runs (every rank
    trains the same model), the slowest rank's times, the largest rank's memory, and the
    throughput of every rank together (each chunk's steps trained ``ranks`` micro-batches).
    ``measured=False``: the trial was given its measurement (already merged), not made one."""
    first = outcomes[0]
    measurements = [o.measurement for o in outcomes if o.measurement is not None]
    measurement = first.measurement
    if measured and measurement is not None and len(measurements) == len(outcomes):
        measurement = _merged(measurements, len(outcomes))
    return dataclasses.replace(
        first,
        config=original,
        measurement=measurement,
        seconds=max(o.seconds for o in outcomes),
    )


def _largest(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _merged(ms: list[Measurement], ranks: int) -> Measurement:
    m = ms[0]
    chunks = tuple(max(times) for times in zip(*(x.chunk_times for x in ms), strict=True))
    compile_seconds = [x.compile_seconds for x in ms if x.compile_seconds is not None]
    restarts = [x.restart_seconds for x in ms if x.restart_seconds is not None]
    utilization = [x.gpu_utilization for x in ms if x.gpu_utilization is not None]
    return dataclasses.replace(
        m,
        batch_size=m.batch_size * ranks,  # global samples per step: throughput of all ranks
        chunk_times=chunks,
        data_wait=max(x.data_wait for x in ms),
        warmup_time=max(x.warmup_time for x in ms),
        first_batch_time=max(x.first_batch_time for x in ms),
        restart_seconds=max(restarts) if restarts else m.restart_seconds,
        peak_memory_bytes=_largest([x.peak_memory_bytes for x in ms]),
        peak_reserved_bytes=_largest([x.peak_reserved_bytes for x in ms]),
        device_free_bytes=min(
            (x.device_free_bytes for x in ms if x.device_free_bytes is not None), default=None
        ),
        gpu_utilization=sum(utilization) / len(utilization) if utilization else None,
        recompiles=max(x.recompiles for x in ms),
        compile_seconds=max(compile_seconds) if compile_seconds else None,
    )


# What a collective says when another rank is gone (gloo, NCCL): this rank's failure is then
# a consequence, not the cause.
PEER_GONE = (
    "closed by peer",
    "reset by peer",
    "remote worker",
    "remote process",
    "Broken pipe",
    "communicator was aborted",
    "DistNetworkError",
)


def _fail(directory: str, rank: int, world: int, reason: FailureReason, message: str) -> None:
    """Say what failed on this rank (the executor reports the first that is not a peer's
    death seen from here), then leave at once: the launcher stops the other ranks, which may
    be waiting for this one in a collective."""
    peer = any(marker in message for marker in PEER_GONE)
    record = {"rank": rank, "ranks": world, "time": time.time(), "reason": reason.value,
              "message": message, "peer": peer}  # fmt: skip
    path = os.path.join(directory, FAILURE_FILE.format(rank=rank))
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _watch_search(pid: int) -> None:
    """Exit once the search process ``pid`` is gone: the launcher (this rank's parent) runs
    in a session of its own and trains on after a search killed with SIGKILL; a rank that
    exits makes it stop the others."""
    try:
        search = psutil.Process(pid)
    except psutil.NoSuchProcess:
        os._exit(70)
    while True:
        time.sleep(0.5)
        try:
            gone = not search.is_running() or search.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            gone = True
        if gone:  # killed (a zombie until reaped), or its pid reused (is_running checks)
            os._exit(70)


def _connect(directory: str) -> multiprocessing.connection.Connection:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(directory, SOCKET_FILE))
    return multiprocessing.connection.Connection(sock.detach())


def _on_rank(accuracy: AccuracyCheck | None, device: str) -> AccuracyCheck | None:
    if accuracy is None or accuracy.config is None:
        return accuracy
    return dataclasses.replace(accuracy, config=accuracy.config.replace(device=device))


def main(directory: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the search process's to handle
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    search = os.environ.get(SEARCH_PID)
    if search:  # the launcher outlives a search killed with SIGKILL: the ranks watch it too
        threading.Thread(target=_watch_search, args=(int(search),), daemon=True).start()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    with open(os.path.join(directory, PID_FILE.format(rank=rank)), "w") as f:
        f.write(str(os.getpid()))
    backend = os.environ.get("AUTOTUNE_DDP_BACKEND", "gloo")
    conn = _connect(directory) if rank == 0 else None
    try:
        with open(os.path.join(directory, WORKLOAD_FILE), "rb") as f:
            preload, payload = pickle.load(f)
        _preload(preload)
        workload = pickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend=backend, timeout=IDLE_TIMEOUT)
        control = dist.new_group(backend="gloo") if backend != "gloo" else dist.group.WORLD
        dist.barrier(group=control)
        if isinstance(workload.train, Stream):
            check_rank_parts(workload.train, control)  # each rank its own part of the stream
    except Exception as exc:
        if conn is not None:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        _fail(directory, rank, world, FailureReason.CRASH, f"{type(exc).__name__}: {exc}")
    if conn is not None:
        conn.send(("ready", None))
    warmed: str | None = None
    while True:
        message: list[Any] = [None]
        if conn is not None:
            try:
                message[0] = conn.recv()
            except EOFError:
                message[0] = None
        dist.broadcast_object_list(message, src=0, group=control)
        if message[0] is None:
            break
        cfg, budget, accuracy, measured, steps = message[0]
        device = rank_device(cfg.device, local)
        try:
            if warmed != device:
                warm_up(device)
                warmed = device
            sender = _StepSender(conn) if conn is not None and steps else None
            with reporting_steps(sender):
                outcome = run_trial(
                    cfg.replace(device=device),
                    workload,
                    budget,
                    accuracy=_on_rank(accuracy, device),
                    measured=measured,
                )
        except Exception as exc:
            reason, text = classify(exc)
            _fail(directory, rank, world, reason, f"outside the trial: {text}")
        if not outcome.ok:
            assert outcome.failure is not None
            _fail(directory, rank, world, outcome.failure, outcome.message or "")
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, outcome, group=control)
        if conn is not None:
            conn.send(("outcome", merge(gathered, cfg, measured=measured is None)))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
