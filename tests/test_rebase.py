"""Never slower than what the user had (issue 56): every ratio against a baseline measured in
the same state of the machine, and no answer the side-by-side rounds did not measure."""

from __future__ import annotations

import dataclasses
import re

import pytest
from sim import Model, result_of, search
from test_ledger import BASE, _base, _candidate, _study_with, measurement, settings

from autotune._load import CpuReading as Reading
from autotune._load import Load, LoadMeter
from autotune._result.result import SearchResult
from autotune._result.summary import render_summary
from autotune._search import rebase, storage
from autotune._search.ledger import Ledger, measure_again
from autotune._search.record import BaselineCheck, CheckReason, Record

SAFE = {"num_workers": [0, 1, 2], "intra_op_threads": [None, 1], "channels_last": [False, True]}
BUSY, IDLE = Load(others=1.0, cores=2), Load(others=0.02, cores=2)


def _speed(cfg) -> float:
    """Loader workers and channels_last help this model; one thread hurts it."""
    s = {0: 1.0, 1: 1.2, 2: 1.3}[cfg.num_workers] * (1.1 if cfg.channels_last else 1.0)
    return s * (0.7 if cfg.intra_op_threads == 1 else 1.0)


def _ratios(lines: list[str], after: float) -> list[tuple[int, float]]:
    """(trial number, printed screening ratio) of each trial line printed ``after`` seconds."""
    out = []
    for line in lines:
        at, _, text = line.strip().partition(" ")
        m = re.search(r"^ *#(\d+)\*? .* ([\d.]+)x ", text)
        if m and float(at) > after:
            out.append((int(m.group(1)), float(m.group(2))))
    return out


def test_a_busy_first_minute_leaves_every_later_ratio_true() -> None:
    """Another process takes a core for the search's first 20 s (half the speed of every run
    then, the baseline's included). The trials measured after it read their true speed over
    the baseline's: the baseline is measured again once a trial ran in the freed machine, and
    the output says so. Before, every later ratio read twice its true value."""
    model = Model(speed=_speed, busy=lambda t: 1.0 if t < 20 else 0.0)
    run, _, lines = search(model, knobs=SAFE, timeout=240.0)
    text = "\n".join(lines)
    assert "machine: the machine was free again during trial #" in text, text
    ledger = run.ledger()
    freed = [c for c in ledger.baseline_checks if c.reason is CheckReason.STATE]
    assert freed and not freed[0].load.busy, text
    after = freed[0].at - run.settings.started
    later = _ratios(lines, after)
    assert len(later) >= 3, text
    for number, printed in later:
        entry = next(e for e in ledger.entries if e.number == number)
        assert printed == pytest.approx(_speed(entry.config), rel=0.05), (number, text)
    # The result names the shared machine, and its answer is the truly fastest config.
    data = result_of(run).to_dict()
    machine = data["search"]["machine"]
    assert machine["shared"] >= 1 and machine["others_max"] == pytest.approx(1.0)
    assert "machine shared: other processes used up to ~1.0 of 2 cores" in render_summary(data)
    assert data["config"]["num_workers"] == 2 and data["config"]["channels_last"]
    assert data["config"]["intra_op_threads"] is None


def test_rounds_that_find_every_leader_slower_answer_the_baseline() -> None:
    """Every config but the baseline screens 1.6x its true speed (its first draw: a lucky
    window), and all train at 0.9x. The rounds measure the leaders and the challengers they
    fit, all slower; the configs they did not reach still screen faster than the baseline.
    The answer is the baseline's own settings, said plainly, not an unmeasured config."""

    def draw(cfg, n: int) -> float:
        return 1.6 if n == 0 and cfg != BASE else 1.0

    model = Model(speed=lambda cfg: 1.0 if cfg == BASE else 0.9, draw=draw)
    run, _, lines = search(model, knobs=SAFE, timeout=240.0)
    ledger = run.ledger()
    unmeasured = [
        e
        for e in ledger.candidates
        if ledger.feasible(e) and ledger.side_speedup(e) is None and not ledger.round_speedups(e)
    ]
    assert unmeasured, "\n".join(lines)  # the rounds did not reach every config
    # They rank faster than the baseline by their screening draws (a race's second draw of a
    # leader reads 0.9x, the median of its two draws still more than 1).
    base_time = ledger.rank_time(ledger.baseline)
    assert all(ledger.rank_time(e) < base_time for e in unmeasured)
    best = ledger.best()
    assert best is not None and best.config == BASE, "\n".join(lines)
    data = result_of(run).to_dict()
    assert data["speedup"] == 1.0 and data["throughput_ratio"] == 1.0
    assert render_summary(data).startswith(
        "autotune result: no config trained faster than yours here"
    )


def test_a_screening_ratio_is_against_the_baseline_measured_in_its_state() -> None:
    """The baseline measured busy first (200 s), then again idle (100 s); trial 1 ran busy
    (180 s), trial 2 idle (90 s): 200/180 and 100/90, never 200/90 (2.2x, the stale ratio).
    In the machine's latest state (idle), trial 1 ranks at 90 s and trial 2 at 90 s."""
    workers = BASE.replace(num_workers=1, persistent_workers=True)
    threads = BASE.replace(intra_op_threads=1)
    base = dataclasses.replace(_base(), at=10.0, load=BUSY)
    one = dataclasses.replace(_candidate(workers, 180.0), at=20.0, load=BUSY)
    two = dataclasses.replace(_candidate(threads, 90.0), at=80.0, load=IDLE)
    study = _study_with([base, one, two])
    check = BaselineCheck(at=70.0, projected_time=100.0, throughput=3200.0, load=IDLE)
    storage.add_baseline_check(study, dataclasses.replace(check, reason=CheckReason.STATE))
    ledger = Ledger.read(study, settings())
    first, second = ledger.entries[1], ledger.entries[2]
    assert ledger.reference(first.record).at == 10.0
    assert ledger.reference(second.record).at == 70.0
    assert ledger.screening_speedup(first) == pytest.approx(200 / 180)
    assert ledger.screening_speedup(second) == pytest.approx(100 / 90)
    assert ledger.normalized(first.record) == pytest.approx(90.0)
    assert ledger.projected(ledger.baseline) == pytest.approx(100.0)  # its latest
    # In one state the nearest in time: a cadence check at 75 s is trial 2's reference.
    storage.add_baseline_check(study, dataclasses.replace(check, at=75.0, projected_time=95.0))
    ledger = Ledger.read(study, settings())
    assert ledger.reference(ledger.entries[2].record).at == 75.0


def test_the_throughput_ratio_never_divides_one_source_by_another() -> None:
    """An interrupted search, no rounds: the winner's screening throughput (1,600 samples/s)
    over the baseline's measured nearest it (1,500), not over its cold first figure (1,000).
    With rounds that measured the baseline and another config but not this one, the answer
    is one they measured (here the baseline: the other was slower), so no ratio puts a
    screening figure beside a side-by-side one."""
    cl = BASE.replace(channels_last=True)
    other = BASE.replace(num_workers=1, persistent_workers=True)
    base = dataclasses.replace(_base(), at=10.0, measurement=measurement(0.032))  # 1,000/s
    slower = dataclasses.replace(_candidate(other, 190.0), at=30.0)
    winner = dataclasses.replace(_candidate(cl, 100.0), at=50.0, measurement=measurement(0.02))
    study = _study_with([base, slower, winner])
    storage.add_baseline_check(
        study, BaselineCheck(at=45.0, projected_time=120.0, throughput=1500.0)
    )
    ledger = Ledger.read(study, settings())
    cut = SearchResult.from_ledger(
        ledger, settings(), study_name="s", storage=None, seconds=60.0, interrupted=True,
        memory=None,
    )  # fmt: skip
    assert cut.winner.config == cl
    assert cut.throughput_ratio == pytest.approx(1600 / 1500)
    assert cut.speedup == pytest.approx(1600 / 1500)
    # The table's baseline row: its measurement in the winner's state, not its cold first one
    # (a busy README run's table showed 38 samples/s beside a winner measured free).
    table = cut.to_dict()["baseline"]["metrics"]
    assert table["throughput"] == pytest.approx(1500)
    assert (
        table["measured_as"] == "screening (its measurement in the winner's state of the machine)"
    )
    for _ in range(2):
        storage.add_round(study, {0: 100.0, 1: 105.0}, {0: 2000.0, 1: 1900.0})
    done = SearchResult.from_ledger(
        Ledger.read(study, settings()), settings(), study_name="s", storage=None,
        seconds=60.0, interrupted=False, memory=None,
    )  # fmt: skip
    assert done.winner.config == BASE
    assert done.throughput_ratio == 1.0 and done.speedup == 1.0


def test_the_baseline_is_measured_again_when_the_state_changed_or_time_passed() -> None:
    base = dataclasses.replace(
        _base(), at=0.0, load=BUSY, measure_seconds=4.0, projected_time=200.0
    )
    ledger = Ledger.read(_study_with([base]), settings())
    assert rebase.due(ledger, BUSY, now=10.0, budget=240.0) is None
    assert rebase.due(ledger, IDLE, now=10.0, budget=240.0) is CheckReason.STATE
    # The same state, long after: the cadence (a measurement per 4 x 1.2 / 0.08 = 60 s).
    assert rebase.due(ledger, BUSY, now=59.0, budget=240.0) is None
    assert rebase.due(ledger, BUSY, now=61.0, budget=240.0) is CheckReason.CADENCE
    # Within the share of the budget: a 60-s search has room for none of the cadence's.
    assert rebase.due(ledger, BUSY, now=61.0, budget=50.0) is None
    # After two re-measurements for a state in a row, a third change keeps its reading.
    study = _study_with([base])
    for at in (20.0, 30.0):
        check = BaselineCheck(
            at=at, projected_time=100.0, throughput=1.0, load=IDLE, reason=CheckReason.STATE
        )
        storage.add_baseline_check(study, check)
    ledger = Ledger.read(study, settings())
    assert rebase.due(ledger, Load(others=2.0, cores=2), now=31.0, budget=240.0) is None


def test_the_load_meter_reads_other_processes_cpu_time() -> None:
    """Over 2 s, the machine was busy 2.5 CPU-seconds and this process tree 0.5: others kept
    one core busy."""
    readings = iter([Reading(wall=0.0, busy=10.0, own=1.0), Reading(wall=2.0, busy=12.5, own=1.5)])
    m = LoadMeter(lambda: next(readings), cores=2)
    m.start()
    load = m.stop()
    assert load == Load(others=1.0, cores=2, seconds=2.0)
    assert load.busy and load.differs(IDLE) and not load.differs(BUSY)
    assert Load.from_dict(load.to_dict()) == load
    record = Record.from_dict(dataclasses.replace(_base(), load=load).to_dict())
    assert record.load == load


def test_the_real_meter_counts_others_and_not_this_process_tree() -> None:
    """A process spinning outside this tree (its parent exited: it is no descendant) reads as
    other processes' use; one spinning as this process's child is this tree's own time."""
    import subprocess
    import sys
    import time

    from autotune._load import _tree_seconds

    spin = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"
    orphan = (
        "import os, subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {spin.format(s=2.5)!r}], start_new_session=True)"
    )
    subprocess.run([sys.executable, "-c", orphan], check=True)
    meter = LoadMeter(cores=2)
    meter.start()
    time.sleep(1.5)
    load = meter.stop()
    assert load is not None and load.others >= 0.6 and load.busy
    before = _tree_seconds()
    busy = "import time\nwhile time.process_time() < 0.8: pass\n"  # 0.8 CPU-seconds
    child = subprocess.Popen([sys.executable, "-c", busy])
    child.wait()
    assert _tree_seconds() - before >= 0.7  # the child's time (0.8 s), once it was waited for


def test_an_outlying_baseline_check_is_measured_again_and_not_kept() -> None:
    """The baseline's third measurement (its first check) reads 0.55x its speed with nothing
    else on the machine (a JPEG search read 262 samples/s between 468 and 495, and every ratio
    after it ran high): it is measured once more, the second figure is the one kept, and the
    rows after it read true ratios."""

    def draw(cfg, n: int) -> float:
        return 0.55 if cfg == BASE and n == 2 else 1.0

    model = Model(speed=_speed, draw=draw)
    run, _, lines = search(model, knobs={**SAFE, "precision": ["fp32", "bf16"]}, timeout=240.0)
    ledger = run.ledger()
    assert ledger.baseline_checks, "\n".join(lines)
    assert all(c.throughput > 90.0 for c in ledger.checks), [c.throughput for c in ledger.checks]
    for number, printed in _ratios(lines, after=0.0):
        entry = next(e for e in ledger.entries if e.number == number)
        assert printed == pytest.approx(_speed(entry.config), rel=0.05), "\n".join(lines)


def test_a_config_fast_only_while_the_machine_was_busy_is_measured_again_not_answered() -> None:
    """A README run with a core taken for its first minute: two OpenMP threads stall on the
    shared core (the baseline trains 6x slower), one thread does not (0.7x the baseline free,
    busy or not). Its 4-6x ratios of the busy state are true of that state only. Once the
    machine is free, the configs that beat the baseline while it was busy are measured again,
    and the answer is the truly fastest config (two workers, channels_last, both threads),
    never a one-thread config. Before, the busy-state ratios ranked in the free state and
    filled the rounds: a README run answered a one-thread config, 0.88x in a plain loop."""

    def slowed(cfg, busy: float) -> float:
        return 1.0 if cfg.intra_op_threads == 1 or busy == 0 else 1.0 + 5.0 * busy

    model = Model(speed=_speed, busy=lambda t: 1.0 if t < 60 else 0.0, slowed=slowed)
    run, _, lines = search(model, knobs=SAFE, timeout=240.0)
    text = "\n".join(lines)
    assert "measuring again the configs that led while it was busy" in text, text
    ledger = run.ledger()
    busy_threads = [
        e
        for e in ledger.candidates
        if e.config.intra_op_threads == 1 and e.record.load is not None and e.record.load.busy
    ]
    assert busy_threads, text  # one thread was measured while the machine was busy
    again = [e for e in busy_threads if any(
        o.number > e.number and o.config == e.config and not o.record.reused
        and not o.record.load.busy for o in ledger.candidates
    )]  # fmt: skip
    assert again, text  # and again once it was free
    best = ledger.best()
    assert best is not None and best.config.intra_op_threads is None, text
    assert best.config.num_workers == 2 and best.config.channels_last, text
    assert result_of(run).to_dict()["speedup"] == pytest.approx(1.43, rel=0.02)


def test_an_answer_not_faster_beyond_the_noise_leaves_the_baseline() -> None:
    """The rounds measured a config at 0.75x, 1.02x, 1.10x and 1.11x: 0.98x, its 95% interval
    0.67-1.44x. Not faster than the baseline beyond the noise, so the answer is the baseline's
    settings (before, any median above 1.00x replaced it). Four rounds at 1.25x-1.33x show it
    faster (1.29x, 1.22-1.36x): then it is the answer."""
    cl = BASE.replace(channels_last=True)
    study = _study_with([dataclasses.replace(_base(), at=0.0), _candidate(cl, 150.0)])
    for ratio in (0.75, 1.02, 1.10, 1.11):
        storage.add_round(study, {0: 100.0, 1: 100.0 / ratio})
    ledger = Ledger.read(study, settings())
    figure = ledger.side_interval(ledger.entries[1])
    assert figure is not None
    shown = (figure.estimate, figure.low, figure.high)
    assert shown == pytest.approx((0.983, 0.669, 1.445), abs=1e-3)
    assert ledger.slower_side_by_side(ledger.entries[1])
    best = ledger.best()
    assert best is not None and best.config == BASE
    clear = _study_with([dataclasses.replace(_base(), at=0.0), _candidate(cl, 150.0)])
    for ratio in (1.30, 1.25, 1.33, 1.28):
        storage.add_round(clear, {0: 100.0, 1: 100.0 / ratio})
    ledger = Ledger.read(clear, settings())
    figure = ledger.side_interval(ledger.entries[1])
    assert figure is not None and figure.low == pytest.approx(1.221, abs=1e-3)
    best = ledger.best()
    assert best is not None and best.config == cl


def test_a_busy_measurement_ranks_last_once_the_baseline_was_measured_free() -> None:
    """Trial 1 ran while the machine was busy (2x the baseline there); then the baseline was
    measured free: trial 1 ranks last, is not the answer, and is the config to measure again.
    With no free measurement of the baseline, the busy state is the only one and it ranks."""
    threads = BASE.replace(intra_op_threads=1)
    base = dataclasses.replace(_base(), at=0.0, load=BUSY)
    one = dataclasses.replace(_candidate(threads, 100.0), at=20.0, load=BUSY)
    study = _study_with([base, one])
    best = Ledger.read(study, settings()).best()
    assert best is not None and best.config == threads
    check = BaselineCheck(at=30.0, projected_time=20.0, throughput=16000.0, load=IDLE)
    storage.add_baseline_check(study, dataclasses.replace(check, reason=CheckReason.STATE))
    ledger = Ledger.read(study, settings())
    assert ledger.rank_time(ledger.entries[1]) == float("inf")
    best = ledger.best()
    assert best is not None and best.config == BASE
    assert [e.number for e in measure_again(ledger, 3)] == [1]
