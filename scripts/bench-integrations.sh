#!/usr/bin/env bash
# What each agent-framework adapter adds to a cell that makes 100 tool
# calls, against a plain `tc.execute` with the same tool
# (benches/integrations/bench_<name>.*; target: within 1.2x). Prints one JSON
# line per framework.
#
# usage: scripts/bench-integrations.sh [--binary PATH] [FRAMEWORK ...]
#   --binary PATH  the toolcell binary to run (default: a release build,
#                  made with `cargo build --release -p toolcell-cli`)
#
# Uses the framework venvs scripts/test-integrations.sh caches (run it, or
# scripts/packages.sh, first) and, for the Vercel AI SDK, the npm cache of
# npm/scripts/test-ai.sh. RUNS (default 21) sets the runs per side.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

binary="" only=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        -*) echo "bench-integrations.sh: unknown option $1" >&2; exit 2 ;;
        *) only+=("$1"); shift ;;
    esac
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/toolcell-ci/target}"
if [[ -z "$binary" ]]; then
    cargo build --quiet --release -p toolcell-cli
    binary="$CARGO_TARGET_DIR/release/toolcell"
fi
export TOOLCELL="$binary"
runs="${RUNS:-21}"
cache="${TOOLCELL_CI_CACHE:-$HOME/.cache/toolcell-ci}"

wanted() {
    [[ ${#only[@]} -eq 0 ]] && return 0
    local f
    for f in "${only[@]}"; do [[ "$f" == "$1" ]] && return 0; done
    return 1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/toolcell-bench-integrations.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export XDG_DATA_HOME="$work/xdg/data" XDG_CACHE_HOME="$work/xdg/cache" XDG_CONFIG_HOME="$work/xdg/config"
mkdir -p "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME"

for bench in benches/integrations/bench_*.py; do
    fw="$(basename "$bench" .py)"
    fw="${fw#bench_}"
    wanted "$fw" || continue
    venv="$cache/integrations/$fw"
    [[ -x "$venv/bin/python" ]] || { echo "bench-integrations.sh: no venv for $fw at $venv: run scripts/test-integrations.sh first" >&2; exit 1; }
    (cd "$work" && "$venv/bin/python" "$root/$bench" "$runs")
done

if wanted vercel_ai; then
    npm_cache="$cache/npm-ai"
    [[ -f "$npm_cache/package-lock.json" ]] || { echo "bench-integrations.sh: no npm cache at $npm_cache: run npm/scripts/test-ai.sh first" >&2; exit 1; }
    tarball="$(npm/scripts/build.sh --binary "$binary" --out "$work/npm" | tail -n 1)"
    mkdir -p "$work/node"
    cp "$npm_cache/package.json" "$npm_cache/package-lock.json" "$work/node/"
    cp -r "$npm_cache/npm-cache" "$work/npm-cache"
    (cd "$work/node" && npm install --offline --no-audit --no-fund --loglevel=error --cache "$work/npm-cache" "$tarball" >/dev/null)
    (cd "$work/node" && RUNS="$runs" node "$root/benches/integrations/bench_vercel_ai.mjs")
fi
