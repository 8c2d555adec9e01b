#!/usr/bin/env bash
# The long soak: `toolcell serve` driven by 16 concurrent clients with a
# chaos thread SIGKILLing kernels (crates/cli/tests/it/soak.rs).
#
#   scripts/soak.sh [SECONDS]
#
# SECONDS (default 1800) is how long the clients keep sending cells. The
# test builds in release mode and prints a summary table at the end:
# requests by kind and outcome, chaos kills, responses/s, the host's fd
# count and RSS in the first and last quarter, the largest latency. Set
# TOOLCELL_SOAK_SEED to replay a run's random choices (the seed is printed).
set -euo pipefail

cd "$(dirname "$0")/.."
secs="${1:-1800}"
case "$secs" in
    '' | *[!0-9]*)
        echo "soak.sh: SECONDS must be a whole number, got '$secs'" >&2
        exit 2
        ;;
esac

TOOLCELL_SOAK_SECS="$secs" exec cargo test --release -p toolcell-cli --test it soak:: -- --nocapture
