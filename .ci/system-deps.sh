#!/usr/bin/env bash
# System packages the integration tests use: a real Slurm (slurm-wlm + munge), a real Prometheus server, and for the
# multi-machine tests network namespaces (iproute2) with an sshd in each (openssh-server, openssh-client).
# Tests start these services themselves and skip with a reason only when they cannot be started.
set -uo pipefail
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: not root or no apt-get; Slurm/Prometheus tests will skip" >&2
    exit 0
fi
wanted=(slurm-wlm munge prometheus openssh-server openssh-client iproute2)
missing=()
for p in "${wanted[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    # --no-install-recommends keeps the install small; a failure only makes those tests skip.
    apt-get install -y -qq --no-install-recommends "${missing[@]}" || echo "system-deps: could not install ${missing[*]}" >&2
fi
exit 0
