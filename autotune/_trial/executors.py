"""Which executor runs a search's trials: in this process, in a worker process, or as a
data-parallel job of several ranks (:mod:`autotune._trial.ddp`)."""

from __future__ import annotations

import sys

from autotune._trial.ddp import DDPExecutor
from autotune._trial.isolation import (
    ISOLATION_MODES,
    InProcessExecutor,
    ProcessExecutor,
    TrialExecutor,
    WorkerStartError,
    unpicklable_parts,
)
from autotune._trial.workload import Workload

__all__ = ["make_executor"]


def make_executor(
    workload: Workload,
    isolation: str,
    *,
    env: dict[str, str] | None = None,
    preload: tuple[tuple[str, str], ...] = (),
    fresh_each: bool = False,
    ranks: int = 1,
    device: str = "cpu",
) -> tuple[TrialExecutor, str | None]:
    """The executor for ``isolation`` ('auto', 'process' or 'none'), and a note when 'auto' had
    to fall back to in-process trials (said once, so the user knows why). With ``ranks`` > 1,
    every trial is a data-parallel job of that many processes on ``device`` (the workload must
    reach them: a ValueError says why it cannot)."""
    if isolation not in ISOLATION_MODES:
        raise ValueError(
            f"`isolation` must be one of {', '.join(ISOLATION_MODES)}, but got {isolation!r}."
        )
    if ranks > 1 and isolation == "none":
        raise ValueError(
            f"`isolation='none'` cannot run data-parallel trials: {ranks} ranks are {ranks} "
            "processes. Leave isolation at 'auto'."
        )
    if isolation == "none":
        return InProcessExecutor(workload), None
    bad = unpicklable_parts(workload)
    problem = f"{'; '.join(bad)} cannot be pickled" if bad else None
    executor = None
    if problem is None:
        # Modules the CLI loaded from files (`file.py:function`) are imported in the worker too.
        preload = preload or tuple(
            (name, str(module.__file__))
            for name, module in list(sys.modules.items())
            if name.startswith("_autotune_user_") and getattr(module, "__file__", None)
        )
        executor = (
            DDPExecutor(workload, ranks, device, env=env, preload=preload, fresh_each=fresh_each)
            if ranks > 1
            else ProcessExecutor(workload, env=env, preload=preload, fresh_each=fresh_each)
        )
        try:
            executor.ensure_started()
        except WorkerStartError as exc:
            problem = str(exc)
            executor = None
    if executor is not None:
        return executor, None
    if ranks > 1:
        raise ValueError(
            f"{ranks} data-parallel ranks are impossible: {problem}. Each rank loads the "
            "model, data and hooks in a process of its own: define them in an importable "
            "module (not __main__, not lambdas), or use the CLI's factories."
        )
    reason = (
        f"trials run in this process, not in isolated workers: {problem}. A hang in native code "
        "or a crash would then end the search; define the model, dataset and hooks in an "
        "importable module (not __main__, not lambdas), or use the CLI's factories, to isolate "
        "trials."
    )
    if isolation == "process":
        raise ValueError(f"`isolation='process'` is impossible: {reason}")
    return InProcessExecutor(workload), reason
