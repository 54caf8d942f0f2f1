"""The per-machine agent: joins the rendezvous, runs this machine's share of each round, reports, obeys.

One agent runs on every machine of a multi-machine job (``tfdist launch --nnodes ... --rdzv-endpoint ...``, or
started over ssh by ``--hostfile``). It serves the rendezvous itself when this machine owns the endpoint's address.
For each round the rendezvous sends the whole cluster; the agent starts its local workers with that TF_CONFIG,
tells the rendezvous when they train and how they ended, and stops them when told (``graceful``: SIGTERM, the
runtime saves at the current step and exits 143 -- the preemption path; otherwise at once: a lost peer means no
collective can finish). Keep-alives both ways: a rendezvous silent for ``node_timeout`` is lost, the local tasks
are stopped and the agent tries to join again until ``rdzv_timeout``.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Callable

from tfdist.launch.elastic.agent import flight as flight_agent, machine_run, round_copies
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.messages.flight import Dump
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
from tfdist.launch.elastic.rendezvous.membership_join import NAME_IN_USE, join_retry
from tfdist.cluster.placement import counts_text
from tfdist.launch.elastic.agent.phases import AgentPhase
from tfdist.launch.elastic.agent.spec import AgentSpec  # noqa: F401 - re-exported (its users import it here)
from tfdist.launch.elastic.agent.node_group import NodeGroup, RoundGroup
from tfdist.launch.elastic.rendezvous.round_roles import describe, local_tasks, round_layout
from tfdist.launch.local.shm_folder import WatchedSnapshotFolder
from tfdist.launch.elastic.netaddr import is_local, is_unroutable, resolve, route_address
from tfdist.launch.local.ports import free_ports, ports_from_base
from tfdist.launch.local.stops import StopRequests
from tfdist.launch.elastic.backend import (
    Backends, Lost, Refused, RendezvousBackend, ServedRendezvous, stdin_closed,
)
from tfdist.launch.elastic.agent.backup_copy import BackupStore
from tfdist.launch.elastic.agent.snapshot_copy import SnapshotCopy
from tfdist.launch.outcome import Outcome, RunState
from tfdist.launch.spec import Timeouts
from tfdist.launch.process.spare_pool import SparePool
from tfdist.launch.console.task_output import to_terminal
from tfdist.launch.seams import Say
from tfdist.status import ExitStatus
from tfdist.validate import LINE_MAX, printable

if TYPE_CHECKING:
    from tfdist.observability.launcher_metrics import LauncherMetrics


class Agent:
    def __init__(self, spec: AgentSpec, *, backends: Backends, say: Say = to_terminal) -> None:
        self.spec = spec
        self.write_line = say  # where its lines go, never printed here (the CLI: the terminal's stderr)
        self.backends = backends  # its rendezvous backends, composed from above (elastic/backends.py)
        self.server: ServedRendezvous | None = None
        self.group: RoundGroup | None = None
        self.make_group: Callable[..., RoundGroup] = NodeGroup  # a round's group (tests pass a stand-in)
        self.round = -1
        self.node_rank = -1
        self.link: RendezvousBackend | None = None  # type: ignore[assignment]
        self.stops = StopRequests()  # signals become flags (local/stops.py), checked wherever the agent waits
        self.address = ""
        self._deferred: M.Message | None = None
        self.spares: SparePool | None = None
        # --firewall first: where it cannot work (exit 2) nothing is made yet, not even the temporary folder below.
        self.firewall = machine_run.open_firewall(spec.tasks.firewall, spec.job, spec.launcher_metrics_port, self.say)
        # One run per machine: its record, folder and live view follow the single-machine launcher's layout.
        self.run_id = f"{spec.job[:48]}-{uuid.uuid4().hex[:8]}"
        self.log_dir = spec.log_dir or tempfile.mkdtemp(prefix=f"tfdist-agent-{uuid.uuid4().hex[:8]}-")
        self.state: RunState | str = RunState.STARTING  # the live view's header; once over, how it ended
        self.result: machine_run.AgentResult | None = None
        self.before_log_cleanup: Callable[[], object] | None = None  # the live view's last look before a temporary folder goes
        self.metrics: LauncherMetrics | None = None  # with --launcher-metrics-port
        self.backups = BackupStore(spec.checkpoint_dir, spec.job) if spec.checkpoint_dir else None
        self.snapshots: WatchedSnapshotFolder | None = None  # this machine's shared-memory snapshots, all rounds
        self.phase = AgentPhase.JOINING  # where this agent is (phases.py); phases: the way it went
        self.phases: list[AgentPhase] = [AgentPhase.JOINING]

    def _enter(self, phase: AgentPhase) -> None:
        if phase is not self.phase:
            self.phase = phase
            self.phases.append(phase)

    def say(self, message: str) -> None:
        rank = f"node{self.node_rank}" if self.node_rank >= 0 else "agent"
        # Messages carry what peers sent (reasons, names): shown, never interpreted by the terminal.
        self.write_line(f"tfdist[{rank}]: {printable(message, LINE_MAX)}")

    # -- setting up ----------------------------------------------------------------------------------------------
    def _address(self, rdzv_ip: str) -> str:
        return self.spec.node_address or route_address(rdzv_ip)

    def _settings(self) -> RendezvousSettings:
        spec = self.spec
        return RendezvousSettings.for_job(spec.job, spec.min_nodes, spec.max_nodes, node_timeout=spec.node_timeout,
                                          rdzv_timeout=spec.rdzv_timeout, first_round_wait=spec.first_round_wait,
                                          max_restarts=spec.max_restarts, grace_period=spec.grace_period,
                                          restart_window=spec.restart_window, backoff=spec.backoff)

    def _open_link(self, rdzv_ip: str) -> RendezvousBackend:
        spec = self.spec
        return self.backends.link(self._settings(), spec.endpoint_host, rdzv_ip, spec.endpoint_port, conf=spec.etcd,
                                  secret=spec.secret, watch_stdin=spec.watch_stdin, say=self.say, here=self.server)

    def _maybe_serve(self, rdzv_ip: str) -> None:
        if not self.spec.serve or self.spec.etcd is not None or not is_local(rdzv_ip):
            return
        settings = self._settings()
        say = lambda m: self.write_line(f"tfdist[rdzv]: {printable(m, LINE_MAX)}")  # noqa: E731
        recorder = flight_agent.job_recorder(self.spec.tasks.flight_recorder, self.log_dir, self.run_id, say)
        try:
            self.server = self.backends.serve(settings, rdzv_ip, self.spec.endpoint_port, secret=self.spec.secret,
                                              say=say, recorder=recorder)
        except OSError:
            self.server = None  # another agent on this machine serves it
        if self.server is None:
            return
        self.say(f"serving the rendezvous for job {self.spec.job} on {self.server.endpoint}")

    def _ready(self, address: str) -> None:
        if self.spec.port_base is not None:
            ports = ports_from_base(self.spec.port_base, self.spec.slots, address)
        else:
            ports = free_ports(self.spec.slots, address)
        backup = self.backups.manifest() if self.backups else None
        folder = self._snapshot_folder()
        snapshot = SnapshotCopy(folder).manifest() if folder else None
        self.link.send(M.Ready(ports=ports, backup=None if backup is None else M.Backup.check(backup),
                               snapshot=snapshot))

    # -- signals -------------------------------------------------------------------------------------------------
    def _signalled(self) -> int | None:
        """The signal that asked this agent to stop, if any; a second Ctrl-C abandons the run here."""
        self.stops.abandon_on_second_ctrl_c(say=self.say)  # says what a signal asked for, once
        return self.stops.signal

    def _forward_stop(self, signum: int) -> None:
        if self.server is not None:  # the rendezvous served here stops every machine, saving first
            self.server.interrupt(signum)

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self) -> int:
        self.stops.install()
        self.stops.forward(self._forward_stop)
        try:
            self.snapshots = WatchedSnapshotFolder(f"{self.spec.job}-{uuid.uuid4().hex[:8]}", say=self.say)
            self.metrics = machine_run.start_metrics(self.spec.launcher_metrics_port, self.spec.job_name,
                                                     self.spec.tasks.metrics_host, self.say)
            status = self._run()
            self.result = machine_run.AgentResult(machine_run.cause_of(status), max(0, self.round))
            self.state = self.result.cause.value
            return status
        finally:
            if self.group is not None:
                self.group.stop(graceful=False)
            self.firewall.close()  # --firewall: after the tasks are gone
            self._enter(AgentPhase.DONE)
            if self.snapshots is not None:
                self.snapshots.remove()
            self._discard_spares()
            if self.server is not None:
                self.server.wait(timeout=2.0)
                self.server.close()
            if self.metrics is not None:
                self.metrics.close()
            self.stops.restore()
            self._clean_up_folder()

    def _task_states(self, state: str) -> None:
        if self.group is not None:
            machine_run.set_task_states(self.metrics, self.group.plans, state)

    def _clean_up_folder(self) -> None:
        machine_run.clean_up_folder(self.log_dir, temporary=self.spec.log_dir is None, result=self.result,
                                    last_look=self.before_log_cleanup, say=self.say)

    def _run(self) -> int:
        rdzv_ip = resolve(self.spec.endpoint_host, "--rdzv-endpoint", socket.AF_UNSPEC)
        address = self.address = self._address(rdzv_ip)
        if is_unroutable(address) and not is_unroutable(rdzv_ip):
            self.say(f"this machine's address {address} cannot be reached from other machines: pass --node-address")
            return int(ExitStatus.USAGE)
        self._maybe_serve(rdzv_ip)
        deadline = time.monotonic() + self.spec.rdzv_timeout
        join = dict(job=self.spec.job, name=self.spec.node_name or address, node_rank=self.spec.node_rank,
                    address=address, slots=self.spec.slots, versions=self.spec.versions,
                    roles=list(self.spec.node_roles), layout=counts_text(self.spec.roles))
        refused_since: float | None = None  # the first of a run of refusals that may be tried again
        while True:
            self.link = self._open_link(rdzv_ip)
            try:
                self.link.connect(join, deadline, give_up=lambda: self._signalled() is not None)
            except Refused as refused:
                now = time.monotonic()
                refused_since = now if refused_since is None else refused_since
                pause = join_retry(refused.reason, refused_since, now, self.spec.node_timeout, deadline)
                if pause is None or self._signalled() is not None:
                    self.say(f"refused by the rendezvous: {refused.reason}")
                    return refused.status
                if now == refused_since:
                    self.say(f"refused for now: this name or address {NAME_IN_USE} (this machine's old connection?); "
                             f"trying again for up to {2 * self.spec.node_timeout + 1:g}s")
                self.link.close()
                time.sleep(pause)
                continue
            except TimeoutError as late:
                self.say(f"{late} (--rdzv-timeout {self.spec.rdzv_timeout:g}s)")
                return int(ExitStatus.TASK_FAILED)
            refused_since = None
            self._enter(AgentPhase.WAITING)
            self.say(f"joined job {self.spec.job} at {self.link.where} as {address} with {self.spec.slots} worker(s)")
            self._ready(address)
            try:
                return self._serve_rounds(address)
            except Lost as lost:
                self._enter(AgentPhase.REJOINING)
                if self.group is not None:
                    # Graceful when the rendezvous itself went away (etcd): the peers can still save together.
                    self.group.stop(graceful=bool(getattr(lost, "graceful", False)))
                    self.group = None
                self._discard_spares()  # cut off: nothing runs here until this machine is taken in again
                self.link.close()
                if self._signalled() is not None:
                    return 128 + self.stops.signal
                self.say(f"lost the rendezvous ({lost}); trying to join again for up to {self.spec.rdzv_timeout:g}s")
                deadline = time.monotonic() + self.spec.rdzv_timeout
                self.node_rank = -1

    def _serve_rounds(self, address: str) -> int:
        stopped_by_signal = False
        while True:
            message, self._deferred = self._deferred or self.link.next_message(timeout=0.05), None
            match message:  # typed and checked by the link (messages.py); pings and strays fall through
                case M.Round():
                    self._start_round(message)
                case M.Stop():
                    self._stop_round(message, address)
                case M.Finish():
                    return self._finish(message)
                case _:
                    self._serve_request(message)
            if self._signalled() is not None and not stopped_by_signal and self.server is None:
                stopped_by_signal = True
                self._leave_on_signal()
                return 128 + self.stops.signal
            if self.spec.watch_stdin and stdin_closed():
                self.say("the launcher's connection closed: stopping")
                self._leave_on_signal()
                return int(ExitStatus.PREEMPTED)
            self._watch_group()

    def _serve_request(self, message: M.Message | None) -> bool:
        """Answer an upload request or a stack dump (True), in the loop of rounds and while a copy comes in
        (round_copies.py says why both)."""
        if isinstance(message, Dump):  # the rendezvous collects every machine's stacks before anything is stopped
            flight_agent.send(self.link, self.spec,
                              flight_agent.answer(self.group, self.round, message, self.spec.tasks))
            return True
        return round_copies.answer_upload(message, self.link, self.backups, self._snapshot_folder())

    def _next_during_copy(self) -> M.Message | None:
        message = self.link.next_message(0.5)
        return None if self._serve_request(message) else message

    def _snapshot_folder(self) -> str | None:
        return self.snapshots.path if self.snapshots is not None and self.snapshots.path else None

    def _start_round(self, message: M.Round) -> None:
        self.round, self.node_rank = message.round, message.node_rank
        if (message.restore and self.backups is not None) or (message.snapshot and self.snapshots is not None):
            self._enter(AgentPhase.RESTORING)
        restored, other = round_copies.take_in(message, self.backups, self._snapshot_folder(),
                                               self._next_during_copy, self.say)
        if other is not None:  # the round was stopped before it started here
            self._deferred = other
            self._enter(AgentPhase.WAITING)
            return
        if not restored:
            self._report_exit(Outcome.FAILED, None, "the latest backup could not be copied here")
            self._enter(AgentPhase.WAITING)
            self._ready(self.address)
            return
        roles, placed = {}, ""
        if self.spec.roles is not None:  # every agent places the round's tasks by the same rule
            layout, placements = round_layout(message.nodes, message.workers, self.spec.roles)
            roles, placed = {"roles": (layout, local_tasks(placements, self.node_rank))}, describe(placements)
        self.group = self.make_group(kill_now=lambda: self.stops.kill_now, **roles,
            command=self.spec.command, workers=tuple(message.workers), first_index=message.first_index,
            slots=self.spec.slots, node_rank=self.node_rank, round_=self.round, job=self.spec.job,
            log_dir=os.path.join(self.log_dir, f"attempt-{self.round}"), env=dict(self.spec.env),
            legacy_keras=self.spec.legacy_keras, max_restarts=self.spec.max_restarts, backoff=self.spec.backoff,
            timeouts=Timeouts(grace=self.spec.grace_period, hang=self.spec.hang_timeout),
            gpus_per_task=self.spec.gpus_per_task, spares=self.spares, restart_window=self.spec.restart_window,
            snapshot_dir=self.snapshots.path if self.snapshots else None,
            options=self.spec.tasks, say=self.say, phases_folder=self.log_dir)
        self.firewall.admit_round(self.group.plans)  # --firewall: this round's machines, before its tasks listen
        self.group.start()
        self._enter(AgentPhase.RUNNING)
        self.state = RunState.RUNNING
        if self.metrics is not None and self.round > 0:
            self.metrics.restart()
        self._task_states("running")
        self.say(f"round {self.round}: started workers {self.group.describe()} of {message.world_size} "
                 f"on {message.machines.count} machine(s)" + (f"; roles: {placed}" if placed else ""))

    def _stop_round(self, message: M.Stop, address: str) -> None:
        graceful = message.graceful
        if self.group is not None and message.round == self.round:
            self._enter(AgentPhase.STOPPING)
            self.say(f"stopping round {self.round}{' (saving first)' if graceful else ''}: {message.reason}")
            outcome = self.group.stop(graceful=graceful)
            self._report_exit(outcome, self.group.step(), "stopped by the rendezvous")
            self.group = None
        self._enter(AgentPhase.WAITING)
        self._ready(address)

    def _watch_group(self) -> None:
        group = self.group
        if group is None:
            return
        if not group.reported_training and group.training():
            group.reported_training = True
            self.link.send(M.Training(round=self.round))
        if group.reported_training and not group.spares_filled and group.progressed():
            group.spares_filled = True
            self._fill_spares(group)
        outcome = group.outcome()
        if outcome is None:
            return
        outcome_name, detail = outcome
        if group.flight is not None:  # before the stop: the rendezvous asks the other machines for their stacks
            flight_agent.send(self.link, self.spec, flight_agent.unasked(self.round, *group.flight))
        # Also after success: stopping joins the output pumps, so the workers' last lines are relayed before this
        # agent can exit; a success lets the other workers here end on their own first.
        self._enter(AgentPhase.STOPPING)
        group.end()
        self._report_exit(outcome_name, group.step(), detail)
        self.group = None
        self._enter(AgentPhase.WAITING)
        if outcome_name is not Outcome.SUCCEEDED:
            self._ready(self.address)

    def _fill_spares(self, group: RoundGroup) -> None:
        """Once the round has run steps (their imports no longer compete with its start, restore and first traced
        step), keep one warm spare per local worker, preloading what the workers imported, so the next round skips
        importing TensorFlow (as the single-machine supervisor does)."""
        if not self.spec.warm_spares or not self.spec.command.is_python:
            return
        if self.spares is None:
            self.spares = SparePool(self.spec.command, group.spare_env)
        self.spares.fill(self.spec.slots, group.preload())

    def _discard_spares(self) -> None:
        if self.spares is not None:
            self.spares.discard_all()

    def _report_exit(self, outcome: Outcome, step: int | None, detail: str) -> None:
        self._task_states(outcome.value)
        step = step if step is None or step >= 0 else None
        self.link.send(M.Exited(round=self.round, outcome=outcome, step=step, detail=detail[:4096]))

    def _finish(self, message: M.Finish) -> int:
        status = message.status
        if self.group is not None:
            # The job is over before this machine's workers are: after a success they are past training, printing
            # their last lines and exiting, so they get the grace period to end on their own (killing them here
            # lost those lines); after a failure nothing they do matters any more.
            self.state = RunState.FINISHING
            self._enter(AgentPhase.STOPPING)
            if status == 0:
                self.group.finish(self.spec.grace_period)
            else:
                self.group.stop(graceful=False)
            self.group = None
        if self.server is not None or status != 0 or message.print_report:
            self.write_line("\n".join(printable(line, LINE_MAX) for line in message.report.splitlines()))
        self.say(f"job over, exit status {status}")
        return status

    def _leave_on_signal(self) -> None:
        """Stopped from outside on this machine: save (the peers take part), report, leave."""
        if self.group is not None:
            self._enter(AgentPhase.STOPPING)
            outcome = self.group.stop(graceful=True)
            self._report_exit(outcome, self.group.step(), "agent stopped by a signal")
            self.group = None
        self.link.close()
        self.stops.abandon_on_second_ctrl_c(say=self.say)  # it cut the save short: leave as interrupted

