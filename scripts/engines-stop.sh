#!/usr/bin/env bash
# Stops the daemons scripts/engines.sh started: dockerd (with its containerd),
# slurmd, slurmctld, and munged when engines.sh was the one to start it.
# Leaves installed packages, the cached rootfs tarball, the image in dockerd's
# data root and slurm's state in place, so the next engines.sh is quick.
#
# Usage: scripts/engines-stop.sh [docker|slurm|all]     (default all)
set -euo pipefail

# shellcheck source=scripts/engines-common.sh
. "$(dirname "$0")/engines-common.sh"

if [[ "$what" == docker || "$what" == all ]]; then
    # dockerd stops its containers (10 s grace each, in parallel) and its containerd.
    stop_pidfile "$ENG/dockerd.pid" dockerd 40
fi
if [[ "$what" == slurm || "$what" == all ]]; then
    stop_pidfile "$DEPS/slurm/slurmd.pid" slurmd 20
    stop_pidfile "$DEPS/slurm/slurmctld.pid" slurmctld 20
    if [[ -f "$ENG/munged.started" ]]; then
        stop_pidfile /run/munge/munged.pid munged 10
        rm -f "$ENG/munged.started"
    fi
fi
if [[ -f "$ENG/status" ]]; then
    # the engines are no longer up: say so to anyone reading the status file
    tmp="$ENG/status.tmp"
    while IFS= read -r line; do
        k="${line%%=*}"
        if [[ "$what" == all || "$what" == "$k" ]]; then
            echo "$k=unavailable: stopped by engines-stop.sh; run scripts/engines.sh"
        else
            echo "$line"
        fi
    done <"$ENG/status" >"$tmp"
    mv -f "$tmp" "$ENG/status"
fi
