#!/usr/bin/env python3
"""CPU per warm cell through `toolcell serve`, serve and kernel together.

Runs `perf stat` around `toolcell serve` (perf counts the whole process
tree: serve and its kernels), sends N warm `x += 1` cells one after another
from this process, closes stdin, and reads perf's totals. Two runs (N = 200
and N = 3200) are subtracted, so the start and the exit cancel out:

    scripts/serve-cpu.py target/release/toolcell            # journal on
    scripts/serve-cpu.py target/release/toolcell --no-journal

Prints task-clock and context switches per cell, and the wall time per cell
seen by the client. Needs `perf`.
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def run(binary, cells, journal):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ)
        for k in ("RUNTIME", "CACHE", "CONFIG", "DATA"):
            os.makedirs(os.path.join(d, k.lower()), exist_ok=True)
            env["XDG_%s_HOME" % k if k != "RUNTIME" else "XDG_RUNTIME_DIR"] = os.path.join(d, k.lower())
        conf = os.path.join(d, "toolcell.toml")
        with open(conf, "w") as f:
            f.write("[journal]\nenabled = %s\n" % ("true" if journal else "false"))
        out = os.path.join(d, "perf.txt")
        p = subprocess.Popen(
            ["perf", "stat", "-x", ",", "-o", out, "-e", "task-clock,context-switches", "--",
             binary, "--config", conf, "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=d,
        )

        def cell(i, code):
            p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": "execute",
                                      "params": {"code": code}}).encode() + b"\n")
            p.stdin.flush()
            reply = json.loads(p.stdout.readline())
            if reply.get("result", {}).get("status") != "success":
                raise SystemExit("cell failed: %r" % (reply,))

        cell(0, "x = 0")
        t0 = time.perf_counter()
        for i in range(cells):
            cell(i + 1, "x += 1")
        wall = (time.perf_counter() - t0) / cells
        p.stdin.close()
        p.wait()
        stats = {}
        with open(out) as f:
            for line in f:
                parts = line.strip().split(",")
                if len(parts) > 2 and parts[0] and parts[0][0].isdigit():
                    stats[parts[2]] = float(parts[0])
        return stats["task-clock"], stats["context-switches"], wall


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/toolcell"
    journal = "--no-journal" not in sys.argv
    lo_n, hi_n = 200, 3200
    lo = run(binary, lo_n, journal)
    hi = run(binary, hi_n, journal)
    n = hi_n - lo_n
    print("journal %s: %.1f µs CPU per cell, %.2f context switches per cell, %.0f µs wall per cell (client)"
          % ("on" if journal else "off", (hi[0] - lo[0]) * 1000.0 / n, (hi[1] - lo[1]) / n, hi[2] * 1e6))


if __name__ == "__main__":
    main()
