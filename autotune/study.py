"""The study: an ordinary Optuna study in an Optuna storage, kept honest across crashes.

- Storage URLs become ``RDBStorage`` with a heartbeat, so a trial whose process died (another
  host included) is failed once its heartbeat goes stale, and retried once.
- On this host, a RUNNING trial whose owning process is gone (``kill -9``) is failed at once and
  retried once, without waiting for the heartbeat's grace period.
- Each trial is told (stored) before the next one is asked for: nothing finished is lost.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StorageError

__all__ = ["heartbeat", "mark_owner", "open_study", "reconcile_stale_trials", "redact"]

log = logging.getLogger("autotune")

OWNER = "autotune_owner"  # user attribute: which process runs the trial
RETRY_OF = "autotune_retry_of"  # user attribute: the failed trial this one retries
HEARTBEAT_INTERVAL = int(os.environ.get("AUTOTUNE_HEARTBEAT_INTERVAL", "10"))
GRACE_PERIOD = int(os.environ.get("AUTOTUNE_GRACE_PERIOD", str(3 * HEARTBEAT_INTERVAL)))


def redact(storage: Any) -> str | None:
    """The storage URL without its password, for logs and the exported JSON."""
    if storage is None:
        return None
    if not isinstance(storage, str):
        return type(storage).__name__
    scheme, sep, rest = storage.partition("://")
    if sep and "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else storage
    return storage


def retry_once(study: optuna.Study, trial: FrozenTrial) -> None:
    """Enqueue a failed trial's parameters again, unless it already was a retry."""
    if trial.user_attrs.get(RETRY_OF) is not None or not trial.params:
        return
    study.enqueue_trial(dict(trial.params), user_attrs={RETRY_OF: trial.number})
    log.info("trial %d failed with its process; it will be retried once", trial.number)


def _storage(storage: str | optuna.storages.BaseStorage | None) -> Any:
    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return storage
    if not isinstance(storage, str):
        raise TypeError(
            f"`storage` must be an Optuna storage URL (e.g. 'sqlite:///autotune.db') or a "
            f"storage object, but got {type(storage).__name__}."
        )
    if storage.startswith("journal://"):
        # A file journal where a database is not wanted (one host, many processes).
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = storage.removeprefix("journal://")
        if not path:
            raise StorageError(
                f"`storage` {storage!r} names no file: use journal:///path/to/study.log."
            )
        return JournalStorage(JournalFileBackend(path))
    if "://" not in storage:
        raise StorageError(
            f"`storage` must be a database URL such as 'sqlite:///autotune.db' or "
            f"'postgresql://user@host/db' (or journal:///path/to/file), but got {storage!r}."
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            storage,
            heartbeat_interval=HEARTBEAT_INTERVAL,
            grace_period=GRACE_PERIOD,
            heartbeat_stale_trial_callback=retry_once,
        )


def open_study(
    storage: str | optuna.storages.BaseStorage | None,
    study_name: str | None,
    seed: int,
    sampler: optuna.samplers.BaseSampler | None = None,
) -> optuna.Study:
    """Create the study, or load it to continue a search (same storage and name)."""
    if sampler is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed,
                multivariate=True,
                group=True,
                constant_liar=True,
                n_startup_trials=6,
            )
    try:
        backend = _storage(storage)
        return optuna.create_study(
            storage=backend,
            study_name=study_name,
            sampler=sampler,
            # A candidate slower than most trials so far (at its throughput phase) skips its
            # accuracy runs; the search also requires it to be clearly slower than the best.
            pruner=optuna.pruners.PercentilePruner(50.0, n_startup_trials=4, n_warmup_steps=0),
            direction="minimize",
            load_if_exists=True,
        )
    except (StorageError, TypeError):
        raise
    except Exception as exc:  # SQLAlchemy's errors for unreachable or malformed databases
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise StorageError(
            f"Cannot open the study in storage {redact(storage)!r}: {type(exc).__name__}: {first}"
        ) from exc


def _host() -> str:
    # AUTOTUNE_HOST names the host where hostnames are not unique (containers started from
    # one image); pids are only compared between processes of the same host name.
    return os.environ.get("AUTOTUNE_HOST") or socket.gethostname()


def _owner() -> dict[str, Any]:
    me = psutil.Process()
    return {"host": _host(), "pid": me.pid, "started": me.create_time()}


def mark_owner(trial: optuna.Trial) -> None:
    trial.set_user_attr(OWNER, _owner())


def _alive(owner: dict[str, Any]) -> bool:
    try:
        process = psutil.Process(int(owner["pid"]))
        return abs(process.create_time() - float(owner["started"])) < 1.0  # not a reused pid
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def reconcile_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose process is gone and retry each once. Returns their numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # heartbeat storages: other hosts too
    host = _host()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        owner = trial.user_attrs.get(OWNER)
        if not isinstance(owner, dict) or owner.get("host") != host or _alive(owner):
            continue
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
            failed.append(trial.number)
            retry_once(study, trial)
    return failed


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Record the trial's heartbeat while it runs, where the storage keeps heartbeats."""
    storage: Any = study._storage
    interval = storage.get_heartbeat_interval() if hasattr(storage, "record_heartbeat") else None
    if not interval:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):
                storage.record_heartbeat(trial._trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name="autotune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
