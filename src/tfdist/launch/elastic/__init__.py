"""Multi-machine launches, one package per concern (issue 32):

- ``rendezvous/``: the job's rounds, backend-neutral and without sockets: the membership policy (pure) and its
  vocabulary, round roles, the restore choice, the backup relay's trust rule, the job's hang report;
- ``messages/``: the typed protocol, both directions and both backends, checked when decoded;
- ``tcp/``: the built-in backend: server, admission, the handshake (``auth.py``), the framed wire, the agent's link;
- ``etcd/``: the etcd backend: settings and signed records, key layout, the agent's link, the coordinator;
- ``agent/``: one machine's side: the agent, its node group, the run record, the flight recorder's part, the backup
  and snapshot copies.

Directly here: what several of them share: the backend seam (``backend.py``), address helpers (``netaddr.py``) and
the job secret (``secret.py``, also ``python -m tfdist.launch.elastic.secret``)."""
