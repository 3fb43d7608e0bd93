"""Where trials run: in a separate worker process (the default), or in this process.

A trial worker is a spawned process with its own CUDA context. A hang, a segfault or the OS
OOM-killer takes down only that worker: the trial is recorded as ``timeout`` or ``crashed``
(with the signal or exit code) and the next trial gets a fresh worker. A CUDA error that leaves
the context unusable (illegal address, device-side assert) is recorded as ``device_error`` with
its own message, and the worker is replaced too. The worker lives across trials while they
succeed, so the start-up cost (importing torch) is paid once, not per trial; but on CUDA a trial
that compiles or autotunes cuDNN, and the trial after one, get a fresh worker: cuDNN's plan cache
(whose key does not include ``benchmark``), CUDA-graph pools and compiled kernels would otherwise
carry over and make a trial's result depend on the trials before it. Each worker compiles into an
empty cache directory of its own, so a compiled trial pays the cold compile cost that a user's
real run pays.

In-process trials are the fallback when the model or data cannot reach a worker (objects that
cannot be pickled); there a Python-level hang is still interrupted by an alarm signal, and a CUDA
error that poisons the process ends the search with a :class:`~autotune.DeviceError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from autotune._choices import CompileMode
from autotune._device import cpu_share
from autotune._errors import DeviceError
from autotune._knobs.config import TrainingConfig
from autotune._trial.failures import FailureReason, free_memory
from autotune._trial.measure import Measurement
from autotune._trial.outcome import AccuracyCheck, Budget, TrialOutcome
from autotune._trial.runner import StepListener, reporting_steps, run_trial
from autotune._trial.workload import Workload

__all__ = [
    "ISOLATION_MODES",
    "InProcessExecutor",
    "ProcessExecutor",
    "TrialExecutor",
    "TrialTimeout",
    "needs_fresh_worker",
    "own_group",
    "unpicklable_parts",
    "worker_env",
]

log = logging.getLogger("autotune")

START_TIMEOUT = 120.0  # seconds a new worker may take to import torch and load the workload


class TrialTimeout(BaseException):
    """A trial ran past its wall-clock limit. A BaseException, like KeyboardInterrupt, so that
    the trial's own ``except Exception`` does not swallow it."""


class TrialExecutor(Protocol):
    isolated: bool

    def run(
        self,
        cfg: TrainingConfig,
        budget: Budget,
        *,
        accuracy: AccuracyCheck | None = None,
        measured: Measurement | None = None,
        time_limit: float | None = None,
        progress: StepListener | None = None,
    ) -> TrialOutcome: ...

    def close(self) -> None: ...


def unpicklable_parts(workload: Workload) -> list[str]:
    """Names of the workload's parts that cannot be pickled (so cannot reach a worker)."""
    task = workload.task
    parts: dict[str, Any] = {
        "model": workload.model,
        "dataset": workload.train,
        "val_dataset": workload.val,
        "optimizer": workload.optimizer,
        "trainer": workload.loop,
    }
    # The task's functions, by the names of their fields (metric_fn: your metric function).
    parts |= {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}
    bad = []
    for name, value in parts.items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            bad.append(f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    return bad


def _timeout_outcome(
    cfg: TrainingConfig, limit: float, seconds: float, during: str | None = None
) -> TrialOutcome:
    where = f" while {during}" if during else ""
    return TrialOutcome(
        config=cfg,
        failure=FailureReason.TIMEOUT,
        message=f"timeout: the trial ran past its {limit:.0f} s limit{where} and was stopped",
        seconds=seconds,
    )


# -- In process ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _alarm(limit: float | None) -> Iterator[None]:
    """Raise TrialTimeout in the main thread after ``limit`` seconds (POSIX, main thread only).
    Interrupts Python-level hangs; a hang inside a C call returns only when the call does."""
    usable = (
        limit is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise TrialTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, float(limit))  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class InProcessExecutor:
    isolated = False

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def run(
        self,
        cfg: TrainingConfig,
        budget: Budget,
        *,
        accuracy: AccuracyCheck | None = None,
        measured: Measurement | None = None,
        time_limit: float | None = None,
        progress: StepListener | None = None,
    ) -> TrialOutcome:
        start = time.perf_counter()
        outcome: TrialOutcome | None
        try:
            with _alarm(time_limit), reporting_steps(progress):
                outcome = run_trial(
                    cfg, self.workload, budget, accuracy=accuracy, measured=measured
                )
        except TrialTimeout:
            outcome = None
        if outcome is not None and outcome.poisoned:
            raise DeviceError(
                f"A trial of {cfg.describe()} hit a CUDA error that leaves this process unable "
                f"to use the GPU: {outcome.message} Trials run in this process, so the search "
                "cannot go on; run trials in isolated workers (isolation='process': the model, "
                "data and hooks must be importable and picklable, e.g. the CLI's factories), "
                "where such a trial is recorded as failed and the search goes on."
            )
        if outcome is not None:
            return outcome
        free_memory(cfg.device)  # outside the except block, as in run_trial
        assert time_limit is not None
        return _timeout_outcome(cfg, time_limit, time.perf_counter() - start)

    def close(self) -> None:
        pass


# -- In a worker process ------------------------------------------------------------------------


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": " (the OS out-of-memory killer does this when RAM runs out)",
            "SIGSEGV": " (a segmentation fault in native code)",
            "SIGABRT": " (a native library aborted, e.g. after a CUDA illegal memory access)",
            "SIGBUS": " (often /dev/shm exhausted by DataLoader workers)",
        }.get(name, "")
        return f"the trial's worker process was killed by {name}{hint}"
    return f"the trial's worker process exited with code {code}"


def _keeps_state(cfg: TrainingConfig) -> bool:
    """Whether a trial leaves process state that changes later trials' timings: cuDNN plans
    autotuned by ``benchmark``, compiled kernels and CUDA-graph pools."""
    return cfg.compile_mode is not CompileMode.NONE or cfg.cudnn_benchmark


def needs_fresh_worker(previous: TrainingConfig | None, cfg: TrainingConfig) -> bool:
    """Whether ``cfg`` must run in a fresh worker rather than the one that ran ``previous``
    (None: the worker has run nothing yet). On CUDA, a trial that compiles or uses cuDNN's
    benchmark mode, and any trial after one, starts from a clean process: cuDNN fixes a
    convolution's plan the first time its shape runs, whatever ``benchmark`` says later."""
    if previous is None or torch.device(cfg.device).type != "cuda":
        return False
    return _keeps_state(previous) or _keeps_state(cfg)


def await_outcome(
    conn: multiprocessing.connection.Connection,
    process: subprocess.Popen[bytes],
    time_limit: float | None,
    progress: StepListener | None,
) -> TrialOutcome | None:
    """The outcome a trial's process sends over ``conn``, its step messages told to
    ``progress`` meanwhile; None when ``time_limit`` passed first. Raises EOFError where the
    process ended (or sent something else) without one."""
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    while True:
        left = 1.0 if deadline is None else deadline - time.perf_counter()
        if conn.poll(min(1.0, max(0.0, left))):
            kind, outcome = conn.recv()
            if kind == "step" and progress is not None:
                progress(*outcome)  # the worker's (phase, done, total)
                continue
            if kind != "outcome":
                raise EOFError
            return outcome  # type: ignore[no-any-return]
        if process.poll() is not None:
            raise EOFError
        if deadline is not None and time.perf_counter() >= deadline:
            return None


class WorkerStartError(RuntimeError):
    """A trial worker could not start or could not load the workload."""


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill a trial worker's process group (the worker, where it still runs, and every process
    it started that is still running): a compile stopped at its limit may leave its compile
    workers spinning, and they would slow every measurement after it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):  # AttributeError: Windows
        process.kill()  # no group left (or not ours): the worker alone, if it still runs


class ProcessExecutor:
    """Runs trials in a worker process (``python -m autotune._trial.worker``), replaced after a
    crash or a timeout.

    The worker is a fresh interpreter, not a fork and not ``multiprocessing``'s spawn, so a
    user's script without an ``if __name__ == "__main__"`` guard is never re-run in it. Modules
    loaded from files (CLI factories) are named in ``preload`` and imported there first.
    """

    isolated = True
    starting = "starting its worker"  # what a start-up past the trial's limit was doing

    def __init__(
        self,
        workload: Workload,
        *,
        env: dict[str, str] | None = None,
        preload: tuple[tuple[str, str], ...] = (),
        fresh_each: bool = False,
    ) -> None:
        self._payload = pickle.dumps(workload)
        self._env = env or {}
        self._preload = preload
        self._fresh_each = fresh_each  # every trial in a new worker (verify's rounds on CUDA)
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._cache: str | None = None  # the worker's own compile cache directory
        self._last: TrainingConfig | None = None  # the last trial the current worker ran
        self.started = 0  # workers started so far

    def _start(self, timeout: float = START_TIMEOUT) -> None:
        ours, theirs = socket.socketpair()
        # An empty compile cache per worker: a compiled trial pays the cold compile cost, as a
        # user's first real run does, whatever earlier trials compiled.
        self._cache = tempfile.mkdtemp(prefix="autotune-compile-")
        env = {
            **os.environ,
            **self._env,
            "TORCHINDUCTOR_CACHE_DIR": self._cache,
            "TRITON_CACHE_DIR": os.path.join(self._cache, "triton"),
        }
        self.started += 1
        self._last = None
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "autotune._trial.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                # Its own process group, stopped whole: what a trial starts (compile workers,
                # loader workers) must not outlive it and slow the next one down. In this
                # session, not a new one: Linux shares CPU time between sessions (autogroup),
                # so a worker in a session of its own gets a smaller share of a busy machine
                # than the user's own loop, run from the same shell as the search, would.
                **own_group(),
            )
        finally:
            theirs.close()
        conn = multiprocessing.connection.Connection(ours.detach())
        try:
            conn.send((self._preload, self._payload))
            if not conn.poll(timeout):
                raise WorkerStartError(f"the trial worker did not start within {timeout:.0f} s")
            kind, detail = conn.recv()
        except (EOFError, OSError):
            process.kill()
            raise WorkerStartError(
                f"the trial worker failed to start: {_describe_exit(process.wait())}"
            ) from None
        except WorkerStartError:
            process.kill()
            process.wait()
            raise
        if kind != "ready":
            process.kill()
            process.wait()
            raise WorkerStartError(f"the trial worker cannot load the model and data: {detail}")
        self._process, self._conn = process, conn

    def _stop(self, *, kill: bool) -> int | None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        self._last = None
        if process is None:
            self._remove_cache()
            return None
        if kill:
            _kill_group(process)
        elif conn is not None:
            with contextlib.suppress(OSError):
                conn.send(None)
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        _kill_group(process)  # what it started and left behind
        if conn is not None:
            conn.close()
        self._remove_cache()
        return code

    def _remove_cache(self) -> None:
        if self._cache is not None:
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None

    def ensure_started(self, timeout: float | None = None) -> None:
        """Start a worker now, within ``timeout`` seconds (raises WorkerStartError when the
        workload cannot reach one, or it did not start in time)."""
        if self._process is None or self._process.poll() is not None:
            self._stop(kill=True)
            self._start(START_TIMEOUT if timeout is None else min(timeout, START_TIMEOUT))

    def run(
        self,
        cfg: TrainingConfig,
        budget: Budget,
        *,
        accuracy: AccuracyCheck | None = None,
        measured: Measurement | None = None,
        time_limit: float | None = None,
        progress: StepListener | None = None,
    ) -> TrialOutcome:
        start = time.perf_counter()
        if self._process is not None and (
            (self._fresh_each and self._last is not None) or needs_fresh_worker(self._last, cfg)
        ):
            self._stop(kill=False)
        # A fresh worker's start-up (importing torch, seconds on a busy machine) is bounded by
        # the trial's limit too, but not charged to the config: its own limit starts after it.
        try:
            self.ensure_started(None if time_limit is None else time_limit)
        except WorkerStartError as exc:
            seconds = time.perf_counter() - start
            if time_limit is not None and seconds >= time_limit:
                return _timeout_outcome(cfg, time_limit, seconds, during=self.starting)
            return TrialOutcome(
                config=cfg, failure=FailureReason.CRASH, message=str(exc), seconds=seconds
            )
        assert self._conn is not None and self._process is not None
        conn, process = self._conn, self._process
        try:
            conn.send((cfg, budget, accuracy, measured, progress is not None))
            outcome = await_outcome(conn, process, time_limit, progress)
            if outcome is None:
                self._stop(kill=True)
                assert time_limit is not None
                return _timeout_outcome(cfg, time_limit, time.perf_counter() - start)
            self._last = cfg
            if outcome.poisoned:
                self._stop(kill=True)  # its CUDA context is unusable: a new worker next
            return outcome
        except (EOFError, OSError, pickle.UnpicklingError):
            return self._ended(cfg, start)
        except BaseException:
            self._stop(kill=True)  # Ctrl-C: end the trial now, cleanly
            raise

    def _ended(self, cfg: TrainingConfig, start: float) -> TrialOutcome:
        """The outcome of a trial whose worker ended without sending one."""
        code = self._stop(kill=True)
        return TrialOutcome(
            config=cfg,
            failure=FailureReason.CRASH,
            message=f"crashed: {_describe_exit(code)}",
            seconds=time.perf_counter() - start,
        )

    def close(self) -> None:
        self._stop(kill=False)


ISOLATION_MODES = ("auto", "process", "none")


def own_group() -> dict[str, Any]:
    """Popen's arguments that start a process in a process group of its own, in the caller's
    session (``start_new_session`` would make a session too)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover - Python 3.10


def worker_env() -> dict[str, str]:
    """Environment for trial workers: this process's import path and CPU share. (Each worker
    gets its own, empty, compile cache directory when it starts.)"""
    env = {"PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    share = cpu_share()
    if share < (os.cpu_count() or share):
        env["OMP_NUM_THREADS"] = str(share)  # the worker inherits the affinity: match threads
    return env
