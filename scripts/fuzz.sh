#!/usr/bin/env bash
# Run the cargo-fuzz targets under the nightly toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS (default 60) is per target; with no TARGET, every target in
# fuzz/Cargo.toml runs in turn. Each target's corpus is the committed
# directory crates/*/tests/data/<target>/ (replayed by that crate's normal
# tests); new inputs are added there, then the corpus is minimized with
# `cargo fuzz cmin`. Crashes land in fuzz/artifacts/<target>/.
set -euo pipefail

cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi

for t in "${targets[@]}"; do
    corpus=$(ls -d crates/*/tests/data/"$t" 2>/dev/null | head -n1 || true)
    if [ -z "$corpus" ]; then
        echo "fuzz.sh: no corpus dir crates/*/tests/data/$t; create it in the owning crate" >&2
        exit 2
    fi
    corpus="$PWD/$corpus"
    echo "== $t: ${secs}s, corpus $corpus" >&2
    (cd fuzz && cargo +nightly fuzz run "$t" "$corpus" -- -max_total_time="$secs" -max_len=4096 -print_final_stats=1) 2>&1 \
        | tee "fuzz/last-run-$t.log" | grep -E '^(#[0-9]+.*(DONE|pulse)|stat::|==)' || true
    grep -E 'stat::number_of_executed_units' "fuzz/last-run-$t.log" || true
    echo "== $t: minimizing corpus" >&2
    (cd fuzz && cargo +nightly fuzz cmin "$t" "$corpus" -- -max_len=4096) >/dev/null 2>&1
    echo "== $t: $(ls "$corpus" | wc -l) corpus files" >&2
done
