"""The host-file driver's agents over ssh: start one per host, notice the ones lost, take back hosts that answer
ssh again after their cool-down, and follow a host discovery script. The rules are ``comeback.py``'s (pure); this
is the mechanism: ssh processes, probes, the script's runs.

A host counts as lost when its ssh session ended or the rendezvous dropped its machine. Its agent's ssh client is
then ended (closing stdin first: a reachable agent stops its tasks), and the host is probed with ``ssh HOST true``
after its cool-down; when that answers, its agent is started again with its old node rank and joins the job at the
rendezvous' next round. A discovery script (``--host-discovery-script``) is run every ``interval`` seconds and prints
``host[ slots=N]`` lines: new hosts get an agent, hosts no longer listed have theirs stopped (never probed again).
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable

from tfdist.cluster.hostfile import HostEntry, parse_hostfile
from tfdist.errors import UsageError
from tfdist.launch.ssh.comeback import Comebacks, CooldownRange, changes

PROBE_TIMEOUT_S = 15.0
SCRIPT_TIMEOUT_S = 10.0


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
                 interval: float, say: Callable[[str], None]) -> None:
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
        for entry in added:
            self.say(f"host discovery: {entry.name} added")
            self._dropped.discard(entry.name)
            self.hosts = [e for e in self.hosts if e.name != entry.name] + [entry]
            self._start(entry)
        for name in dropped:
            self.say(f"host discovery: {name} no longer listed: stopping its agent")
            self._dropped.add(name)
            if self.comebacks is not None:
                self.comebacks.forget(name)
            proc = self.agents.get(name)
            if proc is not None:
                threading.Thread(target=end_session, args=(proc,), daemon=True).start()

    def close(self) -> None:
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

