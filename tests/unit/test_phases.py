"""Issue 36, the task side of learned thresholds: which phase a task is in, since when, and what its finished
phases took, as Keras' hooks (through Progress), a custom loop's optimizer and a restore delimit them."""
from __future__ import annotations

import pytest

from tfdist import protocol as P
from tfdist.protocol.records import Phase, PhaseStats
from tfdist.runtime.bootstrap.reporter import Reporter
from tfdist.runtime.phases import WINDOW, PhaseClock, marks_restore
from tfdist.runtime.progress import Progress
from tfdist.runtime.reporting import Heartbeat


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_enter_finishes_the_phase_before_and_says_when_the_kind_changed():
    clock = Clock()
    phases = PhaseClock(started=90.0, clock=clock)
    assert phases.report()[0] is Phase.STARTUP and phases.report()[2] is None
    clock.now = 110.0
    assert phases.step_done(clock.now) and not phases.enter(Phase.STEP)  # the same kind: no beat due at once
    for duration in (1.0, 3.0, 2.0):
        clock.now += duration
        assert not phases.step_done(clock.now)
    phase, since, stats = phases.report()
    assert phase is Phase.STEP and stats == {Phase.STARTUP: PhaseStats(1, 20.0, 20.0), Phase.STEP: PhaseStats(3, 3.0, 3.0)}
    wall_offset = since - clock.now
    clock.now += 7.0
    assert phases.enter(Phase.BETWEEN)
    assert phases.report()[1] - wall_offset == pytest.approx(clock.now)  # phase_since: when it entered, wall clock
    assert phases.report()[2][Phase.STEP].n == 4  # the step in progress finished when between began


def test_the_p99_is_over_the_last_window_in_constant_memory_and_max_over_all():
    clock = Clock()
    phases = PhaseClock(started=clock.now, clock=clock)
    phases.enter(Phase.STEP)
    clock.now += 50.0  # one long step, long ago
    phases.step_done(clock.now)
    for i in range(2 * WINDOW):
        clock.now += 0.01 if i % 100 else 0.02
        phases.step_done(clock.now)
    stats = phases.report()[2][Phase.STEP]
    assert stats.n == 2 * WINDOW + 1 and stats.max == pytest.approx(50.0)
    assert stats.p99 == pytest.approx(0.01)  # 5 of the last 512 took 0.02: under the top 1 %, nearest rank
    assert len(phases._durations[Phase.STEP].ring) == WINDOW


def beat_at(tmp_path, clock, phases):
    return Heartbeat(str(tmp_path / "hb"), min_interval=3600, phases=phases), str(tmp_path / "hb")


def test_keras_hooks_delimit_startup_steps_and_between_with_a_beat_at_each_change_of_kind(tmp_path):
    clock = Clock()
    phases = PhaseClock(started=clock.now, clock=clock)
    heartbeat, path = beat_at(tmp_path, clock, phases)  # throttled: only the changes of kind get through
    progress = Progress(heartbeat=heartbeat, clock=clock)
    clock.now += 10.0
    progress.begin(0, total_steps=12, steps_per_epoch=4)
    seen = [P.read_heartbeat(path).phase]
    for epoch in range(3):
        progress.epoch_begin()
        seen.append(P.read_heartbeat(path).phase)
        for batch in range(4):
            clock.now += 5.0 if (epoch, batch) == (0, 0) else 0.1  # the first step traces the function
            progress.batch_end(0.5, batch)
            seen.append(P.read_heartbeat(path).phase)
        clock.now += 2.0  # the epoch's end: a save, a validation
        progress.epoch_end()
    progress.end()
    S, B, U = Phase.STEP, Phase.BETWEEN, Phase.STARTUP
    assert seen == [U, U, S, S, S, B, S, S, S, S, B, S, S, S, S, B]
    record = P.read_heartbeat(path)
    assert record.finished and record.phase is B
    assert record.phase_stats[U] == PhaseStats(1, pytest.approx(15.0), pytest.approx(15.0))
    assert record.phase_stats[S].n == 11 and record.phase_stats[S].max == pytest.approx(0.1)
    assert record.phase_stats[B].n == 2 and record.phase_stats[B].p99 == pytest.approx(2.0)


def test_a_restore_is_its_own_phase_up_to_the_end_of_the_first_step(tmp_path, monkeypatch):
    monkeypatch.delenv("TFDIST_RESTART_COUNT", raising=False)
    clock = Clock()
    phases = PhaseClock(started=clock.now, clock=clock)
    heartbeat, path = beat_at(tmp_path, clock, phases)
    backup_dir = tmp_path / "backup"
    backup_dir.mkdir()

    class BackupAndRestore:
        def __init__(self):
            self.backup_dir = str(backup_dir)

        def on_train_begin(self, logs=None):
            clock.now += 3.0  # reading the checkpoint back

    fresh = marks_restore(BackupAndRestore(), phases, lambda: heartbeat.beat(None, force=True))
    fresh.on_train_begin()
    assert phases.phase is Phase.STARTUP, "nothing to read back: no restore"
    (backup_dir / "chief").mkdir()
    restorer = marks_restore(BackupAndRestore(), phases, lambda: heartbeat.beat(None, force=True))
    assert marks_restore(restorer, phases, lambda: None).on_train_begin is restorer.on_train_begin  # once
    restorer.on_train_begin()
    assert P.read_heartbeat(path).phase is Phase.RESTORE  # written at once, before the restore ran
    progress = Progress(heartbeat=heartbeat, clock=clock)
    progress.begin(30, total_steps=40)
    clock.now += 1.5  # the first step after it traces again
    progress.batch_end(0.5, 0)
    stats = P.read_heartbeat(path).phase_stats
    assert stats[Phase.RESTORE] == PhaseStats(1, pytest.approx(4.5), pytest.approx(4.5))


def test_a_custom_loop_seen_by_polling_beats_its_steps_and_says_no_phase(tmp_path):
    clock = Clock()
    phases = PhaseClock(started=clock.now, clock=clock)
    heartbeat = Heartbeat(str(tmp_path / "hb"), min_interval=0.0, phases=phases)
    steps = {}
    rep = Reporter(heartbeat, read_step=lambda o: steps.get(id(o)))

    class Opt:
        pass

    opt = Opt()
    rep._optimizers.add(opt)
    steps[id(opt)] = 0
    rep.poll_loop()
    clock.now += 8.0
    steps[id(opt)] = 2
    rep.poll_loop()  # the loop started: start-up ends
    clock.now += 0.5
    steps[id(opt)] = 7
    rep.poll_loop()
    record = P.read_heartbeat(str(tmp_path / "hb"))
    # The steps are beaten; no phase is claimed (see test_a_loop_seen_only_by_polling_says_no_phase for why).
    assert record.step == 7 and record.phase is None and record.phase_stats is None


def test_a_standalone_evaluate_between_a_custom_loops_polled_steps_claims_no_phase(tmp_path):
    clock = Clock()
    phases = PhaseClock(started=clock.now, clock=clock)
    heartbeat = Heartbeat(str(tmp_path / "hb"), min_interval=3600, phases=phases)
    steps = {}
    rep = Reporter(heartbeat, read_step=lambda o: steps.get(id(o)))

    class Opt:
        pass

    opt = Opt()
    rep._optimizers.add(opt)
    steps[id(opt)] = 0
    rep.poll_loop()
    steps[id(opt)] = 3
    rep.poll_loop()
    rep.evaluating()  # the keep-alive callback's on_test_begin: beaten at once, throttled or not
    assert P.read_heartbeat(str(tmp_path / "hb")).step == 3
    clock.now += 4.0
    steps[id(opt)] = 4
    rep.poll_loop()
    record = P.read_heartbeat(str(tmp_path / "hb"))
    assert record.step == 4 and record.phase is None and record.phase_stats is None


def test_a_loop_seen_only_by_polling_says_no_phase():
    # A custom loop's steps are seen by polling its optimizer: the time between two looks also holds its epoch-end
    # checkpoint save, so a learned step threshold would call that save a hang (seen: a CheckpointManager save at an
    # epoch's end, under load, taken for a 3.5 s hang). Such a task says no phase; the launcher waits --hang-timeout.
    from tfdist.runtime.phases import PhaseClock

    now = [0.0]
    clock = PhaseClock(started=0.0, clock=lambda: now[0])
    assert clock.report()[0] is not None
    now[0] = 1.0
    clock.steps_done(3, now[0])
    assert clock.report() == (None, None, None)
