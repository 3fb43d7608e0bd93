"""The baseline's measurements as the yardstick of every screening ratio: each trial is
compared with the baseline measured in its own state of the machine, nearest it in time, and
expressed in the machine's latest state (see :mod:`autotune._search.rebase`, which takes them).

A ratio to the baseline's first measurement alone runs high wherever the machine was busy or
the caches cold then, and an answer chosen by it can be slower than the baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune._search.record import BaselineCheck, Record

__all__ = ["away", "checks", "normalized", "ratio", "reference"]


def checks(baseline: Record | None, again: Sequence[BaselineCheck]) -> tuple[BaselineCheck, ...]:
    """Every measurement of the baseline's throughput in time order: its trial's own (from
    ``baseline``, its record), then ``again``, those taken during the search."""
    first = BaselineCheck.of(baseline) if baseline is not None else None
    return tuple(sorted((first, *again) if first else again, key=lambda c: c.at))


def reference(measured: Sequence[BaselineCheck], record: Record) -> BaselineCheck | None:
    """Of ``measured``, the one ``record``'s measurement compares with: of those taken in its
    state of the machine (other processes' use alike, see :meth:`Load.differs`), the nearest
    in time; where none was, the nearest."""
    if not measured:
        return None
    at, load = record.at or 0.0, record.load

    def distance(c: BaselineCheck) -> tuple[bool, float]:
        return (load is not None and load.differs(c.load)), abs(c.at - at)

    return min(measured, key=distance)


def normalized(measured: Sequence[BaselineCheck], record: Record) -> float | None:
    """``record``'s projected time as if measured in the machine's latest state: its own time
    times the baseline's latest over the baseline's of its state (its :func:`reference`). The
    baseline's own record reads its latest measurement."""
    time = record.projected_time
    ref = reference(measured, record)
    if time is None or ref is None or not ref.projected_time:
        return time
    return time * measured[-1].projected_time / ref.projected_time


def ratio(measured: Sequence[BaselineCheck], record: Record) -> float | None:
    """``record``'s screening throughput over the baseline's of its state nearest it (None: no
    measurement, or a failed one)."""
    m, ref = record.measurement, reference(measured, record)
    if m is None or ref is None or not ref.throughput or not record.ok:
        return None
    return m.throughput / ref.throughput


def away(measured: Sequence[BaselineCheck], record: Record) -> bool:
    """Whether ``record`` was measured while other processes used the machine
    (:attr:`Load.busy`) although the baseline was also measured with it free: its ratio is of
    a state the user's own training, alone on the machine, is not in, and does not carry to
    it for a config whose speed depends on the state (a thread count, most of all): ranked in
    the free state by that ratio, such configs would take the rounds' places."""
    load = record.load
    if load is None or not load.busy:
        return False
    return any(c.load is not None and not c.load.busy for c in measured)
