#!/usr/bin/env bash
# Builds the npm package `toolcell` (a tarball) from this directory:
# TypeScript compiled to ESM (dist/esm) and CommonJS (dist/cjs) with .d.ts,
# plus the toolcell binary in bin/. The version is the workspace version
# ([workspace.package] in the top-level Cargo.toml).
#
# usage: npm/scripts/build.sh --binary PATH [--out DIR] [--os OS] [--cpu CPU]
#
#   --binary PATH  the toolcell binary to ship (e.g. target/release/toolcell,
#                  or target/x86_64-unknown-linux-gnu/release/toolcell)
#   --out DIR      where the .tgz goes (default: npm/build)
#   --os, --cpu    the package's "os" and "cpu" fields (default linux, x64).
#                  For another target, build the binary for it first, e.g.
#                    cargo build --release -p toolcell-cli --target aarch64-unknown-linux-gnu
#                    npm/scripts/build.sh --cpu arm64 \
#                        --binary target/aarch64-unknown-linux-gnu/release/toolcell
#
# Needs node and npm; installs the build's devDependencies (typescript,
# @types/node) from package-lock.json into npm/node_modules when missing.
# Prints the tarball's path as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
binary="" out="$here/build" os="linux" cpu="x64"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --os) os="$2"; shift 2 ;;
        --cpu) cpu="$2"; shift 2 ;;
        *) echo "build.sh: unknown argument $1 (see the usage at the top of this script)" >&2; exit 2 ;;
    esac
done
[[ -n "$binary" && -x "$binary" ]] || { echo "build.sh: --binary must name an executable toolcell binary" >&2; exit 2; }

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
[[ -n "$version" ]] || { echo "build.sh: no [workspace.package] version in $root/Cargo.toml" >&2; exit 1; }

cd "$here"
# devDependencies: reinstall only when the lock file changed.
stamp="node_modules/.toolcell-lock"
if [[ ! -f "$stamp" ]] || ! cmp -s package-lock.json "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error >&2
    cp package-lock.json "$stamp"
fi

rm -rf build/dist build/stage
node_modules/.bin/tsc -p tsconfig.esm.json
node_modules/.bin/tsc -p tsconfig.cjs.json
# dist/esm/here.js: the ESM form of src/here.ts (no __dirname in modules).
cat > build/dist/esm/here.js <<'JS'
import { dirname } from "path";
import { fileURLToPath } from "url";
export const here = dirname(fileURLToPath(import.meta.url));
JS
echo '{"type": "module"}' > build/dist/esm/package.json
echo '{"type": "commonjs"}' > build/dist/cjs/package.json

stage="build/stage"
mkdir -p "$stage/bin" "$out"
cp -r build/dist "$stage/dist"
cp README.md "$stage/README.md"
cp "$binary" "$stage/bin/toolcell"
chmod 755 "$stage/bin/toolcell"
node -e '
const fs = require("fs");
const [src, dst, version, os, cpu] = process.argv.slice(1);
const pkg = JSON.parse(fs.readFileSync(src, "utf8"));
pkg.version = version; pkg.os = [os]; pkg.cpu = [cpu];
delete pkg.devDependencies; delete pkg.scripts;
fs.writeFileSync(dst, JSON.stringify(pkg, null, 2) + "\n");
' package.json "$stage/package.json" "$version" "$os" "$cpu"
tarball="$(cd "$stage" && npm pack --silent --pack-destination "$out")"
echo "$out/$tarball"
