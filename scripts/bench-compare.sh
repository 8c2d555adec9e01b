#!/usr/bin/env bash
# Side-by-side benchmark: toolcell vs Jupyter (jupyter_client + ipykernel).
#
#   scripts/bench-compare.sh [ARGS...]      # ARGS go to benches/compare/jupyter.py
#   scripts/bench-compare.sh --json         # machine-readable output
#   scripts/bench-compare.sh --quick        # fewer repetitions (a smoke run)
#
# Creates (or reuses) a throwaway venv under
# ${XDG_CACHE_HOME:-$HOME/.cache}/toolcell/bench-compare-venv with
# jupyter_client and ipykernel, builds the release binary (cargo rebuilds only
# what changed), and runs the script with the venv's python. The same
# interpreter runs toolcell's kernels (--python) and ipykernel, so both sides
# use one Python. Delete the venv directory to start over.
#
# Environment: PYTHON (the python that creates the venv, default python3),
# TOOLCELL_BIN (use this binary instead of building target/release/toolcell).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

python=${PYTHON:-python3}
venv="${XDG_CACHE_HOME:-$HOME/.cache}/toolcell/bench-compare-venv"

if ! command -v "$python" >/dev/null 2>&1; then
    echo "bench-compare.sh: $python not found; install Python 3.8 or newer (or set PYTHON=/path/to/python3)" >&2
    exit 2
fi

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)' 2>/dev/null; then
    echo "bench-compare.sh: $python is older than Python 3.8 (set PYTHON=/path/to/python3.8+)" >&2
    exit 2
fi

if [ ! -x "$venv/bin/python" ]; then
    if ! "$python" -m venv --help >/dev/null 2>&1; then
        echo "bench-compare.sh: '$python -m venv' is not available." >&2
        echo "  On Debian/Ubuntu: apt-get install python3-venv (or python3.X-venv for your version)" >&2
        exit 2
    fi
    echo "bench-compare.sh: creating venv $venv" >&2
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv"; then
        rm -rf "$venv"
        echo "bench-compare.sh: '$python -m venv $venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 2
    fi
fi

vpy="$venv/bin/python"
if ! "$vpy" -c 'import jupyter_client, ipykernel' >/dev/null 2>&1; then
    # Major versions pinned. ipykernel 7 needs Python >= 3.10; older
    # interpreters get the 6.x line (the last one supporting 3.8/3.9).
    if "$vpy" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
        ipk='ipykernel>=7,<8'
    else
        ipk='ipykernel>=6.29,<7'
    fi
    echo "bench-compare.sh: installing jupyter_client 8.x and $ipk into $venv" >&2
    "$vpy" -m pip install --quiet --disable-pip-version-check 'jupyter_client>=8,<9' "$ipk"
fi

if [ -n "${TOOLCELL_BIN:-}" ]; then
    bin=$TOOLCELL_BIN
else
    # cargo decides whether anything changed (a no-op build takes a second).
    echo "bench-compare.sh: cargo build --release -p toolcell-cli" >&2
    cargo build --release -p toolcell-cli
    bin="${CARGO_TARGET_DIR:-$root/target}/release/toolcell"
fi

exec "$vpy" "$root/benches/compare/jupyter.py" --toolcell "$bin" --python "$vpy" "$@"
