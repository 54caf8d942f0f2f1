"""The host-file driver's agents over ssh: start one per host, notice the ones lost, take back hosts that answer
ssh again after their cool-down, and follow a host discovery script. The rules are ``comeback.py``'s (pure); this
is the mechanism: ssh processes, probes, the script's runs.

A host counts as lost when its ssh session ended or the rendezvous dropped its machine. Its agent's ssh client is
then ended (closing stdin first: a reachable agent stops its tasks), and the host is probed with ``ssh HOST true``
after its cool-down; when that answers, its agent is started again with its old node rank and joins the job at the
rendezvous' next round. A discovery script (``--host-discovery-script``) is run every ``interval`` seconds and prints
``host[ slots=N]`` lines: new hosts get an agent, hosts no longer listed have theirs stopped (never probed again).
A new host is first checked as the preflight checked the others (``probing.HostVetting``: versions, the script,
``--firewall``); one that fails is named in one line and checked again at most every ``REVET_S`` while listed.
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import TYPE_CHECKING, Callable

from tfdist.cluster.hostfile import HostEntry, parse_hostfile
from tfdist.errors import UsageError
from tfdist.launch.ssh.comeback import Comebacks, CooldownRange, changes

if TYPE_CHECKING:
    from tfdist.launch.ssh.probing import HostVetting

PROBE_TIMEOUT_S = 15.0
SCRIPT_TIMEOUT_S = 10.0
REVET_S = 60.0  # a discovered host that failed its check is checked again after this, while the script lists it


def run_discovery(path: str) -> list[HostEntry]:
    """The hosts a discovery script prints now. Raises UsageError (one line naming the script)."""
    where = f"--host-discovery-script {path}"
    try:
        done = subprocess.run([path], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as bad:
        raise UsageError(f"{where}: cannot run it ({bad})", hint="an executable that prints host[ slots=N] lines") \
            from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise UsageError(f"{where}: exited {done.returncode}: {last[:200]}", hint="it must exit 0")
    return parse_hostfile(done.stdout, where)


class Fleet:
    def __init__(self, hosts: tuple[HostEntry, ...], launch: Callable[[HostEntry, int], subprocess.Popen[bytes]],
                 present: Callable[[], set[str]], *, cooldown: CooldownRange | None, discovery: str | None,
                 interval: float, say: Callable[[str], None],
                 vet: Callable[[HostEntry], HostVetting] | None = None) -> None:
        self.hosts = list(hosts)
        self.launch, self.present, self.say = launch, present, say
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.ranks: dict[str, int] = {}
        self.seen: set[str] = set()
        self.comebacks = Comebacks(cooldown) if cooldown is not None else None
        self.probes: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        self.discovery, self.interval = discovery, interval
        self._next_discovery = time.monotonic() + interval
        self._dropped: set[str] = set()
        self.vet = vet
        self.vetting: dict[str, tuple[HostEntry, HostVetting]] = {}
        self._refused: dict[str, tuple[str, float]] = {}  # a discovered host that failed its check: why, when

    @property
    def idle(self) -> bool:
        """Nothing under way that may still start an agent (a lost host's probe, a discovered host's check)."""
        return not self.probes and not self.vetting

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return list(self.agents.values())

    def start_all(self) -> None:
        for entry in self.hosts:
            self._start(entry)

    def _start(self, entry: HostEntry) -> None:
        rank = self.ranks.setdefault(entry.name, len(self.ranks))
        self.agents[entry.name] = self.launch(entry, rank)

    def tick(self, now: float) -> None:
        present = self.present()
        self.seen |= present
        for name, proc in list(self.agents.items()):
            if name in self._dropped:
                continue
            gone = proc.poll() is not None or (name in self.seen and name not in present)
            if gone and self.comebacks is not None and name not in self.comebacks.next_probe:
                threading.Thread(target=end_session, args=(proc,), daemon=True).start()
                self.seen.discard(name)
                self.comebacks.lost(name, now)
                self.say(f"host {name} lost: probing it over ssh again in {self.comebacks.cooldown.wait(0):g}s")
        if self.comebacks is not None:
            self._probe(now)
        if self.discovery is not None and now >= self._next_discovery:
            self._next_discovery = now + self.interval
            self._discover(now)
        self._vetted(now)

    def _probe(self, now: float) -> None:
        assert self.comebacks is not None
        for name in self.comebacks.due(now):
            entry = next(e for e in self.hosts if e.name == name)
            self.probes[name] = (subprocess.Popen(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "--",
                                                   entry.host, "true"], stdin=subprocess.DEVNULL,
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                  start_new_session=True), now)
        for name, (proc, started) in list(self.probes.items()):
            code = proc.poll()
            if code is None and now - started < PROBE_TIMEOUT_S:
                continue
            del self.probes[name]
            if code is None:
                proc.kill()
                proc.wait()
            if code == 0 and name not in self._dropped:
                self.comebacks.back(name)
                self.say(f"host {name} answers ssh again: starting its agent (it rejoins the running round "
                         "if its seat was kept, else joins the next)")
                self._start(next(e for e in self.hosts if e.name == name))
            elif name not in self._dropped:
                wait = self.comebacks.silent(name, now)
                self.say(f"host {name} still does not answer ssh: next try in {wait:g}s")

    def _discover(self, now: float) -> None:
        assert self.discovery is not None
        try:
            found = run_discovery(self.discovery)
        except UsageError as bad:
            self.say(f"{bad} (keeping the current hosts)")
            return
        added, dropped = changes([e for e in self.hosts if e.name not in self._dropped], found)
        listed = {e.name for e in found}
        for name in [n for n in self._refused if n not in listed]:
            del self._refused[name]
        for name in [n for n in self.vetting if n not in listed]:  # no longer listed while being checked
            self.vetting.pop(name)[1].close()
        for entry in added:
            refused = self._refused.get(entry.name)
            if entry.name in self.vetting or (refused is not None and now - refused[1] < REVET_S):
                continue
            if refused is None:
                self.say(f"host discovery: {entry.name} added")
            if self.vet is None:
                self._admit(entry)
            else:
                self.vetting[entry.name] = (entry, self.vet(entry))
        for name in dropped:
            self.say(f"host discovery: {name} no longer listed: stopping its agent")
            self._dropped.add(name)
            if self.comebacks is not None:
                self.comebacks.forget(name)
            proc = self.agents.get(name)
            if proc is not None:
                threading.Thread(target=end_session, args=(proc,), daemon=True).start()

    def _vetted(self, now: float) -> None:
        """Discovered hosts whose check ended: started, or named with the reason (again only when it changed)."""
        for name, (entry, vetting) in list(self.vetting.items()):
            verdict = vetting.verdict(now)
            if verdict is None:
                continue
            del self.vetting[name]
            vetting.close()
            before = self._refused.pop(name, None)
            if verdict:
                if before is None or before[0] != verdict:
                    self.say(f"host discovery: {name} gets no agent: {verdict} (checked again in {REVET_S:g}s "
                             "while listed)")
                self._refused[name] = (verdict, now)
            else:
                if before is not None:
                    self.say(f"host discovery: {name} passes its check now")
                self._admit(entry)

    def _admit(self, entry: HostEntry) -> None:
        self._dropped.discard(entry.name)
        self.hosts = [e for e in self.hosts if e.name != entry.name] + [entry]
        self._start(entry)

    def close(self) -> None:
        for _entry, vetting in self.vetting.values():
            vetting.close()
        self.vetting.clear()
        for proc, _ in self.probes.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.probes.clear()


def end_session(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Close the agent's stdin (it stops its tasks), then end the ssh client if it is still there."""
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

