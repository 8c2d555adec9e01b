#!/usr/bin/env python3
"""A/B of two `toolcell` builds on the hot paths: warm cells, tool calls,
many sessions at once, through `toolcell serve` from a client process.

    scripts/wakeups-ab.py BASE NEW [--rounds N] [--cells N] [--load] [--only warm,tool,scale]

BASE and NEW are `toolcell` binaries (e.g. today's main built into another
target directory, and this checkout's target/release/toolcell). Each round
runs every part once per binary, alternating which goes first, so both see
the same machine. `--load` keeps two busy loops running meanwhile (a loaded
machine: no idle vCPU to wake). Per binary it prints the median over rounds
of each figure, and NEW / BASE:

- warm: `x += 1` cells one after another (after a warm-up): the client's
  round trip, median and p99, and the CPU time of serve and its kernel
  together per cell (from /proc/<pid>/task/*/schedstat of serve and every
  descendant, read before and after), with their context switches.
- tool: a cell making 100 `read_file` calls against one making none; per
  call = (median difference) / 100, and CPU per call the same way.
- scale: 64 sessions x 200 cells at once, closed loop (a session's next
  cell is sent when its last answer arrives); throughput and cells lost.

Every figure is from the same, isolated configuration (journal on, as the
default), in throwaway XDG directories. Cold starts have their own script:
scripts/cold-start.py BASE NEW.
"""
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args(argv):
    opts = {"rounds": 3, "cells": 3000, "load": False, "only": {"warm", "tool", "scale"}}
    bins = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--rounds", "--cells"):
            opts[a[2:]] = int(argv[i + 1])
            i += 2
        elif a == "--load":
            opts["load"] = True
            i += 1
        elif a == "--only":
            opts["only"] = set(argv[i + 1].split(","))
            i += 2
        else:
            bins.append(a)
            i += 1
    if len(bins) != 2:
        sys.exit(__doc__)
    return bins, opts


def children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(pid):
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_of(pids):
    """(ns on CPU, context switches) of every thread of `pids`."""
    ns = switches = 0
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    ns += int(f.read().split()[0])
                with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                    for line in f:
                        if "ctxt_switches" in line:  # voluntary and not
                            switches += int(line.split()[-1])
            except (OSError, ValueError, IndexError):
                continue
    return ns, switches


class Serve:
    def __init__(self, binary, max_kernels=8):
        self.dir = tempfile.TemporaryDirectory(prefix="toolcell-ab-")
        d = self.dir.name
        env = dict(os.environ)
        for k in ("run", "cache", "config", "data"):
            os.makedirs(os.path.join(d, k))
        env.update(
            XDG_RUNTIME_DIR=os.path.join(d, "run"),
            XDG_CACHE_HOME=os.path.join(d, "cache"),
            XDG_CONFIG_HOME=os.path.join(d, "config"),
            XDG_DATA_HOME=os.path.join(d, "data"),
        )
        with open(os.path.join(d, "f.txt"), "w") as f:
            f.write("hello\n")
        conf = os.path.join(d, "toolcell.toml")
        with open(conf, "w") as f:
            f.write("[execution]\nmax_tool_calls = 1000\n\n[kernels]\nmax_kernels = %d\nwarm_pool = 0\n" % max_kernels)
        self.p = subprocess.Popen(
            [binary, "--config", conf, "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, cwd=d, bufsize=0,
        )
        # Replies are read through a buffer, as any real client does: an
        # unbuffered `readline` makes one read(2) per byte (~470 per reply,
        # ~160 us of the client's CPU per cell), which the first A/Bs of
        # issue 38 measured as part of every round trip.
        self.out = io.BufferedReader(self.p.stdout, 1 << 16)
        self.next_id = 0

    def send(self, code, session=None):
        self.next_id += 1
        params = {"code": code}
        if session is not None:
            params["session"] = session
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": "execute",
                                       "params": params}).encode() + b"\n")
        return self.next_id

    def recv(self):
        line = self.out.readline()
        if not line:
            raise SystemExit("serve ended early")
        return json.loads(line)

    def cell(self, code):
        self.send(code)
        r = self.recv()
        if r.get("result", {}).get("status") != "success":
            raise SystemExit("cell failed: %r" % (r,))
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        self.dir.cleanup()


def warm(binary, cells):
    s = Serve(binary)
    try:
        s.cell("x = 0")
        for _ in range(300):
            s.cell("x += 1")
        pids = tree(s.p.pid)
        c0 = cpu_of(pids)
        lat = []
        for _ in range(cells):
            t = time.perf_counter()
            s.cell("x += 1")
            lat.append(time.perf_counter() - t)
        c1 = cpu_of(pids)
    finally:
        s.close()
    lat.sort()
    return {
        "median_us": statistics.median(lat) * 1e6,
        "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
        "cpu_us": (c1[0] - c0[0]) / 1e3 / cells,
        "switches": (c1[1] - c0[1]) / cells,
    }


def tool(binary, reps=40):
    s = Serve(binary)
    calls = "for _ in range(100): read_file('f.txt')"
    empty = "for _ in range(100): pass"
    try:
        for _ in range(5):
            s.cell(calls)
            s.cell(empty)
        pids = tree(s.p.pid)
        with_calls, without = [], []
        cpu_with = cpu_without = 0
        sw_with = sw_without = 0
        for _ in range(reps):
            for code, times in ((calls, with_calls), (empty, without)):
                c0 = cpu_of(pids)
                t = time.perf_counter()
                s.cell(code)
                times.append(time.perf_counter() - t)
                c1 = cpu_of(pids)
                if times is with_calls:
                    cpu_with += c1[0] - c0[0]
                    sw_with += c1[1] - c0[1]
                else:
                    cpu_without += c1[0] - c0[0]
                    sw_without += c1[1] - c0[1]
    finally:
        s.close()
    return {
        "call_us": (statistics.median(with_calls) - statistics.median(without)) * 1e6 / 100,
        "call_cpu_us": (cpu_with - cpu_without) / 1e3 / reps / 100,
        "call_switches": (sw_with - sw_without) / reps / 100,
    }


def scale(binary, sessions=64, cells=200):
    s = Serve(binary, max_kernels=sessions)
    try:
        # Start every kernel first: the figure is warm throughput.
        ids = {}
        for k in range(sessions):
            ids[s.send("x = 0", "s%d" % k)] = k
        for _ in range(sessions):
            r = s.recv()
            if r.get("result", {}).get("status") != "success":
                raise SystemExit("session start failed: %r" % (r,))
        done = [0] * sessions
        ok = 0
        ids = {}
        t = time.perf_counter()
        for k in range(sessions):
            ids[s.send("x += 1", "s%d" % k)] = k
        while ids:
            r = s.recv()
            k = ids.pop(r.get("id"))
            if r.get("result", {}).get("status") == "success":
                ok += 1
            done[k] += 1
            if done[k] < cells:
                ids[s.send("x += 1", "s%d" % k)] = k
        wall = time.perf_counter() - t
    finally:
        s.close()
    return {"cells_per_s": sessions * cells / wall, "lost": sessions * cells - ok}


def main():
    bins, opts = parse_args(sys.argv[1:])
    load = []
    if opts["load"]:
        load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    runs = {b: [] for b in bins}
    try:
        for r in range(opts["rounds"]):
            order = bins if r % 2 == 0 else bins[::-1]
            for b in order:
                fig = {}
                if "warm" in opts["only"]:
                    fig.update(warm(b, opts["cells"]))
                if "tool" in opts["only"]:
                    fig.update(tool(b))
                if "scale" in opts["only"]:
                    fig.update(scale(b))
                runs[b].append(fig)
                print("round %d %s: %s" % (r + 1, b, json.dumps({k: round(v, 2) for k, v in fig.items()})),
                      flush=True)
    finally:
        for p in load:
            p.kill()
    base, new = bins
    print("\n%s machine, %d rounds, medians (NEW / BASE):" % ("loaded (2 busy loops)" if load else "quiet",
                                                              opts["rounds"]))
    for key in runs[base][0]:
        a = statistics.median(f[key] for f in runs[base])
        b = statistics.median(f[key] for f in runs[new])
        ratio = b / a if a else float("nan")
        print("  %-14s base %10.2f  new %10.2f  ratio %.2f" % (key, a, b, ratio))


if __name__ == "__main__":
    main()
