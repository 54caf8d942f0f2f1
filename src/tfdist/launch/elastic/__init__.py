"""Multi-machine launches: the per-machine agent, the node group it runs (a local group of tasks that is one node of
the job), the rendezvous (membership rules: pure; server; client; wire: the line protocol; backup_copy: moving the
newest backup between machines) and address helpers (netaddr)."""
