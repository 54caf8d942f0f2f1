"""The live view of ``tfdist launch``: one line per task, redrawn from the heartbeats, and a summary at the end.

Pure rendering (:func:`render_rows`, :func:`render_header`, :func:`render_summary`: data in, lines out) plus a thin
thread (:class:`LiveView`) that reads the run folder at most twice a second. :func:`watch` is what the launcher
wraps around ``Supervisor.run()``: it records the run (for ``tfdist status`` and ``tfdist logs``), shows the live
lines when stderr is a terminal, and prints the summary after them. Elsewhere (a pipe, a file, ``--json``) output
stays exactly as it was: the prefixed task lines and the launcher's own messages.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, TextIO

from tfdist.launch.console import progress, runs
from tfdist.launch.console.terminal import PinnedLines
from tfdist.launch.outcome import RunState

REDRAW_INTERVAL_S = 0.5  # at most two redraws a second


# ----------------------------------------------------------------------------------------------- formatting


def format_duration(seconds: float | None) -> str:
    """``7s``, ``1m05s``, ``2h03m``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_number(value: float | None) -> str:
    """A loss or metric: 4 significant digits, no exponent for everyday values."""
    if value is None:
        return "-"
    return f"{value:.4g}"


@dataclass(frozen=True)
class Row:
    """What one live line says about one task."""

    task: str
    state: str
    step: int | None = None
    total_steps: int | None = None
    steps_per_s: float | None = None
    loss: float | None = None
    restarts: int = 0
    eta_s: float | None = None


def render_rows(rows: Sequence[Row]) -> list[str]:
    """One aligned line per task: state, step[/total], steps/s (when measured), loss, restarts, and the ETA while a
    task trains towards a known total."""
    if not rows:
        return []
    steps = [("-" if r.step is None else f"{r.step:,}") + (f"/{r.total_steps:,}" if r.total_steps else "")
             for r in rows]
    rates = [None if r.steps_per_s is None else f"{r.steps_per_s:.1f}" for r in rows]
    name_w = max(len(r.task) for r in rows)
    state_w = max(len(r.state) for r in rows)
    step_w = max(len(s) for s in steps)
    lines = []
    for row, step, rate in zip(rows, steps, rates):
        line = f"{row.task:<{name_w}}  {row.state:<{state_w}}  step {step:>{step_w}}"
        if any(rates):
            line += f"  {rate or '-':>6} steps/s"
        line += f"  loss {format_number(row.loss):<8}  restarts {row.restarts}"
        if row.eta_s is not None:
            line += f"  ETA {format_duration(row.eta_s)}"
        lines.append(line)
    return lines


def render_header(run_id: str, attempt: int | None, state: str, elapsed_s: float) -> str:
    where = f"  attempt {attempt}" if attempt is not None else ""
    return f"tfdist: job {run_id}  {state}{where}  {format_duration(elapsed_s)}"


@dataclass(frozen=True)
class Summary:
    """How a run ended, in numbers (also stored in the run record for ``tfdist status``)."""

    run_id: str
    state: str
    duration_s: float
    restarts: int
    steps: int | None = None
    loss: float | None = None
    examples: int | None = None
    steps_per_s: float | None = None  # while training (see :func:`training_rate`), not over the whole run
    examples_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {"steps": self.steps, "duration_s": rounded(self.duration_s), "restarts": self.restarts,
                "steps_per_s": rounded(self.steps_per_s), "examples": self.examples,
                "examples_per_s": rounded(self.examples_per_s), "loss": self.loss}


def training_rate(first: progress.Beat | None, last: progress.Beat | None) -> tuple[float | None, float | None]:
    """Steps and examples per second between two heartbeats of one task: the training throughput, leaving out the
    start-up (TensorFlow's import, the cluster handshake) that the run's wall time includes."""
    if first is None or last is None or last.time <= first.time:
        return None, None
    elapsed = last.time - first.time

    def rate(a: int | None, b: int | None) -> float | None:
        return (b - a) / elapsed if a is not None and b is not None and b >= a else None

    return rate(first.step, last.step), rate(first.examples, last.examples)


def render_summary(summary: Summary) -> list[str]:
    """The lines printed after the live view: outcome, steps, time, throughput, restarts, final metrics."""
    restarts = f"{summary.restarts} restart" + ("" if summary.restarts == 1 else "s")
    parts = [f"tfdist: job {summary.run_id} {summary.state} in {format_duration(summary.duration_s)}"]
    if summary.steps is not None:
        parts.append(f"{summary.steps:,} steps")
    if summary.steps_per_s is not None:
        parts.append(f"{summary.steps_per_s:.1f} steps/s")
    if summary.examples_per_s is not None:
        parts.append(f"{summary.examples_per_s:,.0f} examples/s")
    parts.append(restarts)
    if summary.loss is not None:
        parts.append(f"final loss {format_number(summary.loss)}")
    return [", ".join(parts)]


# ----------------------------------------------------------------------------------------- the live thread


def rows_for(tasks: Sequence[progress.TaskStatus], tracker: progress.RateTracker, restarts: int) -> list[Row]:
    rows = []
    for task in tasks:
        rate = tracker.update(task)
        beat = task.beat
        step = beat.step if beat else None
        total = beat.total_steps if beat else None
        rows.append(Row(task=task.name, state=task.state, step=step, total_steps=total, steps_per_s=rate,
                        loss=beat.loss if beat else None, restarts=restarts,
                        eta_s=progress.eta_seconds(step, total, rate) if task.state == progress.TRAINING else None))
    return rows


def _leader_beat(tasks: Sequence[progress.TaskStatus]) -> progress.Beat | None:
    """The leading task's heartbeat (the chief, else worker 0: the task whose success is the job's); on a machine of
    a multi-machine job without it, this machine's first worker, which runs the same steps."""
    from tfdist.cluster import TaskId, leader_of

    by_id = {}
    for task in tasks:
        role, _, index = task.name.partition(":")
        if index.isdigit():
            by_id[TaskId(role, int(index))] = task
    leader = leader_of(by_id)
    if leader is None:
        workers = sorted((task for task in by_id if task.type == "worker"), key=lambda task: task.index)
        leader = workers[0] if workers else None
    return by_id[leader].beat if leader is not None else None


class LiveView:
    """Samples the run folder every :data:`REDRAW_INTERVAL_S` and, when given a terminal, redraws the lines."""

    def __init__(self, log_dir: str, run_id: str, started_at: float, *, pinned: PinnedLines | None = None,
                 group_state: Callable[[], str] | None = None, interval_s: float = REDRAW_INTERVAL_S) -> None:
        self.log_dir = log_dir
        self.run_id = run_id
        self.started_at = started_at
        self.pinned = pinned
        self._group_state = group_state  # callable -> str, or None
        self.interval_s = interval_s
        self.tracker = progress.RateTracker()
        self.attempt: int | None = None
        self.last_beat: progress.Beat | None = None  # the leader's, kept once the folder is gone
        self.first_beat: progress.Beat | None = None  # the leader's first in this attempt
        self.final_state: str | None = None  # set when the run is over
        self.redraws = 0
        self._stop = threading.Event()
        self._sample_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="tfdist-liveview", daemon=True)

    def state(self) -> str:
        if self.final_state is not None:
            return self.final_state
        try:
            return str(self._group_state()) if self._group_state is not None else "running"
        except Exception:  # noqa: BLE001 - the supervisor's internals are not ours to rely on
            return "running"

    def sample(self) -> list[str]:
        """Read the folder once; return (and draw, on a terminal) the lines. Thread-safe: the supervisor may call
        it too (see :func:`watch`)."""
        with self._sample_lock:
            return self._sample()

    def _sample(self) -> list[str]:
        number, tasks = progress.latest_attempt(self.log_dir)
        if number is not None:
            if number != self.attempt:
                self.first_beat = None
            self.attempt = number
            current = _leader_beat(tasks)
            self.last_beat = current or self.last_beat
            if self.first_beat is None and current is not None and current.step is not None:
                self.first_beat = current
        lines = [render_header(self.run_id, self.attempt, self.state(), time.time() - self.started_at)]
        lines += render_rows(rows_for(tasks, self.tracker, self.attempt or 0))
        if self.pinned is not None:
            self.pinned.set_lines(lines)
            self.redraws += 1
        return lines

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a view must never take the launch down
                pass

    def start(self) -> None:
        if self.pinned is not None:
            self.pinned.install()
        self.sample()
        self._thread.start()

    def stop(self, *, keep: bool = True) -> None:
        """Stop redrawing; ``keep``: leave the final lines on the screen (else erase them: the launch never ran)."""
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            if keep:
                self.sample()  # the final state, when the folder is still there
        finally:
            if self.pinned is not None:
                self.pinned.close(keep=keep)


def wants_live(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Live lines only on a real terminal that understands cursor movement."""
    try:
        return stream.isatty() and environ.get("TERM", "") != "dumb"
    except (ValueError, AttributeError):
        return False


FINAL_STATES = ("succeeded", "preempted", "interrupted")  # any other ending is "failed"


def final_state(result: object) -> str | None:
    """How a launch ended, from its :class:`~tfdist.launch.outcome.LaunchResult` (None while nothing ended)."""
    cause = getattr(result, "cause", None)
    if cause is None:
        final = getattr(result, "final", None)
        cause = getattr(final, "cause", None)
    if cause is None:
        return None
    value = str(getattr(cause, "value", cause))
    return value if value in FINAL_STATES else "failed"


class WatchedCommand(Protocol):
    def argv(self) -> list[str]: ...


class WatchedSpec(Protocol):
    @property
    def log_dir(self) -> str | None: ...
    @property
    def job_name(self) -> str: ...
    @property
    def command(self) -> WatchedCommand: ...


class Watched(Protocol):
    """What :func:`watch` reads of the single-machine :class:`~tfdist.launch.local.supervisor.Supervisor` or a
    machine's :class:`~tfdist.launch.elastic.agent.agent.Agent` (it never drives them). ``state`` is a
    :class:`~tfdist.launch.outcome.RunState` (or its value); ``result`` is read once the run is over."""

    run_id: str
    log_dir: str
    before_log_cleanup: Callable[[], object] | None

    @property
    def spec(self) -> WatchedSpec: ...
    @property
    def state(self) -> RunState | str: ...
    @property
    def result(self) -> object: ...


def _live_state(supervisor: Watched) -> str:
    state = supervisor.state
    return str(getattr(state, "value", state))


@contextmanager
def watch(supervisor: Watched, *, live: bool | None = None, environ: Mapping[str, str] | None = None,
          stream: TextIO | None = None) -> Iterator[LiveView]:
    """Record the run, show the live view (``live``: None = when ``stream`` is a terminal), print the summary.

    ``supervisor`` is read, never driven (see :class:`Watched`).
    """
    environ = os.environ if environ is None else environ
    stream = stream or sys.stderr
    spec = supervisor.spec
    record = runs.new_record(run_id=supervisor.run_id, log_dir=supervisor.log_dir, temporary=spec.log_dir is None,
                             job_name=spec.job_name, command=tuple(spec.command.argv()))
    runs.save(record, environ)
    show = wants_live(stream, environ) if live is None else live
    view = LiveView(supervisor.log_dir, supervisor.run_id, record.started_at,
                    pinned=PinnedLines(stream) if show else None, group_state=lambda: _live_state(supervisor))
    view.start()
    # The supervisor removes a temporary run folder when the job ends; it calls this first (if it knows the hook),
    # so that the summary has the final heartbeats rather than those of the last redraw.
    supervisor.before_log_cleanup = view.sample
    escaped: BaseException | None = None
    try:
        yield view
    except BaseException as error:
        escaped = error
        raise
    finally:
        if escaped is None:
            view.final_state = final_state(supervisor.result) or "failed"
        else:
            view.final_state = "interrupted" if isinstance(escaped, KeyboardInterrupt) else "failed"
        error = escaped is not None and not isinstance(escaped, KeyboardInterrupt)
        view.stop(keep=not error)
        beat = view.last_beat
        steps_per_s, examples_per_s = training_rate(view.first_beat, beat)
        summary = Summary(run_id=supervisor.run_id, state=view.final_state,
                          duration_s=time.time() - record.started_at,
                          restarts=int(getattr(supervisor.result, "restarts", view.attempt or 0)),
                          steps=beat.step if beat else None, loss=beat.loss if beat else None,
                          examples=beat.examples if beat else None, steps_per_s=steps_per_s,
                          examples_per_s=examples_per_s)
        runs.save(runs.finished(record, view.final_state, summary.to_json()), environ)
        if show and not error:
            for line in render_summary(summary):
                print(line, file=stream, flush=True)
