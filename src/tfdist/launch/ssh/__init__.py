"""Host-file launches: the ssh driver that starts an agent on every listed machine, and the host probe it runs there
first (``python -m tfdist.launch.ssh.host_probe``)."""
