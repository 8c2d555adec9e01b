#!/usr/bin/env python3
"""Cold starts against the interpreter's own start.

    scripts/cold-start.py target/release/toolcell [other/toolcell ...] [--runs N]

For each binary: a fresh `toolcell serve`'s first cell (the time from
starting the process to the first answer, with the warm pool on and off),
and a one-shot `toolcell exec pass`; beside them `python -c pass` of the
real interpreter (median of N runs, alternating, default 15). The probe
and runner caches live in a directory kept across runs, as on a user's
machine; the first run of each binary fills them and is not counted.
Compare binaries A/B in one call: the figures move with the machine's load.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

args = sys.argv[1:]
runs = 15
if "--runs" in args:
    i = args.index("--runs")
    runs = int(args[i + 1])
    del args[i : i + 2]
bins = args
if not bins:
    sys.exit(__doc__)
keep = tempfile.mkdtemp(prefix="toolcell-cold-")
python = subprocess.run(
    ["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
).stdout.strip()


def env_for(d):
    return dict(
        os.environ,
        XDG_CACHE_HOME=os.path.join(keep, "cache"),
        XDG_DATA_HOME=os.path.join(keep, "data"),
        XDG_RUNTIME_DIR=d,
        XDG_CONFIG_HOME=d,
    )


def serve_first(binary, pool):
    d = tempfile.mkdtemp(prefix="toolcell-cold-run-")
    conf = os.path.join(d, "toolcell.toml")
    with open(conf, "w") as f:
        f.write("" if pool is None else "[kernels]\nwarm_pool = %d\n" % pool)
    t = time.perf_counter()
    p = subprocess.Popen(
        [binary, "--config", conf, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env_for(d), cwd=d
    )
    p.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"execute","params":{"code":"1"}}\n')
    p.stdin.flush()
    line = p.stdout.readline()
    took = time.perf_counter() - t
    if b'"success"' not in line:
        sys.exit("unexpected answer: %r" % line)
    p.stdin.close()
    p.wait()
    return took


def timed(cmd, d):
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env_for(d), cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit("%s failed" % cmd)
    return time.perf_counter() - t


work = tempfile.mkdtemp(prefix="toolcell-cold-exec-")
for b in bins:
    serve_first(b, None)
    timed([b, "exec", "pass"], work)
res = {"python -c pass": []}
for _ in range(runs):
    res["python -c pass"].append(timed([python, "-c", "pass"], work))
    for b in bins:
        name = os.path.basename(os.path.dirname(os.path.abspath(b))) + "/" + os.path.basename(b)
        for pool in (None, 0):
            key = "%s serve first cell, pool %s" % (name, "auto" if pool is None else "off")
            res.setdefault(key, []).append(serve_first(b, pool))
        res.setdefault("%s exec pass" % name, []).append(timed([b, "exec", "pass"], work))
base = statistics.median(res["python -c pass"])
print("python: %s; load average %s" % (python, " ".join("%.2f" % x for x in os.getloadavg())))
for k, v in res.items():
    m = statistics.median(v)
    print("%-56s median %6.1f ms  (%.2fx python -c pass)" % (k, m * 1e3, m / base))
