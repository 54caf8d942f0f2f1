"""The rendezvous server: one TCP listener, one thread per agent connection, one loop that ticks the policy.

Mechanism only: every rule lives in :mod:`tfdist.launch.elastic.membership`. The loop also watches keep-alives: a machine that
sends nothing for ``node_timeout`` seconds is lost even though its connection looks open (a cut cable closes
nothing). Served by the agent on the machine that owns the ``--rdzv-endpoint`` address, or by the host-file driver.
"""
from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import Any, Callable

from tfdist.launch.elastic import wire as P
from tfdist.launch.elastic.membership import MembershipPolicy, Finish, Node, RendezvousSettings, StartRound, Stop
from tfdist.launch.elastic.backup_copy import BackupRelay


class RendezvousServer:
    """Serve one job's rendezvous on ``host:port`` until the job is finished."""

    def __init__(self, settings: RendezvousSettings, host: str, port: int, *,
                 say: Callable[[str], None] = lambda _m: None) -> None:
        self.settings = settings
        self.policy = MembershipPolicy(settings, time.monotonic())
        self._say = say
        self._lock = threading.RLock()
        self._channels: dict[int, P.Channel] = {}
        self._last_seen: dict[int, float] = {}
        self._ids = itertools.count(1)
        self._listener = socket.create_server((host, port), reuse_port=False)
        self.address = self._listener.getsockname()[:2]
        self.finished = threading.Event()
        self.result: Finish | None = None
        self.relay = BackupRelay(self._send, say)
        self._threads: list[threading.Thread] = []
        self.round_started_at: dict[int, float] = {}

    # -- life cycle ----------------------------------------------------------------------------------------------
    def start(self) -> "RendezvousServer":
        for target, name in ((self._accept_loop, "rdzv-accept"), (self._tick_loop, "rdzv-tick")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def interrupt(self, signum: int) -> None:
        with self._lock:
            self.policy.interrupt(signum, time.monotonic())

    def wait(self, timeout: float | None = None) -> Finish | None:
        self.finished.wait(timeout)
        return self.result

    def close(self) -> None:
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            channels = list(self._channels.values())
        for channel in channels:
            channel.close()

    # -- connections ---------------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self.finished.is_set():
            try:
                sock, _peer = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(P.Channel(sock),), daemon=True, name="rdzv-conn").start()

    def _serve(self, channel: P.Channel) -> None:
        node_id = next(self._ids)
        try:
            channel.sock.settimeout(self.settings.node_timeout)
            join = channel.receive()
            channel.sock.settimeout(None)
            if join is None or join["type"] != "join":
                channel.send("refused", reason="expected a join message first", status=2)
                return
            node = _node_from_join(node_id, join)
            with self._lock:
                refusal = self.policy.on_join(node, str(join.get("job", "")))
                if refusal is None:
                    self._channels[node_id] = channel
                    self._last_seen[node_id] = time.monotonic()
            if refusal is not None:
                self._say(f"refused {node.label}: {refusal[0]}")
                channel.send("refused", reason=refusal[0], status=refusal[1])
                return
            channel.send("welcome", node_id=node_id)
            self._say(f"{node.label} joined ({node.slots} worker(s))")
            while True:
                message = channel.receive()
                if message is None:
                    break
                self._on_message(node_id, message)
        except (OSError, P.ProtocolError, ValueError, KeyError, TypeError) as bad:
            reason = f"bad connection: {bad}"
        else:
            reason = "its agent closed the connection"
        finally:
            pass
        with self._lock:
            known = self._channels.pop(node_id, None) is not None
            if known:
                self.policy.on_lost(node_id, reason, time.monotonic())
                self._say(f"lost node {node_id}: {reason}")
        channel.close()

    def _on_message(self, node_id: int, message: dict[str, Any]) -> None:
        kind = message["type"]
        now = time.monotonic()
        with self._lock:
            self._last_seen[node_id] = now
            if kind == "ready":
                self.policy.on_ready(node_id, tuple(int(p) for p in message["ports"]), message.get("backup"))
            elif kind == "training":
                self.policy.on_training(node_id, int(message["round"]))
            elif kind == "exited":
                self.policy.on_exited(node_id, int(message["round"]), str(message["outcome"]),
                                      message.get("step"), str(message.get("detail", "")), now)
            elif kind == "file":
                self.relay.on_upload(node_id, message)

    def _send(self, node_id: int, kind: str, **fields: Any) -> None:
        with self._lock:
            channel = self._channels.get(node_id)
        if channel is not None:
            channel.send(kind, **fields)

    # -- the loop ------------------------------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        interval = P.ping_interval(self.settings.node_timeout)
        last_ping = 0.0
        while not self.finished.is_set():
            now = time.monotonic()
            with self._lock:
                for node_id, seen in list(self._last_seen.items()):
                    if node_id in self._channels and now - seen > self.settings.node_timeout:
                        self._say(f"node {node_id}: no keep-alive for {now - seen:.1f}s")
                        self.policy.on_lost(node_id, f"no keep-alive for {self.settings.node_timeout:g}s", now)
                        self._channels.pop(node_id).close()
                actions = self.policy.tick(now)
                channels = dict(self._channels)
            for action in actions:
                self._carry_out(action, channels)
            if now - last_ping >= interval:
                last_ping = now
                for channel in channels.values():
                    channel.send("ping")
            time.sleep(0.02)

    def _carry_out(self, action: object, channels: dict[int, P.Channel]) -> None:
        if isinstance(action, StartRound):
            self.round_started_at[action.round] = time.monotonic()
            self._say(f"round {action.round}: {len(action.nodes)} machine(s), {action.world_size} worker(s)")
            restore = self.relay.plan(self.policy.nodes, action)
            for assignment in action.assignments:
                channel = channels.get(assignment.node_id)
                if channel is not None:
                    channel.send("round", round=action.round, node_rank=assignment.node_rank,
                                 world_size=action.world_size, workers=list(action.workers),
                                 first_index=assignment.first_index, nodes=[list(n) for n in action.nodes],
                                 restore=restore.get(assignment.node_id))
            self.relay.request_upload(action.round)
        elif isinstance(action, Stop):
            for node_id in action.node_ids:
                channel = channels.get(node_id)
                if channel is not None:
                    channel.send("stop", round=self.policy.round, graceful=action.graceful, reason=action.reason)
            self._say(f"stopping round {self.policy.round}: {action.reason}")
        elif isinstance(action, Finish):
            self.result = action
            for channel in channels.values():
                channel.send("finish", status=action.status, report=action.report)
            self.finished.set()


def _node_from_join(node_id: int, join: dict[str, Any]) -> Node:
    rank = join.get("node_rank")
    slots = int(join["slots"])
    if not 1 <= slots <= 1024:
        raise ValueError(f"slots {slots} out of range")
    return Node(node_id=node_id, name=str(join.get("name") or join["address"]), address=str(join["address"]),
                slots=slots, requested_rank=None if rank is None else int(rank),
                versions={str(k): str(v) for k, v in (join.get("versions") or {}).items()})
