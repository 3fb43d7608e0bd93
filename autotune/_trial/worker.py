"""A trial worker: ``python -m autotune._trial.worker FD`` (started by isolation.ProcessExecutor).

It receives the pickled workload over the socket ``FD``, then runs one trial per message and
sends back its outcome. It never runs the user's ``__main__`` and stops when its parent dies,
or after a trial that left its CUDA context unusable.
"""

from __future__ import annotations

import importlib.util
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time

import torch

from autotune._trial.failures import FailureReason, classify
from autotune._trial.outcome import TrialOutcome
from autotune._trial.runner import reporting_steps, run_trial

STEP_INTERVAL = 0.25  # seconds between step messages: a display refreshes 4 times a second


class _StepSender:
    """Sends the trial's progress to the search process, at most every STEP_INTERVAL."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= STEP_INTERVAL or done >= total:
            self.last = now
            self.conn.send(("step", (phase, done, total)))


def _watch_parent(parent: int) -> None:
    # Without this, a worker whose search process was killed (kill -9) would train on, orphaned.
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(70)


def _preload(modules: tuple[tuple[str, str], ...]) -> None:
    for name, path in modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec.loader.exec_module(module)


def warm_up(device: str) -> None:
    """Make this worker's device current and create its CUDA context, cuBLAS and cuDNN handles
    before any trial is timed: a fresh worker's first trial must not pay for them in its
    one-time cost while a reused worker's trials do not."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return
    torch.cuda.set_device(dev)  # pinning and the bf16 check use the current device
    x = torch.ones(1, 1, 8, 8, device=dev)
    # Not cudnn.flags(): it also sets the legacy TF32 flag, which torch 2.13 refuses to mix
    # with the fp32_precision settings the trials use.
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        with torch.no_grad():
            torch.nn.functional.conv2d(x, torch.ones(1, 1, 3, 3, device=dev))
            (x[0, 0] @ x[0, 0]).sum().item()
    finally:
        torch.backends.cudnn.benchmark = benchmark


def main(fd: int) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the search process's to handle
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    conn = multiprocessing.connection.Connection(fd)
    preload, payload = conn.recv()
    try:
        _preload(preload)
        workload = pickle.loads(payload)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return 1
    conn.send(("ready", None))
    warmed: str | None = None
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return 0
        if message is None:
            return 0
        cfg, budget, accuracy, measured, steps = message
        try:
            if warmed != cfg.device:
                warm_up(cfg.device)
                warmed = cfg.device
            with reporting_steps(_StepSender(conn) if steps else None):
                outcome = run_trial(cfg, workload, budget, accuracy=accuracy, measured=measured)
        except Exception as exc:
            # run_trial records a trial's failures itself; what escapes it (its clean-up
            # failing after a CUDA error) is reported with its own message, not as an exit code.
            # Either way the worker's state is unknown: it is replaced.
            reason, text = classify(exc)
            if reason is not FailureReason.DEVICE:
                text = f"the trial's worker failed outside the trial: {text}"
            outcome = TrialOutcome(config=cfg, failure=FailureReason.DEVICE, message=text)
        conn.send(("outcome", outcome))
        if outcome.poisoned:
            return 3  # nothing more can run on this CUDA context


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
