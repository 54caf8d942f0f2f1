"""One call for the launcher and ``tfdist dump``: collect every task's evidence, judge it, write the report."""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from tfdist.launch.flight import report as reports
from tfdist.launch.flight.collect import Target, collect
from tfdist.launch.flight.gpus import nvidia_smi
from tfdist.launch.flight.report import HANG, ON_DEMAND, TASK_FAILED, HangReport  # noqa: F401 - re-exported
from tfdist.launch.flight.rules import TRAINER_ROLES, decide
from tfdist.launch.seams import RunningTasks

log = logging.getLogger("tfdist.launch")


def targets_of(group: RunningTasks) -> list[Target]:
    """The tasks of a running attempt (a :class:`~tfdist.launch.local.group.TaskGroup`; exit codes as the launcher
    knows them)."""
    return [Target(name=p.name, pid=p.pid, heartbeat_path=p.plan.heartbeat_path, log_path=p.log_path,
                   exit_code=p.poll()) for p in group.procs]


def others_running(group: RunningTasks) -> bool:
    """A training task of ``group`` still runs: a failure leaves it waiting (worth a dump before the stop)."""
    return any(p.poll() is None and p.plan.task_type in TRAINER_ROLES for p in group.procs)


def record(targets: Sequence[Target], *, run_id: str, attempt: int, reason: str, folder: str | None,
           watchdog_task: str | None = None, dumper: str = "auto") -> tuple[HangReport, str | None]:
    """The report on ``targets`` and the path of its text file (None when ``folder`` is None or not writable: the
    report is still returned, to be printed). Never raises for a task it cannot read."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfdist-flight-gpus") as pool:
        gpus = pool.submit(nvidia_smi)  # beside the stacks, in the same seconds
        tasks = collect(targets, dumper=dumper)
        gpu_report = gpus.result()
    verdict = decide(tasks, watchdog_task=watchdog_task)
    result = HangReport(run_id=run_id, attempt=attempt, reason=reason, verdict=verdict, tasks=tuple(tasks),
                        time=time.time(), collect_seconds=time.monotonic() - started, gpus=gpu_report)
    path = None
    if folder is not None:
        try:
            path = reports.write(result, folder)
        except OSError as error:  # a full disk must not stop the supervision
            log.warning("cannot write the hang report in %s: %s", folder, error)
    return result, path
