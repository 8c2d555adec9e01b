#!/usr/bin/env python3
"""Context economy: how many bytes a model reads for seven typical cells.

Each task is a cell an agent really writes (scan a log, train with progress
bars, install packages, dump a table, fetch a JSON API, run a test suite,
walk a tree) and a list of *facts*: strings the model needs, which must be
in what it reads. For each task this prints the size of the tool result the
model would read:

- `hermes`: the Hermes agent's `execute_code` (the harness toolcell's
  defaults come from), emulated: output read in text mode (a `\r` ends a
  line), ANSI sequences removed, stdout cut to 50 000 bytes (40% head, 60%
  tail), stderr to 10 000, returned as its JSON object with the truncation
  fields and spill warning;
- `toolcell fold=false|auto|true`: `toolcell exec --json` with that
  `[output] fold` (`"auto"` is the default).

and whether every fact survived. The totals line is what BENCHMARKS.md
quotes.

usage: benches/compare/context.py [--toolcell PATH] [--json]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TASKS = [
    (
        "log scan",
        r'''
import datetime
t0 = datetime.datetime(2026, 12, 1, 8, 0, 0)
errors = 0
for i in range(5000):
    ts = (t0 + datetime.timedelta(milliseconds=173 * i)).isoformat(timespec="milliseconds")
    if i in (1234, 3001, 4711):
        errors += 1
        print(f"{ts}Z ERROR payment-svc request {i:06d} failed: upstream timeout after 30s (order A-{i})")
    else:
        print(f"{ts}Z INFO payment-svc request {i:06d} ok in {i % 97}.{i % 10}ms user=u{i % 311}")
print(f"scanned 5000 lines, {errors} errors")
''',
        ["request 001234 failed", "request 003001 failed", "request 004711 failed", "scanned 5000 lines, 3 errors"],
    ),
    (
        "training with progress bars",
        r'''
import sys
for epoch in range(1, 6):
    for step in range(0, 501, 5):
        bar = "#" * (step // 25) + "." * (20 - step // 25)
        sys.stdout.write(f"\r\x1b[32mepoch {epoch}\x1b[0m [{bar}] {step}/500 loss={2.0 / (epoch + step / 500):.4f}")
        sys.stdout.flush()
    print(f"\nepoch {epoch} done: val_acc={0.70 + epoch * 0.05:.3f}")
print("best val_acc=0.950 at epoch 5")
''',
        ["epoch 5 done: val_acc=0.950", "best val_acc=0.950 at epoch 5"],
    ),
    (
        "package install log",
        r'''
pkgs = [f"pkg{i}-lib" for i in range(240)]
for p in pkgs:
    print(f"Collecting {p}==1.{len(p)}.0")
    print(f"  Downloading {p}-1.{len(p)}.0-py3-none-any.whl (1{len(p)}3 kB)")
    print(f"     \x1b[38;5;196m━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━\x1b[0m 1{len(p)}3.0/1{len(p)}3.0 kB \x1b[31m12.3 MB/s\x1b[0m eta \x1b[36m0:00:00\x1b[0m")
print("Installing collected packages: " + ", ".join(pkgs))
print("Successfully installed " + " ".join(f"{p}-1.{len(p)}.0" for p in pkgs))
''',
        ["Successfully installed pkg0-lib-1.8.0", "pkg239-lib-1.10.0"],
    ),
    (
        "table dump",
        r'''
rows = []
for i in range(3000):
    rows.append(f"{i:5d}  2026-11-{i % 30 + 1:02d}  customer-{i % 450:04d}  {((i * 37) % 1000) / 10:8.2f}  {'paid' if i % 7 else 'open'}")
print("   id  date        customer        amount  state")
print("\n".join(rows))
total = sum(((i * 37) % 1000) / 10 for i in range(3000))
print(f"[3000 rows x 5 columns] total amount: {total:.2f}")
''',
        ["[3000 rows x 5 columns] total amount: 149850.00", "2999  2026-11-30"],
    ),
    (
        "JSON API response",
        r'''
import json
items = [{"id": f"sku-{i:05d}", "price": round(3 + (i * 13 % 500) / 7, 2), "tags": ["a", "b", "c"][: i % 3 + 1]} for i in range(4000)]
print(json.dumps({"items": items, "next": None}, separators=(",", ":")))
cheap = [x["id"] for x in items if x["price"] < 3.2]
print(f"{len(items)} items; cheapest: {', '.join(cheap[:3])}")
''',
        ["4000 items; cheapest: sku-00000"],
    ),
    (
        "test suite run",
        r'''
import sys
for i in range(400):
    if i in (57, 311):
        print(f"tests/test_api.py::test_case_{i} FAILED")
    else:
        print(f"tests/test_api.py::test_case_{i} PASSED                         [{i * 100 // 400:3d}%]")
for i in (57, 311):
    print(f"___________________ test_case_{i} ___________________")
    print(f"    def test_case_{i}():")
    print(f">       assert compute({i}) == {i * 2}")
    print(f"E       assert {i * 2 + 1} == {i * 2}")
    print(f"tests/test_api.py:{i * 3}: AssertionError")
print("========== 2 failed, 398 passed in 12.34s ==========")
''',
        ["test_case_57 FAILED", "test_case_311 FAILED", "E       assert 623 == 622", "2 failed, 398 passed"],
    ),
    (
        "tree walk",
        r'''
paths = [f"src/module_{i // 100:02d}/file_{i:05d}.py" for i in range(8000)]
paths[6543] = "src/module_65/LEGACY_config.py"
for p in paths:
    print(p)
print(f"{len(paths)} files; legacy: {[p for p in paths if 'LEGACY' in p][0]}")
''',
        ["8000 files; legacy: src/module_65/LEGACY_config.py"],
    ),
]

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def hermes_view(stdout: str, stderr: str, status: str) -> str:
    """The tool result Hermes' execute_code returns for this output."""

    def clean(text: str) -> str:
        # Read in text mode (universal newlines: a `\r` became a line end),
        # ANSI sequences removed; no progress-bar collapsing.
        return ANSI.sub("", text)

    def cut(text: str, cap: int) -> tuple:
        raw = text.encode()
        if len(raw) <= cap:
            return text, False, len(raw)
        head, tail = cap * 40 // 100, cap - cap * 40 // 100
        notice = f"\n\n... [OUTPUT TRUNCATED - {len(raw) - cap} bytes omitted out of {len(raw)} total] ...\n\n"
        return raw[:head].decode(errors="replace") + notice + raw[-tail:].decode(errors="replace"), True, len(raw)

    out, truncated, total = cut(clean(stdout), 50_000)
    err, _, _ = cut(clean(stderr), 10_000)
    result = {"status": status, "output": out + (("\n--- stderr ---\n" + err) if err else ""), "tool_calls_made": 0,
              "duration_seconds": 0.1, "stdout_truncated": truncated,
              "stdout_bytes_captured": min(total, 50_000), "stdout_bytes_total": total,
              "stdout_bytes_omitted": max(0, total - 50_000)}
    if truncated:
        result["stdout_spill_path"] = "/home/user/.hermes/cache/exec/stdout-0123456789ab.txt"
        result["warning"] = ("execute_code stdout was truncated (head/tail shown); the script did run. FULL output "
                             "saved to /home/user/.hermes/cache/exec/stdout-0123456789ab.txt — page it with read_file("
                             "path=\"/home/user/.hermes/cache/exec/stdout-0123456789ab.txt\", offset=...) instead of re-running.")
    return json.dumps(result, ensure_ascii=False)


def toolcell_view(binary: str, code: str, fold: str, work: str) -> str:
    cfg = os.path.join(work, f"fold-{fold}.toml")
    with open(cfg, "w") as f:
        f.write(f"[output]\nfold = {fold if fold != 'auto' else json.dumps('auto')}\n[journal]\nenabled = false\n")
    out = subprocess.run([binary, "--config", cfg, "exec", "--json", "--cwd", work, code],
                         capture_output=True, text=True, timeout=300)
    r = json.loads(out.stdout)
    # What a model reads: the result object, without the kernel's bookkeeping.
    r.pop("kernel", None)
    r.pop("usage", None)
    return json.dumps(r, ensure_ascii=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toolcell", default=os.environ.get("TOOLCELL") or shutil.which("toolcell") or "toolcell")
    ap.add_argument("--json", action="store_true", help="one JSON line per task, then the totals")
    args = ap.parse_args()
    modes = ["hermes", "false", "auto", "true"]
    totals = {m: 0 for m in modes}
    kept = {m: 0 for m in modes}
    nfacts = 0
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))
        os.environ.update(env)
        rows = []
        for name, code, facts in TASKS:
            raw = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            views = {"hermes": hermes_view(raw.stdout, raw.stderr, "success" if raw.returncode == 0 else "error")}
            for fold in ("false", "auto", "true"):
                views[fold] = toolcell_view(args.toolcell, code, fold, work)
            row = {"task": name, "raw_bytes": len(raw.stdout.encode())}
            nfacts += len(facts)
            for m in modes:
                text = json.loads(views[m])["output"]
                have = sum(1 for f in facts if f in text)
                row[m] = {"bytes": len(views[m].encode()), "facts": f"{have}/{len(facts)}"}
                totals[m] += len(views[m].encode())
                kept[m] += have
            rows.append(row)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"totals": totals, "facts_kept": kept, "facts": nfacts}))
        return 0
    print(f"{'task':30} {'raw':>9} " + " ".join(f"{m if m == 'hermes' else 'fold=' + m:>16}" for m in modes))
    for row in rows:
        print(f"{row['task']:30} {row['raw_bytes']:>9} " +
              " ".join(f"{row[m]['bytes']:>10} ({row[m]['facts']})" for m in modes))
    print(f"{'total':30} {'':>9} " + " ".join(f"{totals[m]:>10} ({kept[m]}/{nfacts})" for m in modes))
    print("ratio to hermes:" + "".join(f"  fold={m}: {totals[m] / totals['hermes']:.2f}x" for m in modes[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
