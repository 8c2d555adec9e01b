#!/usr/bin/env bash
# Installs the third-party MCP servers the tests drive (crates/tools/tests/it/mcp_servers.rs):
#   - @modelcontextprotocol/server-everything and server-filesystem (npm) into $DEPS/npm
#   - a Python venv with the `mcp` SDK (FastMCP) at $DEPS/venv
# where DEPS is $TOOLCELL_TEST_DEPS (default $HOME/.cache/toolcell-ci/deps).
# Idempotent: installs only what is missing or at another version; quiet unless
# something fails. Needs node/npm and python3 (with venv) on PATH.
# Also installs, with apt-get (as root or through sudo) when missing:
# openssh-server and openssh-client for the remote-kernel tests
# (crates/host/tests/it/remote.rs), R with jsonlite and ggplot2 for the R
# kernel tests, and old Pythons for the interpreter tests (see the end).
# Prints each step as it starts it.
set -euo pipefail

NPM_PKGS=(
    "@modelcontextprotocol/server-everything@2026.8.31"
    "@modelcontextprotocol/server-filesystem@2026.8.31"
)
PY_PKGS=("mcp==2.3.0")

DEPS="${TOOLCELL_TEST_DEPS:-$HOME/.cache/toolcell-ci/deps}"
mkdir -p "$DEPS"
log="$DEPS/install.log"

# What it is doing, as it starts doing it (apt-get can take minutes).
say() { echo "test-deps: $*"; }

fail() {
    echo "test-deps: $1 (log: $log)" >&2
    tail -n 20 "$log" >&2 || true
    exit 1
}

# openssh-server and openssh-client for the remote-kernel tests
# (crates/host/tests/it/remote.rs starts its own sshd on 127.0.0.1 with keys
# and config in a temp dir; no system configuration is touched).
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
    sudo=""
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || fail "openssh-server/openssh-client missing and neither root nor sudo available"
        sudo="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    say "installing openssh-server and openssh-client (apt-get)"
    $sudo apt-get update -qq >>"$log" 2>&1 || fail "apt-get update failed"
    $sudo apt-get install -y -qq --no-install-recommends openssh-server openssh-client \
        >>"$log" 2>&1 || fail "apt-get install openssh-server openssh-client failed"
fi

# npm: a stamp file records the package list installed; reinstall when it changes.
npm_stamp="$DEPS/npm/.toolcell-stamp"
want_npm="${NPM_PKGS[*]}"
if [[ ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$want_npm" ]]; then
    command -v npm >/dev/null || fail "npm not found on PATH"
    say "installing ${NPM_PKGS[*]} (npm) into $DEPS/npm"
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
    say "installing ${PY_PKGS[*]} (pip) into a venv at $DEPS/venv"
    "$py" -m venv "$DEPS/venv" >>"$log" 2>&1 || fail "python3 -m venv failed"
    "$DEPS/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "${PY_PKGS[@]}" >>"$log" 2>&1 || fail "pip install failed"
    printf '%s' "$want_py" >"$py_stamp"
fi

# R and its packages for the R kernel tests (crates/host/tests/it/languages.rs):
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
    say "installing ${r_missing[*]} (apt-get; R is a few hundred MB)"
    {
        "${sudo[@]}" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${r_missing[@]}"
    } >>"$log" 2>&1 || fail "apt-get install ${r_missing[*]} failed"
fi

# Old interpreters for the tests of what toolcell does with them
# (crates/host/tests/it/interpreter.rs: Python 2 and a Python 3 older than
# 3.8 are refused with their version; crates/kernel/tests/it/runner_python.rs:
# the runner's suite under the oldest supported Python). pyenv's 2.7/3.6/3.7/
# 3.8 are used where present; otherwise Debian 11's python2.7, pypy3 (a
# Python 3.7) and python3.9 (no reachable registry carries a 3.8), installed
# through an apt source for Debian 11 that exists only for this install.
have() { [[ -x "$HOME/.pyenv/versions/$1" || -x "$2" ]]; }
old3() {
    local p
    for p in "$HOME/.pyenv/versions/3.6.15/bin/python3.6" "$HOME/.pyenv/versions/3.7.16/bin/python3.7" /usr/bin/pypy3; do
        [[ -x "$p" ]] && "$p" -c 'import sys; sys.exit(not (3,) <= sys.version_info < (3, 8))' 2>/dev/null && return 0
    done
    return 1
}
old_missing=()
have 2.7.18/bin/python2.7 /usr/bin/python2.7 || old_missing+=(python2.7)
old3 || old_missing+=(pypy3)
have 3.8.18/bin/python3.8 /usr/bin/python3.8 || have 3.9.18/bin/python3.9 /usr/bin/python3.9 || old_missing+=(python3.9)
if ((${#old_missing[@]})); then
    command -v apt-get >/dev/null || fail "old Pythons missing (${old_missing[*]}) and no apt-get"
    sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    say "installing Debian 11's ${old_missing[*]} (apt-get, a minute or two)"
    src=/etc/apt/sources.list.d/toolcell-test-bullseye.sources
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bullseye\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        | "${sudo[@]}" tee "$src" >/dev/null
    ok=1
    "${sudo[@]}" apt-get update -qq >>"$log" 2>&1 \
        && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
            -t bullseye "${old_missing[@]}" >>"$log" 2>&1 || ok=0
    "${sudo[@]}" rm -f "$src"
    "${sudo[@]}" apt-get update -qq >>"$log" 2>&1 || true
    ((ok)) || fail "apt-get install -t bullseye ${old_missing[*]} failed"
fi
say "everything the tests drive is installed"
