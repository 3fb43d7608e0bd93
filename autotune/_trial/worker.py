"""A trial worker: ``python -m autotune._trial.worker FD`` (started by isolation.ProcessExecutor).

It receives the pickled workload over the socket ``FD``, then runs one trial per message and
sends back its outcome. It never runs the user's ``__main__`` and stops when its parent dies.
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
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return 0
        if message is None:
            return 0
        cfg, budget, accuracy, measured, steps = message
        with reporting_steps(_StepSender(conn) if steps else None):
            outcome = run_trial(cfg, workload, budget, accuracy=accuracy, measured=measured)
        conn.send(("outcome", outcome))


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
