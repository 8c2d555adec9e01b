#!/usr/bin/env bash
# The agent-framework integrations, tested from the built packages:
#   - Python (toolcell.integrations.*): for each python/integrations/requirements-<fw>.txt,
#     a venv with exactly those pins (cached under $TOOLCELL_CI_CACHE/integrations/<fw>,
#     rebuilt when the file changes), the wheel installed into it with --no-deps,
#     then python/tests_integrations/test_<fw>.py and examples/<fw>_agent.py (its
#     `# ci-expect:` line) run from a temp dir holding only copies of them;
#   - npm (toolcell/ai, the Vercel AI SDK adapter): npm/scripts/test-ai.sh on the tarball.
#
# usage: scripts/test-integrations.sh --wheel WHEEL [--tarball TGZ] [FRAMEWORK ...]
#   FRAMEWORK  pydantic_ai, smolagents, langchain, openai_agents, llama_index, vercel_ai
#              (default: all)
#
# Called by scripts/packages.sh with the artifacts it built. The network is
# needed only the first time (PyPI, npm), then the caches are used.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

wheel="" tarball="" only=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --wheel) wheel="$2"; shift 2 ;;
        --tarball) tarball="$2"; shift 2 ;;
        -*) echo "test-integrations.sh: unknown option $1" >&2; exit 2 ;;
        *) only+=("$1"); shift ;;
    esac
done
[[ -n "$wheel" && -f "$wheel" ]] || { echo "test-integrations.sh: --wheel must name the toolcell wheel" >&2; exit 2; }

cache="${TOOLCELL_CI_CACHE:-$HOME/.cache/toolcell-ci}/integrations"
mkdir -p "$cache"
# The frameworks need Python 3.10+; the machine's python3 (3.11) with venv.
py=python3
if ! "$py" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 10)' 2>/dev/null; then py=/usr/bin/python3; fi

work="$(mktemp -d "${TMPDIR:-/tmp}/toolcell-integrations.XXXXXX")"
trap 'rm -rf "$work"' EXIT
unset TOOLCELL VIRTUAL_ENV
export XDG_DATA_HOME="$work/xdg/data" XDG_CACHE_HOME="$work/xdg/cache" XDG_CONFIG_HOME="$work/xdg/config"
mkdir -p "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME"
# Offline by construction: no test may reach a model provider.
export OPENAI_API_KEY="" ANTHROPIC_API_KEY="" HF_HUB_OFFLINE=1 OPENAI_AGENTS_DISABLE_TRACING=1

t0=$SECONDS
step() { printf -- '--> %s (%ss)\n' "$*" "$((SECONDS - t0))"; }
declare -a summary=()

wanted() {
    [[ ${#only[@]} -eq 0 ]] && return 0
    local f
    for f in "${only[@]}"; do [[ "$f" == "$1" ]] && return 0; done
    return 1
}

cp -r python/tests_integrations "$work/tests"

for req in python/integrations/requirements-*.txt; do
    fw="$(basename "$req" .txt)"
    fw="${fw#requirements-}"
    wanted "$fw" || continue
    venv="$cache/$fw"
    stamp="$(sha256sum "$req" | cut -d' ' -f1) $("$py" -c 'import sys; print(sys.version.split()[0])')"
    if [[ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]]; then
        step "$fw: a venv with $(grep -cv '^#' "$req") pinned packages (once)"
        rm -rf "$venv"
        "$py" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req" >"$work/pip-$fw.log" 2>&1 || {
            tail -n 30 "$work/pip-$fw.log" >&2
            echo "test-integrations.sh: installing $req failed" >&2
            exit 1
        }
        echo "$stamp" >"$venv/.stamp"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall --no-index "$wheel"
    (cd "$work/tests" && "$venv/bin/python" -c 'import toolcell, sys; assert "site-packages" in toolcell.__file__, toolcell.__file__')
    version="$("$venv/bin/python" - "$fw" <<'PY'
import sys
from importlib.metadata import version
dist = {"pydantic_ai": "pydantic-ai-slim", "smolagents": "smolagents", "langchain": "langchain-core",
        "openai_agents": "openai-agents", "llama_index": "llama-index-core"}[sys.argv[1]]
print(f"{dist} {version(dist)}")
PY
)"
    step "$fw ($version): pytest test_$fw.py"
    p0=$SECONDS
    (cd "$work/tests" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "test_$fw.py") >"$work/pytest-$fw.log" 2>&1 || {
        cat "$work/pytest-$fw.log" >&2
        echo "test-integrations.sh: the $fw tests failed" >&2
        exit 1
    }
    result="$(grep -E '^[0-9]+ passed' "$work/pytest-$fw.log" | tail -1)"
    echo "    $result"
    example="examples/${fw}_agent.py"
    expect="$(sed -n '2s/^# ci-expect: //p' "$example")"
    mkdir -p "$work/ex-$fw"
    cp "$example" "$work/ex-$fw/"
    out="$(cd "$work/ex-$fw" && "$venv/bin/python" "$(basename "$example")")"
    [[ -n "$expect" && "$out" == "$expect" ]] || {
        echo "test-integrations.sh: $example printed: $out (expected: $expect)" >&2
        exit 1
    }
    summary+=("$fw  $version: $result ($((SECONDS - p0))s); example: $out")
done

if wanted vercel_ai; then
    if [[ -n "$tarball" ]]; then
        step "vercel_ai: npm/scripts/test-ai.sh"
        v0=$SECONDS
        npm/scripts/test-ai.sh --tarball "$tarball" >"$work/ai.log" 2>&1 || {
            cat "$work/ai.log" >&2
            echo "test-integrations.sh: the Vercel AI SDK adapter tests failed" >&2
            exit 1
        }
        npass="$(sed -n 's/^# pass //p' "$work/ai.log")"
        nfail="$(sed -n 's/^# fail //p' "$work/ai.log")"
        [[ "$nfail" == 0 && -n "$npass" ]] || { cat "$work/ai.log" >&2; exit 1; }
        summary+=("vercel_ai  $(grep -o 'ai@[0-9.]*' npm/scripts/test-ai.sh | head -1): $npass passed ($((SECONDS - v0))s)")
    else
        echo "test-integrations.sh: vercel_ai needs --tarball (the npm package); not tested" >&2
        exit 2
    fi
fi

echo
echo "integrations: all good in $((SECONDS - t0))s"
printf '  %s\n' "${summary[@]}"
