#!/usr/bin/env python3
"""Side-by-side benchmark: toolcell vs Jupyter (jupyter_client + ipykernel).

Measures the same workloads, in the same run, through

  (a) toolcell: one long-lived `toolcell serve` process driven over stdio with
      JSON-RPC 2.0 (docs/serve.md) by the small client class below, and
  (b) Jupyter: `jupyter_client.KernelManager` + a blocking kernel client
      talking to an `ipykernel` kernel over ZeroMQ,

and prints one row per workload with the median and p90 of each side and the
ratio jupyter/toolcell of the medians (> 1 means toolcell is faster).

Workloads (a cell is "done" when its result is in hand: toolcell's `execute`
response; for Jupyter the `execute_reply` on shell *and* the `idle` status on
iopub, i.e. every output message of the cell has been received):

  kernel_start   a never-used session: toolcell times `execute` of `pass` on a
                 new session name (that spawns the kernel); Jupyter times
                 start_kernel() + wait_for_ready() + the first execute. Each
                 kernel is shut down afterwards, untimed.
  exec_oneshot   toolcell only: a whole `toolcell exec 'pass'` process
                 (host start, kernel spawn, cell, teardown).
  warm_cell      `x = 1` in an already-used session/kernel, after a warmup.
  print_10mb     `for _ in range(100000): print("y" * 99)` (10,000,000 bytes).
                 toolcell drains and cleans everything but returns at most
                 max_stdout_bytes (the rest is counted, and spilled to a file);
                 the Jupyter client receives every iopub stream message.
  interrupt      `print("go"); time.sleep(60)`; once "go" has arrived (a live
                 `cell/output` notification / an iopub stream message), send
                 the interrupt (toolcell: an `interrupt` request on the same
                 serve; Jupyter: KernelManager.interrupt_kernel()) and time
                 until the cell's result arrives.

Both sides run the same interpreter (--python; the default is the python
running this script), so ipykernel and toolcell's runner load the same
CPython. They still differ in what the kernel imports: ipykernel imports
IPython, zmq, tornado, etc.; toolcell's runner is stdlib-only.

Usage:
  jupyter.py [--toolcell PATH] [--python PATH] [--quick] [--json]
             [--toolcell-only] [--n-start N] [--n-warm N] ...

Python 3.8+, stdlib only for the toolcell half (--toolcell-only needs no
Jupyter packages). scripts/bench-compare.sh sets up a venv and runs this.
"""

import argparse
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import tempfile
import time

TEN_MB_CELL = 'for _ in range(100000): print("y" * 99)'
TEN_MB_BYTES = 100000 * 100
INTERRUPT_CELL = 'import time\nprint("go", flush=True)\ntime.sleep(60)'
WARM_CELL = "x = 1"


class BenchError(Exception):
    """A workload did not behave as expected (wrong status, lost output...)."""


# --------------------------------------------------------------------------
# statistics and formatting


def percentile(samples, q):
    """Percentile of a non-empty list, linear between closest ranks."""
    s = sorted(samples)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(samples):
    if not samples:
        return None
    return {
        "n": len(samples),
        "median_s": percentile(samples, 0.5),
        "p90_s": percentile(samples, 0.9),
        "min_s": min(samples),
        "max_s": max(samples),
    }


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return "%.0f us" % (seconds * 1e6)
    if seconds < 1.0:
        return "%.2f ms" % (seconds * 1e3)
    return "%.3f s" % seconds


# --------------------------------------------------------------------------
# toolcell side


class ServeClient:
    """Drives one `toolcell serve` over its stdin/stdout (docs/serve.md).

    Single-threaded: requests are written as one JSON line each; `wait(id)`
    reads response lines until the one with that id arrives, keeping
    responses for other ids and `cell/output` notifications aside, since
    serve answers requests for different sessions concurrently and out of
    order.
    """

    def __init__(self, argv, cwd, stderr_path):
        self._stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=0,
        )
        self._fd = self.proc.stdout.fileno()
        self._buf = bytearray()
        self._next_id = 0
        self._responses = {}
        self.notifications = []

    def send(self, method, params=None):
        self._next_id += 1
        msg = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        return self._next_id

    def _read_message(self, deadline):
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                if line.strip():
                    return json.loads(line)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError("toolcell serve: no response in time")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                raise BenchError(
                    "toolcell serve exited (code %s); see its stderr"
                    % self.proc.poll()
                )
            self._buf += chunk

    def _dispatch(self, msg):
        if "id" in msg and msg.get("id") is not None:
            self._responses[msg["id"]] = msg
        else:
            self.notifications.append(msg)

    def wait(self, req_id, timeout=120.0):
        """The response to request `req_id`: its `result`, or BenchError."""
        deadline = time.monotonic() + timeout
        while req_id not in self._responses:
            self._dispatch(self._read_message(deadline))
        msg = self._responses.pop(req_id)
        if "error" in msg:
            raise BenchError("toolcell serve error: %r" % (msg["error"],))
        return msg["result"]

    def wait_notification(self, pred, timeout=30.0):
        """Reads until a notification satisfying `pred` arrives."""
        deadline = time.monotonic() + timeout
        while True:
            for i, n in enumerate(self.notifications):
                if pred(n):
                    del self.notifications[i]
                    return n
            self._dispatch(self._read_message(deadline))

    def call(self, method, params=None, timeout=120.0):
        return self.wait(self.send(method, params), timeout)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def expect_status(result, status, what):
    if result.get("status") != status:
        raise BenchError(
            "%s: expected status %r, got %r: %s"
            % (what, status, result.get("status"), json.dumps(result)[:500])
        )


class ToolcellSide:
    def __init__(self, binary, python, workdir):
        self.binary = binary
        self.python = python
        self.workdir = workdir
        self.config = os.path.join(workdir, "toolcell.toml")
        spill = os.path.join(workdir, "spill")
        os.makedirs(spill, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(
                "[execution]\npython = %s\n\n[output]\nspill_dir = %s\n"
                % (json.dumps(python), json.dumps(spill))
            )
        self.client = ServeClient(
            [binary, "serve", "--config", self.config],
            cwd=workdir,
            stderr_path=os.path.join(workdir, "serve.stderr"),
        )
        self._fresh = 0

    def close(self):
        self.client.close()

    def fresh_session(self):
        self._fresh += 1
        return "bench-start-%d" % self._fresh

    def interpreter(self):
        r = self.client.call(
            "execute",
            {"code": "import sys; print(sys.executable)", "session": "probe"},
        )
        expect_status(r, "success", "interpreter probe")
        self.client.call("shutdown_session", {"session": "probe"})
        return r["output"].strip()

    def kernel_start(self):
        session = self.fresh_session()
        t0 = time.perf_counter()
        r = self.client.call("execute", {"code": "pass", "session": session})
        dt = time.perf_counter() - t0
        expect_status(r, "success", "kernel start")
        if r["kernel"]["reused"]:
            raise BenchError("kernel start: session %s was not new" % session)
        self.client.call("shutdown_session", {"session": session})
        return dt

    def exec_oneshot(self):
        argv = [self.binary, "exec", "--config", self.config, "pass"]
        t0 = time.perf_counter()
        p = subprocess.run(
            argv,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise BenchError(
                "toolcell exec 'pass' exited %d: %s"
                % (p.returncode, p.stderr.decode(errors="replace")[:500])
            )
        return dt

    def warm_cell(self, n, warmup):
        session = "bench-warm"
        for _ in range(warmup):
            expect_status(
                self.client.call("execute", {"code": WARM_CELL, "session": session}),
                "success",
                "warm cell",
            )
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = self.client.call("execute", {"code": WARM_CELL, "session": session})
            samples.append(time.perf_counter() - t0)
            expect_status(r, "success", "warm cell")
        self.client.call("shutdown_session", {"session": session})
        return samples

    def print_10mb(self, n):
        session = "bench-print"
        expect_status(
            self.client.call("execute", {"code": "pass", "session": session}),
            "success",
            "print 10 MB warmup",
        )
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = self.client.call("execute", {"code": TEN_MB_CELL, "session": session})
            samples.append(time.perf_counter() - t0)
            expect_status(r, "success", "print 10 MB")
            if r.get("stdout_bytes_total") != TEN_MB_BYTES:
                raise BenchError(
                    "print 10 MB: stdout_bytes_total %r, expected %d"
                    % (r.get("stdout_bytes_total"), TEN_MB_BYTES)
                )
        self.client.call("shutdown_session", {"session": session})
        return samples

    def interrupt(self, n):
        session = "bench-interrupt"
        expect_status(
            self.client.call("execute", {"code": "pass", "session": session}),
            "success",
            "interrupt warmup",
        )
        samples = []
        for _ in range(n):
            self.client.notifications.clear()
            req = self.client.send(
                "execute",
                {"code": INTERRUPT_CELL, "session": session, "stream": True},
            )
            self.client.wait_notification(
                lambda m: m.get("method") == "cell/output"
                and m.get("params", {}).get("session") == session
                and "go" in m.get("params", {}).get("chunk", "")
            )
            t0 = time.perf_counter()
            ireq = self.client.send("interrupt", {"session": session})
            r = self.client.wait(req, timeout=30)
            samples.append(time.perf_counter() - t0)
            self.client.wait(ireq)
            expect_status(r, "interrupted", "interrupt")
            if not r["kernel"].get("state_kept"):
                raise BenchError("interrupt: the kernel did not survive: %r" % r)
        self.client.call("shutdown_session", {"session": session})
        return samples


# --------------------------------------------------------------------------
# Jupyter side


class JupyterSide:
    def __init__(self, python, workdir):
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager

        import jupyter_client

        self.KernelManager = KernelManager
        self.workdir = workdir
        # A kernelspec of our own, so ipykernel runs exactly `python` (the
        # same interpreter toolcell's kernels run), whatever else is installed.
        specdir = os.path.join(workdir, "kernels", "bench")
        os.makedirs(specdir, exist_ok=True)
        with open(os.path.join(specdir, "kernel.json"), "w") as f:
            json.dump(
                {
                    "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "bench",
                    "language": "python",
                },
                f,
            )
        self.ksm = KernelSpecManager(kernel_dirs=[os.path.join(workdir, "kernels")])
        # ipykernel must be importable by `python`, which runs the kernels
        # (jupyter_client only by the python running this script).
        probe = subprocess.run(
            [python, "-c", "import ipykernel, IPython; print(ipykernel.__version__, IPython.__version__)"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
        )
        if probe.returncode != 0:
            raise ImportError("ipykernel is not importable by %s: %s" % (python, probe.stderr.strip()[-300:]))
        ipk, ipy = probe.stdout.split()
        self.versions = {"jupyter_client": jupyter_client.__version__, "ipykernel": ipk, "ipython": ipy}

    def start(self):
        km = self.KernelManager(kernel_name="bench", kernel_spec_manager=self.ksm)
        # The kernel's own stderr (debugger warnings etc.) would clutter the
        # table; it is not part of what a client receives.
        km.start_kernel(cwd=self.workdir, stderr=subprocess.DEVNULL)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        return km, kc

    @staticmethod
    def stop(km, kc):
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    @staticmethod
    def run_cell(kc, code, on_iopub=None, timeout=120.0):
        """Executes `code`; returns the execute_reply content once the reply
        has arrived and iopub has reported `idle` for this request (every
        output message received). `on_iopub(msg)` sees each iopub message of
        the request."""
        msg_id = kc.execute(code)
        deadline = time.monotonic() + timeout
        reply = None
        idle = False
        while not idle:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError("jupyter: cell did not finish in time")
            msg = kc.get_iopub_msg(timeout=remaining)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if on_iopub is not None:
                on_iopub(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
        while reply is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BenchError("jupyter: no execute_reply in time")
            msg = kc.get_shell_msg(timeout=remaining)
            if msg["parent_header"].get("msg_id") == msg_id:
                reply = msg["content"]
        return reply

    def interpreter(self):
        km, kc = self.start()
        try:
            out = []

            def grab(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])

            self.run_cell(kc, "import sys; print(sys.executable)", grab)
            return "".join(out).strip()
        finally:
            self.stop(km, kc)

    def kernel_start(self):
        t0 = time.perf_counter()
        km, kc = self.start()
        reply = self.run_cell(kc, "pass")
        dt = time.perf_counter() - t0
        self.stop(km, kc)
        if reply["status"] != "ok":
            raise BenchError("jupyter kernel start: reply %r" % reply)
        return dt

    def warm_cell(self, n, warmup):
        km, kc = self.start()
        try:
            for _ in range(warmup):
                self.run_cell(kc, WARM_CELL)
            samples = []
            for _ in range(n):
                t0 = time.perf_counter()
                reply = self.run_cell(kc, WARM_CELL)
                samples.append(time.perf_counter() - t0)
                if reply["status"] != "ok":
                    raise BenchError("jupyter warm cell: reply %r" % reply)
            return samples
        finally:
            self.stop(km, kc)

    def print_10mb(self, n):
        km, kc = self.start()
        try:
            self.run_cell(kc, "pass")
            samples = []
            for _ in range(n):
                got = [0]

                def count(msg):
                    if msg["msg_type"] == "stream":
                        got[0] += len(msg["content"]["text"].encode())

                t0 = time.perf_counter()
                reply = self.run_cell(kc, TEN_MB_CELL, count)
                samples.append(time.perf_counter() - t0)
                if reply["status"] != "ok" or got[0] != TEN_MB_BYTES:
                    raise BenchError(
                        "jupyter print 10 MB: status %s, %d bytes received"
                        % (reply["status"], got[0])
                    )
            return samples
        finally:
            self.stop(km, kc)

    def interrupt(self, n):
        km, kc = self.start()
        try:
            self.run_cell(kc, "pass")
            samples = []
            for _ in range(n):
                msg_id = kc.execute(INTERRUPT_CELL)
                deadline = time.monotonic() + 30
                while True:
                    msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                    if (
                        msg["parent_header"].get("msg_id") == msg_id
                        and msg["msg_type"] == "stream"
                        and "go" in msg["content"]["text"]
                    ):
                        break
                t0 = time.perf_counter()
                km.interrupt_kernel()
                idle = False
                reply = None
                while not idle:
                    msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                    if (
                        msg["parent_header"].get("msg_id") == msg_id
                        and msg["msg_type"] == "status"
                        and msg["content"]["execution_state"] == "idle"
                    ):
                        idle = True
                while reply is None:
                    msg = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
                    if msg["parent_header"].get("msg_id") == msg_id:
                        reply = msg["content"]
                samples.append(time.perf_counter() - t0)
                if reply.get("ename") != "KeyboardInterrupt":
                    raise BenchError("jupyter interrupt: reply %r" % reply)
            return samples
        finally:
            self.stop(km, kc)


# --------------------------------------------------------------------------
# machine description


def machine_info(python, toolcell_bin):
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["ram_gib"] = round(int(line.split()[1]) / (1024 * 1024), 1)
                    break
    except OSError:
        pass
    info["kernel"] = platform.system() + " " + platform.release()
    info["python"] = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        stdout=subprocess.PIPE,
        universal_newlines=True,
        check=True,
    ).stdout.strip()
    info["toolcell"] = subprocess.run(
        [toolcell_bin, "--version"], stdout=subprocess.PIPE, universal_newlines=True
    ).stdout.strip()
    return info


def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# --------------------------------------------------------------------------
# main


ROWS = [
    ("kernel_start", "kernel start (new session -> first result)"),
    ("exec_oneshot", "toolcell exec 'pass' (whole process)"),
    ("warm_cell", "warm cell `x = 1`"),
    ("print_10mb", "cell printing 10 MB"),
    ("interrupt", "interrupt sleep(60) -> result"),
]

NOTES = [
    "time until the result is in hand: toolcell's `execute` response; Jupyter's "
    "execute_reply plus the iopub `idle` status (every output message received)",
    "kernel start: toolcell = `execute` on a never-used session of a running "
    "`toolcell serve`; Jupyter = start_kernel() + wait_for_ready() + first execute "
    "(shutdown not counted)",
    "print 10 MB: toolcell drains, ANSI-strips and redacts all 10 MB but returns "
    "max_stdout_bytes (50 kB, rest spilled to a file, 5 MB cap); Jupyter's client "
    "receives every iopub stream message until `idle` (all 10 MB)",
    "interrupt: from sending the interrupt (toolcell `interrupt` request / "
    "KernelManager.interrupt_kernel()) once the cell's first line arrived, to its result",
    "same interpreter on both sides; ipykernel imports IPython, zmq, tornado; "
    "toolcell's runner is stdlib-only: that is part of the difference",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--toolcell",
        default=os.environ.get("TOOLCELL_BIN"),
        help="toolcell binary (default $TOOLCELL_BIN, else target/release/toolcell)",
    )
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="interpreter for both kernels (default: the one running this script)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--quick", action="store_true", help="few repetitions (smoke run)")
    ap.add_argument(
        "--toolcell-only", action="store_true", help="skip Jupyter (needs no Jupyter packages)"
    )
    ap.add_argument("--n-start", type=int, help="kernel starts per side (default 20, quick 2)")
    ap.add_argument("--n-exec", type=int, help="toolcell exec processes (default 10, quick 2)")
    ap.add_argument("--n-warm", type=int, help="warm cells (default 200, quick 20)")
    ap.add_argument("--n-print", type=int, help="10 MB cells (default 10, quick 1)")
    ap.add_argument("--n-interrupt", type=int, help="interrupts (default 10, quick 2)")
    args = ap.parse_args(argv)

    quick = args.quick
    n_start = args.n_start or (2 if quick else 20)
    n_exec = args.n_exec or (2 if quick else 10)
    n_warm = args.n_warm or (20 if quick else 200)
    warmup = 5 if quick else 20
    n_print = args.n_print or (1 if quick else 10)
    n_interrupt = args.n_interrupt or (2 if quick else 10)

    binary = args.toolcell
    if not binary:
        here = os.path.dirname(os.path.abspath(__file__))
        binary = os.path.join(here, "..", "..", "target", "release", "toolcell")
    binary = os.path.abspath(binary)
    if not os.access(binary, os.X_OK):
        sys.stderr.write(
            "jupyter.py: toolcell binary %s not found; build it with "
            "`cargo build --release -p toolcell-cli` or pass --toolcell PATH\n" % binary
        )
        return 2
    # The interpreter's own sys.executable, not a version-manager shim
    # (pyenv's costs 60-90 ms a launch): toolcell probes it the same way, and
    # ipykernel should not pay the shim either.
    try:
        python = subprocess.run(
            [args.python, "-c", "import sys; print(sys.executable)"],
            stdout=subprocess.PIPE,
            universal_newlines=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write("jupyter.py: --python %s does not run: %s\n" % (args.python, e))
        return 2

    def log(msg):
        sys.stderr.write("jupyter.py: %s\n" % msg)
        sys.stderr.flush()

    workdir = tempfile.mkdtemp(prefix="toolcell-bench-compare-")
    # Keep Jupyter/IPython state out of the user's home; the untimed first
    # start below creates the IPython profile.
    os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(workdir, "jupyter-runtime")
    os.environ["IPYTHONDIR"] = os.path.join(workdir, "ipython")
    results = {name: {"toolcell": None, "jupyter": None} for name, _ in ROWS}
    info = machine_info(python, binary)
    info["load_1min_start"] = loadavg()
    interp = {}
    tc = None
    try:
        jp = None
        if not args.toolcell_only:
            try:
                jp = JupyterSide(python, workdir)
            except ImportError as e:
                log("Jupyter packages missing (%s); use --toolcell-only or "
                    "scripts/bench-compare.sh" % e)
                return 2
            info.update(jp.versions)

        tc = ToolcellSide(binary, python, workdir)
        interp["toolcell"] = tc.interpreter()
        if jp is not None:
            interp["jupyter"] = jp.interpreter()

        # Interleave the two sides per workload, so a burst of load on the
        # machine hits both rather than one.
        log("kernel start x%d (after one untimed start each)" % n_start)
        tc.kernel_start()
        if jp is not None:
            jp.kernel_start()
        ts, js = [], []
        for _ in range(n_start):
            ts.append(tc.kernel_start())
            if jp is not None:
                js.append(jp.kernel_start())
        results["kernel_start"] = {"toolcell": ts, "jupyter": js or None}

        log("toolcell exec one-shot x%d" % n_exec)
        tc.exec_oneshot()
        results["exec_oneshot"]["toolcell"] = [tc.exec_oneshot() for _ in range(n_exec)]

        log("warm cell x%d (after %d warmup)" % (n_warm, warmup))
        results["warm_cell"]["toolcell"] = tc.warm_cell(n_warm, warmup)
        if jp is not None:
            results["warm_cell"]["jupyter"] = jp.warm_cell(n_warm, warmup)

        log("print 10 MB x%d" % n_print)
        results["print_10mb"]["toolcell"] = tc.print_10mb(n_print)
        if jp is not None:
            results["print_10mb"]["jupyter"] = jp.print_10mb(n_print)

        log("interrupt x%d" % n_interrupt)
        results["interrupt"]["toolcell"] = tc.interrupt(n_interrupt)
        if jp is not None:
            results["interrupt"]["jupyter"] = jp.interrupt(n_interrupt)
    except BenchError as e:
        log("FAILED: %s" % e)
        if tc is not None:
            log("serve stderr is in %s" % os.path.join(workdir, "serve.stderr"))
            workdir = None  # keep it for inspection
        return 1
    finally:
        if tc is not None:
            tc.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    info["load_1min_end"] = loadavg()

    rows = []
    for name, label in ROWS:
        t = summary(results[name]["toolcell"] or [])
        j = summary(results[name]["jupyter"] or [])
        ratio = j["median_s"] / t["median_s"] if (t and j and t["median_s"] > 0) else None
        rows.append({"name": name, "label": label, "toolcell": t, "jupyter": j, "ratio": ratio})

    if args.json:
        out = {
            "machine": info,
            "interpreter": interp,
            "repetitions": {
                "kernel_start": n_start,
                "exec_oneshot": n_exec,
                "warm_cell": n_warm,
                "warm_cell_warmup": warmup,
                "print_10mb": n_print,
                "interrupt": n_interrupt,
            },
            "workloads": rows,
            "notes": NOTES,
        }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    print("machine: %s, %s cores, %s GiB RAM, %s" % (
        info.get("cpu"), info.get("cores"), info.get("ram_gib"), info.get("kernel")))
    print("python %s; %s; jupyter_client %s, ipykernel %s, IPython %s" % (
        info.get("python"), info.get("toolcell"), info.get("jupyter_client", "-"),
        info.get("ipykernel", "-"), info.get("ipython", "-")))
    print("interpreter: " + ", ".join("%s %s" % kv for kv in sorted(interp.items())))
    print("load (1 min) at start %.2f, at end %.2f" % (
        info["load_1min_start"] or 0, info["load_1min_end"] or 0))
    print()
    header = ("workload", "n", "toolcell median", "toolcell p90",
              "jupyter median", "jupyter p90", "jupyter/toolcell")
    table = [header]
    for r in rows:
        t, j = r["toolcell"], r["jupyter"]
        table.append((
            r["label"],
            str(t["n"]) if t else "-",
            fmt_time(t and t["median_s"]),
            fmt_time(t and t["p90_s"]),
            fmt_time(j and j["median_s"]),
            fmt_time(j and j["p90_s"]),
            ("%.1fx" % r["ratio"]) if r["ratio"] else "-",
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in table[1:]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    print()
    for note in NOTES:
        print("- " + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
