"""The agent's two built-in rendezvous backends, composed: the one module of ``elastic/`` that knows ``tcp/`` and
``etcd/`` and the agent together. The agent package imports neither backend (it takes a
:class:`~tfdist.launch.elastic.backend.Backends`), so what serves or reaches a rendezvous is chosen here, once.

Use :class:`Agent` (the agent with these backends) wherever a machine's agent is started.
"""
from __future__ import annotations

from typing import Callable

from tfdist.launch.console.task_output import to_terminal
from tfdist.launch.elastic.agent import agent as agent_room
from tfdist.launch.elastic.agent.spec import AgentSpec
from tfdist.launch.elastic.backend import LinkConf, RendezvousBackend, ServedRendezvous
from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder
from tfdist.launch.elastic.rendezvous.membership_types import RendezvousSettings
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.tcp.server import RendezvousServer
from tfdist.launch.seams import Say


class BuiltInBackends:
    """``--rdzv-backend tfdist`` (the built-in server, served by the machine that owns the endpoint) or ``etcd``."""

    def link(self, settings: RendezvousSettings, host: str, ip: str, port: int, *, conf: LinkConf | None,
             secret: bytes, watch_stdin: bool, say: Callable[[str], None],
             here: ServedRendezvous | None) -> RendezvousBackend:
        if conf is not None:
            from tfdist.launch.elastic.etcd.link import EtcdLink  # the etcd client library is an extra

            return EtcdLink(conf, settings, secret=secret or None, watch_stdin=watch_stdin, say=say)
        server = here if isinstance(here, RendezvousServer) else None
        return RendezvousLink(host, ip, port, settings.node_timeout, secret=secret, watch_stdin=watch_stdin, say=say,
                              here=server)

    def serve(self, settings: RendezvousSettings, ip: str, port: int, *, secret: bytes, say: Callable[[str], None],
              recorder: JobRecorder | None) -> ServedRendezvous | None:
        return RendezvousServer(settings, ip, port, secret=secret, say=say, recorder=recorder).start()


class Agent(agent_room.Agent):
    """One machine's agent with the built-in backends."""

    def __init__(self, spec: AgentSpec, *, say: Say = to_terminal) -> None:
        super().__init__(spec, backends=BuiltInBackends(), say=say)
