"""Caps on what an untrusted environment may ask for.

Every size read from TF_CONFIG, Slurm's or Kubernetes' variables is checked against these before anything is
allocated, so a typo or a hostile value is a one-line error instead of a hang or an exhausted memory.
"""
from __future__ import annotations

# Tasks in one job. The largest TensorFlow jobs on record have a few thousand workers.
MAX_TASKS = 65_536
# Hosts a Slurm host list may expand to (checked on the product of its ranges before expanding).
MAX_HOSTS = 65_536
# Tasks Slurm may place on one node.
MAX_TASKS_PER_NODE = 4096
# A host name, as DNS allows (RFC 1035: 253 characters in text form; 255 leaves room for brackets).
MAX_HOST_CHARS = 255
# TF_CONFIG text: room for MAX_TASKS addresses of ordinary length, no more.
MAX_TF_CONFIG_CHARS = 4 * 1024 * 1024
# TF_CONFIG is three levels deep ({"cluster": {"worker": [...]}}); anything deeper is not TF_CONFIG.
MAX_JSON_DEPTH = 8
# Decimal digits of any count or index in an environment variable.
MAX_DIGITS = 9
