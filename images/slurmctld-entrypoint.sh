#!/bin/sh
# slurmctld's entrypoint: `slurmctld-entrypoint slurmctld -D -f /etc/slurm-sidecars/slurm/slurm.conf`.
#
# Before slurmctld reads its files, `slurm-sidecars config-guard` puts the last verified set back
# when config-sync marked the set on disk as not yet verified (it swapped it in, and slurmctld died
# or restarted before the verification ended). So a slurmctld that starts at any instant, a restart
# by the kubelet after a crash included, reads only a verified set. The guard looks in the directory
# of the slurm.conf slurmctld is given (`-f`, else SLURM_CONF). It exits non-zero only when a set
# marked unverified cannot be replaced: then slurmctld must not start on it, and the container fails.
set -eu
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
prev=
for arg in "$@"; do
    if [ "$prev" = "-f" ]; then conf=$arg; fi
    prev=$arg
done
slurm-sidecars config-guard --target "$(dirname -- "$conf")"
exec "$@"
