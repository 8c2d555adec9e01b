"""Test and benchmark driver around the reference client.

Reads one JSON command per line on stdin, writes one JSON answer per line on
stdout, so a Rust test can steer a real Python client step by step.
"""

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import toolcell_rpc_client as rpc  # noqa: E402


def attempt(tool, args):
    try:
        return {"ok": True, "result": rpc.call(tool, **args)}
    except rpc.ToolError as e:
        return {"ok": False, "code": e.code, "error": str(e)}


threads = {}


def spawn(name, tool, args):
    gate = threading.Event()
    box = {}

    def run():
        gate.wait()
        box["answer"] = attempt(tool, args)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    threads[name] = (t, gate, box)
    return {"spawned": name}


def release(name):
    t, gate, box = threads.pop(name)
    gate.set()
    t.join()
    return box["answer"]


def parallel(nthreads, ncalls):
    """Each thread makes ncalls echo calls; checks every reply matches."""
    errors = []
    conns = set()
    lock = threading.Lock()

    def run(t):
        for n in range(ncalls):
            a = attempt("echo", {"t": t, "n": n})
            if not a["ok"] or a["result"]["args"] != {"t": t, "n": n}:
                with lock:
                    errors.append(a)
                return
        with lock:
            conns.add(id(rpc._local.conn[0]))

    ts = [threading.Thread(target=run, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"errors": errors[:3], "connections": len(conns)}


def fork_call():
    """Parent and forked child both call: the child must open its own connection."""
    first = attempt("echo", {"who": "parent-before"})
    pid = os.fork()
    if pid == 0:
        a = attempt("echo", {"who": "child"})
        os._exit(0 if a["ok"] and a["result"]["args"] == {"who": "child"} else 1)
    after = attempt("echo", {"who": "parent-after"})
    _, status = os.waitpid(pid, 0)
    return {"first": first, "after": after, "child_ok": os.WEXITSTATUS(status) == 0}


def interrupt_then_call(ms):
    """A call interrupted by KeyboardInterrupt while waiting for its reply,
    then another call: it must get its own reply, not the late one."""
    import signal

    def boom(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        attempt("sleep", {"ms": ms})
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGALRM, old)
    return {"interrupted": interrupted, "after": attempt("echo", {"after": True})}


def bench(n):
    """n echo calls; per-call latencies in ns."""
    attempt("echo", {})  # connect outside the timed region
    lat = []
    clock = time.perf_counter_ns
    call = rpc.call
    start = clock()
    for _ in range(n):
        t0 = clock()
        call("echo")
        lat.append(clock() - t0)
    total = clock() - start
    lat.sort()
    return {"n": n, "total_ns": total, "median_ns": lat[len(lat) // 2],
            "p99_ns": lat[min(len(lat) - 1, (len(lat) * 99) // 100)]}


def cached_usable():
    """Whether this (the main) thread's cached connection would be reused."""
    return {"usable": rpc._usable(getattr(rpc._local, "conn", None))}


def main():
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "exit":
            return
        if op == "call":
            out = attempt(cmd["tool"], cmd.get("args", {}))
        elif op == "spawn":
            out = spawn(cmd["name"], cmd["tool"], cmd.get("args", {}))
        elif op == "release":
            out = release(cmd["name"])
        elif op == "parallel":
            out = parallel(cmd["threads"], cmd["calls"])
        elif op == "fork_call":
            out = fork_call()
        elif op == "interrupt_then_call":
            out = interrupt_then_call(cmd["ms"])
        elif op == "cached_usable":
            out = cached_usable()
        elif op == "bench":
            out = bench(cmd["n"])
        else:
            out = {"driver_error": "unknown op %r" % op}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
