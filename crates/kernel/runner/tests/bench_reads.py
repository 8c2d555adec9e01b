"""What observing reads (files.read: the runner's audit hook) costs.

    git show REV:crates/kernel/runner/runner.py > /tmp/runner_before.py
    python3 crates/kernel/runner/tests/bench_reads.py /tmp/runner_before.py [rounds]

Runs the warm-cell round trip of bench_roundtrip.py (3,000 cells of
``x += 1`` per round) against the runner given (one without the hook) and
the current one, alternately, and prints both medians and their ratio, with
the runner's own wall time per cell; then a cell that opens 100,000 times
among 2,000 files, under each runner.

Not a test: timing figures depend on the machine and its load.
"""

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_roundtrip  # noqa: E402
import harness  # noqa: E402

OPENS = """
t = time.perf_counter()
for i in range(100000):
    open(os.path.join(d, 'f%d' % (i % 2000))).close()
print(round(time.perf_counter() - t, 3))
"""


def main():
    before = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    runners = (("before", before), ("now", harness.RUNNER))
    trip = {name: [] for name, _ in runners}
    wall = {name: [] for name, _ in runners}
    for _ in range(rounds):
        for name, path in runners:
            harness.RUNNER = path
            t, w = bench_roundtrip.bench_runner(3000, "x += 1")
            trip[name].append(statistics.median(t))
            wall[name].append(statistics.median(w))
    for name, _ in runners:
        print(
            "%-6s warm cell round trip: median of round medians %.1f us (min %.1f); runner wall %.2f us"
            % (
                name,
                statistics.median(trip[name]) * 1e6,
                min(trip[name]) * 1e6,
                statistics.median(wall[name]) * 1e6,
            )
        )
    print(
        "now/before: round trip %.3f, runner wall %.3f"
        % (
            statistics.median(trip["now"]) / statistics.median(trip["before"]),
            statistics.median(wall["now"]) / statistics.median(wall["before"]),
        )
    )
    for name, path in runners:
        harness.RUNNER = path
        k = harness.Kernel()
        try:
            k.execute(
                "import os, tempfile, time\nd = tempfile.mkdtemp()\n"
                "for i in range(2000): open(os.path.join(d, 'f%d' % i), 'w').close()"
            )
            c = k.execute(OPENS)
            read = c.result.get("read")
            print(
                "%-6s 100,000 opens of 2,000 files: %s s; read: %s"
                % (name, c.out.strip(), "total %d" % read["total"] if read else "not observed")
            )
        finally:
            k.close()


if __name__ == "__main__":
    main()
