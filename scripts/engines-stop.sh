#!/usr/bin/env bash
# Stops the daemons scripts/engines.sh started: dockerd (with its containerd),
# slurmd, slurmctld, and munged when engines.sh was the one to start it.
# Leaves installed packages, the cached rootfs tarball, the image in dockerd's
# data root and slurm's state in place, so the next engines.sh is quick.
#
# Usage: scripts/engines-stop.sh [docker|slurm|all]     (default all)
set -euo pipefail

what="${1:-all}"
case "$what" in
docker | slurm | all) ;;
*)
    echo "usage: $0 [docker|slurm|all]" >&2
    exit 2
    ;;
esac

DEPS="${TOOLCELL_TEST_DEPS:-$HOME/.cache/toolcell-ci/deps}"
ENG="$DEPS/engines"

SUDO=()
[[ "$(id -u)" != 0 ]] && SUDO=(sudo -n)

alive() { # PIDFILE NAME
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$2"* ]] || return 1
    # not a zombie (an orphan waits a moment for init to reap it)
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]
}

# stop PIDFILE NAME SECONDS : SIGTERM, wait up to SECONDS, then SIGKILL.
stop() {
    local i pid
    alive "$1" "$2" || return 0
    pid="$(cat "$1")"
    "${SUDO[@]}" kill "$pid" 2>/dev/null || true
    for ((i = 0; i < $3 * 4; i++)); do
        alive "$1" "$2" || return 0
        sleep 0.25
    done
    echo "engines-stop: $2 (pid $pid) still running after $3 s: SIGKILL" >&2
    "${SUDO[@]}" kill -9 "$pid" 2>/dev/null || true
}

if [[ "$what" == docker || "$what" == all ]]; then
    # dockerd stops its containers (10 s grace each, in parallel) and its containerd.
    stop "$ENG/dockerd.pid" dockerd 40
fi
if [[ "$what" == slurm || "$what" == all ]]; then
    stop "$DEPS/slurm/slurmd.pid" slurmd 20
    stop "$DEPS/slurm/slurmctld.pid" slurmctld 20
    if [[ -f "$ENG/munged.started" ]]; then
        stop /run/munge/munged.pid munged 10
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
