"""An agent's part in the flight recorder across machines: its tasks' evidence as an ``evidence`` message, sent
unasked when one of its tasks hung or failed (before it stops them), or in answer to the rendezvous' ``dump``.
Reading the tasks is :mod:`tfdist.launch.flight.collect`'s; cutting them to fit the wire is
:mod:`tfdist.launch.flight.transfer`'s; the collection and the one report are the server's
(:mod:`tfdist.launch.elastic.rendezvous.hang_collection`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from tfdist.launch.elastic.messages.flight import Dump, Evidence
from tfdist.launch.flight import transfer
from tfdist.launch.flight.evidence import TaskEvidence

if TYPE_CHECKING:
    from tfdist.launch.elastic.agent.spec import AgentSpec
    from tfdist.launch.elastic.backend import RendezvousBackend
    from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder
    from tfdist.launch.elastic.agent.node_group import RoundGroup, TaskOptions
    from tfdist.launch.flight.report import HangReport

OFF = "the flight recorder is off on this machine (--no-flight-recorder)"
IDLE = "no tasks were running on this machine"


def evidence(round_: int, request: int, tasks: Sequence[TaskEvidence], *, reason: str = "hang",
             watchdog: str | None = None, note: str = "") -> Evidence:
    """The message for ``tasks`` (cut to fit, see ``transfer.bounded``)."""
    fields, cut = transfer.bounded(tasks)
    return Evidence(round=round_, request=request, tasks=fields, reason=reason if reason in ("hang", "task-failed")
                    else "hang", watchdog=watchdog[:transfer.MAX_SHORT] if watchdog else None,
                    note=transfer.clip(note, transfer.MAX_LINE), cut=cut)


def send(link: RendezvousBackend, spec: AgentSpec, message: Evidence) -> None:
    """Send ``message`` to the rendezvous over ``link``; the etcd backend (``spec.etcd``) carries no evidence: each
    machine keeps its own report there."""
    if spec.etcd is None:
        link.send(message)


def unasked(round_: int, report: HangReport, watchdog: str | None) -> Evidence:
    """What an agent sends when its own task hung or failed (``report``: the HangReport it made before the stop)."""
    return evidence(round_, 0, report.tasks, reason=report.reason, watchdog=watchdog)


def job_recorder(enabled: bool, folder: str, run_id: str, say: Callable[[str], None]) -> JobRecorder | None:
    """The serving agent's JobRecorder: one hang report for every machine, in its run folder (None: recorder off)."""
    from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder

    return JobRecorder(folder=folder, run_id=run_id, say=say) if enabled else None


def answer(group: RoundGroup | None, current_round: int, message: Dump, options: TaskOptions) -> Evidence:
    """The answer to a ``dump``: this machine's tasks of that round, read now (``group``: the round's RoundGroup,
    None when none runs here; ``current_round``: the round it runs; ``options``: its TaskOptions); no tasks and a
    note when the recorder is off or nothing of that round runs here."""
    round_, request, reason = message.round, message.request, message.reason
    if not options.flight_recorder:
        return evidence(round_, request, (), reason=reason, note=OFF)
    if group is None or current_round != round_:
        return evidence(round_, request, (), reason=reason, note=IDLE)
    return evidence(round_, request, group.read_tasks(), reason=reason)
