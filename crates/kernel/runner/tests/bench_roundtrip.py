"""Warm-cell round trip through the runner: host writes execute, reads result.

    python3 crates/kernel/runner/tests/bench_roundtrip.py [cells] [code]

Starts a runner with the harness (exactly as the host does), warms it up,
then times N cells of ``x += 1`` (default 2000): from writing the execute
line on fd 3 to having the whole result frame from stdout (the ``end``
frame on stderr is drained too). Prints the median and percentiles, the
runner's own ``usage.wall_seconds`` median, and for scale a bare pipe round
trip to the same Python (a loop that reads a line and writes a line).

Also measures spawn-to-ready (Popen to the ready frame, kernel dir set up
included) against the same interpreter's own ``-u -c pass``, interleaved.

Not a test: timing figures depend on the machine and its load.
"""

import json
import os
import select
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def _pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))]


def bench_runner(n, code):
    k = harness.Kernel(readers=False)
    try:
        out_fd = k.proc.stdout.fileno()
        err_fd = k.proc.stderr.fileno()
        mark = b"\n" + k.sentinel.encode() + b" "
        poller = select.poll()
        poller.register(out_fd, select.POLLIN)
        poller.register(err_fd, select.POLLIN)
        buf = bytearray()
        times = []
        walls = []
        reqs = [
            (json.dumps({"type": "execute", "id": "%x" % (i + 1), "code": code if i else "x = 0"}) + "\n").encode()
            for i in range(n + 200)
        ]
        for i, req in enumerate(reqs):
            t0 = time.perf_counter()
            os.write(k.req_w, req)
            body = None
            while body is None:
                for fd, _ in poller.poll():
                    data = os.read(fd, 1 << 16)
                    if fd == out_fd:
                        buf += data
                j = buf.rfind(mark)
                if j >= 0:
                    nl = buf.find(b"\n", j + len(mark))
                    if nl >= 0:
                        length = int(buf[j + len(mark) : nl])
                        if len(buf) >= nl + 1 + length:
                            body = bytes(buf[nl + 1 : nl + 1 + length])
                            del buf[:]
            t1 = time.perf_counter()
            result = json.loads(body)
            assert result["status"] == "ok", result
            if i >= 200:  # warm-up excluded
                times.append(t1 - t0)
                walls.append(result["usage"]["wall_seconds"])
        return times, walls
    finally:
        k.close()


ECHO = "import os\nbuf = b''\nwhile True:\n    d = os.read(0, 65536)\n    if not d: break\n    os.write(1, b'ok\\n')\n"


def bench_bare_pipe(n):
    p = subprocess.Popen(
        [harness.test_python(), "-u", "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    times = []
    try:
        for i in range(n + 200):
            t0 = time.perf_counter()
            os.write(p.stdin.fileno(), b'{"type":"execute","id":"1","code":"x += 1"}\n')
            os.read(p.stdout.fileno(), 64)
            t1 = time.perf_counter()
            if i >= 200:
                times.append(t1 - t0)
    finally:
        p.stdin.close()
        p.wait()
    return times


def bench_startup(n=30):
    """Spawn-to-ready of the runner vs the interpreter's own `-u -c pass`, interleaved."""
    ready = []
    bare = []
    py = harness.test_python()
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([py, "-u", "-c", "pass"], stdin=subprocess.DEVNULL)
        bare.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        k = harness.Kernel(readers=False)
        ready.append(time.perf_counter() - t0)
        k.close()
    return ready, bare


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    code = sys.argv[2] if len(sys.argv) > 2 else "x += 1"
    times, walls = bench_runner(n, code)
    bare = bench_bare_pipe(n)
    us = 1e6
    print("python: %s" % harness.test_python())
    print("cells: %d of %r" % (n, code))
    print(
        "runner round trip: median %.1f us, p10 %.1f us, p90 %.1f us, p99 %.1f us"
        % (statistics.median(times) * us, _pct(times, 0.1) * us, _pct(times, 0.9) * us, _pct(times, 0.99) * us)
    )
    print(
        "runner usage.wall_seconds (request received -> result built): median %.1f us" % (statistics.median(walls) * us)
    )
    print("bare pipe round trip: median %.1f us" % (statistics.median(bare) * us))
    ready, plain = bench_startup()
    print(
        "spawn to ready: median %.1f ms (interpreter's own `-u -c pass`: median %.1f ms)"
        % (statistics.median(ready) * 1e3, statistics.median(plain) * 1e3)
    )


if __name__ == "__main__":
    main()
