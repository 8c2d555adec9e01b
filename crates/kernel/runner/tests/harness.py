"""A small host for the toolcell runner, used by the tests and the benchmark.

It starts ``runner.py`` exactly as the Rust host does (docs/protocol.md): a
private 0700 kernel directory holding a copy of the runner (and optionally a
``toolcell_tools.py``), ``<python> -u <kdir>/runner.py`` in its own session,
stdin on /dev/null, stdout/stderr pipes, the read end of the request pipe on
fd 3, the toolcell environment; then the hello/ready handshake. Two reader
threads decode the sentinel frames on stdout and stderr.

The interpreter under test is ``$TOOLCELL_TEST_PYTHON`` or, by default, the
one running the tests.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

RUNNER = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "runner.py"))


def test_python():
    return os.environ.get("TOOLCELL_TEST_PYTHON") or sys.executable


class Decoder:
    """Incremental sentinel-frame decoder (docs/protocol.md, "Decoder rules").

    ``feed`` returns events ``("raw", bytes)`` and ``("frame", bytes)``;
    ``finish`` returns what is left at EOF.
    """

    MAX_HEADER = 21

    def __init__(self, sentinel, max_len=64 * 1024 * 1024):
        self.mark = b"\n" + sentinel + b" "
        self.max_len = max_len
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        events = []
        mark = self.mark
        while self.buf:
            i = self.buf.find(mark)
            if i < 0:
                # Hold back the longest suffix that could still begin a marker.
                keep = 0
                for k in range(min(len(mark) - 1, len(self.buf)), 0, -1):
                    if self.buf.endswith(mark[:k]):
                        keep = k
                        break
                if len(self.buf) > keep:
                    events.append(("raw", bytes(self.buf[: len(self.buf) - keep])))
                    del self.buf[: len(self.buf) - keep]
                break
            if i:
                events.append(("raw", bytes(self.buf[:i])))
                del self.buf[:i]
            start = len(mark)
            nl = self.buf.find(b"\n", start, start + self.MAX_HEADER)
            if nl < 0:
                header = bytes(self.buf[start : start + self.MAX_HEADER])
                if len(header) < self.MAX_HEADER and header.isdigit() or header == b"":
                    break  # wait for more header bytes
                events.append(("raw", bytes(self.buf[:start])))
                del self.buf[:start]
                continue
            digits = bytes(self.buf[start:nl])
            if not (1 <= len(digits) <= 20 and digits.isdigit()) or int(digits) > self.max_len:
                events.append(("raw", bytes(self.buf[:start])))
                del self.buf[:start]
                continue
            length = int(digits)
            if len(self.buf) < nl + 1 + length:
                break  # wait for the body
            events.append(("frame", bytes(self.buf[nl + 1 : nl + 1 + length])))
            del self.buf[: nl + 1 + length]
        return events

    def finish(self):
        rest = bytes(self.buf)
        self.buf.clear()
        return [("raw", rest)] if rest else []


class _Stream:
    """A reader thread decoding one of the kernel's output pipes."""

    def __init__(self, name, fd, sentinel):
        self.name = name
        self.fd = fd
        self.decoder = Decoder(sentinel)
        self.cond = threading.Condition()
        self.pending = []  # decoded events not yet consumed
        self.eof = False
        self.thread = threading.Thread(target=self._run, name="harness-" + name, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                chunk = b""
            events = self.decoder.feed(chunk) if chunk else self.decoder.finish()
            with self.cond:
                self.pending.extend(events)
                if not chunk:
                    self.eof = True
                self.cond.notify_all()
            if not chunk:
                return

    def take_frame(self, pred, timeout):
        """Consume events up to the first frame matching ``pred``.

        Returns ``(raw_before, frame_obj, skipped_frames)``; raises
        TimeoutError if none arrives in time (or the stream ends).
        """
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                raw = []
                skipped = []
                for idx, (kind, payload) in enumerate(self.pending):
                    if kind == "raw":
                        raw.append(payload)
                        continue
                    obj = json.loads(payload.decode("utf-8"))
                    if pred(obj):
                        del self.pending[: idx + 1]
                        return b"".join(raw), obj, skipped
                    skipped.append(obj)
                if self.eof:
                    raise TimeoutError("%s ended without the expected frame" % self.name)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no matching frame on %s within %ss" % (self.name, timeout))
                self.cond.wait(left)

    def raw_pending(self):
        """Raw bytes received and not consumed yet (nothing is consumed)."""
        with self.cond:
            return b"".join(p for k, p in self.pending if k == "raw")

    def wait_raw(self, needle, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                data = b"".join(p for k, p in self.pending if k == "raw")
                if needle in data:
                    return data
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise TimeoutError("%r not seen on %s; got %r" % (needle, self.name, data[-500:]))
                self.cond.wait(left)

    def take_all_raw(self):
        with self.cond:
            data = b"".join(p for k, p in self.pending if k == "raw")
            frames = [p for k, p in self.pending if k == "frame"]
            self.pending = []
            return data, frames


class Cell:
    """What one execute request produced."""

    def __init__(self, result, end, stdout, stderr, skipped):
        self.result = result
        self.end = end
        self.stdout = stdout
        self.stderr = stderr
        self.skipped = skipped  # frames seen that were not this cell's end/result

    @property
    def status(self):
        return self.result["status"]

    @property
    def out(self):
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self):
        return self.stderr.decode("utf-8", "replace")

    @property
    def tb(self):
        return self.result["traceback"]

    def __repr__(self):
        return "Cell(result=%r, stdout=%r, stderr=%r)" % (self.result, self.stdout[-2000:], self.stderr[-2000:])


def kernel_env(kdir, extra=None):
    env = {}
    for name, value in os.environ.items():
        if name.startswith(("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_", "TERM", "TZ", "TMPDIR")):
            env[name] = value
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "PYTHONIOENCODING": "utf-8",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": kdir,
        }
    )
    if extra:
        env.update(extra)
    return env


class Kernel:
    """One runner process, started like the host starts it."""

    def __init__(self, python=None, flags=("-u",), cwd=None, env=None, tools_module=None, handshake=True, readers=True):
        self.python = python or test_python()
        self.kdir = tempfile.mkdtemp(prefix="toolcell-kernel-")
        os.chmod(self.kdir, 0o700)
        self.runner = os.path.join(self.kdir, "runner.py")
        shutil.copyfile(RUNNER, self.runner)
        if tools_module is not None:
            with open(os.path.join(self.kdir, "toolcell_tools.py"), "w") as f:
                f.write(tools_module)
        self.sentinel = "tc-" + secrets.token_urlsafe(24)
        self.cwd = cwd or self.kdir
        r, w = os.pipe()
        # The request pipe goes to fd 3 through `sh`, not a preexec_fn:
        # Python code between fork and exec can deadlock in a parent with
        # threads (the reader threads of earlier kernels); a CI run once saw
        # a kernel that never sent `ready`.
        move = "" if r == 3 else "exec 3<&%d %d<&- && " % (r, r)
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", move + 'exec "$@"', "sh", self.python]
            + list(flags)
            + [self.runner],
            cwd=self.cwd,
            env=kernel_env(self.kdir, env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(r,),
        )
        os.close(r)
        self.req_w = w
        sb = self.sentinel.encode()
        self.ready = None
        self.pre_ready_stdout = b""
        if not readers:
            # The caller reads the pipes itself (the benchmark); do the
            # handshake here with a blocking read.
            self.send({"type": "hello", "sentinel": self.sentinel, "protocol": 1})
            dec = Decoder(sb)
            while self.ready is None:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise RuntimeError("runner exited before ready")
                for kind, payload in dec.feed(chunk):
                    if kind == "frame":
                        self.ready = json.loads(payload)
            return
        self.stdout = _Stream("stdout", self.proc.stdout.fileno(), sb)
        self.stderr = _Stream("stderr", self.proc.stderr.fileno(), sb)
        if handshake:
            self.send({"type": "hello", "sentinel": self.sentinel, "protocol": 1})
            try:
                self.pre_ready_stdout, self.ready, _ = self.stdout.take_frame(lambda o: o.get("type") == "ready", 30)
            except TimeoutError as e:
                raise TimeoutError("%s; %s" % (e, self._state())) from None

    def _state(self):
        """What the process is doing, for a failure message."""
        facts = []
        for name in ("cmdline", "wchan", "stat"):
            try:
                with open("/proc/%d/%s" % (self.proc.pid, name), "rb") as f:
                    facts.append("%s=%r" % (name, f.read()[:300].replace(b"\0", b" ")))
            except OSError as e:
                facts.append("%s: %s" % (name, e))
        facts.append("stderr=%r" % self.stderr.raw_pending()[-1000:])
        return "kernel pid %d: %s" % (self.proc.pid, ", ".join(facts))

    @property
    def pid(self):
        return self.proc.pid

    def send(self, obj):
        self.send_raw((json.dumps(obj) + "\n").encode("utf-8"))

    def send_raw(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.req_w, view)
            view = view[n:]

    def start(self, code, cid=None):
        cid = cid or secrets.token_hex(8)
        self.send({"type": "execute", "id": cid, "code": code})
        return cid

    def wait(self, cid, timeout=60):
        err, end, skipped_err = self.stderr.take_frame(lambda o: o.get("type") == "end" and o.get("id") == cid, timeout)
        out, result, skipped_out = self.stdout.take_frame(
            lambda o: o.get("type") == "result" and o.get("id") == cid, timeout
        )
        return Cell(result, end, out, err, skipped_err + skipped_out)

    def execute(self, code, timeout=60):
        return self.wait(self.start(code), timeout)

    def close_requests(self):
        if self.req_w is not None:
            os.close(self.req_w)
            self.req_w = None

    def signal_group(self, sig):
        os.killpg(self.proc.pid, sig)

    def wait_exit(self, timeout=10):
        return self.proc.wait(timeout)

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
        finally:
            self.close_requests()
            for s in (self.proc.stdout, self.proc.stderr):
                s.close()
            shutil.rmtree(self.kdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def process_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")
