"""Data-parallel trials: each trial a job of ``ranks`` processes started by PyTorch's elastic
launcher (``python -m torch.distributed.run``, as ``torchrun``), never a home-made process group.

The job lives across trials while they succeed (importing torch and joining the process group
are paid once); rank 0 takes each trial from this process over a Unix socket in the job's
private directory and hands it to the other ranks (see :mod:`autotune._trial.ddp_worker`).
A trial that fails on any rank ends the job: that rank writes what failed and exits, the
launcher stops every other rank within its monitor interval, and the outcome names the rank
(``rank 1 of 2: out of memory ...``). A job that ran past its limit is stopped the same way,
from here: the launcher is asked to stop its ranks, then killed, then any rank still alive
(their pids are in the job directory) is killed too, so no process is left behind; the
rendezvous is ``--standalone`` (a free local port), released with the processes.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import os
import pickle
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from autotune._device import cpu_share
from autotune._knobs.config import TrainingConfig
from autotune._trial.failures import FailureReason
from autotune._trial.isolation import (
    START_TIMEOUT,
    ProcessExecutor,
    WorkerStartError,
    _describe_exit,
    _kill_group,
    own_group,
)
from autotune._trial.outcome import TrialOutcome
from autotune._trial.workload import Workload

__all__ = ["MONITOR_INTERVAL", "DDPExecutor", "ddp_env", "launcher_command"]

MONITOR_INTERVAL = 0.2  # seconds between the launcher's checks of its ranks
STOP_GRACE = 5.0  # seconds the launcher has to stop its ranks before it is killed
LOG_TAIL = 1500  # characters of the launcher's log a failure without a record shows
# The job directory's files, shared with the ranks (ddp_worker imports them from here: this
# module must not import ddp_worker, or ``import autotune`` would load the trial worker's module
# before ``python -m autotune._trial.worker`` runs it, and every fresh worker would warn).
FAILURE_FILE = "failure-rank{rank}.json"
PID_FILE = "pid-rank{rank}"
SEARCH_PID = "AUTOTUNE_DDP_SEARCH"  # the environment variable naming the search's pid
SOCKET_FILE = "control.sock"
WORKLOAD_FILE = "workload.pkl"


def launcher_command(ranks: int, directory: str) -> list[str]:
    """The ``torchrun`` command of a trial job (``python -m torch.distributed.run``)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={ranks}",
        "--max-restarts=0",
        f"--monitor-interval={MONITOR_INTERVAL}",
        "-m",
        "autotune._trial.ddp_worker",
        directory,
    ]


def ddp_env(ranks: int, device: str) -> dict[str, str]:
    """What a job's ranks need in their environment: the backend, and each rank's share of
    the CPU's threads (torchrun's own default is one thread per rank)."""
    cuda = torch.device(device).type == "cuda"
    return {
        "AUTOTUNE_DDP_BACKEND": "nccl" if cuda else "gloo",
        "OMP_NUM_THREADS": str(max(1, cpu_share() // ranks)),
    }


class DDPExecutor(ProcessExecutor):
    """Runs each trial as a data-parallel job of ``ranks`` processes (see the module): a
    :class:`ProcessExecutor` whose worker is the job (its rank 0 answers), started, stopped
    and read after a failure its own way."""

    starting = "starting its ranks"

    def __init__(
        self,
        workload: Workload,
        ranks: int,
        device: str,
        *,
        env: dict[str, str] | None = None,
        preload: tuple[tuple[str, str], ...] = (),
        fresh_each: bool = False,
    ) -> None:
        self._payload = pickle.dumps((preload, pickle.dumps(workload)))
        self.ranks = ranks
        self._env = {**(env or {}), **ddp_env(ranks, device)}
        self._fresh_each = fresh_each
        self._dir: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._last: TrainingConfig | None = None
        self.started = 0  # jobs started so far

    # -- The job ------------------------------------------------------------------------------

    def _start(self, timeout: float = START_TIMEOUT) -> None:
        directory = tempfile.mkdtemp(prefix="autotune-ddp-")  # private (0700): its socket too
        self._dir = directory
        Path(directory, WORKLOAD_FILE).write_bytes(self._payload)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(os.path.join(directory, SOCKET_FILE))
        server.listen(1)
        cache = os.path.join(directory, "compile-cache")
        env = {
            **os.environ,
            **self._env,
            "TORCHINDUCTOR_CACHE_DIR": cache,
            "TRITON_CACHE_DIR": os.path.join(cache, "triton"),
            "AUTOTUNE_DDP_JOB": secrets.token_hex(8),
            SEARCH_PID: str(os.getpid()),  # its ranks stop when this process is gone
        }
        self.started += 1
        self._last = None
        log = open(os.path.join(directory, "launcher.log"), "wb")  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                launcher_command(self.ranks, directory),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Ctrl-C is the search's (a group of its own, not the terminal's); the job is
                # stopped from here; in the search's session, as a trial worker is (own_group)
                **own_group(),
            )
        finally:
            log.close()
        try:
            self._conn = self._accept(server, timeout)
            kind, detail = self._receive_start(timeout)
        except WorkerStartError:
            self._stop(kill=True)
            raise
        finally:
            server.close()
        if kind != "ready":
            self._stop(kill=True)
            raise WorkerStartError(f"the trial's ranks cannot load the model and data: {detail}")

    def _accept(
        self, server: socket.socket, timeout: float
    ) -> multiprocessing.connection.Connection:
        deadline = time.monotonic() + timeout
        server.settimeout(0.5)
        while True:
            try:
                sock, _ = server.accept()
            except TimeoutError:
                self._check_alive(deadline, timeout)
                continue
            sock.settimeout(None)
            return multiprocessing.connection.Connection(sock.detach())

    def _receive_start(self, timeout: float) -> tuple[str, object]:
        assert self._conn is not None
        deadline = time.monotonic() + timeout
        while not self._conn.poll(0.5):
            self._check_alive(deadline, timeout)
        try:
            return self._conn.recv()  # type: ignore[no-any-return]
        except (EOFError, OSError):
            raise WorkerStartError(f"the trial's ranks failed to start: {self._why()}") from None

    def _check_alive(self, deadline: float, timeout: float) -> None:
        assert self._process is not None
        if self._process.poll() is not None:
            raise WorkerStartError(f"the trial's ranks failed to start: {self._why()}")
        if time.monotonic() >= deadline:
            raise WorkerStartError(f"the trial's ranks did not start within {timeout:.0f} s")

    def _stop(self, *, kill: bool) -> None:
        """End the job: asked to finish (rank 0 tells the others) or stopped, and in either
        case every rank gone before this returns."""
        process, conn, directory = self._process, self._conn, self._dir
        self._process = self._conn = self._dir = None
        self._last = None
        if process is not None:
            if not kill and conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(None)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)  # the launcher stops its ranks
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if conn is not None:
            conn.close()
        if directory is not None:
            _kill_ranks(directory)
            shutil.rmtree(directory, ignore_errors=True)
        if process is not None:
            _kill_group(process)  # what the ranks started and left behind (compile workers)

    # -- A job that ended mid-trial ------------------------------------------------------------

    def _ended(self, cfg: TrainingConfig, start: float) -> TrialOutcome:
        """The outcome of a job that ended mid-trial: the first rank's failure it recorded,
        else the launcher's root cause (a rank killed by a signal records nothing)."""
        process, directory = self._process, self._dir
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_GRACE + 5)  # the launcher stops the other ranks
        reason, message = root_failure(directory, self.ranks)
        self._stop(kill=True)
        return TrialOutcome(
            config=cfg, failure=reason, message=message, seconds=time.perf_counter() - start
        )

    def _why(self) -> str:
        """Why the job ended (see :func:`root_failure`)."""
        return root_failure(self._dir, self.ranks)[1]


_EXIT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?exitcode\s*:\s*(-?\d+)", re.S)
_ROOT = "Root Cause"


def launcher_exits(log: str) -> dict[int, int]:
    """The exit code of each rank the launcher reported as failed (its "Failures" and "Root
    Cause" sections)."""
    return {int(rank): int(code) for rank, code in _EXIT.findall(log)}


def describe_launcher_failure(log: str, ranks: int) -> str:
    """The launcher's root cause in words (``rank 1 of 2: ... killed by SIGKILL``), or the
    end of its log where it names none."""
    root = log.split(_ROOT, 1)[1] if _ROOT in log else ""
    exits = launcher_exits(root)
    if exits:
        rank, code = next(iter(exits.items()))
        return _exit_words(rank, ranks, code)
    tail = log.strip()[-LOG_TAIL:]
    return f"the trial's launcher ended; its log ends: {tail}" if tail else "the launcher ended"


def _exit_words(rank: int, ranks: int, code: int) -> str:
    return f"rank {rank} of {ranks}: {_describe_exit(code).replace('worker', 'rank')}"


def root_failure(directory: str | None, ranks: int) -> tuple[FailureReason, str]:
    """Why a job ended mid-trial, from the failures its ranks recorded and the launcher's log:
    the earliest failure a rank recorded of its own (an OOM, a NaN, an error); else a rank that
    ended without a record (killed by a signal, or exiting), with its exit as the launcher saw
    it, the others having only seen it go ("connection closed by peer"); else the launcher's
    root cause. Always names the rank."""
    if directory is None:
        return FailureReason.CRASH, "crashed: the trial's launcher ended"
    records = []
    for path in Path(directory).glob(FAILURE_FILE.format(rank="*")):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    own = [r for r in records if not r.get("peer")]
    if own:
        first = min(own, key=lambda r: float(r["time"]))
        return FailureReason(
            first["reason"]
        ), f"rank {first['rank']} of {ranks}: {first['message']}"
    log = ""
    with contextlib.suppress(OSError):
        log = Path(directory, "launcher.log").read_text(errors="replace")
    started = {
        int(path.name.removeprefix(PID_FILE.format(rank="")))
        for path in Path(directory).glob(PID_FILE.format(rank="*"))
    }
    silent = sorted(started - {int(r["rank"]) for r in records})
    exits = launcher_exits(log)
    # SIGTERM is how the launcher stops the ranks left once one failed: not a cause.
    stopped = -int(signal.SIGTERM)
    for rank in sorted(silent, key=lambda r: exits.get(r) == stopped):
        if rank in exits:
            return FailureReason.CRASH, f"crashed: {_exit_words(rank, ranks, exits[rank])}"
    if silent:
        return FailureReason.CRASH, (
            f"crashed: rank {silent[0]} of {ranks} ended without a word (killed by a signal, "
            "or the OS out-of-memory killer)"
        )
    if records:
        first = min(records, key=lambda r: float(r["time"]))
        return FailureReason.CRASH, f"crashed: rank {first['rank']} of {ranks}: {first['message']}"
    return FailureReason.CRASH, f"crashed: {describe_launcher_failure(log, ranks)}"


def _kill_ranks(directory: str) -> None:
    """SIGKILL every rank of the job still alive (the launcher was killed before it could stop
    them, or a rank ignored it): by the pids they wrote, where the process is still that
    rank (its command line names the job directory)."""
    for path in Path(directory).glob(PID_FILE.format(rank="*")):
        try:
            pid = int(path.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if directory.encode() in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
