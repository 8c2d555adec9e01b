"""toolcell kernel runner (docs/protocol.md).

The Rust host writes this file into the kernel's private 0700 directory and
starts it as ``<python> -u <kdir>/runner.py`` in its own process group, with
stdin on /dev/null, stdout and stderr on pipes and the read end of the request
pipe on fd 3. Requests are JSON lines on fd 3; replies are frames

    b"\\n" + SENTINEL + b" " + <decimal body length> + b"\\n" + <JSON body>

written on the private duplicates of fds 1 (``ready``, ``result``) and 2
(``end``). Everything else on those pipes is the cells' raw output.

Standard library only; Python 3.8 to 3.13. See README.md beside this file.
"""

# Imports are kept to C modules where possible: every one of json, re,
# signal (enum), threading, types and linecache (tokenize, re) would add
# milliseconds to each kernel's start.
import _ast  # compile()'s AST node types, without loading ast.py
import _signal
import _thread
import builtins
import fcntl
import os
import resource
import stat as _stat
import sys
import time
from _queue import SimpleQueue as _SimpleQueue

PROTOCOL = 1

# Flags and constants resolved once.
_TLA = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_AST_FLAGS = _ast.PyCF_ONLY_AST | _TLA
_CO_COROUTINE = 0x0080
_SIGINT = _signal.SIGINT
_SIG_IGN = _signal.SIG_IGN
_default_int_handler = _signal.default_int_handler
_signal_fn = _signal.signal
_getrusage = resource.getrusage
_RUSAGE_SELF = resource.RUSAGE_SELF
_RUSAGE_CHILDREN = resource.RUSAGE_CHILDREN
_perf_counter = time.perf_counter
_os_write = os.write
_Expr = _ast.Expr
_Interactive = _ast.Interactive
_ModuleType = type(sys)
_CodeType = type((lambda: None).__code__)
_RSS_DIVISOR = 1024 if sys.platform == "darwin" else 1  # ru_maxrss unit: bytes on macOS


def _no_default(obj):
    raise TypeError("not JSON serializable: %r" % type(obj).__name__)


try:  # JSON through the C accelerator directly: `import json` costs ~5 ms (re).
    import _json

    class _ScanContext:
        pass

    _ctx = _ScanContext()
    _ctx.strict = True
    _ctx.object_hook = None
    _ctx.object_pairs_hook = None
    _ctx.parse_float = float
    _ctx.parse_int = int
    _ctx.parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__
    _scan = _json.make_scanner(_ctx)
    _encoder = _json.make_encoder(None, _no_default, _json.encode_basestring, None, ":", ",", False, False, True)

    def _loads(data):
        text = data.decode("utf-8").strip(" \t\r\n")
        obj, end = _scan(text, 0)
        if end != len(text):
            raise ValueError("extra data after the JSON value")
        return obj

    def _dumps(obj):
        return "".join(_encoder(obj, 0))

    if (
        _loads(b' {"a": [1, "\\u00e9"]} ') != {"a": [1, "\u00e9"]}
        or _dumps({"a": [1, "\u00e9"]}) != '{"a":[1,"\u00e9"]}'
    ):
        raise ImportError("unexpected _json behaviour")
except Exception:  # another implementation: the json module
    import json

    _loads = json.loads
    _dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# The file the runner's own code objects carry; frames from it are cut from
# every traceback a user sees.
_RUNNER_FILE = (lambda: None).__code__.co_filename
# Set by the remote bootstrap (docs/protocol.md, "Remote kernels: the same
# protocol over a command's stdio"): the stub module's source.
# Then requests come on stdin, there is no kernel directory on this machine
# (the runner makes a private temporary one), and figures travel in frames.
_REMOTE_STUBS = globals().get("_TOOLCELL_INBAND")
_REMOTE = _REMOTE_STUBS is not None
if _REMOTE:
    _KDIR = ""  # made in _make_remote_dir()
    _ARTIFACTS = ""
else:
    _KDIR = os.path.dirname(os.path.abspath(__file__))
    _ARTIFACTS = os.path.join(_KDIR, "artifacts")
# Tool calls travel in-band (hello's "inband_tools"): a tool_call frame on
# stdout, the host's tool_reply line on the request channel.
_INBAND_TOOLS = False
_calls = {}  # call id -> [lock held until the reply, reply]
_calls_lock = _thread.allocate_lock()
_call_seq = [0]
_in_cell = False
# An interrupt that arrives after a cell's execute request was read but
# before its code started is kept for it (not lost): `_cell_queued` is set
# by the reader when it queues an execute; under `_int_lock` the reader
# either signals the running cell or leaves `_int_pending` for the next one.
_cell_queued = False
_int_pending = False
_int_lock = _thread.allocate_lock()

# Cell sources kept in linecache (for tracebacks of functions defined in old
# cells) are bounded: the oldest are dropped past this many characters.
_LINECACHE_BUDGET = 64 * 1024 * 1024
# Compiled code of recent small cells, reused when the same source comes again.
_compile_cache = {}
_CACHE_ENTRIES = 64
_CACHE_SRC_MAX = 4096
# A traceback longer than this (in characters) keeps only its head and tail
# lines, so a result frame stays below the host's maximum frame length (64 MiB;
# at most 6 bytes per character once JSON-escaped). It is large so that a long
# exception message reaches the host whole: the host redacts it, then cuts it
# to max_stderr_bytes, and only a cut after redaction may fall inside a line.
_MAX_TRACEBACK = 4 << 20
# A request line longer than this is discarded (the host never sends one).
_MAX_REQUEST = 512 * 1024 * 1024

# Protocol state, set up by _init_fds() and the hello request. The sentinel
# lives only here, in memory.
_PID = os.getpid()  # the runner's own pid (a cell may fork)
_REQ_FD = -1
_OUT_FD = -1
_ERR_FD = -1
_MARK = b""
_frame_lock = _thread.allocate_lock()
# POSIX guarantees atomic pipe writes up to PIPE_BUF bytes (4096 on Linux).
_PIPE_BUF = 4096
_requests = _SimpleQueue()
_rbuf = bytearray()  # request bytes read but not yet parsed
_shutdown_requested = False

_ns = {}  # the cells' namespace (the __main__ module's dict)
_exec_count = 0
_sources = {}  # cell file name -> linecache entry, oldest first
_sources_total = 0
_linecache = None  # the linecache module, once something imported it
_loop = None  # the one asyncio event loop, created on the first await cell
_asyncio = None
_subprocess = None
_shlex = None
_traceback = None
_artifacts_ready = False


class StdinNotImplementedError(NotImplementedError):
    """Raised by any read of ``sys.stdin`` inside a cell."""


_STDIN_MESSAGE = (
    "interactive input is not supported: a toolcell cell cannot read stdin "
    "(input(), sys.stdin). Pass the data in the code itself, or write it to a "
    "file and read the file."
)


# --------------------------------------------------------------------------
# Low-level output
# --------------------------------------------------------------------------


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = _os_write(fd, view)
        except BlockingIOError:
            # A cell made the (shared) pipe description non-blocking.
            import select

            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


def _flush_std():
    """Flush Python-level buffers so a frame follows the cell's output."""
    out = sys.stdout
    err = sys.stderr
    for stream in (out, err):
        try:
            stream.flush()
        except BaseException:  # a cell may have closed, replaced or removed it
            pass
    # The originals too, when a cell swapped sys.stdout/sys.stderr.
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not out and stream is not err and stream is not None:
            try:
                stream.flush()
            except BaseException:
                pass


def _frame(obj):
    """A frame's header and body, ready to write."""
    text = _dumps(obj)
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep the frame valid UTF-8
        body = text.encode("utf-8", "replace")
    return b"%s%d\n" % (_MARK, len(body)), body


def _write_frame(fd, frame):
    header, body = frame
    with _frame_lock:
        if len(header) + len(body) <= _PIPE_BUF:
            _write_all(fd, header + body)
        else:
            # The header always goes in one atomic write of its own (pipe
            # writes up to PIPE_BUF are atomic), so a reader never sees half
            # a marker followed by a pause: the host may release a held
            # marker prefix once the pipe has been quiet for a moment.
            _write_all(fd, header)
            _write_all(fd, body)


def _send(fd, obj, flush=True):
    if flush:
        _flush_std()
    _write_frame(fd, _frame(obj))


def _raw_stderr(message):
    """A raw (non-frame) diagnostic line on stderr, for the host's logs."""
    try:
        data = ("toolcell runner: %s\n" % message).encode("utf-8", "replace")
        with _frame_lock:
            _write_all(_ERR_FD if _ERR_FD >= 0 else 2, data)
    except BaseException:
        pass


def _descendants(pid):
    """Every live descendant of pid, through /proc/<pid>/task/*/children."""
    found = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir("/proc/%d/task" % parent)
        except OSError:
            continue
        for tid in tasks:
            try:
                with open("/proc/%d/task/%s/children" % (parent, tid)) as f:
                    kids = f.read().split()
            except OSError:
                continue
            for kid in kids:
                found.append(int(kid))
                todo.append(int(kid))
    return found


def _remove_remote_dir():
    if _REMOTE and _KDIR:
        try:
            import shutil

            shutil.rmtree(_KDIR, ignore_errors=True)
        except BaseException:
            pass


def _die():
    """The host is gone: kill every descendant (setsid'd ones too) and our group."""
    _remove_remote_dir()
    try:
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, _signal.SIGKILL)
            except OSError:
                pass
        if os.getpgrp() == os.getpid():
            os.killpg(0, _signal.SIGKILL)
        else:  # not a session/group leader: never kill a group we do not own
            os.kill(os.getpid(), _signal.SIGKILL)
    finally:
        os._exit(137)


# --------------------------------------------------------------------------
# File descriptors and the request reader
# --------------------------------------------------------------------------


def _private_dup(fd):
    """Duplicate fd to a non-inheritable descriptor numbered 100 or more."""
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    except (OSError, AttributeError):
        return os.dup(fd)  # non-inheritable by default (PEP 446)


def _init_fds():
    global _REQ_FD, _OUT_FD, _ERR_FD
    if _REMOTE:
        # Requests arrive on stdin: move them to a private fd; the cells'
        # fd 0 becomes /dev/null, as for a local kernel.
        _REQ_FD = _private_dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    else:
        _REQ_FD = _private_dup(3)
        os.close(3)
    _OUT_FD = _private_dup(1)
    _ERR_FD = _private_dup(2)


def _make_remote_dir():
    """A private temporary directory for the stub module and figures."""
    global _KDIR, _ARTIFACTS
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(16):
        path = os.path.join(base, "toolcell-remote-%s" % os.urandom(8).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        break
    else:
        raise OSError("cannot create a private directory under %s" % base)
    _KDIR = path
    _ARTIFACTS = os.path.join(path, "artifacts")
    fd = os.open(os.path.join(path, "toolcell_tools.py"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        data = _REMOTE_STUBS
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    env = os.environ
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8")
        except BaseException:
            pass


# --------------------------------------------------------------------------
# In-band tool calls and interrupts (docs/protocol.md, "Remote kernels: the
# same protocol over a command's stdio")
# --------------------------------------------------------------------------


def _inband_call(tool, args):
    """The stub module's ``_call`` when tool calls travel in-band.

    Sends a tool_call frame and waits for the reader thread to hand over the
    host's reply; threads call in parallel, each waiting on its own lock.
    """
    module = sys.modules.get("toolcell_tools")
    error = getattr(module, "ToolError", RuntimeError)
    lock = _thread.allocate_lock()
    lock.acquire()
    with _calls_lock:
        _call_seq[0] += 1
        cid = _call_seq[0]
        entry = [lock, None]
        _calls[cid] = entry
    try:
        try:
            _send(_OUT_FD, {"type": "tool_call", "id": cid, "tool": tool, "args": args}, False)
        except (TypeError, ValueError):
            raise
        except OSError as e:
            raise error(
                "lost the connection to the toolcell host during %s (%s); the outcome is unknown "
                "and the call was not repeated: check its effect before calling again" % (tool, e),
                "connection_lost", tool) from None
        lock.acquire()
    finally:
        with _calls_lock:
            _calls.pop(cid, None)
    msg = entry[1]
    if not isinstance(msg, dict):
        raise error("the toolcell host sent an unreadable reply to %s" % (tool,), "bad_reply", tool)
    if msg.get("ok"):
        return msg.get("result")
    code = msg.get("code")
    raise error("%s: %s" % (tool, msg.get("error", code)), code, tool)


def _tool_reply(req):
    with _calls_lock:
        entry = _calls.get(req.get("id"))
    if entry is not None:
        entry[1] = req.get("reply")
        try:
            entry[0].release()
        except RuntimeError:
            pass


def _interrupt():
    """In-band interrupt from the reader thread: SIGINT to our process
    group during a cell; kept for the cell about to start when its request
    was read already."""
    with _int_lock:
        if _interrupt_direct():
            _signal_group()


def _use_inband(module):
    if _INBAND_TOOLS and module is not None:
        module._call = _inband_call


_SPARE_FD = -1
_EMFILE = 24


def _reserve_spare():
    """Hold one spare descriptor, given back when a cell ran out of them.

    Under ``[limits] open_files`` a cell that fills the table would leave the
    runner unable to import ``traceback`` or read source lines for its
    result; closing the spare first leaves room for that.
    """
    global _SPARE_FD
    if _SPARE_FD < 0:
        try:
            fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _SPARE_FD = _private_dup(fd)
            finally:
                os.close(fd)
        except OSError:
            _SPARE_FD = -1


def _release_spare():
    global _SPARE_FD
    if _SPARE_FD >= 0:
        try:
            os.close(_SPARE_FD)
        except OSError:
            pass
        _SPARE_FD = -1


def _reader():
    """The request reader thread: if it fails, the kernel cannot go on."""
    try:
        _read_requests()
    except BaseException as e:  # e.g. MemoryError: without requests we are deaf
        _raw_stderr("request reader failed: %s: %s" % (type(e).__name__, e))
    _die()


def _read_requests():
    """Read request lines from the private request fd and queue them.

    EOF (or a read error) means the host is gone: kill the process group at
    once, even in the middle of a cell.
    """
    buf = bytearray(_rbuf)  # what main read along with hello
    del _rbuf[:]
    while True:
        for kind, req in _lines(buf):
            if kind == "req":
                rtype = req.get("type")
                if rtype == "tool_reply":
                    _tool_reply(req)
                    continue
                if rtype == "interrupt":
                    _interrupt()
                    continue
                _note_request(rtype)
            _requests.put((kind, req))
        try:
            chunk = os.read(_REQ_FD, 1 << 16)
        except InterruptedError:
            continue
        except BaseException:
            chunk = b""
        if not chunk:
            if _shutdown_requested:
                # The main thread is about to exit 0; give it a moment.
                time.sleep(1.0)
            _die()
        buf += chunk


def _note_request(rtype):
    with _int_lock:
        _note_request_direct(rtype)


_discarding = [False]


def _lines(buf):
    """The complete request lines in buf (taken out of it), parsed:
    ("req", dict) or ("bad", message). A line longer than _MAX_REQUEST is
    dropped, and reported once its end arrives."""
    out = []
    start = 0
    while True:
        nl = buf.find(b"\n", start)
        if nl < 0:
            break
        line = bytes(buf[start:nl])
        start = nl + 1
        if _discarding[0]:
            _discarding[0] = False
            out.append(("bad", "request line longer than %d bytes dropped" % _MAX_REQUEST))
            continue
        if not line.strip():
            continue
        try:
            req = _loads(line)
        except BaseException as e:
            out.append(("bad", "request line is not JSON (%s)" % e))
            continue
        if not isinstance(req, dict):
            out.append(("bad", "request is not a JSON object"))
            continue
        out.append(("req", req))
    if start:
        del buf[:start]
    if len(buf) > _MAX_REQUEST:
        del buf[:]
        _discarding[0] = True
    return out


# --------------------------------------------------------------------------
# Direct mode (local kernels): the main thread reads its own requests
# --------------------------------------------------------------------------
#
# A request reader thread costs a thread hand-off per cell (the reader wakes,
# queues, the main thread wakes). A local kernel without in-band tool calls
# needs the request channel only for execute, interrupt and shutdown, so the
# main thread reads it itself between cells; from the moment it takes an
# execute request until the cell ends the kernel sends SIGIO when a request
# arrives (O_ASYNC, off between cells), and the handler, which runs in the
# main thread, reads it: an interrupt interrupts. A watcher thread only
# polls for the pipe's hang-up (the host is gone) and never reads.

_direct = False
_queued = []  # requests read by the SIGIO handler for the main loop, in order
_FIONREAD = 0x541B  # Linux


def _pending_bytes():
    try:
        return _unpack_int(fcntl.ioctl(_REQ_FD, _FIONREAD, b"\0\0\0\0"))
    except BaseException:
        return 0


def _unpack_int(b):
    return int.from_bytes(b, sys.byteorder, signed=True)


_reading = [False]  # the request buffer is being read or parsed
_missed = [False]  # a SIGIO came while it was


def _drain(read):
    """Parse the complete request lines read so far (after reading what
    waits on the request fd without blocking, when `read`): interrupts act
    now, everything else is queued for the main loop, in order.

    Runs in the main thread only, from the main loop or the SIGIO handler,
    which may nest: a nested call while the buffer is busy only notes that
    it came, and the outer call reads again before it returns.
    """
    if _reading[0]:
        _missed[0] = True
        return
    _reading[0] = True
    fire = False
    try:
        while True:
            _missed[0] = False
            if read:
                n = _pending_bytes()
                if n > 0:
                    try:
                        _rbuf.extend(os.read(_REQ_FD, n))
                    except OSError:
                        pass
            for kind, req in _lines(_rbuf):
                if kind == "req":
                    rtype = req.get("type")
                    if rtype == "interrupt":
                        fire = _interrupt_direct() or fire
                        continue
                    _note_request_direct(rtype)
                _queued.append((kind, req))
            if not _missed[0]:
                break
            read = True
    finally:
        _reading[0] = False
    if fire:
        # Last: the KeyboardInterrupt this raises may land right here.
        _signal_group()


def _note_request_direct(rtype):
    """Marks a shutdown or a queued cell (locking as _interrupt_direct)."""
    global _shutdown_requested, _cell_queued
    if rtype == "shutdown":
        _shutdown_requested = True
    elif rtype == "execute":
        _cell_queued = True


def _interrupt_direct():
    """Whether an interrupt should signal the running cell now; else it is
    kept for the queued cell, or dropped. The caller holds _int_lock, or is
    the main thread in direct mode (nothing else touches the state)."""
    global _int_pending
    if _in_cell:
        return True
    if _cell_queued:
        _int_pending = True
    return False


def _signal_group():
    try:
        if os.getpgrp() == _PID:
            os.killpg(_PID, _SIGINT)
        else:
            os.kill(_PID, _SIGINT)
    except OSError:
        pass


def _on_sigio(signum, frame):
    # Between cells the main loop reads requests itself.
    if (_in_cell or _cell_queued) and os.getpid() == _PID:
        _drain(True)


def _next_direct():
    """The next request for the main loop (blocking between cells)."""
    global _cell_queued, _int_pending
    while True:
        if _queued:
            item = _queued.pop(0)
            if item[0] == "req" and item[1].get("type") == "execute":
                # From now on a request raises SIGIO; one that came before
                # (an interrupt for this cell) raised none: read it now.
                _async(True)
                _drain(True)
            return item
        # Idle: no cell is queued, and only this read takes requests.
        _cell_queued = _int_pending = False
        _reading[0] = True
        try:
            chunk = os.read(_REQ_FD, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        finally:
            _reading[0] = False
        if not chunk:
            if _shutdown_requested:
                _exit(0)
            _die()
        _rbuf.extend(chunk)
        _drain(False)


def _watch_hangup(p):
    """The watcher thread: the host closing the request pipe is its death.

    `p` is a poll object on the request fd, made by the main thread before
    any cell ran: a cell that fills the descriptor table must not leave
    this thread unable to import or open what it needs (it would die, and
    take the kernel with it)."""
    # Signals stay unblocked here, as in the reader thread: a cell that
    # blocks SIGINT or SIGIO in the main thread still gets them through
    # this one (Python runs the handlers in the main thread all the same).
    try:
        while True:
            try:
                if p.poll():
                    break
            except InterruptedError:
                continue
        if _shutdown_requested or (not _in_cell and _pending_bytes() > 0):
            # The main thread is about to read a shutdown and exit 0.
            time.sleep(1.0)
    except BaseException as e:
        _raw_stderr("hang-up watcher failed: %s: %s" % (type(e).__name__, e))
    _die()


_fl_idle = 0  # the request fd's status flags between cells (no O_ASYNC)


def _start_direct():
    global _direct, _fl_idle
    _direct = True
    _signal_fn(_signal.SIGIO, _on_sigio)
    fcntl.fcntl(_REQ_FD, fcntl.F_SETOWN, _PID)
    _fl_idle = fcntl.fcntl(_REQ_FD, fcntl.F_GETFL) & ~os.O_ASYNC
    import select

    p = select.poll()
    p.register(_REQ_FD, 0)  # POLLHUP and POLLERR are always reported
    _thread.start_new_thread(_watch_hangup, (p,))


def _async(on):
    """SIGIO on request arrival, only while a cell is queued or runs:
    between cells the main loop reads (a signal per request would cost a
    delivery and wake the watcher thread for nothing)."""
    try:
        fcntl.fcntl(_REQ_FD, fcntl.F_SETFL, _fl_idle | os.O_ASYNC if on else _fl_idle)
    except OSError as e:
        _raw_stderr("cannot switch SIGIO on the request pipe: %s" % e)


def _read_hello():
    """The first request, read by the main thread itself."""
    while True:
        got = _lines(_rbuf)
        if got:
            kind, req = got[0]
            # Anything after hello stays for whoever reads next.
            for item in reversed(got[1:]):
                _queued.insert(0, item)
            return kind, req
        try:
            chunk = os.read(_REQ_FD, 1 << 16)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            _die()
        _rbuf.extend(chunk)


# --------------------------------------------------------------------------
# The cells' world: namespace, stdin, shell lines
# --------------------------------------------------------------------------


class _NoStdinBuffer:
    """``sys.stdin.buffer`` stand-in: every read raises."""

    def __init__(self, owner):
        self._owner = owner

    def _refuse(self, *args, **kwargs):
        return self._owner._refuse()

    read = read1 = readline = readlines = readinto = readinto1 = peek = _refuse

    def __iter__(self):
        return self

    def __next__(self):
        return self._owner._refuse()

    def fileno(self):
        return 0

    def isatty(self):
        return False

    def readable(self):
        return True

    def close(self):
        pass

    closed = False


class _NoStdin:
    """``sys.stdin`` for cells: any read raises at once and is recorded."""

    encoding = "utf-8"
    errors = "strict"
    newlines = None
    closed = False
    name = "<stdin>"
    mode = "r"

    def __init__(self):
        self.requested = False
        self.buffer = _NoStdinBuffer(self)

    def _refuse(self, *args, **kwargs):
        self.requested = True
        raise StdinNotImplementedError(_STDIN_MESSAGE)

    read = readline = readlines = _refuse

    def __iter__(self):
        return self

    def __next__(self):
        return self._refuse()

    def fileno(self):
        return 0

    def isatty(self):
        return False

    def readable(self):
        return True

    def writable(self):
        return False

    def seekable(self):
        return False

    def close(self):
        pass

    def flush(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_stdin = _NoStdin()


def _run_child(argv):
    """Run a command with the cell's fds 1 and 2 (stdin /dev/null) and wait."""
    global _subprocess
    if _subprocess is None:
        import subprocess as _subprocess
    _flush_std()  # Python-buffered output first, then the command's
    proc = _subprocess.Popen(argv, stdin=_subprocess.DEVNULL)
    try:
        proc.wait()
    except BaseException:  # interrupted: do not leave it running
        try:
            proc.kill()
        except OSError:
            pass
        proc.wait()
        raise


def _shell(cmd):
    """Run a `!cmd` line: /bin/sh -c cmd. A non-zero status does not raise."""
    _run_child(["/bin/sh", "-c", cmd])


def _pip(args):
    """Run a `%pip ...` line with this interpreter's own pip."""
    _run_child([sys.executable, "-m", "pip"] + list(args))
    import importlib

    importlib.invalidate_caches()  # newly installed packages become importable


_MAGIC_HINTS = {
    "matplotlib": "figures are saved as PNG automatically at the end of a cell; remove this line",
    "cd": "use os.chdir(path) instead",
    "time": "time the code with time.perf_counter() instead",
    "timeit": "use the timeit module instead",
    "env": "read or set os.environ instead",
    "load_ext": "import the module instead",
    "autoreload": "use importlib.reload(module) instead",
    "run": "use exec(open(path).read()) or runpy.run_path(path) instead",
    "conda": "run it as a shell line: !conda ...",
}


def _may_have_magic(src):
    """Cheap pre-check: does any line start (after blanks) with `!` or `%`?"""
    if "!" not in src and "%" not in src:
        return False
    for line in src.split("\n"):
        first = line.lstrip(" \t\f")[:1]
        if first == "!" or first == "%":
            return True
    return False


def _split_lines(src):
    parts = src.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _transform(src, filename):
    """Rewrite `!cmd` and `%pip ...` lines into calls; reject other magics.

    The rule: a physical line is a shell/magic line when it *starts a new
    logical line* -- it is not inside a string literal (single, triple, any
    prefix), not inside brackets, and does not follow a backslash
    continuation -- and its first non-blank character is `!` or `%`. Such a
    line can never be valid Python, so valid code is never changed. Its
    indentation is kept, so `!cmd` works inside blocks. Line numbers are
    unchanged.
    """
    global _shlex
    lines = _split_lines(src)
    out = []
    quote = None  # the open string's quote ('"', "'", '\"\"\"', "'''") or None
    depth = 0
    cont = False
    for lineno, line in enumerate(lines, 1):
        if quote is None and depth == 0 and not cont:
            stripped = line.lstrip(" \t\f")
            first = stripped[:1]
            if first == "!" or first == "%":
                indent = line[: len(line) - len(stripped)]
                end = "\n" if line.endswith("\n") else ""
                body = stripped.rstrip("\r\n")
                if first == "!":
                    out.append("%s__toolcell_shell__(%r)%s" % (indent, body[1:], end))
                    continue
                name = body.lstrip("%")
                for j, ch in enumerate(name):
                    if not (ch.isalnum() or ch == "_"):
                        name = name[:j]
                        break
                if body.startswith("%pip") and body[4:5] in ("", " ", "\t"):
                    if _shlex is None:
                        import shlex as _shlex
                    try:
                        args = _shlex.split(body[4:])
                    except ValueError as e:
                        raise SyntaxError(
                            "cannot parse %%pip arguments: %s" % e,
                            (filename, lineno, len(indent) + 1, line),
                        ) from None
                    out.append("%s__toolcell_pip__(%r)%s" % (indent, args, end))
                    continue
                shown = body.split()[0] if body.split() else body
                msg = "unsupported magic %s: toolcell supports only `!cmd` shell lines and `%%pip ...`" % shown
                hint = _MAGIC_HINTS.get(name)
                if hint:
                    msg += " (%s)" % hint
                raise SyntaxError(msg, (filename, lineno, len(indent) + 1, line))
        # Scan the line to track strings, brackets and continuations.
        cont = False
        i = 0
        n = len(line)
        escaped_newline = False
        while i < n:
            c = line[i]
            if quote is not None:
                if c == "\\":
                    if i + 1 < n and line[i + 1] in "\r\n":
                        escaped_newline = True
                    i += 2
                    continue
                if c == quote[0] and line.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    continue
                i += 1
                continue
            if c == "#":
                break
            if c == '"' or c == "'":
                if line.startswith(c * 3, i):
                    quote = c * 3
                    i += 3
                else:
                    quote = c
                    i += 1
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth:
                    depth -= 1
            elif c == "\\" and not line[i + 1 :].strip("\r\n"):
                cont = True
            i += 1
        if quote is not None and len(quote) == 1 and not escaped_newline:
            quote = None  # unterminated single-quoted string: a syntax error anyway
        out.append(line)
    return "".join(out)


def _register_source(filename, src):
    """Keep the cell's source for linecache so tracebacks can show its lines."""
    global _sources_total
    entry = (len(src), None, _split_lines(src), filename)  # mtime None: never checked
    _sources[filename] = entry
    _sources_total += len(src)
    lc = _linecache
    while _sources_total > _LINECACHE_BUDGET and len(_sources) > 1:
        old = next(iter(_sources))
        _sources_total -= _sources.pop(old)[0]
        if lc is not None:
            lc.cache.pop(old, None)
    if lc is not None:
        lc.cache[filename] = entry


def _adopt_linecache(module):
    global _linecache
    _linecache = module
    module.cache.update(_sources)


class _SyncingLoader:
    """Wraps linecache's loader: once it is loaded, give it the cell sources."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _adopt_linecache(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _LinecacheWatch:
    """A meta-path finder that only notices the first import of linecache.

    linecache (with tokenize and re) is not loaded up front to keep kernel
    start fast; whoever imports it first (traceback, warnings, the runner's
    own error formatting) gets a linecache that already knows every cell.
    """

    done = False

    def find_spec(self, name, path=None, target=None):
        if name != "linecache" or self.done:
            return None
        self.done = True
        try:
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                        return None
                    spec.loader = _SyncingLoader(spec.loader)
                    return spec
        except Exception:
            pass
        return None

    def find_module(self, fullname, path=None):  # for pre-PEP 451 callers
        return None

    def invalidate_caches(self):
        pass


def _watch_linecache():
    module = sys.modules.get("linecache")
    if module is not None:
        _adopt_linecache(module)
    else:
        sys.meta_path.insert(0, _LinecacheWatch())


def _make_namespace():
    global _ns
    main = _ModuleType("__main__")
    ns = main.__dict__
    ns["__builtins__"] = builtins
    sys.modules["__main__"] = main
    _ns = ns
    try:
        toolcell_tools = _import_stubs()
    except ImportError as e:
        if getattr(e, "name", None) != "toolcell_tools":
            _raw_stderr("toolcell_tools failed to import: %s: %s" % (type(e).__name__, e))
        return
    except BaseException as e:
        _raw_stderr("toolcell_tools failed to import: %s: %s" % (type(e).__name__, e))
        return
    _use_inband(toolcell_tools)
    # Every tool and helper the stub exports is defined in the namespace
    # (the execute_code description promises it); `from toolcell_tools
    # import …` works too.
    names = getattr(toolcell_tools, "__all__", None) or ("json_parse", "shell_quote", "retry")
    for name in names:
        if isinstance(name, str) and hasattr(toolcell_tools, name):
            ns[name] = getattr(toolcell_tools, name)


def _refile(code, filename):
    """`code` and every code object in it, as if compiled from `filename`."""
    consts = tuple(_refile(c, filename) if type(c) is _CodeType else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _import_stubs():
    """The stub module: from the code the host had this interpreter compile
    once (``toolcell_tools.code`` beside the source, written by the host only
    when it matches the source), else imported from the source. Compiling
    the stub costs a kernel start ~5 ms; loading its code, a tenth of one."""
    path = os.path.join(_KDIR, "toolcell_tools.py")
    code = None
    try:
        with open(os.path.join(_KDIR, "toolcell_tools.code"), "rb") as f:
            data = f.read()
        if data[:4] == sys.modules["_frozen_importlib_external"].MAGIC_NUMBER:
            import marshal

            code = marshal.loads(data[4:])
    except Exception:
        code = None
    if type(code) is not _CodeType:
        import toolcell_tools

        return toolcell_tools
    module = _ModuleType("toolcell_tools")
    module.__file__ = path
    sys.modules["toolcell_tools"] = module
    try:
        exec(_refile(code, path), module.__dict__)
    except BaseException:
        sys.modules.pop("toolcell_tools", None)
        raise
    return module


def _load_stubs(source):
    """Replaces the stub module's tools with those of `source` (the host
    sends it with a cell when the tools a cell may call changed: a serve
    client registered some, an MCP server's list changed). The state of the
    namespace is kept; names the old module exported and the cell did not
    rebind are replaced or removed."""
    module = sys.modules.get("toolcell_tools")
    path = os.path.join(_KDIR, "toolcell_tools.py")
    # The file too, so tracebacks and inspect.getsource see the new code.
    tmp = path + ".new"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            data = source.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        _raw_stderr("cannot rewrite toolcell_tools.py (%s); tools are loaded from memory" % (e,))
    old_all = list(getattr(module, "__all__", ()) or ()) if module is not None else []
    old = dict((n, getattr(module, n, None)) for n in old_all) if module is not None else {}
    if module is None:
        module = _ModuleType("toolcell_tools")
        module.__file__ = path
        sys.modules["toolcell_tools"] = module
    for name in old_all:
        if name in ("ToolError",):
            continue
        full = "toolcell_tools." + name
        if sys.modules.get(full) is old.get(name):
            sys.modules.pop(full, None)
        module.__dict__.pop(name, None)
    # Keep the module's ToolError class, so `except ToolError` in the
    # session's own functions still catches what new tools raise.
    keep_error = module.__dict__.get("ToolError")
    exec(compile(source, path, "exec"), module.__dict__)
    _use_inband(module)
    if keep_error is not None:
        module.ToolError = keep_error
        for sub in list(sys.modules):
            if sub.startswith("toolcell_tools."):
                setattr(sys.modules[sub], "ToolError", keep_error)
    try:
        import linecache
        linecache.checkcache(path)
    except Exception:
        pass
    ns = _ns
    if ns is None:
        return
    new_all = list(getattr(module, "__all__", ()) or ())
    for name in old_all:
        if name not in new_all and name in ns and ns[name] is old.get(name):
            del ns[name]
    for name in new_all:
        if isinstance(name, str) and hasattr(module, name):
            if name not in ns or name not in old or ns[name] is old.get(name):
                ns[name] = getattr(module, name)


def _setup_interpreter():
    # The kernel dir holds the stub module; make it importable even when the
    # host starts us with -I (which drops PYTHONPATH and the script's dir).
    if _KDIR not in sys.path:
        sys.path.insert(0, _KDIR)
    # Like the interactive interpreter: the current directory is importable,
    # unless the host asked for isolation.
    if not (sys.flags.isolated or getattr(sys.flags, "safe_path", False)) and "" not in sys.path:
        sys.path.insert(1, "")
    sys.argv = [""]
    sys.stdin = _stdin
    _watch_linecache()
    builtins.__toolcell_shell__ = _shell
    builtins.__toolcell_pip__ = _pip
    # Reads are observed, not guessed (docs/result.md, "files"): an audit
    # hook sees every open(), io.open() and os.open(); it is a no-op
    # between cells.
    sys.addaudithook(_on_audit)


# --------------------------------------------------------------------------
# Running a cell
# --------------------------------------------------------------------------


def _get_loop():
    global _loop, _asyncio
    if _asyncio is None:
        import asyncio as _asyncio
    if _loop is None or _loop.is_closed():
        _loop = _asyncio.new_event_loop()
    _asyncio.set_event_loop(_loop)
    return _loop


def _run_async(coro):
    loop = _get_loop()
    task = loop.create_task(coro)
    try:
        loop.run_until_complete(task)
    except BaseException:
        # Interrupted while the loop waited: do not leave the cell running.
        if not task.done():
            task.cancel()
        raise


def _retarget(code, filename):
    """The same code object (and nested ones) under another file name."""
    consts = code.co_consts
    for c in consts:
        if type(c) is _CodeType:
            consts = tuple(_retarget(k, filename) if type(k) is _CodeType else k for k in consts)
            return code.replace(co_filename=filename, co_consts=consts)
    return code.replace(co_filename=filename)


def _compile_cell(src, filename):
    """Code objects to run for a cell, in order.

    The cell is parsed once (after `!`/`%` line rewriting, only when such a
    line may exist); a trailing expression statement is compiled on its own
    in "single" mode so sys.displayhook echoes it, as the interactive
    interpreter does. Small cells seen recently are not re-parsed: their
    code objects are reused under the new cell's file name.
    """
    cached = _compile_cache.get(src)
    if cached is not None:
        return [_retarget(c, filename) for c in cached]
    text = _transform(src, filename) if _may_have_magic(src) else src
    tree = compile(text, filename, "exec", _AST_FLAGS)
    body = tree.body
    codes = []
    if body and type(body[-1]) is _Expr:
        last = body.pop()
        if body:
            codes.append(compile(tree, filename, "exec", _TLA))
        codes.append(compile(_Interactive([last]), filename, "single", _TLA))
    else:
        codes.append(compile(tree, filename, "exec", _TLA))
    if len(src) <= _CACHE_SRC_MAX:
        if len(_compile_cache) >= _CACHE_ENTRIES:
            del _compile_cache[next(iter(_compile_cache))]
        _compile_cache[src] = codes
    return codes


async def _run_codes(codes, ns):
    for code in codes:
        if code.co_flags & _CO_COROUTINE:
            await eval(code, ns)
        else:
            exec(code, ns)


def _execute(src, filename):
    """Compile and run one cell in the namespace (exceptions propagate).

    A cell with a top-level `await` anywhere runs entirely as one task on the
    persistent event loop (so every statement of it sees the running loop);
    other cells run plainly, outside any loop (so `asyncio.run()` works).
    """
    ns = _ns
    codes = _compile_cell(src, filename)
    for code in codes:
        if code.co_flags & _CO_COROUTINE:
            _run_async(_run_codes(codes, ns))
            return
    for code in codes:
        exec(code, ns)


def _ignore_sigint():
    while True:
        try:
            _signal_fn(_SIGINT, _SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def _run_user(src, filename):
    """Run the cell with SIGINT live; return the exception it ended with."""
    global _in_cell, _int_pending, _cell_queued
    _signal_fn(_SIGINT, _default_int_handler)
    with _int_lock:
        _in_cell = True
        pending = _int_pending
        _int_pending = False
    try:
        if pending:
            # Interrupted before its first line ran.
            raise KeyboardInterrupt
        _execute(src, filename)
    except BaseException as e:
        with _int_lock:
            _in_cell = _cell_queued = _int_pending = False
        _ignore_sigint()
        return e
    with _int_lock:
        _in_cell = _cell_queued = _int_pending = False
    _ignore_sigint()
    return None


def _filter_te(te, cell_file):
    """Cut runner frames (and what precedes the cell) from a TracebackException chain."""
    tb = _traceback
    todo = [te]
    seen = set()
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        frames = list(cur.stack)
        start = 0
        for i, fs in enumerate(frames):
            if fs.filename == cell_file:
                start = i
                break
        # The runner's frames and the generated stub's internals are noise
        # to the reader: the cell line that called the tool says enough.
        kept = [fs for fs in frames[start:]
                if fs.filename != _RUNNER_FILE and not fs.filename.endswith("/toolcell_tools.py")]
        if len(kept) != len(frames):
            cur.stack = tb.StackSummary.from_list(kept)
            if not kept:
                cur.exc_traceback = None
        todo.append(getattr(cur, "__cause__", None))
        todo.append(getattr(cur, "__context__", None))
        todo.extend(getattr(cur, "exceptions", None) or ())


def _cap_text(text, limit=_MAX_TRACEBACK, last=""):
    """Keep the head and tail lines of an over-long text (frames must stay small).

    Only whole lines are kept: the host redacts secrets line by line after
    this cut, and a cut inside a line could leave part of a secret that it
    can no longer recognise. A line longer than its share is left out whole;
    when that is the last line, ``last`` stands in for it.
    """
    if len(text) <= limit:
        return text
    head_budget = limit * 2 // 5
    tail_budget = limit - head_budget
    # The head ends after the last newline within its budget.
    head_end = text.rfind("\n", 0, head_budget) + 1
    # The tail starts after the first newline at or past len - tail_budget - 1.
    nl = text.find("\n", len(text) - tail_budget - 1)
    if nl < 0 or nl + 1 >= len(text):
        # The last line alone is over the tail's budget (or the text ends
        # without a newline in reach): keep no tail rather than part of it.
        tail_start = len(text)
    else:
        tail_start = nl + 1
    omitted = tail_start - head_end
    return "%s... [traceback truncated: %d characters omitted; only whole lines are kept] ...\n%s" % (
        text[:head_end],
        omitted,
        text[tail_start:] or last,
    )


def _format_exc(exc, cell_file):
    global _traceback
    if _traceback is None:
        import traceback as _traceback
    try:
        te = _traceback.TracebackException(type(exc), exc, exc.__traceback__)
        _filter_te(te, cell_file)
        name = type(exc).__qualname__
        module = type(exc).__module__
        if module not in ("builtins", "__main__"):
            name = "%s.%s" % (module, name)
        return _cap_text("".join(te.format()), last="%s: (message too long to show)\n" % name)
    except BaseException as e:  # e.g. RecursionError on a very long chain (3.8-3.10)
        try:
            only = "".join(_traceback.format_exception_only(type(exc), exc))
        except BaseException:
            only = "%s\n" % type(exc).__name__
        return _cap_text("%s(full traceback unavailable: %s)\n" % (only, type(e).__name__))


def _exit_code(exc):
    """Exit code of a SystemExit as the interpreter would use it."""
    code = exc.code
    if code is None:
        return 0, None
    if isinstance(code, int):
        if -(2**63) <= code < 2**63:
            return int(code), None
        return 1, str(code)
    return 1, str(code)


def _ensure_artifacts():
    global _artifacts_ready
    if not _artifacts_ready:
        os.makedirs(_ARTIFACTS, mode=0o700, exist_ok=True)
        os.chmod(_ARTIFACTS, 0o700)
        _artifacts_ready = True
    return _ARTIFACTS


def _save_figures(count):
    """Save and close every open pyplot figure (only if pyplot is loaded)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    display = []
    try:
        nums = list(plt.get_fignums())
    except Exception as e:
        _raw_stderr("could not list matplotlib figures: %s: %s" % (type(e).__name__, e))
        return display
    for k, num in enumerate(nums, 1):
        try:
            fig = plt.figure(num)
            path = os.path.join(_ensure_artifacts(), "cell-%d-fig-%d.png" % (count, k))
            fig.savefig(path, format="png")
            if _REMOTE:
                if not _send_file(path, "image/png"):
                    continue
                path = os.path.basename(path)
            display.append({"mime": "image/png", "path": path})
        except Exception as e:
            _raw_stderr("could not save figure %s: %s: %s" % (num, type(e).__name__, e))
        finally:
            try:
                plt.close(num)
            except Exception:
                pass
    return display


# Figures larger than this stay behind (the host refuses images over 16 MiB).
_MAX_FILE = 16 << 20


def _send_file(path, mime):
    """A remote kernel's figure goes to the host in a frame (base64)."""
    import binascii

    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE + 1)
        os.unlink(path)
    except OSError as e:
        _raw_stderr("could not read figure %s: %s" % (path, e))
        return False
    if len(data) > _MAX_FILE:
        _raw_stderr("figure %s is larger than %d bytes; not sent" % (os.path.basename(path), _MAX_FILE))
        return False
    b64 = binascii.b2a_base64(data, newline=False).decode("ascii")
    _send(_OUT_FD, {"type": "file", "name": os.path.basename(path), "mime": mime, "data": b64}, False)
    return True


def _usage(ru0, rc0, t0):
    ru1 = _getrusage(_RUSAGE_SELF)
    rc1 = _getrusage(_RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    cpu += (rc1.ru_utime - rc0.ru_utime) + (rc1.ru_stime - rc0.ru_stime)
    return {
        "cpu_seconds": round(cpu, 6),
        "peak_rss_kb": max(ru1.ru_maxrss, rc1.ru_maxrss) // _RSS_DIVISOR,
        "wall_seconds": round(_perf_counter() - t0, 6),
    }


def _release_frames(exc):
    """Drop the local variables of the frames a MemoryError unwound.

    The traceback keeps those frames (and ``sys.last_traceback`` would keep
    them until the next error), so the list that filled memory would stay
    alive and the next cell would fail too. ``frame.clear()`` frees the
    locals but keeps code and line numbers, so the traceback still formats.
    """
    tb = exc.__traceback__
    while tb is not None:
        try:
            tb.tb_frame.clear()
        except RuntimeError:  # a frame still executing (the runner's own)
            pass
        tb = tb.tb_next


def _set_last(exc):
    sys.last_type = type(exc)
    sys.last_value = exc
    sys.last_traceback = exc.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = exc


# --------------------------------------------------------------------------
# What a cell read (docs/result.md, "files": `read`)
# --------------------------------------------------------------------------

# Files listed per cell at most; beyond, only counted.
_READ_LISTED = 50
# Paths remembered per cell (listed, counted or passed over), so a file
# opened again costs one set lookup; beyond, every further read of a path
# not remembered is counted again (the count becomes "at least").
_READ_KNOWN = 4096


class _Reads(object):
    """The regular files the running cell opened for reading."""

    __slots__ = ("listed", "known", "more")

    def __init__(self):
        self.listed = {}  # absolute path -> None, in first-read order
        self.known = set()  # paths as opened, and absolute, already decided
        self.more = 0  # files read beyond the listed ones


# The running cell's reads (None between cells; _READS_NONE_YET until the
# cell's first open, so a cell that opens nothing allocates nothing).
_READS_NONE_YET = object()
_reads = None
# Where the interpreter's own files live (standard library, site-packages,
# the runner and the kernel dir): reads there are not the cell's evidence.
_read_skip = ()


def _read_prefixes():
    import site

    dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, _KDIR]
    here = globals().get("__file__")  # none when run from source (remote kernels)
    if here:
        dirs.append(os.path.dirname(os.path.abspath(here)))
    try:
        dirs.extend(site.getsitepackages())
    except Exception:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:
        pass
    out = []
    for d in dirs:
        if isinstance(d, str) and d:
            d = os.path.abspath(d).rstrip(os.sep) + os.sep
            if d != os.sep and d not in out:
                out.append(d)
    return tuple(out)


def _on_audit(event, args):
    """sys.addaudithook: notes each `open` for reading while a cell runs.

    Never raises: a failure here must not break the cell's open."""
    if event != "open":
        return
    global _reads
    r = _reads
    if r is None:
        return
    if r is _READS_NONE_YET:  # the cell's first open: made only when needed
        r = _reads = _Reads()
    try:
        path, mode, flags = args
        if mode is None:  # os.open: the flags say
            if flags & 3 == os.O_WRONLY:
                return
        elif "r" not in mode and "+" not in mode:
            return
        if isinstance(path, int):  # an open descriptor (fdopen)
            return
        if path in r.known:
            return
        # Imports read sources and bytecode through importlib.
        if sys._getframe(1).f_code.co_filename.startswith("<frozen importlib"):
            return
        name = os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)
        full = os.path.abspath(name)
        if len(r.known) < _READ_KNOWN:
            seen = full in r.known
            r.known.add(path)
            if seen:
                return
            r.known.add(full)
        elif full in r.listed:
            return
        if full.startswith(_read_skip):
            return
        if not _stat.S_ISREG(os.stat(full).st_mode):
            return
        if len(r.listed) < _READ_LISTED:
            r.listed[full] = None
        else:
            r.more += 1
    except BaseException:
        return


def _start_reads():
    global _reads, _read_skip
    if not _read_skip:
        try:
            _read_skip = _read_prefixes()
        except Exception:
            _read_skip = (os.path.abspath(sys.prefix) + os.sep,)
    _reads = _READS_NONE_YET


def _end_reads():
    """`{"paths": [...], "total": n}` of the cell that ran, or None."""
    global _reads
    r, _reads = _reads, None
    if r is None or r is _READS_NONE_YET or not r.listed:
        return None
    # A name that is not UTF-8 (surrogate-escaped) goes as text with
    # replacement characters: the frame must stay valid JSON.
    paths = [p.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for p in r.listed]
    return {"paths": paths, "total": len(r.listed) + r.more}


def _finish_cell(rid, count, filename, exc, ru0, rc0, t0):
    """Build the result of a cell from how it ended (may raise: runner bug)."""
    status = "ok"
    traceback_text = ""
    exit_code = None
    if exc is not None:
        if isinstance(exc, SystemExit):
            status = "exit"
            exit_code, message = _exit_code(exc)
            if message is not None:
                try:
                    sys.stderr.write(message + "\n")
                except BaseException:
                    _raw_stderr(message)
        elif isinstance(exc, KeyboardInterrupt):
            status = "interrupted"
            traceback_text = _format_exc(exc, filename)
        else:
            status = "error"
            if isinstance(exc, MemoryError):
                _release_frames(exc)
            elif isinstance(exc, OSError) and exc.errno == _EMFILE:
                _release_spare()
            _set_last(exc)
            traceback_text = _format_exc(exc, filename)
    reads = _end_reads()
    display = _save_figures(count)
    result = {"type": "result", "id": rid, "status": status}
    if reads is not None:
        result["read"] = reads
    if exit_code is not None:
        result["exit_code"] = exit_code
    result["traceback"] = traceback_text
    result["execution_count"] = count
    result["stdin_requested"] = _stdin.requested
    result["usage"] = _usage(ru0, rc0, t0)
    result["display"] = display
    _reserve_spare()
    return result


def _internal_error_result(rid, count, err):
    try:
        import traceback

        detail = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    except BaseException:
        detail = repr(err)
    return {
        "type": "result",
        "id": rid,
        "status": "error",
        "traceback": _cap_text(
            "toolcell runner: internal error while handling this cell "
            "(the kernel is still usable): %s: %s\n%s" % (type(err).__name__, err, detail)
        ),
        "execution_count": count,
        "stdin_requested": bool(_stdin.requested),
        "usage": {"cpu_seconds": 0.0, "peak_rss_kb": 0, "wall_seconds": 0.0},
        "display": [],
    }


def _handle_execute(req):
    global _exec_count
    rid = req.get("id")
    code = req.get("code")
    if not isinstance(rid, str):
        _raw_stderr("execute request without a string id ignored")
        return
    _exec_count += 1
    count = _exec_count
    t0 = _perf_counter()
    ru0 = _getrusage(_RUSAGE_SELF)
    rc0 = _getrusage(_RUSAGE_CHILDREN)
    exit_code = None
    try:
        if not isinstance(code, str):
            raise TypeError("execute request: code must be a string")
        stubs = req.get("stubs")
        if isinstance(stubs, str):
            _load_stubs(stubs)
        filename = "<cell-%d>" % count
        _stdin.requested = False
        _register_source(filename, code)
        _start_reads()
        try:
            exc = _run_user(code, filename)  # returns with SIGINT ignored again
        except KeyboardInterrupt as late:  # landed in runner code around the cell
            exc = late
            _ignore_sigint()
        if os.getpid() != _PID:
            _forked_child_exit(exc)
        if _direct:
            _async(False)
        if _direct and _signal.getsignal(_signal.SIGIO) is not _on_sigio:
            # The cell took SIGIO over (its default action ends the process):
            # requests must keep reaching us.
            _signal_fn(_signal.SIGIO, _on_sigio)
        result = _finish_cell(rid, count, filename, exc, ru0, rc0, t0)
        exit_code = result.get("exit_code")
    except BaseException as err:
        _ignore_sigint()
        _end_reads()
        if _direct:
            _async(False)
        result = _internal_error_result(rid, count, err)
    # Both frames are made before either is written, so they reach the
    # host back to back: its reader, woken by the first, finds the second
    # there too (one wake-up for the end of a cell, not two).
    _flush_std()
    try:
        framed = _frame(result)
    except BaseException as err:
        framed = _frame(_internal_error_result(rid, count, err))
    try:
        _write_frame(_ERR_FD, _frame({"type": "end", "id": rid}))
    except (BrokenPipeError, ConnectionResetError):
        raise  # the host is gone: the main loop dies
    except OSError:
        pass  # a cell broke the stderr frame channel; the host copes without `end`
    try:
        _write_frame(_OUT_FD, framed)
    except (BrokenPipeError, ConnectionResetError):
        raise
    except OSError as e:
        # A cell closed the runner's private stdout descriptor: no result can
        # reach the host any more. Die now (the host reports a dead kernel)
        # rather than leave the host waiting for the cell's timeout.
        _raw_stderr("cannot send the cell's result (%s: %s); the kernel exits" % (type(e).__name__, e))
        _die()
    if exit_code is not None:
        _exit(exit_code)


def _forked_child_exit(exc):
    """A child the cell forked (os.fork) ran off the end of the cell.

    It must not answer for the cell (the parent does) nor read requests:
    report an uncaught exception as Python would, then exit.
    """
    code = 0
    try:
        if isinstance(exc, SystemExit):
            code, message = _exit_code(exc)
            if message is not None:
                sys.stderr.write(message + "\n")
        elif exc is not None:
            code = 1
            sys.stderr.write(_format_exc(exc, "<cell-%d>" % _exec_count))
        _flush_std()
    finally:
        os._exit(code & 0xFF)


def _exit(code):
    """Leave like the interpreter would (atexit handlers run), then exit."""
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush_std()
    _remove_remote_dir()
    os._exit(code & 0xFF)


# --------------------------------------------------------------------------
# Main loop
# --------------------------------------------------------------------------


def _valid_sentinel(s):
    return isinstance(s, str) and s != "" and all("!" <= ch <= "~" for ch in s)


def main():
    global _MARK, _INBAND_TOOLS
    _ignore_sigint()
    if _REMOTE:
        # Lead our own process group, to signal (interrupt) and kill it.
        try:
            os.setsid()
        except OSError:
            pass  # already a session leader (sshd started us so)
    try:
        _init_fds()
    except OSError as e:
        sys.stderr.write("toolcell runner: fd 3 must be the request pipe (%s)\n" % e)
        sys.exit(2)
    if _REMOTE:
        try:
            _make_remote_dir()
        except OSError as e:
            sys.stderr.write("toolcell runner: %s\n" % e)
            sys.exit(2)
    _reserve_spare()
    kind, hello = _read_hello()
    if kind != "req" or hello.get("type") != "hello":
        _raw_stderr("the first request must be hello")
        os._exit(2)
    if hello.get("protocol") != PROTOCOL:
        _raw_stderr("unsupported protocol %r (this runner speaks %d)" % (hello.get("protocol"), PROTOCOL))
        os._exit(2)
    sentinel = hello.get("sentinel")
    if not _valid_sentinel(sentinel):
        _raw_stderr("the sentinel must be non-empty printable ASCII without whitespace")
        os._exit(2)
    _MARK = b"\n" + sentinel.encode("ascii") + b" "
    _INBAND_TOOLS = bool(hello.get("inband_tools"))
    if _REMOTE or _INBAND_TOOLS:
        # In-band tool replies arrive while the cell's threads wait: a
        # reader thread takes every request.
        for item in _queued:
            _requests.put(item)
        del _queued[:]
        _thread.start_new_thread(_reader, ())
    else:
        _start_direct()
    cwd = hello.get("cwd")
    del sentinel
    if isinstance(cwd, str) and cwd:
        try:
            os.chdir(os.path.expanduser(cwd))
        except OSError as e:
            _raw_stderr("cannot change to the working directory %r: %s" % (cwd, e))
            os._exit(2)
    del hello

    _setup_interpreter()
    _make_namespace()
    _send(
        _OUT_FD,
        {
            "type": "ready",
            "protocol": PROTOCOL,
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable or "",
        },
    )

    get = _next_direct if _direct else _requests.get
    while True:
        try:
            kind, req = get()
            if kind == "bad":
                _raw_stderr(req)
                continue
            rtype = req.get("type")
            if rtype == "execute":
                _handle_execute(req)
            elif rtype == "shutdown":
                _exit(0)
            else:
                _raw_stderr("unknown request type %r ignored" % (rtype,))
        except (BrokenPipeError, ConnectionResetError):
            _die()  # the host closed our output pipes: it is gone
        except BaseException as e:  # never let the main loop die
            _ignore_sigint()
            _raw_stderr("internal error in the main loop: %s: %s" % (type(e).__name__, e))


if __name__ == "__main__":
    main()
