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
- Processes that open one SQLite file at once (searches started together, a search's workers)
  create its tables and their studies one at a time, under a lock on a file beside it
  (``autotune.db.lock``); a write waits up to :data:`SQLITE_TIMEOUT` for another's, and what
  SQLite still answers "locked" or "already exists" while a storage or study is being created
  is tried again, within :data:`CREATION_WAIT`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import itertools
import logging
import os
import re
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
import psutil
import sqlalchemy.exc
from optuna.trial import FrozenTrial, TrialState

from autotune._errors import OtherModelError, StorageError
from autotune._guard.confirmation import Confirmation
from autotune._load import Load
from autotune._search.record import BaselineAccuracy, BaselineCheck, GuardFailure, Record
from autotune._search.settings import SearchSettings, differences, measured_changes
from autotune._trial.outcome import AccuracyRun
from autotune._trial.probe import MemoryLimits

try:
    import fcntl
except ImportError:  # Windows: no file lock, the retries alone
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "add_baseline_check",
    "add_baseline_runs",
    "add_note",
    "add_round",
    "creating",
    "file_confirmation",
    "heartbeat",
    "load_study",
    "mark_owner",
    "open_study",
    "publish_settings",
    "read_baseline_accuracy",
    "read_baseline_checks",
    "read_confirmations",
    "read_memory",
    "read_notes",
    "read_records",
    "read_round_loads",
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
T = TypeVar("T")

OWNER = "autotune_owner"  # trial attribute: which process runs the trial
RETRY_OF = "autotune_retry_of"  # trial attribute: the failed trial this one retries
RECORD = "autotune"  # trial attribute: the trial's record
ROLE = "autotune_role"  # trial attribute: "baseline" or "candidate"
SETTINGS = "autotune_settings"  # study attribute: the search's settings
MEMORY = "autotune_memory"  # study attribute: the memory probe's findings
BASELINE_ACCURACY = "autotune_baseline_accuracy"  # study attribute: the guard's baseline runs
GUARD_FAILURE = "autotune_guard_failure"  # study attribute: the baseline's runs that failed
BASELINE_RUN = "autotune_baseline_run:"  # + seed: a baseline run a check bought later
ROUNDS = "autotune_rounds"  # study attribute: side-by-side rounds, trial -> time, throughput
# One study attribute per key, so that processes adding them at once never overwrite each other.
CONFIRMATION = "autotune_confirmation:"  # + numerics id: the confirmation filed under it
BASELINE_CHECK = "autotune_baseline_check:"  # + time and process: the baseline measured again
NOTE = "autotune_note:"  # + time and process: an event line's whole text (the result's detail)
_NOTES = itertools.count()  # this process's notes, numbered: two in one microsecond both kept
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


def records_since(study: optuna.Study, known: Mapping[int, Record]) -> list[tuple[int, Record]]:
    """Every finished trial's record, in trial order, by number: those in ``known`` (read
    before) as they are there, since a finished trial's attributes never change; only the
    others are parsed. Optuna's storage cache reads only the trials not finished before."""
    out = []
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = known.get(trial.number)
        if record is None:
            data = trial.user_attrs.get(RECORD)
            record = Record.from_dict(data) if isinstance(data, dict) else None
        if record is not None:
            out.append((trial.number, record))
    return out


Attrs = Mapping[str, Any]  # a study's user attributes, read once (``study.user_attrs``)
# Seconds a read of the study's attributes stands for the next read, where this process wrote
# none since and no trial finished: reading them is one query but decodes every attribute
# (each check's per-example sums among them), and the search asks many questions a second.
ATTRS_FRESH = 1.0
_WRITES = [0]  # study attributes this process has written, in any study


def _set(study: optuna.Study, key: str, value: Any) -> None:
    study.set_user_attr(key, value)
    _WRITES[0] += 1


def writes() -> int:
    """How many study attributes this process has written: a read of them taken before the
    last write is out of date."""
    return _WRITES[0]


def _attrs(source: optuna.Study | Attrs) -> Attrs:
    """A study's user attributes: read from its storage (one query), or as already read."""
    return source if isinstance(source, Mapping) else source.user_attrs


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
    _set(study, SETTINGS, settings.to_dict())


def read_memory(study: optuna.Study) -> MemoryLimits | None:
    data = study.user_attrs.get(MEMORY)
    return MemoryLimits.from_dict(data) if isinstance(data, dict) else None


def write_memory(study: optuna.Study, memory: MemoryLimits) -> None:
    _set(study, MEMORY, memory.to_dict())


def read_baseline_accuracy(study: optuna.Study | Attrs) -> BaselineAccuracy | None:
    """The baseline's accuracy runs: its first ones, then the seeds that checks bought later
    (each filed under its own attribute), as far as they run on from seed to seed."""
    attrs = _attrs(study)
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
    _set(study, BASELINE_ACCURACY, accuracy.to_dict())


def read_guard_failure(study: optuna.Study) -> GuardFailure | None:
    """The baseline's accuracy runs that failed, so that no check could be made (None: none)."""
    data = study.user_attrs.get(GUARD_FAILURE)
    return GuardFailure.from_dict(data) if isinstance(data, dict) else None


def write_guard_failure(study: optuna.Study, failure: GuardFailure) -> None:
    _set(study, GUARD_FAILURE, failure.to_dict())


def add_baseline_runs(study: optuna.Study, runs: Sequence[AccuracyRun]) -> None:
    """File more of the baseline's accuracy runs, each under its seed: workers that extend the
    baseline at once add their seeds side by side instead of overwriting each other's."""
    for run in runs:
        _set(study, f"{BASELINE_RUN}{run.seed}", run.to_dict())


def _round_values(study: optuna.Study | Attrs) -> list[dict[int, Any]]:
    data = _attrs(study).get(ROUNDS)
    if not isinstance(data, list):
        return []
    return [{int(k): v for k, v in r.items()} for r in data if isinstance(r, dict)]


def read_rounds(study: optuna.Study | Attrs) -> list[dict[int, float]]:
    """The side-by-side rounds: in each, the trials measured again one after the other, trial
    number -> projected time. (Only the coordinator writes them.)"""
    return [
        {n: float(v["time"] if isinstance(v, dict) else v) for n, v in r.items()}
        for r in _round_values(study)
    ]


def read_round_throughputs(study: optuna.Study | Attrs) -> list[dict[int, float]]:
    """The same rounds' steady-state throughputs, trial number -> samples/s (rounds filed
    before they were kept have none)."""
    return [
        {n: float(v["throughput"]) for n, v in r.items() if isinstance(v, dict)}
        for r in _round_values(study)
    ]


def read_round_loads(study: optuna.Study | Attrs) -> list[dict[int, Load]]:
    """The same rounds' machine states, trial number -> other processes' use during it."""
    out = []
    for r in _round_values(study):
        loads = {}
        for n, v in r.items():
            load = Load.from_dict(v.get("load")) if isinstance(v, dict) else None
            if load is not None:
                loads[n] = load
        out.append(loads)
    return out


def add_round(
    study: optuna.Study,
    measured: dict[int, float],
    throughputs: dict[int, float] | None = None,
    loads: dict[int, Load] | None = None,
) -> None:
    """File a side-by-side round: each trial's projected time, its throughput and the
    machine's state while it was measured."""
    rates, states = throughputs or {}, loads or {}

    def value(n: int, time: float) -> Any:
        if n not in rates:
            return time
        out: dict[str, Any] = {"time": time, "throughput": rates[n]}
        if n in states:
            out["load"] = states[n].to_dict()
        return out

    rounds = study.user_attrs.get(ROUNDS)
    rounds = rounds if isinstance(rounds, list) else []
    _set(study, ROUNDS, [*rounds, {str(n): value(n, t) for n, t in measured.items()}])


def add_baseline_check(study: optuna.Study, check: BaselineCheck) -> None:
    """File a measurement of the baseline taken during the search (its own key: processes
    filing at once never overwrite each other)."""
    key = f"{BASELINE_CHECK}{check.at:.6f}:{os.getpid()}"
    _set(study, key, check.to_dict())


def add_note(study: optuna.Study, text: str) -> None:
    """Keep an event line's whole text (its progress line was shortened): the detail a
    result shows with ``autotune show --detail``."""
    said = f"{datetime.datetime.now().timestamp():.6f}:{os.getpid()}:{next(_NOTES)}"
    _set(study, f"{NOTE}{said}", text)


def read_notes(study: optuna.Study | Attrs) -> list[str]:
    """The event lines' whole texts, in the order they were said."""
    notes = [
        (key, value)
        for key, value in _attrs(study).items()
        if key.startswith(NOTE) and isinstance(value, str)
    ]
    return [
        text for _, text in sorted(notes, key=lambda kv: float(kv[0][len(NOTE) :].split(":")[0]))
    ]


def read_baseline_checks(study: optuna.Study | Attrs) -> list[BaselineCheck]:
    """The baseline's measurements taken during the search (its trial's own aside), in time
    order."""
    checks = [
        BaselineCheck.from_dict(value)
        for key, value in _attrs(study).items()
        if key.startswith(BASELINE_CHECK) and isinstance(value, dict)
    ]
    return sorted(checks, key=lambda c: c.at)


def guard_evidence(attrs: Attrs) -> dict[str, Any]:
    """The attributes the accuracy guard and its checks' verdicts are made from: the
    baseline's runs and every confirmation (a check is judged again when one changes)."""
    keys = (BASELINE_ACCURACY, BASELINE_RUN, CONFIRMATION)
    return {k: v for k, v in attrs.items() if k.startswith(keys)}


def read_confirmations(study: optuna.Study | Attrs) -> dict[str, Confirmation]:
    """Numerics id (see autotune._knobs.registry.numerics_id) -> the confirmation filed under it."""
    return {
        key.removeprefix(CONFIRMATION): Confirmation.from_dict(value)
        for key, value in _attrs(study).items()
        if key.startswith(CONFIRMATION) and isinstance(value, dict)
    }


def file_confirmation(study: optuna.Study, numerics: str, confirmation: Confirmation) -> None:
    _set(study, f"{CONFIRMATION}{numerics}", confirmation.to_dict())


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
    failed and retried; a storage object is used as it is. A SQLite file's tables are created
    under its lock (see :func:`creating`)."""
    return _resolve(storage, held=False)


def _resolve(storage: str | optuna.storages.BaseStorage | None, *, held: bool) -> Any:
    """:func:`resolve`; ``held``: the caller holds :func:`creating`'s lock already."""
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
    if held:
        return _database(storage)
    with creating(storage):
        return _database(storage)


def _database(url: str) -> optuna.storages.RDBStorage:
    """The database storage of ``url``, its tables created where they are not yet (under
    :func:`creating`, where ``url`` is a SQLite file)."""
    engine_kwargs: dict[str, Any] = {}
    if _sqlite_file(url) is not None and not re.search(r"[?&]timeout=", url):
        # Python's default busy timeout is 5 s: a write then fails "database is locked" while
        # other processes' writes queue before it (several searches sharing a few cores).
        engine_kwargs["connect_args"] = {"timeout": SQLITE_TIMEOUT}

    def make() -> optuna.storages.RDBStorage:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=HEARTBEAT_INTERVAL,
                grace_period=GRACE_PERIOD,
                heartbeat_stale_trial_callback=retry_once,
            )

    return _retried(make)


# -- Opening one SQLite file from many processes at once ----------------------------------------
SQLITE_TIMEOUT = 30.0  # seconds a SQLite statement waits for another process's write
CREATION_WAIT = 120.0  # seconds to wait for the lock, and to retry creating tables and study
# What SQLite (or another database) answers a process that creates what another is creating,
# or writes while another does: transient while a storage or study is being created.
_TRANSIENT = ("database is locked", "database table is locked", "already exists", "unique")
SQLITE_ADVICE = (
    "A SQLite file takes one writer at a time, and not on a network file system: for many "
    "processes on one study use a journal file (--storage journal:///path/study.log, on a "
    "local or shared disk) or a database server (--storage postgresql://user@host/db, with "
    'pip install "autotune[postgres]").'
)


def _sqlite_file(storage: Any) -> Path | None:
    """The file of a ``sqlite:///path`` storage (a URL or an RDBStorage); None for any other."""
    url = getattr(storage, "url", storage)
    if not isinstance(url, str):
        return None
    match = re.match(r"sqlite(\+pysqlite)?:///([^?]+)", url)
    if match is None or match.group(2) == ":memory:":
        return None
    return Path(match.group(2))


@contextlib.contextmanager
def creating(storage: Any) -> Iterator[None]:
    """Hold the lock beside a SQLite file (``<file>.lock``) while its tables or a study in it
    are created, so that processes opening it at once do so one after the other; other
    storages, or a folder where no lock file can be made, go without (the retries remain).
    Waits at most :data:`CREATION_WAIT` seconds, then says which file holds it."""
    path = _sqlite_file(storage)
    if path is None or fcntl is None:
        yield
        return
    _import_database_modules()  # seconds of imports, not to be taken one process at a time
    lock = path.with_name(f"{path.name}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a folder that is missing or read-only: the database names the problem
        yield
        return
    try:
        deadline = time.monotonic() + CREATION_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"Cannot open storage {redact(storage)!r}: another process has held "
                        f"{str(lock)!r} for {CREATION_WAIT:.0f} s while creating the study. "
                        f"{SQLITE_ADVICE}"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # and with it the lock


def _import_database_modules() -> None:
    """What Optuna imports when it first opens a database (its schema, Alembic)."""
    for name in ("optuna.storages._rdb.models", "alembic.migration", "alembic.script",
                 "alembic.command", "alembic.config"):  # fmt: skip
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _transient(exc: BaseException) -> bool:
    if not isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.IntegrityError):
        return False
    text = str(exc).splitlines()[0].lower() if str(exc) else ""
    return any(word in text for word in _TRANSIENT)


def _retried(make: Callable[[], T]) -> T:
    """``make()``, tried again while the database answers that another process is creating or
    writing the same thing (see :data:`_TRANSIENT`), for at most :data:`CREATION_WAIT`."""
    deadline = time.monotonic() + CREATION_WAIT
    pause = 0.05
    while True:
        try:
            return make()
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as exc:
            if not _transient(exc) or time.monotonic() + pause >= deadline:
                raise
            log.debug("storage busy (%s); trying again", _first_line(exc, None))
            time.sleep(pause)
            pause = min(2 * pause, 1.0)


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

    def create(backend: Any) -> optuna.Study:
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

    try:
        # One lock for the tables and the study: processes started together on one SQLite
        # file create them one after the other (the first), or find them (the others).
        with creating(storage):
            backend = _resolve(storage, held=True)
            return _retried(lambda: create(backend))
    except (StorageError, TypeError):
        raise
    except Exception as exc:  # SQLAlchemy's errors for unreachable or malformed databases
        advice = f" {SQLITE_ADVICE}" if _transient(exc) and _sqlite_file(storage) else ""
        raise StorageError(
            f"Cannot open the study in storage {redact(storage)!r}: "
            f"{_first_line(exc, storage)}{advice}"
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
