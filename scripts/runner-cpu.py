#!/usr/bin/env python3
"""CPU and context switches per warm cell of the Python runner alone.

    scripts/runner-cpu.py [path/to/runner.py] [cells]

Starts the runner through its test harness (exactly as the host does),
runs 200 warm-up cells, then N `x += 1` cells (default 3000), and reads the
runner's threads' CPU (`/proc/<pid>/task/*/schedstat`) and context switches
(`/proc/<pid>/task/*/status`) before and after. Compare two runners A/B in
the same minute: the figures move with the machine's load.
"""
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "crates", "kernel", "runner", "tests"))
import harness  # noqa: E402

if len(sys.argv) > 1:
    harness.RUNNER = os.path.abspath(sys.argv[1])
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3000


def cpu(pid):
    ns = 0
    switches = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        with open(f) as fh:
            ns += int(fh.read().split()[0])
    for f in glob.glob("/proc/%d/task/*/status" % pid):
        with open(f) as fh:
            for line in fh:
                if "ctxt_switches" in line:
                    switches += int(line.split()[1])
    return ns, switches


k = harness.Kernel()
try:
    k.execute("x = 0")
    for _ in range(200):
        k.execute("x += 1")
    c0, s0 = cpu(k.proc.pid)
    t0 = time.perf_counter()
    for _ in range(N):
        k.execute("x += 1")
    c1, s1 = cpu(k.proc.pid)
    t1 = time.perf_counter()
finally:
    k.close()
print("%s: runner CPU %.1f µs/cell, %.2f context switches/cell, round trip %.1f µs/cell (harness)"
      % (harness.RUNNER, (c1 - c0) / N / 1000, (s1 - s0) / N, (t1 - t0) / N * 1e6))
