"""The one progress callback's core (no TensorFlow): local step counting, fan-out, and loss conversion only when a
record is written."""
from __future__ import annotations

from tfdist import protocol as P
from tfdist.observability.labels import TaskLabels
from tfdist.runtime.metrics import TrainingMetrics
from tfdist.runtime.phases import PhaseClock
from tfdist.runtime.progress import Progress, as_float, total_steps
from tfdist.runtime.reporting import Heartbeat

SERIES = {"job": "j", "task_type": "worker", "task_index": "0", "host": "h"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Tensor:
    """Stands for a scalar loss tensor: converting it is the device sync to avoid per batch."""

    conversions = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        Tensor.conversions += 1
        return self.value


class Scalars:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def steps_done(self, step, steps, loss, now):
        self.calls.append(("steps", step, steps, now))

    def pause(self, step):
        self.calls.append(("pause", step))

    def close(self):
        self.calls.append(("close",))


def test_steps_are_counted_locally_and_fanned_out(tmp_path):
    clock = Clock()
    metrics = TrainingMetrics(TaskLabels("j", "worker", 0, "h"))
    beat_file = tmp_path / "heartbeat.json"
    heartbeat = Heartbeat(str(beat_file), min_interval=3600, phases=PhaseClock(0.0, clock=clock))  # forced beats only
    scalars = Scalars()
    progress = Progress(heartbeat=heartbeat, metrics=metrics, scalars=scalars, examples_per_step=8, clock=clock)
    progress.begin(40, steps_per_call=2, total_steps=100)  # resumed at step 40
    first = P.read_heartbeat(str(beat_file))
    assert (first.step, first.total_steps, first.finished) == (40, 100, False)
    Tensor.conversions = 0
    for _ in range(5):
        progress.batch_begin()
        clock.now += 0.5
        progress.batch_end(Tensor(0.25))
    assert progress.step == 50 and progress.examples == 80 and progress.start_step == 40
    assert Tensor.conversions == 1  # one beat was written (the first step ended start-up): one loss converted
    reg = metrics.registry
    assert reg.get_sample_value("tfdist_train_steps_total", SERIES) == 10
    assert reg.get_sample_value("tfdist_train_examples_total", SERIES) == 80
    # Each hook call covers 2 steps in 0.5 s: 0.25 s per step, observed once per call.
    assert reg.get_sample_value("tfdist_train_step_duration_seconds_sum", SERIES) == 5 * 0.5 / 2
    assert [c[1] for c in scalars.calls] == [42, 44, 46, 48, 50]
    progress.epoch_end()
    beat = P.read_heartbeat(str(beat_file))
    assert (beat.step, beat.loss, beat.total_steps, beat.examples) == (50, 0.25, 100, 80)
    assert Tensor.conversions == 2
    progress.end()
    last = P.read_heartbeat(str(beat_file))
    assert last.finished and last.step == 50
    assert scalars.calls[-2:] == [("pause", 50), ("close",)]


def test_heartbeat_is_throttled_by_the_writer(tmp_path):
    beat_file = tmp_path / "hb"
    progress = Progress(heartbeat=Heartbeat(str(beat_file), min_interval=0.0), examples_per_step=0)
    progress.begin(0)
    progress.batch_end(None)
    assert P.read_heartbeat(str(beat_file)).step == 1
    progress.batch_end(float("nan"))
    beat = P.read_heartbeat(str(beat_file))
    assert beat.step == 2 and beat.loss is None  # NaN has no JSON spelling


def test_without_a_heartbeat_path_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(P.HEARTBEAT_FILE, raising=False)
    progress = Progress(heartbeat=Heartbeat())
    assert progress.heartbeat is None
    progress.begin(0)
    progress.batch_end(1.0)
    progress.end()
    assert list(tmp_path.iterdir()) == []


def test_parameter_server_mode_takes_the_step_at_epoch_end(tmp_path):
    beat_file = tmp_path / "hb"
    progress = Progress(heartbeat=Heartbeat(str(beat_file), min_interval=3600))
    progress.begin(0, total_steps=None)
    progress.epoch_end(step=30)
    assert progress.step == 30 and P.read_heartbeat(str(beat_file)).step == 30


def test_total_steps_and_loss_conversion():
    assert total_steps({"epochs": 3, "steps": 100}) == 300
    assert total_steps({"epochs": 3, "steps": None}) is None
    assert total_steps(None) is None
    assert as_float(Tensor(0.5)) == 0.5 and as_float(None) is None and as_float(float("inf")) is None
    assert as_float("x") is None
