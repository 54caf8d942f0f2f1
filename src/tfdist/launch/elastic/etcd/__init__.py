"""The etcd rendezvous backend: settings and signed records, the key layout, the agent's link and the coordinator."""
