"""The job's rounds, backend-neutral and without sockets: the membership policy and its vocabulary, round roles, the
restore choice, the backup relay's trust rule and the job's hang report."""
