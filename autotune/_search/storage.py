"""The study: an ordinary Optuna study in an Optuna storage, kept honest across crashes, and
the one place that knows where autotune keeps what in it.

- Each trial's :class:`~autotune._search.record.Record` is in its user attribute ``autotune``
  (its role also in ``autotune_role``, for tools); what spans trials is in the study's user
  attributes: the settings, the memory probe's findings, re-measurements and confirmations.
- Storage URLs become ``RDBStorage`` with a heartbeat, so a trial whose process died (another
  host included) is failed once its heartbeat goes stale, and retried once.
- On this host, a RUNNING trial whose owning process is gone (``kill -9``) is failed at once and
  retried once, without waiting for the heartbeat's grace period.
- A trial's first heartbeat is written before its owner is, so no trial is seen owned yet
  beatless; one left without an owner long after it started (its process died while asking)
  is failed and retried too.
- Each trial is told (stored) before the next one is asked for: nothing finished is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import socket
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.trial import FrozenTrial, TrialState

from autotune._errors import OtherModelError, StorageError
from autotune._search.guard import Confirmation
from autotune._search.record import BaselineAccuracy, Record
from autotune._search.settings import SearchSettings, differences, measured_changes
from autotune._trial.outcome import AccuracyRun
from autotune._trial.probe import MemoryLimits

__all__ = [
    "add_baseline_runs",
    "add_round",
    "file_confirmation",
    "heartbeat",
    "load_study",
    "mark_owner",
    "open_study",
    "publish_settings",
    "read_baseline_accuracy",
    "read_confirmations",
    "read_memory",
    "read_records",
    "read_round_throughputs",
    "read_rounds",
    "read_settings",
    "reconcile_stale_trials",
    "redact",
    "refuse_other_model",
    "refuse_other_settings",
    "resolve",
    "retry_waiting",
    "running_elsewhere",
    "store_record",
    "write_baseline_accuracy",
    "write_memory",
]

log = logging.getLogger("autotune")

OWNER = "autotune_owner"  # trial attribute: which process runs the trial
RETRY_OF = "autotune_retry_of"  # trial attribute: the failed trial this one retries
RECORD = "autotune"  # trial attribute: the trial's record
ROLE = "autotune_role"  # trial attribute: "baseline" or "candidate"
SETTINGS = "autotune_settings"  # study attribute: the search's settings
MEMORY = "autotune_memory"  # study attribute: the memory probe's findings
BASELINE_ACCURACY = "autotune_baseline_accuracy"  # study attribute: the guard's baseline runs
BASELINE_RUN = "autotune_baseline_run:"  # + seed: a baseline run a check bought later
ROUNDS = "autotune_rounds"  # study attribute: side-by-side rounds, trial -> time, throughput
# One study attribute per key, so that processes adding them at once never overwrite each other.
CONFIRMATION = "autotune_confirmation:"  # + numerics id: the confirmation filed under it
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
ORPHAN_SECONDS = 600.0  # a RUNNING trial with no owner this long after it started is dead


# -- What autotune keeps in the study -----------------------------------------------------------


def read_records(study: optuna.Study) -> list[tuple[FrozenTrial, Record]]:
    """Every finished trial that has a record, in trial order."""
    out = []
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        data = trial.user_attrs.get(RECORD)
        if isinstance(data, dict):
            out.append((trial, Record.from_dict(data)))
    return out


def store_record(trial: optuna.Trial, record: Record) -> None:
    trial.set_user_attr(RECORD, record.to_dict())
    trial.set_user_attr(ROLE, record.role.value)


def read_settings(study: Any) -> SearchSettings | None:
    """The settings a study published (``study``: an ``optuna.Study``, or a summary of one from
    ``optuna.get_all_study_summaries``); None before its baseline was measured."""
    data = study.user_attrs.get(SETTINGS)
    return SearchSettings.from_dict(data) if isinstance(data, dict) else None


def refuse_other_settings(study: optuna.Study, settings: SearchSettings) -> None:
    """Raise when a study is resumed with settings that change what its stored facts mean
    (see :func:`autotune._search.settings.differences`), naming them and the two ways out;
    an :class:`~autotune._errors.OtherModelError` where the model or the data is not the one
    the study measured."""
    stored = read_settings(study)
    if stored is not None:
        refuse_other_model(study, stored, settings)
    changed = [] if stored is None else differences(stored, settings)
    if changed:
        raise StorageError(
            f"Study {study.study_name!r} was measured under other settings "
            f"({'; '.join(changed)}): its trials would be ranked and judged under rules they "
            "were not measured for. Resume it with the stored settings, or start a new study "
            "(--study / study_name) for the new ones."
        )


def refuse_other_model(
    study: optuna.Study, stored: SearchSettings, asked: SearchSettings, *, worker: bool = False
) -> None:
    """Raise :class:`~autotune._errors.OtherModelError` where ``asked`` (a search resuming
    the study, or a worker joining it) has another model or data than the study measured."""
    changed = measured_changes(stored, asked)
    if not changed:
        return
    model = any(c.startswith("the model") for c in changed)
    data = any(c.startswith("the data") for c in changed)
    what = "model and data" if model and data else "model" if model else "data"
    if worker:
        out = f"Give this worker the {what} the search was started with."
    else:
        out = (
            f"Search this {what} in a study of its own: give another study name (--study / "
            "study_name), or leave the name out on the command line, whose default name "
            f"follows the model and data. To resume {study.study_name!r}, restore the {what} "
            "it measured."
        )
    whose = "This worker's" if worker else "The"
    raise OtherModelError(
        f"{whose} {what} changed since study {study.study_name!r} measured its trials "
        f"({'; '.join(changed)}): its speeds and accuracies are not this {what}'s. {out}"
    )


def publish_settings(study: optuna.Study, settings: SearchSettings) -> None:
    study.set_user_attr(SETTINGS, settings.to_dict())


def read_memory(study: optuna.Study) -> MemoryLimits | None:
    data = study.user_attrs.get(MEMORY)
    return MemoryLimits.from_dict(data) if isinstance(data, dict) else None


def write_memory(study: optuna.Study, memory: MemoryLimits) -> None:
    study.set_user_attr(MEMORY, memory.to_dict())


def read_baseline_accuracy(study: optuna.Study) -> BaselineAccuracy | None:
    """The baseline's accuracy runs: its first ones, then the seeds that checks bought later
    (each filed under its own attribute), as far as they run on from seed to seed."""
    attrs = study.user_attrs
    data = attrs.get(BASELINE_ACCURACY)
    if not isinstance(data, dict):
        return None
    accuracy = BaselineAccuracy.from_dict(data)
    runs = list(accuracy.runs)
    horizon = runs[0].samples if runs else None  # a later seed of another horizon is no pair
    while isinstance(more := attrs.get(f"{BASELINE_RUN}{len(runs)}"), dict):
        run = AccuracyRun.from_dict(more)
        if run.samples != horizon:
            break
        runs.append(run)
    extra = runs[len(accuracy.runs) :]
    return dataclasses.replace(
        accuracy, runs=tuple(runs), seconds=accuracy.seconds + sum(r.seconds for r in extra)
    )


def write_baseline_accuracy(study: optuna.Study, accuracy: BaselineAccuracy) -> None:
    study.set_user_attr(BASELINE_ACCURACY, accuracy.to_dict())


def add_baseline_runs(study: optuna.Study, runs: Sequence[AccuracyRun]) -> None:
    """File more of the baseline's accuracy runs, each under its seed: workers that extend the
    baseline at once add their seeds side by side instead of overwriting each other's."""
    for run in runs:
        study.set_user_attr(f"{BASELINE_RUN}{run.seed}", run.to_dict())


def _round_values(study: optuna.Study) -> list[dict[int, Any]]:
    data = study.user_attrs.get(ROUNDS)
    if not isinstance(data, list):
        return []
    return [{int(k): v for k, v in r.items()} for r in data if isinstance(r, dict)]


def read_rounds(study: optuna.Study) -> list[dict[int, float]]:
    """The side-by-side rounds: in each, the trials measured again one after the other, trial
    number -> projected time. (Only the coordinator writes them.)"""
    return [
        {n: float(v["time"] if isinstance(v, dict) else v) for n, v in r.items()}
        for r in _round_values(study)
    ]


def read_round_throughputs(study: optuna.Study) -> list[dict[int, float]]:
    """The same rounds' steady-state throughputs, trial number -> samples/s (rounds filed
    before they were kept have none)."""
    return [
        {n: float(v["throughput"]) for n, v in r.items() if isinstance(v, dict)}
        for r in _round_values(study)
    ]


def add_round(
    study: optuna.Study, measured: dict[int, float], throughputs: dict[int, float] | None = None
) -> None:
    """File a side-by-side round: each trial's projected time, and its throughput."""
    rates = throughputs or {}

    def value(n: int, time: float) -> Any:
        return {"time": time, "throughput": rates[n]} if n in rates else time

    rounds = study.user_attrs.get(ROUNDS)
    rounds = rounds if isinstance(rounds, list) else []
    study.set_user_attr(ROUNDS, [*rounds, {str(n): value(n, t) for n, t in measured.items()}])


def read_confirmations(study: optuna.Study) -> dict[str, Confirmation]:
    """Numerics id (see autotune._knobs.registry.numerics_id) -> the confirmation filed under it."""
    return {
        key.removeprefix(CONFIRMATION): Confirmation.from_dict(value)
        for key, value in study.user_attrs.items()
        if key.startswith(CONFIRMATION) and isinstance(value, dict)
    }


def file_confirmation(study: optuna.Study, numerics: str, confirmation: Confirmation) -> None:
    study.set_user_attr(f"{CONFIRMATION}{numerics}", confirmation.to_dict())


# -- Opening the study, and keeping it honest across crashes ------------------------------------
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
    # A trial that died before it chose all its parameters: those it had, or those it was
    # enqueued with (its first guess, a variant), which it had not yet asked for.
    params = {**trial.system_attrs.get("fixed_params", {}), **trial.params}
    if trial.user_attrs.get(RETRY_OF) is not None or not params:
        return
    study.enqueue_trial(params, user_attrs={RETRY_OF: trial.number})
    log.info("trial %d failed with its process; it will be retried once", trial.number)


def resolve(storage: str | optuna.storages.BaseStorage | None) -> Any:
    """The one place a storage URL becomes an Optuna storage, for the search, the workers, the
    reports and ``from_study`` alike: ``journal:///path`` is a file journal, any other URL a
    database (SQLite, PostgreSQL, MySQL) with heartbeats, so a process that dies has its trial
    failed and retried; a storage object is used as it is."""
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
            f"'postgresql://user@host/db' (or journal:///path/to/file), but got "
            f"{redact(storage)!r}."
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
        backend = resolve(storage)
        return optuna.create_study(
            storage=backend,
            study_name=study_name,
            sampler=sampler,
            # A candidate that cannot beat the best verified answer (its throughput phase,
            # reported as the trial's intermediate value, is not faster) skips its accuracy run
            # and ends PRUNED: the rule needs the ledger's verdicts, so the search applies it.
            pruner=optuna.pruners.NopPruner(),
            direction="minimize",
            load_if_exists=True,
        )
    except (StorageError, TypeError):
        raise
    except Exception as exc:  # SQLAlchemy's errors for unreachable or malformed databases
        raise StorageError(
            f"Cannot open the study in storage {redact(storage)!r}: {_first_line(exc, storage)}"
        ) from exc


def _host() -> str:
    # AUTOTUNE_HOST names the host where hostnames are not unique (containers started from
    # one image); pids are only compared between processes of the same host name.
    return os.environ.get("AUTOTUNE_HOST") or socket.gethostname()


def _owner() -> dict[str, Any]:
    me = psutil.Process()
    return {"host": _host(), "pid": me.pid, "started": me.create_time()}


def mark_owner(study: optuna.Study, trial: optuna.Trial) -> None:
    """Name the process that runs ``trial``, after its first heartbeat: Optuna fails only
    trials with a stale beat, so a process killed between its owner showing and a first
    beat (the beat thread not yet started) would leave its trial running for ever."""
    backend: Any = study._storage
    if hasattr(backend, "record_heartbeat") and backend.get_heartbeat_interval():
        backend.record_heartbeat(trial._trial_id)
    trial.set_user_attr(OWNER, _owner())


def _alive(owner: dict[str, Any]) -> bool:
    try:
        process = psutil.Process(int(owner["pid"]))
        return abs(process.create_time() - float(owner["started"])) < 1.0  # not a reused pid
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def running_elsewhere(study: optuna.Study) -> bool:
    """Whether a trial of another process is running (or was, until its heartbeat goes stale
    or this host sees its process gone)."""
    me = _owner()
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        owner = trial.user_attrs.get(OWNER)
        if isinstance(owner, dict) and (owner.get("host"), owner.get("pid")) != (
            me["host"],
            me["pid"],
        ):
            return True
    return False


def retry_waiting(study: optuna.Study) -> bool:
    """Whether the retry of a trial that died with its process is still waiting to run."""
    return any(
        t.user_attrs.get(RETRY_OF) is not None
        for t in study.get_trials(deepcopy=False, states=[TrialState.WAITING])
    )


def reconcile_stale_trials(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose process is gone and retry each once. Returns their numbers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # heartbeat storages: other hosts too
    host = _host()
    failed = []
    now = datetime.datetime.now()
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        owner = trial.user_attrs.get(OWNER)
        if owner is None:
            # Named within moments of being asked for: still nameless long after, its process
            # died inside ``ask`` (the sampler), before a beat or an owner could be written.
            start = trial.datetime_start
            if start is None or (now - start).total_seconds() < ORPHAN_SECONDS:
                continue
        elif not isinstance(owner, dict) or owner.get("host") != host or _alive(owner):
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


def load_study(storage: str | optuna.storages.BaseStorage, study_name: str | None) -> optuna.Study:
    """Open an existing study for reading; the error lists the studies that do exist."""
    shown = redact(storage)
    if isinstance(storage, str) and storage.startswith("sqlite:///"):
        # SQLAlchemy would create an empty database file at a mistyped path.
        path = Path(storage.removeprefix("sqlite:///"))
        if not path.is_file():
            raise StorageError(
                f"No SQLite database at {str(path)!r} (from storage {shown!r}). Run the command "
                "where the search ran, or pass the storage URL it used."
            )
    if isinstance(storage, str) and storage.startswith("journal://"):
        path = Path(storage.removeprefix("journal://"))
        if not path.is_file():
            raise StorageError(
                f"No journal file at {str(path)!r} (from storage {shown!r}). Run the command "
                "where the search ran, or pass the storage URL it used."
            )
    try:
        backend = resolve(storage)
        names = optuna.get_all_study_names(storage=backend)
    except StorageError:
        raise
    except Exception as exc:  # SQLAlchemy's errors for unreachable or malformed databases
        raise StorageError(f"Cannot read storage {shown!r}: {_first_line(exc, storage)}") from exc
    if study_name is None:
        if len(names) == 1:
            study_name = names[0]
        else:
            raise StorageError(
                f"Storage {shown!r} holds {len(names)} studies; name one with --study / "
                f"study_name. Studies there: {', '.join(names) or 'none'}."
            )
    if study_name not in names:
        raise StorageError(
            f"No study {study_name!r} in storage {shown!r}. Studies there: "
            f"{', '.join(names) or 'none'}."
        )
    return optuna.load_study(study_name=study_name, storage=backend)


def _first_line(exc: BaseException, storage: Any) -> str:
    """An error's type and first line, with the storage's password (which drivers may echo)
    replaced by ***."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    password = _password(storage)
    if password:
        first = first.replace(password, "***")
    return f"{type(exc).__name__}: {first}"


def _password(storage: Any) -> str | None:
    if not isinstance(storage, str):
        return None
    _, sep, rest = storage.partition("://")
    creds = rest.rpartition("@")[0] if sep and "@" in rest else ""
    return creds.split(":", 1)[1] if ":" in creds else None
