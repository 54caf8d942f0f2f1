"""One machine's side of a multi-machine job: the agent, its node group, the run record, the flight recorder's part
and the backup and snapshot copies."""
