"""Host-file mode: preflight every host over ssh, serve the rendezvous here, start one agent per host over ssh.

ssh is the system's OpenSSH client with ``BatchMode=yes`` (never a password prompt), the user's own keys and
``~/.ssh/config``. Every remote command is built with ``shlex.quote``: host names, paths and script arguments reach
the remote shell as single words, whatever characters they hold. The agents' output (already prefixed
``[node1 worker:3]``) is relayed here line by line. An agent watches its stdin: when this driver goes away, the ssh
connection closes it and the agent stops its tasks, so an interrupted or killed driver leaves nothing running.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import socket
from dataclasses import dataclass, field
from typing import IO, Callable, Sequence

from tfdist.errors import UsageError
from tfdist.launch.elastic.rendezvous.membership import RendezvousSettings
from tfdist.cluster.hostfile import HostEntry
from tfdist.launch.elastic.netaddr import resolve, route_address
from tfdist.launch.console.task_output import terminal_streams, to_terminal
from tfdist.launch.elastic.tcp.server import RendezvousServer
from tfdist.launch.local.stops import StopRequests
from tfdist.launch.seams import Say
from tfdist.launch.ssh.comeback import CooldownRange
from tfdist.launch.ssh.fleet import Fleet
from tfdist.launch.ssh.probing import MESH_TAG, PREFLIGHT_TIMEOUT_S, PROBE_TAG, HostVetting, ProbeSession, report_faults
from tfdist.status import ExitStatus
from tfdist.validate import LINE_MAX, printable

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5")
# Forwarded to every host, as ssh sends no environment by default: where tfdist is imported from, TF's log level.
FORWARDED_ENV = ("PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS")
FIREWALL_FLAG = "--firewall"  # forwarded to the agents: each host must be able to load its nftables table


@dataclass(frozen=True)
class DriverSpec:
    hosts: tuple[HostEntry, ...]
    slots: int  # -n, for hosts without slots=
    target: tuple[str, ...]  # the script and its arguments, as given
    agent_args: tuple[str, ...]  # flags passed through to every agent (timeouts, --env, ...)
    job: str
    min_nodes: int
    max_nodes: int
    settings: RendezvousSettings
    secret: bytes = field(default=b"", repr=False)  # this job's fresh secret: written to each agent's stdin only
    python: str = sys.executable
    cwd: str = ""
    cooldown: CooldownRange | None = CooldownRange()  # lost hosts are probed again after it (None: never)
    discovery: str | None = None  # --host-discovery-script
    discovery_interval: float = 5.0
    flight_recorder: bool = True  # one hang report for every host, written by this driver (elastic/hang_collection)
    log_dir: str | None = None  # --log-dir: where this driver writes it (None: the verdict in the final report only)


def _split_target(target: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``("-m", "pkg", "a")`` -> ``(("-m",), ("pkg", "a"))``: the flag that says how to run it, and the rest."""
    if target and target[0] in ("-m", "--no-python"):
        return target[:1], target[1:]
    return (), target


def ssh_command(host: str, remote: str) -> list[str]:
    return ["ssh", *SSH_OPTIONS, "--", host, remote]


def _remote(spec: DriverSpec, argv: Sequence[str]) -> str:
    """``cd CWD && env K=V ... ARGV`` for the remote shell, every word quoted."""
    env = [f"{k}={os.environ[k]}" for k in FORWARDED_ENV if os.environ.get(k)]
    return f"cd {shlex.quote(spec.cwd or os.getcwd())} && exec env {shlex.join([*env, *argv])}"


def agent_ssh_command(spec: DriverSpec, rank: int, endpoint: str, entry: HostEntry | None = None) -> list[str]:
    """The ssh command that starts host ``rank``'s agent (``entry``, default the rank-th host listed; a discovered
    host has none), joining the rendezvous at ``endpoint`` (``host:port``)."""
    entry = entry or spec.hosts[rank]
    shape, rest = _split_target(spec.target)
    argv = [spec.python, "-m", "tfdist", "launch", "--nnodes", f"{spec.min_nodes}:{spec.max_nodes}",
            "--rdzv-endpoint", endpoint, "--rdzv-id", spec.job, "--node-rank", str(rank),
            "--rdzv-secret-file", "-",  # the job's secret comes over ssh's stdin, never on a command line
            "--node-name", entry.name, "-n", str(entry.slots or spec.slots), "--agent-watch-stdin",
            *(("--node-roles", ",".join(entry.roles)) if entry.roles else ()),
            *spec.agent_args, *shape, "--", *rest]
    return ssh_command(entry.host, _remote(spec, argv))


# ---------------------------------------------------------------------------------------------------- preflight


def probe_command(spec: DriverSpec, entry: HostEntry, rendezvous_ip: str | None) -> list[str]:
    """The ssh command that runs ``host_probe`` on ``entry`` (with the mesh check when ``rendezvous_ip`` is given:
    the preflight's hosts check each other; a host added later is checked alone)."""
    firewall = ["--firewall"] if FIREWALL_FLAG in spec.agent_args else []  # every agent will load a table
    mesh = ["--mesh", rendezvous_ip] if rendezvous_ip is not None else []
    return ssh_command(entry.host, _remote(spec, [spec.python, "-m", "tfdist.launch.ssh.host_probe", *firewall, *mesh,
                                                  _script(spec)]))


def _script(spec: DriverSpec) -> str:
    shape, rest = _split_target(spec.target)
    return rest[0] if rest and not shape else ""  # a module or a program on PATH has no file to look for


def preflight(spec: DriverSpec, rendezvous_ip: str) -> dict:
    """Every host reachable, the same versions everywhere, the script present at the same path, and every host's
    address (the one its agent will advertise) reachable over TCP from every other host. Returns the versions the
    hosts agree on (a host a discovery script adds later must have the same: ``probing.HostVetting``).

    Raises:
        UsageError: one message naming every host at fault (exit 2); nothing has been started.
    """
    sessions = {entry.host: ProbeSession(probe_command(spec, entry, rendezvous_ip)) for entry in spec.hosts}
    try:
        deadline = time.monotonic() + PREFLIGHT_TIMEOUT_S
        reports = {host: s.answer(PROBE_TAG, deadline) for host, s in sessions.items()}
        broken = [f"{host}: {s.why_not()}" for host, s in sessions.items() if reports[host] is None]
        if broken:
            raise UsageError("preflight: " + "; ".join(broken), hint="fix ssh access (BatchMode, keys in ~/.ssh) "
                             "and install tfdist on every host")
        distinct = {json.dumps(r["versions"], sort_keys=True) for r in reports.values()}
        if len(distinct) > 1:
            listing = "; ".join(f"{host}: " + ", ".join(printable(f"{k} {v}") for k, v in sorted(r["versions"].items()))
                                for host, r in reports.items())
            raise UsageError(f"preflight: versions differ between hosts: {listing}",
                             hint="install the same Python, TensorFlow and tfdist on every host")
        cwd = spec.cwd or os.getcwd()
        faults = {host: report_faults(r, _script(spec), cwd) for host, r in reports.items()}
        cannot = [f"{host}: {f['firewall']}" for host, f in faults.items() if "firewall" in f]
        if cannot:
            raise UsageError("preflight: " + "; ".join(cannot))
        missing = [host for host, f in faults.items() if "script" in f]
        if missing:
            raise UsageError(f"preflight: {faults[missing[0]]['script']} on {', '.join(missing)}",
                             hint="copy the script to the same path on every host")
        addresses = json.dumps([r["listen"] for r in reports.values()])
        for session in sessions.values():
            session.send(addresses)
        deadline = time.monotonic() + PREFLIGHT_TIMEOUT_S
        unreachable = []
        for host, session in sessions.items():
            mesh = session.answer(MESH_TAG, deadline) or {"(all)": session.why_not()}
            origin = reports[host]["listen"].rpartition(":")[0]
            unreachable += [f"from {origin} to {target} ({why})" for target, why in mesh.items() if why != "ok"]
        if unreachable:
            raise UsageError("preflight: hosts cannot reach each other: " + "; ".join(unreachable),
                             hint="open TCP between the hosts (firewall, routes), or fix their addresses")
        return next(iter(reports.values()))["versions"]
    finally:
        for session in sessions.values():
            session.close()


# ------------------------------------------------------------------------------------------------------- the run


def _relay(stream: IO[bytes], out: IO[str]) -> None:
    for raw in iter(stream.readline, b""):
        try:
            out.write(raw.decode("utf-8", errors="replace"))
            out.flush()
        except (BrokenPipeError, ValueError):
            pass
    stream.close()


def _report_folder(log_dir: str | None) -> str | None:
    """The driver's ``--log-dir`` for the job's hang report (the agents' folders are on their hosts)."""
    if log_dir is None:
        return None
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError:
        return None
    return log_dir


def run(spec: DriverSpec, *, say: Say = to_terminal,
        streams: Callable[[], tuple[IO[str], IO[str]]] = terminal_streams) -> int:
    """Preflight, serve the rendezvous, start the agents, wait for the job; returns the job's exit status. Its own
    lines go to ``say``; the agents' output is copied as it comes to ``streams()`` (stdout, stderr): never printed
    here (the CLI passes the terminal's)."""
    if not spec.hosts:
        raise UsageError("no hosts to run on")
    first_ip = resolve(spec.hosts[0].name, "--hostfile", socket.AF_UNSPEC)
    listen = route_address(first_ip)
    versions = preflight(spec, listen)
    say_rdzv = lambda m: say(f"tfdist[rdzv]: {printable(m, LINE_MAX)}")  # noqa: E731
    recorder = None
    if spec.flight_recorder:
        from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder

        recorder = JobRecorder(folder=_report_folder(spec.log_dir), run_id=spec.job, say=say_rdzv)
    server = RendezvousServer(spec.settings, listen, 0, secret=spec.secret, say=say_rdzv, recorder=recorder).start()
    say(f"tfdist: job {spec.job}: rendezvous at {server.endpoint}, {len(spec.hosts)} host(s)")
    relays: list[threading.Thread] = []
    stops = StopRequests()  # signals become flags (local/stops.py); the first is handed to the rendezvous server

    def launch(entry: HostEntry, rank: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(agent_ssh_command(spec, rank, server.endpoint, entry), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        _hand_secret(proc, spec.secret)
        for stream, out in zip((proc.stdout, proc.stderr), streams()):
            relay = threading.Thread(target=_relay, args=(stream, out), daemon=True)
            relay.start()
            relays.append(relay)
        return proc

    def vet(entry: HostEntry) -> HostVetting:  # a discovered host: the preflight's checks but the mesh's, alone
        return HostVetting(ProbeSession(probe_command(spec, entry, None)), versions, _script(spec),
                           spec.cwd or os.getcwd())

    fleet = Fleet(spec.hosts, launch, server.member_names,
                  cooldown=spec.cooldown, discovery=spec.discovery, interval=spec.discovery_interval,
                  say=lambda m: say(f"tfdist: {printable(m, LINE_MAX)}"), vet=vet)

    stops.install()
    stops.forward(server.interrupt)  # every machine saves and stops, then the job ends

    def abandon() -> None:  # says what a signal asked for (once), and leaves on a second Ctrl-C
        stops.abandon_on_second_ctrl_c(say=lambda m: say(f"tfdist: {m}"))

    try:
        fleet.start_all()
        while not server.finished.wait(0.1):
            abandon()
            fleet.tick(time.monotonic())
            if all(p.poll() is not None for p in fleet.processes) and not server.member_names() and fleet.idle:
                server.interrupt(signal.SIGTERM)  # every agent is gone: nothing more can happen
        result = server.result
        status = result.status if result is not None else int(ExitStatus.TASK_FAILED)
        _wait_agents(fleet.processes, spec.settings.node_timeout + 5, abandon=abandon)
        for relay in relays:
            relay.join(timeout=2)
        if result is not None:
            say("\n".join(printable(line, LINE_MAX) for line in result.report.splitlines()))
        return status
    finally:
        fleet.close()
        _wait_agents(fleet.processes, 0)
        server.close()
        stops.restore()


def _hand_secret(proc: subprocess.Popen[bytes], secret: bytes) -> None:
    """The job secret as the first line of the agent's stdin (``--rdzv-secret-file -``): never on a command line."""
    from tfdist.launch.elastic.secret import encode

    try:
        assert proc.stdin is not None
        proc.stdin.write((encode(secret) + "\n").encode("ascii"))
        proc.stdin.flush()
    except OSError:
        pass  # the agent is already gone: the job goes on without it, as with any lost machine


def _wait_agents(agents: list[subprocess.Popen[bytes]], seconds: float,
                 abandon: Callable[[], None] = lambda: None) -> None:
    """Give the agents ``seconds`` to exit; then close their stdin (they stop their tasks) and end the ssh clients.
    ``abandon()`` may raise to stop waiting (a second Ctrl-C)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(p.poll() is None for p in agents):
        abandon()
        time.sleep(0.05)
    for proc in agents:
        if proc.poll() is None:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(p.poll() is None for p in agents):
        time.sleep(0.05)
    for proc in agents:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
