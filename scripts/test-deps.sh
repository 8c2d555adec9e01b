#!/usr/bin/env bash
# Installs the third-party MCP servers the tests drive (crates/tools/tests/mcp_servers.rs):
#   - @modelcontextprotocol/server-everything and server-filesystem (npm) into $DEPS/npm
#   - a Python venv with the `mcp` SDK (FastMCP) at $DEPS/venv
# where DEPS is $TOOLCELL_TEST_DEPS (default $HOME/.cache/toolcell-ci/deps).
# Idempotent: installs only what is missing or at another version; quiet unless
# something fails. Needs node/npm and python3 (with venv) on PATH.
# Also installs openssh-server and openssh-client (apt-get) when missing, for
# the remote-kernel tests (crates/host/tests/remote.rs).
set -euo pipefail

NPM_PKGS=(
    "@modelcontextprotocol/server-everything@2026.8.31"
    "@modelcontextprotocol/server-filesystem@2026.8.31"
)
PY_PKGS=("mcp==2.3.0")

DEPS="${TOOLCELL_TEST_DEPS:-$HOME/.cache/toolcell-ci/deps}"
mkdir -p "$DEPS"
log="$DEPS/install.log"

fail() {
    echo "test-deps: $1 (log: $log)" >&2
    tail -n 20 "$log" >&2 || true
    exit 1
}

# openssh-server and openssh-client for the remote-kernel tests
# (crates/host/tests/remote.rs starts its own sshd on 127.0.0.1 with keys
# and config in a temp dir; no system configuration is touched).
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
    sudo=""
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || fail "openssh-server/openssh-client missing and neither root nor sudo available"
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >>"$log" 2>&1 || fail "apt-get update failed"
    $sudo apt-get install -y -qq --no-install-recommends openssh-server openssh-client \
        >>"$log" 2>&1 || fail "apt-get install openssh-server openssh-client failed"
fi

# npm: a stamp file records the package list installed; reinstall when it changes.
npm_stamp="$DEPS/npm/.toolcell-stamp"
want_npm="${NPM_PKGS[*]}"
if [[ ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$want_npm" ]]; then
    command -v npm >/dev/null || fail "npm not found on PATH"
    mkdir -p "$DEPS/npm"
    npm install --prefix "$DEPS/npm" --no-audit --no-fund --loglevel=error \
        "${NPM_PKGS[@]}" >>"$log" 2>&1 || fail "npm install failed"
    printf '%s' "$want_npm" >"$npm_stamp"
fi

# Python venv with the MCP SDK.
py_stamp="$DEPS/venv/.toolcell-stamp"
want_py="${PY_PKGS[*]}"
if [[ ! -x "$DEPS/venv/bin/python" || ! -f "$py_stamp" || "$(cat "$py_stamp")" != "$want_py" ]]; then
    py=python3
    [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null && py=/usr/bin/python3
    "$py" -m venv "$DEPS/venv" >>"$log" 2>&1 || fail "python3 -m venv failed"
    "$DEPS/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "${PY_PKGS[@]}" >>"$log" 2>&1 || fail "pip install failed"
    printf '%s' "$want_py" >"$py_stamp"
fi

# R and its packages for the R kernel tests (crates/host/tests/languages.rs):
# Debian's packages (CRAN itself need not be reachable). node 18+ must be on PATH
# already (the npm step above needs it too).
r_missing=()
command -v Rscript >/dev/null || r_missing+=(r-base-core)
if command -v Rscript >/dev/null; then
    Rscript -e 'library(jsonlite)' >/dev/null 2>&1 || r_missing+=(r-cran-jsonlite)
    Rscript -e 'library(ggplot2)' >/dev/null 2>&1 || r_missing+=(r-cran-ggplot2)
else
    r_missing+=(r-cran-jsonlite r-cran-ggplot2)
fi
if ((${#r_missing[@]})); then
    command -v apt-get >/dev/null || fail "R packages missing (${r_missing[*]}) and no apt-get: install them by hand"
    sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    {
        "${sudo[@]}" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${r_missing[@]}"
    } >>"$log" 2>&1 || fail "apt-get install ${r_missing[*]} failed"
fi
