# Shared by scripts/engines.sh and scripts/engines-stop.sh (sourced, not run):
# their usage, where their state lives, and how they find and stop a daemon
# by its pid file.

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

# Root, or passwordless sudo, or `false` (every as_root fails; is_root says so).
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        SUDO=(false)
    fi
fi
as_root() { "${SUDO[@]}" "$@"; }
is_root() { [[ "${SUDO[*]:-}" != false ]]; }

# alive PIDFILE NAME : the pid in PIDFILE runs a program called NAME*.
alive() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$2"* ]] || return 1
    # not a zombie (an orphan waits a moment for init to reap it)
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]
}

# stop_pidfile PIDFILE NAME [SECONDS] : SIGTERM, wait up to SECONDS (15),
# then SIGKILL, saying so on stderr.
stop_pidfile() {
    local i pid secs="${3:-15}"
    alive "$1" "$2" || return 0
    pid="$(cat "$1")"
    as_root kill "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 4; i++)); do
        alive "$1" "$2" || return 0
        sleep 0.25
    done
    echo "$(basename "$0"): $2 (pid $pid) still running after $secs s: SIGKILL" >&2
    as_root kill -9 "$pid" 2>/dev/null || true
}
