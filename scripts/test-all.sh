#!/usr/bin/env bash
# Every test: the third-party programs and engines they drive (installed
# and started when missing),
# the workspace's tests, the crates' feature-less builds, every bench run
# once as a test, and the Python and npm packages tested from their
# artifacts. README and .ci/run both point here.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# MCP servers from npm and PyPI, R for the R kernels: into a cache outside
# the clone when missing.
step "scripts/test-deps.sh"
scripts/test-deps.sh

# Docker and a one-node SLURM cluster for the remote-lifecycle recipes
# (crates/cli/tests/it/engines.rs): installed and started when missing. An
# engine that cannot run here is named with the reason.
step "scripts/engines.sh"
scripts/engines.sh

# No test passes without running its subject: a test that finds what it
# needs missing (root, cgroup v2, sshd, an old Python, an engine...) fails
# under TOOLCELL_REQUIRE=1 instead of returning early. TOOLCELL_REQUIRE=0
# lets such tests skip, each saying why on stderr.
export TOOLCELL_REQUIRE="${TOOLCELL_REQUIRE:-1}"

step "cargo test --workspace"
cargo test --workspace

# One kernel (toolcell-kernel) pulls no SQLite, no MCP client, no HTTP/TLS
# stack; the host crate without its default features (`journal`, `mcp`,
# `web`) neither.
step "cargo tree: toolcell-kernel and toolcell-host --no-default-features pull no rmcp, reqwest, rustls, rusqlite"
for crate in toolcell-kernel toolcell-host; do
    heavy=$(cargo tree -p "$crate" --no-default-features -e normal --prefix none \
        | awk '{print $1}' | grep -xE 'rmcp|reqwest|rustls|rusqlite' | sort -u || true)
    if [ -n "$heavy" ]; then
        echo "test-all: $crate --no-default-features still depends on:" $heavy >&2
        exit 1
    fi
done
step "cargo test -p toolcell-host --no-default-features"
cargo test -p toolcell-host --no-default-features

# toolcell-tools without its default features (no HTTP/TLS/HTML stack, no MCP client).
step "cargo test -p toolcell-tools --no-default-features"
cargo test -p toolcell-tools --no-default-features

step "cargo test --benches -p toolcell-benches"
cargo test --benches -p toolcell-benches

# The Python wheel and the npm package: built, installed alone into a fresh
# venv / temp dir, and their client tests and examples run there.
step "scripts/packages.sh"
scripts/packages.sh
