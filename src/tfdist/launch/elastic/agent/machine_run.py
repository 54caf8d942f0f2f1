"""What one machine's agent keeps of a multi-machine run, as the single-machine launcher keeps of its own: how the
job ended in the launcher's words (for the run record that ``tfdist status`` reads), the launcher's own metrics on
``--launcher-metrics-port``, the temporary run folder, removed when the job did not fail, and ``--firewall``'s
table (launch/firewall/)."""
from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from tfdist.launch.firewall import Firewall, NoFirewall, firewall_for
from tfdist.launch.outcome import Cause
from tfdist.status import ExitStatus

if TYPE_CHECKING:
    from tfdist.launch.seams import TaskMetrics
    from tfdist.observability.launcher_metrics import LauncherMetrics
    from tfdist.protocol import TaskPlan


@dataclass(frozen=True)
class AgentResult:
    """How this machine saw the job end (read by :func:`tfdist.launch.console.liveview.watch`)."""

    cause: Cause
    restarts: int


def open_firewall(enabled: bool, job: str, launcher_metrics_port: int | None,
                  say: Callable[[str], None]) -> Firewall | NoFirewall:
    """``--firewall``: this machine's table, loaded before any round, guarding the agent's own metrics port in every
    round (raises UsageError where it cannot work)."""
    return firewall_for(enabled, job, [launcher_metrics_port], say=say)


def cause_of(status: int) -> Cause:
    """The single-machine launcher's word for how the job ended, from the exit status the rendezvous gave."""
    if status == ExitStatus.SUCCESS:
        return Cause.SUCCEEDED
    if status in (ExitStatus.PREEMPTED, 128 + signal.SIGHUP):
        return Cause.PREEMPTED
    if status == ExitStatus.CTRL_C:
        return Cause.INTERRUPTED
    return Cause.TASK_FAILED


def start_metrics(port: int | None, job_name: str, host: str,
                  say: Callable[[str], None]) -> LauncherMetrics | None:
    """The agent's LauncherMetrics served on ``port`` (None without ``--launcher-metrics-port``)."""
    if port is None:
        return None
    from tfdist.observability.launcher_metrics import LauncherMetrics

    metrics = LauncherMetrics(job_name)
    say(f"launcher metrics at {metrics.start(port, host).url}")
    return metrics


def set_task_states(metrics: TaskMetrics | None, plans: Iterable[TaskPlan], state: str) -> None:
    if metrics is not None:
        for plan in plans:
            metrics.set_task_state(plan.task_type, plan.task_index, state)


def clean_up_folder(log_dir: str, *, temporary: bool, result: AgentResult | None,
                    last_look: Callable[[], object] | None, say: Callable[[str], None]) -> None:
    """Remove a temporary run folder as the single-machine launcher does: kept after a failure (its logs are the
    evidence), removed otherwise, after the live view's last look (``last_look``); a folder where no round ran (the
    agent was refused, or never joined) holds no evidence and goes too."""
    if not temporary:
        return
    failed = result is None or result.cause is Cause.TASK_FAILED
    if failed and _ran_here(log_dir):
        say(f"logs kept in {log_dir}")
        return
    if last_look is not None:
        try:
            last_look()
        except Exception:  # noqa: BLE001 - the view's last look must not keep the folder
            pass
    shutil.rmtree(log_dir, ignore_errors=True)


def _ran_here(log_dir: str) -> bool:
    """Whether any round's workers ran here (an ``attempt-<round>`` folder exists)."""
    try:
        return any(name.startswith("attempt-") for name in os.listdir(log_dir))
    except OSError:
        return False
