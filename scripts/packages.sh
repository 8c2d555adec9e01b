#!/usr/bin/env bash
# Builds the Python wheel and the npm package from this checkout, installs
# each into a fresh environment holding nothing from the source tree but the
# artifact, and runs the client tests and the examples there:
#   - wheel: maturin (pinned, in a cached venv), `--profile dev` so it reuses
#     the debug build of $CARGO_TARGET_DIR; installed into a new venv with
#     pytest (from a cached wheelhouse), then python/tests and
#     examples/python_agent.py;
#   - npm: npm/scripts/build.sh with the binary from the wheel, `npm pack`ed,
#     installed into a temp dir, then `node --test` on npm/test and
#     examples/ts_agent.ts compiled against the installed types;
#   - the agent-framework integrations, from both artifacts
#     (scripts/test-integrations.sh: pinned frameworks in cached venvs).
#
# usage: scripts/packages.sh [--out DIR] [--release]
#   --out DIR   keep the wheel and the .tgz in DIR (default: only tested, then removed)
#   --release   build the binary with the release profile (slow; CI uses the debug one)
#
# Called by .ci/run; idempotent. Needs python3 (venv), node and npm; the
# network only the first time (maturin, pytest, typescript from the
# registries, then cached under $TOOLCELL_CI_CACHE, default ~/.cache/toolcell-ci).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

keep="" profile="dev"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) keep="$2"; shift 2 ;;
        --release) profile="release"; shift ;;
        *) echo "packages.sh: unknown argument $1 (usage: scripts/packages.sh [--out DIR] [--release])" >&2; exit 2 ;;
    esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/toolcell-ci/target}"
cache="${TOOLCELL_CI_CACHE:-$HOME/.cache/toolcell-ci}"
MATURIN="maturin==1.16.0"
PYTEST="pytest==9.2.0"
PYTEST_39="pytest==8.3.5"   # pytest 9 needs 3.10; the oldest Python the client supports is 3.9
PYTEST_39_DEPS="tomli exceptiongroup"   # what it needs below 3.11 (pip download evaluates markers for this interpreter)

# A python3 with venv and ensurepip (Debian's, when the default lacks them).
py=python3
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then py=/usr/bin/python3; fi

work="$(mktemp -d "${TMPDIR:-/tmp}/toolcell-packages.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The binary under test is the packaged one, never one named by the caller.
unset TOOLCELL VIRTUAL_ENV
# The servers the tests start keep their journal, spill files and any user
# configuration in the work dir, not the user's.
export XDG_DATA_HOME="$work/xdg/data" XDG_CACHE_HOME="$work/xdg/cache" XDG_CONFIG_HOME="$work/xdg/config"
mkdir -p "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME"

t0=$SECONDS
now() { echo $((SECONDS - t0)); }
step() { printf -- '--> %s (%ss)\n' "$*" "$(now)"; }
declare -a summary=()

# ---------------------------------------------------------------- tools
tools="$cache/packaging"
mkdir -p "$tools"
if [[ ! -x "$tools/venv/bin/maturin" || "$(cat "$tools/venv/.stamp" 2>/dev/null)" != "$MATURIN $PYTEST $PYTEST_39 $PYTEST_39_DEPS" ]]; then
    step "installing $MATURIN and a $PYTEST wheelhouse into $tools"
    rm -rf "$tools/venv" "$tools/wheelhouse"
    "$py" -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "$MATURIN"
    "$tools/venv/bin/pip" download --quiet --disable-pip-version-check -d "$tools/wheelhouse" "$PYTEST"
    "$tools/venv/bin/pip" download --quiet --disable-pip-version-check -d "$tools/wheelhouse" \
        --only-binary=:all: --python-version 3.9 "$PYTEST_39" $PYTEST_39_DEPS
    echo "$MATURIN $PYTEST $PYTEST_39 $PYTEST_39_DEPS" >"$tools/venv/.stamp"
fi

# ---------------------------------------------------------------- wheel
step "maturin build --profile $profile (python/)"
b0=$SECONDS
(cd python && "$tools/venv/bin/maturin" build --quiet --profile "$profile" --out "$work/wheel") >"$work/maturin.log" 2>&1 || {
    tail -n 40 "$work/maturin.log" >&2
    echo "packages.sh: maturin build failed" >&2
    exit 1
}
wheel="$(ls "$work"/wheel/toolcell-*.whl)"
summary+=("wheel   $(basename "$wheel") ($(du -h "$wheel" | cut -f1)), built in $((SECONDS - b0))s")

step "fresh venv with only the wheel (and pytest)"
"$py" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$tools/wheelhouse" "$PYTEST"
# Only the tests and the example are copied: `toolcell` must come from the wheel.
mkdir -p "$work/py"
cp -r python/tests "$work/py/tests"
cp examples/python_agent.py "$work/py/"
(cd "$work/py" && "$work/venv/bin/python" -c 'import toolcell, sys; assert "site-packages" in toolcell.__file__, toolcell.__file__')

step "pytest (python/tests)"
p0=$SECONDS
(cd "$work/py" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests) | tee "$work/pytest.log"
summary+=("python  $(grep -E '^[0-9]+ passed' "$work/pytest.log" | tail -1) ($((SECONDS - p0))s)")

step "examples/python_agent.py"
out="$(cd "$work/py" && "$work/venv/bin/python" python_agent.py)"
[[ "$out" == "Orders over 100: A-1, A-3" ]] || { echo "python example printed: $out" >&2; exit 1; }
summary+=("python  example: $out")

# The oldest Python supported, when this machine has it: the schema and tool tests.
py39=""
for cand in "$(command -v python3.9 || true)" "$HOME"/.pyenv/versions/3.9*/bin/python3.9; do
    if [[ -n "$cand" && -x "$cand" ]] && "$cand" -c 'import venv, ensurepip' 2>/dev/null; then py39="$cand"; break; fi
done
if [[ -n "$py39" ]]; then
    step "Python 3.9: pytest tests/test_schema.py tests/test_tools.py"
    q0=$SECONDS
    "$py39" -m venv "$work/venv39"
    "$work/venv39/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
    "$work/venv39/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$tools/wheelhouse" "$PYTEST_39"
    (cd "$work/py" && "$work/venv39/bin/python" -m pytest -q -p no:cacheprovider tests/test_schema.py tests/test_tools.py) | tee "$work/pytest39.log"
    summary+=("py3.9   $(grep -E '^[0-9]+ passed' "$work/pytest39.log" | tail -1) ($((SECONDS - q0))s)")
else
    summary+=("py3.9   not on this machine: skipped")
fi

# ---------------------------------------------------------------- npm
step "npm package (npm/scripts/build.sh)"
n0=$SECONDS
# The binary is the one the wheel carries.
"$work/venv/bin/python" - "$wheel" "$work/toolcell" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/toolcell"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
os.chmod(sys.argv[2], 0o755)
PY
tarball="$(npm/scripts/build.sh --binary "$work/toolcell" --out "$work/npm" | tail -n 1)"
summary+=("npm     $(basename "$tarball") ($(du -h "$tarball" | cut -f1)), built in $((SECONDS - n0))s")

step "temp dir with only the npm package"
mkdir -p "$work/node/test"
echo '{"private": true, "type": "module"}' >"$work/node/package.json"
(cd "$work/node" && npm install --offline --no-audit --no-fund --loglevel=error "$tarball" >/dev/null)
cp npm/test/* "$work/node/test/"
cp examples/ts_agent.ts "$work/node/"

step "node --test (npm/test)"
j0=$SECONDS
(cd "$work/node" && node --test test/) >"$work/node-test.log" 2>&1 || {
    cat "$work/node-test.log" >&2
    echo "packages.sh: node tests failed" >&2
    exit 1
}
grep -E '^# (tests|pass|fail) ' "$work/node-test.log"
npass="$(sed -n 's/^# pass //p' "$work/node-test.log")"
nfail="$(sed -n 's/^# fail //p' "$work/node-test.log")"
summary+=("node    $npass passed, $nfail failed ($((SECONDS - j0))s)")

step "examples/ts_agent.ts (tsc against the installed types, then node)"
(cd "$work/node" && "$root/npm/node_modules/.bin/tsc" --strict --target es2022 --module nodenext \
    --moduleResolution nodenext --typeRoots "$root/npm/node_modules/@types" --types node ts_agent.ts)
out="$(cd "$work/node" && node ts_agent.js)"
[[ "$out" == "Orders over 100: A-1, A-3" ]] || { echo "TypeScript example printed: $out" >&2; exit 1; }
summary+=("node    example: $out")

# ---------------------------------------------------------------- integrations
# The agent-framework adapters (toolcell.integrations.*, toolcell/ai), each
# against its pinned framework, from these same artifacts.
step "scripts/test-integrations.sh (agent frameworks)"
i0=$SECONDS
scripts/test-integrations.sh --wheel "$wheel" --tarball "$tarball" | tee "$work/integrations.log"
summary+=("frameworks: $(grep -cE '^  (pydantic_ai|smolagents|langchain|openai_agents|llama_index|vercel_ai)  ' "$work/integrations.log") tested ($((SECONDS - i0))s)")

if [[ -n "$keep" ]]; then
    mkdir -p "$keep"
    cp "$wheel" "$tarball" "$keep/"
    summary+=("kept    $keep/$(basename "$wheel") and $keep/$(basename "$tarball")")
fi

echo
echo "packages: all good in $(now)s"
printf '  %s\n' "${summary[@]}"
