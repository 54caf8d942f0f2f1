"""Multi-machine launches: the per-machine agent (``agent.py``) and the node group it runs (``node_group.py``: a
local group of tasks that is one node of the job); the rendezvous: membership rules (``membership.py``: pure), the
server and the agent's client (``server.py``, ``client.py``) or the etcd backend (``etcd_*.py``), the wire
(``auth.py``: the handshake; ``wire.py``: authenticated frames, keep-alives; ``messages.py``, ``flight_messages.py``:
the typed messages, checked when decoded); copying the newest backup and in-memory snapshot between machines
(``backup_copy.py``, ``backup_relay.py``, ``snapshot_plan.py``, ``snapshot_copy.py``); address helpers
(``netaddr.py``)."""
