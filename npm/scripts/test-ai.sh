#!/usr/bin/env bash
# Tests `toolcell/ai` (the Vercel AI SDK adapter) from a packed toolcell
# package: installs the tarball and the pinned `ai` (plus zod, and the
# TypeScript compiler for the type checks) into a temp dir holding nothing
# from the source tree, then
#   1. checks the base client still works without `ai` (node_modules/ai
#      moved away for it), and that `toolcell/ai` then fails naming `ai`;
#   2. type-checks a consumer of `toolcell/ai` as ESM and as CommonJS
#      (module nodenext, and CommonJS with the old node10 resolution);
#   3. compiles and runs examples/vercel_ai_agent.ts (its `// ci-expect:` line);
#   4. runs `node --test` on npm/test-ai.
#
# usage: npm/scripts/test-ai.sh --tarball PATH
#   --tarball PATH  the toolcell .tgz (npm/scripts/build.sh prints its path)
#
# The pinned packages are installed once into
# ${TOOLCELL_CI_CACHE:-$HOME/.cache/toolcell-ci}/npm-ai (its own npm cache and
# lock file); later runs install from there with --offline. Change a pin
# below and the cache is rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"

# ai's own declarations import the types of json-schema: without them a consumer
# type-checking its libraries (no skipLibCheck) fails, whatever toolcell does.
AI_PINS=("ai@7.0.173" "zod@4.6.7" "typescript@5.9.3" "@types/node@20.19.43" "@types/json-schema@7.0.15")

tarball=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tarball) tarball="$2"; shift 2 ;;
        *) echo "test-ai.sh: unknown argument $1 (usage: npm/scripts/test-ai.sh --tarball PATH)" >&2; exit 2 ;;
    esac
done
[[ -n "$tarball" && -f "$tarball" ]] || { echo "test-ai.sh: --tarball must name the toolcell .tgz (npm/scripts/build.sh prints it)" >&2; exit 2; }
tarball="$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")"

cache="${TOOLCELL_CI_CACHE:-$HOME/.cache/toolcell-ci}/npm-ai"
npmq=(--no-audit --no-fund --loglevel=error --cache "$cache/npm-cache")

t0=$SECONDS
step() { printf -- '--> %s (%ss)\n' "$*" "$((SECONDS - t0))"; }

# The package.json of a dir with the pins as dependencies.
manifest() {
    node -e '
const deps = {};
for (const spec of process.argv.slice(1)) { const at = spec.lastIndexOf("@"); deps[spec.slice(0, at)] = spec.slice(at + 1); }
console.log(JSON.stringify({ private: true, type: "module", dependencies: deps }, null, 2));
' "${AI_PINS[@]}"
}

# ---------------------------------------------------------------- cache
if [[ "$(cat "$cache/.stamp" 2>/dev/null)" != "${AI_PINS[*]}" ]]; then
    step "installing ${AI_PINS[*]} into $cache (once)"
    rm -rf "$cache"
    mkdir -p "$cache"
    manifest >"$cache/package.json"
    # With the registry URLs in the lock (whatever the user's npmrc says), the
    # installs below need no package metadata: --offline finds the tarballs.
    (cd "$cache" && npm install "${npmq[@]}" --omit-lockfile-registry-resolved=false >/dev/null)
    rm -rf "$cache/node_modules"   # the npm cache and the lock file are what is kept
    echo "${AI_PINS[*]}" >"$cache/.stamp"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/toolcell-ai.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The binary under test is the packaged one.
unset TOOLCELL
export XDG_DATA_HOME="$work/xdg/data" XDG_CACHE_HOME="$work/xdg/cache" XDG_CONFIG_HOME="$work/xdg/config"
mkdir -p "$XDG_DATA_HOME" "$XDG_CACHE_HOME" "$XDG_CONFIG_HOME"

step "temp dir with the package and ${AI_PINS[*]} (offline)"
mkdir -p "$work/node/test"
cp "$cache/package.json" "$cache/package-lock.json" "$work/node/"
# A copy of the npm cache: installing the tarball would add it to the cache.
cp -r "$cache/npm-cache" "$work/npm-cache"
(cd "$work/node" && npm install --offline --no-audit --no-fund --loglevel=error --cache "$work/npm-cache" "$tarball" >/dev/null)
cp "$here"/test-ai/* "$work/node/test/"
tsc="$work/node/node_modules/.bin/tsc"

# ---------------------------------------------------------------- 1
step "the base client without ai (node_modules/ai moved away)"
mv "$work/node/node_modules/ai" "$work/node/node_modules/.ai-away"
(cd "$work/node" && node --input-type=module -e '
import { Toolcell } from "toolcell";
const tc = new Toolcell();
const r = await tc.execute("print(6 * 7)");
await tc.close();
if (r.output !== "42\n") throw new Error("base client printed " + JSON.stringify(r.output));
let err;
try { await import("toolcell/ai"); } catch (e) { err = e; }
if (!err || !/\x27ai\x27/.test(String(err.message))) throw new Error("toolcell/ai without ai: " + (err ? err.message : "loaded"));
')
mv "$work/node/node_modules/.ai-away" "$work/node/node_modules/ai"

# ---------------------------------------------------------------- 2
step "types: an ESM and a CommonJS consumer of toolcell/ai"
mkdir -p "$work/node/types/esm" "$work/node/types/cjs" "$work/node/types/node10"
consumer='
import { toolcellTool, resultText } from "toolcell/ai";
import type { ToolcellTool, ToolcellToolOutput } from "toolcell/ai";
import { Toolcell } from "toolcell";
import { generateText, streamText, tool, jsonSchema, isStepCount } from "ai";
import type { LanguageModel } from "ai";
import { z } from "zod";
export async function demo(model: LanguageModel): Promise<string> {
  const tc = new Toolcell();
  const get_order = tool({ inputSchema: z.object({ id: z.string() }), execute: async ({ id }) => ({ id, total: 1 }) });
  const ping = tool({ inputSchema: jsonSchema<{ n: number }>({ type: "object", properties: { n: { type: "number" } } }), execute: async ({ n }) => n });
  const execute_code: ToolcellTool = await toolcellTool({ toolcell: tc, tools: { get_order, ping }, session: "s", timeout: 30 });
  const r = await generateText({ model, tools: { execute_code, get_order }, stopWhen: isStepCount(5), prompt: "hi" });
  const out: ToolcellToolOutput | undefined = r.steps[0]?.toolResults.find((t) => t.toolName === "execute_code")?.output as ToolcellToolOutput | undefined;
  const s = streamText({ model, tools: { execute_code }, prompt: "hi" });
  for await (const p of s.fullStream) if (p.type === "tool-result" && p.preliminary) void p.output;
  await execute_code.close();
  return (out?.result ? resultText(out.result) : "") + execute_code.session + r.text;
}
'
echo '{"type": "module"}' >"$work/node/types/esm/package.json"
echo '{"type": "commonjs"}' >"$work/node/types/cjs/package.json"
echo '{"type": "commonjs"}' >"$work/node/types/node10/package.json"
for d in esm cjs node10; do printf '%s' "$consumer" >"$work/node/types/$d/consumer.ts"; done
common=(--strict --noEmit --target es2022 --typeRoots "$work/node/node_modules/@types" --types node)
# One program: under nodenext each file is ESM or CommonJS by its package.json.
(cd "$work/node/types" && "$tsc" "${common[@]}" --module nodenext --moduleResolution nodenext esm/consumer.ts cjs/consumer.ts)
# node10 ignores "exports" (typesVersions maps toolcell/ai); ai's and zod's own
# declarations need esModuleInterop and skipLibCheck there.
(cd "$work/node/types/node10" && "$tsc" "${common[@]}" --module commonjs --moduleResolution node10 --esModuleInterop --skipLibCheck consumer.ts)

# ---------------------------------------------------------------- 3
step "examples/vercel_ai_agent.ts (tsc against the installed types, then node)"
cp "$root/examples/vercel_ai_agent.ts" "$work/node/"
(cd "$work/node" && "$tsc" --strict --skipLibCheck --target es2022 --module nodenext --moduleResolution nodenext \
    --typeRoots "$work/node/node_modules/@types" --types node vercel_ai_agent.ts)
expect="$(sed -n '2s,^// ci-expect: ,,p' "$root/examples/vercel_ai_agent.ts")"
out="$(cd "$work/node" && node vercel_ai_agent.js)"
[[ "$out" == "$expect" ]] || { echo "test-ai.sh: examples/vercel_ai_agent.ts printed: $out (expected: $expect)" >&2; exit 1; }
echo "    $out"

# ---------------------------------------------------------------- 4
step "node --test (npm/test-ai)"
cd "$work/node"
node --test test/
