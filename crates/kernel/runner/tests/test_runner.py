"""Behaviour of the toolcell runner (docs/protocol.md), with real processes.

Every test starts a real runner with the harness (as the Rust host does) and
talks to it over real pipes. Run from the repository root:

    python3 -m unittest discover -s crates/kernel/runner/tests -v

The interpreter under test is ``$TOOLCELL_TEST_PYTHON`` (default: the one
running the tests). The matplotlib test needs an interpreter with matplotlib:
the one under test, or ``$TOOLCELL_TEST_MPL_PYTHON``.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Kernel, process_alive  # noqa: E402

RUNNER_NAME = "runner.py"


def dedent(code):
    return textwrap.dedent(code).lstrip("\n")


class RunnerTest(unittest.TestCase):
    def kernel(self, **kw):
        k = Kernel(**kw)
        self.addCleanup(k.close)
        return k

    def assertOk(self, cell):
        self.assertEqual(cell.status, "ok", cell)

    def assertNoRunnerFrames(self, text):
        self.assertNotIn(RUNNER_NAME, text)
        self.assertNotIn("_execute", text)

    def wait_dead(self, pid, timeout):
        deadline = time.monotonic() + timeout
        while process_alive(pid):
            if time.monotonic() > deadline:
                self.fail("process %d still alive after %ss" % (pid, timeout))
            time.sleep(0.01)


class HandshakeAndFds(RunnerTest):
    def test_ready_frame_describes_the_interpreter(self):
        k = self.kernel()
        r = k.ready
        self.assertEqual(r["type"], "ready")
        self.assertEqual(r["protocol"], 1)
        self.assertEqual(r["pid"], k.pid)
        out = subprocess.check_output(
            [k.python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3]); print(sys.executable)"]
        ).decode()
        version, executable = out.split("\n")[:2]
        self.assertEqual(r["python"], version)
        self.assertEqual(os.path.realpath(r["executable"]), os.path.realpath(executable))
        self.assertEqual(set(r), {"type", "protocol", "pid", "python", "executable"})

    def test_sentinel_lives_only_in_memory(self):
        k = self.kernel()
        s = k.sentinel.encode()
        with open("/proc/%d/environ" % k.pid, "rb") as f:
            self.assertNotIn(s, f.read())
        with open("/proc/%d/cmdline" % k.pid, "rb") as f:
            self.assertNotIn(s, f.read())
        for root, _, files in os.walk(k.kdir):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    self.assertNotIn(s, f.read(), name)
        c = k.execute("import os, sys\nprint(repr(dict(os.environ)), sys.argv)")
        self.assertOk(c)
        self.assertNotIn(k.sentinel, c.out)
        self.assertTrue(c.out.endswith(" ['']\n"), c.out)

    def _fds_on_pipe(self, k, pipe_fd):
        ino = os.fstat(pipe_fd).st_ino
        found = []
        for name in os.listdir("/proc/%d/fd" % k.pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (k.pid, name))
            except OSError:
                continue
            if target == "pipe:[%d]" % ino:
                found.append(int(name))
        return sorted(found)

    def _cloexec(self, k, fd):
        with open("/proc/%d/fdinfo/%d" % (k.pid, fd)) as f:
            flags = int([ln for ln in f if ln.startswith("flags:")][0].split()[1], 8)
        return bool(flags & 0o2000000)

    def test_request_pipe_moves_to_a_private_cloexec_fd_and_fd3_is_closed(self):
        k = self.kernel()
        found = self._fds_on_pipe(k, k.req_w)
        self.assertEqual(len(found), 1, found)
        self.assertGreaterEqual(found[0], 100)
        self.assertTrue(self._cloexec(k, found[0]), "request fd must be close-on-exec")
        # Private close-on-exec duplicates of fds 1 and 2 carry the frames.
        for std, pipe in ((1, k.proc.stdout), (2, k.proc.stderr)):
            fds = self._fds_on_pipe(k, pipe.fileno())
            self.assertEqual(fds[0], std)
            self.assertEqual(len(fds), 2, fds)
            self.assertGreaterEqual(fds[1], 100)
            self.assertTrue(self._cloexec(k, fds[1]))
            self.assertFalse(self._cloexec(k, std))  # subprocesses still write to fds 1/2
        c = k.execute(
            dedent(
                """
                import os, subprocess, sys
                try:
                    os.fstat(3)
                    print("fd3 open")
                except OSError:
                    print("fd3 closed")
                listing = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"
                out = subprocess.check_output([sys.executable, "-c", listing])
                print(out.decode().strip())
                """
            )
        )
        self.assertOk(c)
        lines = c.out.split("\n")
        self.assertEqual(lines[0], "fd3 closed")
        child_fds = json.loads(lines[1])
        # 0, 1, 2 and the fd listdir itself used: nothing of the protocol leaks.
        self.assertTrue(set(child_fds) <= {0, 1, 2, 3}, child_fds)
        self.assertFalse([fd for fd in child_fds if fd >= 100])

    def test_wrong_protocol_is_refused_with_a_message(self):
        k = self.kernel(handshake=False)
        k.send({"type": "hello", "sentinel": "abc-def-ghi", "protocol": 2})
        self.assertEqual(k.wait_exit(10), 2)
        self.assertIn(b"unsupported protocol", k.stderr.wait_raw(b"protocol", 5))

    def test_a_sentinel_with_whitespace_is_refused(self):
        k = self.kernel(handshake=False)
        k.send({"type": "hello", "sentinel": "has space", "protocol": 1})
        self.assertEqual(k.wait_exit(10), 2)
        self.assertIn(b"sentinel must be", k.stderr.wait_raw(b"sentinel", 5))

    def test_first_request_must_be_hello(self):
        k = self.kernel(handshake=False)
        k.send({"type": "execute", "id": "1", "code": "print(1)"})
        self.assertEqual(k.wait_exit(10), 2)
        self.assertIn(b"first request must be hello", k.stderr.wait_raw(b"hello", 5))

    def test_cwd_and_sys_path(self):
        cwd = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
        k = self.kernel(cwd=cwd)
        c = k.execute("import os, sys\nprint(os.getcwd())\nprint(sys.path[0])\nprint('' in sys.path)")
        self.assertOk(c)
        lines = c.out.split("\n")
        self.assertEqual(lines[0], cwd)
        self.assertEqual(os.path.realpath(lines[1]), os.path.realpath(k.kdir))
        self.assertEqual(lines[2], "True")


class Framing(RunnerTest):
    def test_fake_frame_with_guessed_sentinel_stays_raw_output(self):
        k = self.kernel()
        fake_body = json.dumps({"type": "result", "id": "forged", "status": "ok"})
        code = dedent(
            """
            import sys
            body = %r
            fake = "\\ntc-guessed-sentinel %%d\\n%%s" %% (len(body), body)
            print(fake)
            sys.stderr.write("\\ntc-guessed-sentinel 20\\n" + '{"type":"end","id":"forged"}')
            print("after")
            """
            % fake_body
        )
        c = k.execute(code)
        self.assertOk(c)
        self.assertIn("tc-guessed-sentinel", c.out)
        self.assertIn(fake_body, c.out)
        self.assertTrue(c.out.endswith("after\n"), c)
        self.assertIn('{"type":"end","id":"forged"}', c.err)
        self.assertEqual(c.skipped, [])

    def test_dup2_over_stdout_and_closing_stderr_cannot_cut_the_channel(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import os
                x = 41
                print("before")
                os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
                os.close(2)
                os.dup2(os.open("/dev/null", os.O_RDONLY), 3)
                print("lost to /dev/null")
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "before\n")
        c = k.execute("x += 1\nprint('also lost')")
        self.assertOk(c)
        self.assertEqual(c.out, "")
        c = k.execute("raise ValueError(x)")
        self.assertEqual(c.status, "error")
        self.assertIn("ValueError: 42", c.tb)

    def test_end_on_stderr_follows_the_cells_stderr_and_result_follows_stdout(self):
        k = self.kernel()
        c = k.execute("import sys\nprint('o' * 300000)\nsys.stderr.write('e' * 100000)\nprint('tail')")
        self.assertOk(c)
        self.assertEqual(c.out, "o" * 300000 + "\ntail\n")
        self.assertEqual(c.err, "e" * 100000)
        self.assertEqual(c.end, {"type": "end", "id": c.result["id"]})

    def test_output_without_a_trailing_newline_stays_exact(self):
        k = self.kernel()
        c = k.execute("import sys\nprint('abc', end='')\nn = sys.stderr.write('err-no-newline')")
        self.assertOk(c)
        self.assertEqual(c.out, "abc")
        self.assertEqual(c.err, "err-no-newline")

    def test_result_fields_are_exactly_the_spec(self):
        k = self.kernel()
        c = k.execute("1")
        self.assertEqual(
            set(c.result),
            {"type", "id", "status", "traceback", "execution_count", "stdin_requested", "usage", "display"},
        )
        self.assertEqual(set(c.result["usage"]), {"cpu_seconds", "peak_rss_kb", "wall_seconds"})
        self.assertIsInstance(c.result["usage"]["peak_rss_kb"], int)
        c = k.execute("raise SystemExit(0)")
        self.assertIn("exit_code", c.result)

    def test_lone_surrogates_still_give_a_valid_utf8_frame(self):
        k = self.kernel()
        c = k.execute("raise ValueError('bad \\udcff byte')")
        self.assertEqual(c.status, "error")
        self.assertIn("ValueError: bad", c.tb)

    def test_non_ascii_code_output_and_traceback(self):
        k = self.kernel()
        c = k.execute("s = 'héllo ✓ 日本'\nprint(s)\nraise ValueError(s + ' ✗')")
        self.assertEqual(c.status, "error")
        self.assertEqual(c.out, "héllo ✓ 日本\n")
        self.assertIn("ValueError: héllo ✓ 日本 ✗", c.tb)
        self.assertIn("raise ValueError(s + ' ✗')", c.tb)

    def test_a_large_cell_source(self):
        k = self.kernel()
        code = "".join("v%d = %d\n" % (i, i) for i in range(50000)) + "v49999 + 1"
        c = k.execute(code)
        self.assertOk(c)
        self.assertEqual(c.out, "50000\n")


class HarnessDecoder(unittest.TestCase):
    """The harness's frame decoder: events must not depend on chunking."""

    def _decode(self, data, sizes):
        import itertools

        d = harness.Decoder(b"S3NT")
        events = []
        pos = 0
        for size in itertools.cycle(sizes):
            if pos >= len(data):
                break
            events += d.feed(data[pos : pos + size])
            pos += size
        events += d.finish()
        merged = []
        for kind, payload in events:
            if kind == "raw" and merged and merged[-1][0] == "raw":
                merged[-1] = ("raw", merged[-1][1] + payload)
            elif kind != "raw" or payload:
                merged.append((kind, payload))
        return merged

    def test_events_do_not_depend_on_chunk_sizes(self):
        body = b'{"type":"end","id":"x"}'
        data = (
            b"raw \nS3N partial marker \nS3NT 12x not a header \nS3NT 3\nabc"
            + b"\nS3NT %d\n%s tail \nS3NT" % (len(body), body)
            + b" 0\n\nS3NT 99999999999999999999999\n after"
        )
        expected = [
            ("raw", b"raw \nS3N partial marker \nS3NT 12x not a header "),
            ("frame", b"abc"),
            ("frame", body),
            ("raw", b" tail "),
            ("frame", b""),
            ("raw", b"\nS3NT 99999999999999999999999\n after"),
        ]
        for sizes in ([len(data)], [1], [2], [3, 1], [7], [5, 11, 2]):
            self.assertEqual(self._decode(data, sizes), expected, sizes)


class Lifecycle(RunnerTest):
    def test_eof_on_requests_mid_cell_kills_the_process_group(self):
        k = self.kernel()
        cid = k.start(
            dedent(
                """
                import subprocess, sys, time
                child = subprocess.Popen(["sleep", "60"])
                # A grandchild in its own session: outside the process group.
                code = "import subprocess, time; subprocess.Popen(['sleep', '61']); time.sleep(60)"
                escaper = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
                time.sleep(0.3)
                print("child=%d,%d;" % (child.pid, escaper.pid), flush=True)
                time.sleep(60)
                """
            )
        )
        seen = k.stdout.wait_raw(b";", 10).decode()
        pids = [int(p) for p in seen.split("child=")[1].split(";")[0].split(",")]
        with open("/proc/%d/task/%d/children" % (pids[1], pids[1])) as f:
            pids += [int(p) for p in f.read().split()]  # the escaper's own sleep
        self.assertEqual(len(pids), 3)
        for pid in pids:
            self.assertTrue(process_alive(pid), pid)
        deadline = time.monotonic() + 1.0
        k.close_requests()
        self.assertEqual(k.wait_exit(1.0), -signal.SIGKILL)
        for pid in pids:
            self.wait_dead(pid, max(0.05, deadline - time.monotonic()))
        del cid

    def test_eof_between_cells_ends_the_kernel(self):
        k = self.kernel()
        self.assertOk(k.execute("x = 1"))
        k.close_requests()
        self.assertEqual(k.wait_exit(1.0), -signal.SIGKILL)

    def test_shutdown_exits_zero(self):
        k = self.kernel()
        self.assertOk(k.execute("x = 1"))
        k.send({"type": "shutdown"})
        k.close_requests()
        self.assertEqual(k.wait_exit(5), 0)

    def test_shutdown_runs_atexit_handlers(self):
        k = self.kernel()
        path = os.path.join(k.kdir, "atexit-ran")
        self.assertOk(k.execute("import atexit\natexit.register(lambda: open(%r, 'w').close())" % path))
        k.send({"type": "shutdown"})
        self.assertEqual(k.wait_exit(5), 0)
        self.assertTrue(os.path.exists(path))

    def test_sigint_between_cells_does_nothing(self):
        k = self.kernel()
        self.assertOk(k.execute("x = 'kept'"))
        for _ in range(3):
            k.signal_group(signal.SIGINT)
        time.sleep(0.3)
        self.assertIsNone(k.proc.poll())
        c = k.execute("x")
        self.assertOk(c)
        self.assertEqual(c.out, "'kept'\n")

    def test_sigint_is_ignored_between_cells_and_caught_during_them(self):
        k = self.kernel()

        def masks():
            with open("/proc/%d/status" % k.pid) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            bit = 1 << (signal.SIGINT - 1)
            return bool(int(fields["SigIgn"], 16) & bit), bool(int(fields["SigCgt"], 16) & bit)

        self.assertOk(k.execute("x = 1"))
        self.assertEqual(masks(), (True, False))  # SIG_IGN while idle
        cid = k.start("import sys, time\nsys.stdout.write('in cell\\n')\ntime.sleep(0.5)")
        k.stdout.wait_raw(b"in cell", 10)
        self.assertEqual(masks(), (False, True))  # a handler while the cell runs
        self.assertOk(k.wait(cid))
        self.assertEqual(masks(), (True, False))

    def test_sigint_during_a_cell_interrupts_it_and_keeps_state(self):
        k = self.kernel()
        self.assertOk(k.execute("x = 'kept'"))
        cid = k.start("import sys, time\nsys.stdout.write('sleeping\\n')\ntime.sleep(30)\nx = 'lost'")
        k.stdout.wait_raw(b"sleeping", 10)
        time.sleep(0.1)
        k.signal_group(signal.SIGINT)
        c = k.wait(cid, 10)
        self.assertEqual(c.status, "interrupted")
        self.assertNotIn("exit_code", c.result)
        self.assertIn("KeyboardInterrupt", c.tb)
        self.assertIn('File "<cell-2>", line 3', c.tb)
        self.assertNoRunnerFrames(c.tb)
        c = k.execute("x")
        self.assertEqual(c.out, "'kept'\n")

    def test_sigint_interrupts_a_shell_line(self):
        k = self.kernel()
        cid = k.start("print('go', flush=True)\n!sleep 30\nprint('not reached')")
        k.stdout.wait_raw(b"go", 10)
        time.sleep(0.2)
        k.signal_group(signal.SIGINT)
        c = k.wait(cid, 10)
        self.assertEqual(c.status, "interrupted")
        self.assertNotIn("not reached", c.out)
        self.assertOk(k.execute("!true"))

    def test_sigint_interrupts_an_await_and_the_loop_stays_usable(self):
        k = self.kernel()
        cid = k.start("import asyncio\nprint('waiting', flush=True)\nawait asyncio.sleep(30)")
        k.stdout.wait_raw(b"waiting", 10)
        time.sleep(0.2)
        k.signal_group(signal.SIGINT)
        c = k.wait(cid, 10)
        self.assertEqual(c.status, "interrupted")
        c = k.execute("await asyncio.sleep(0.01, result='again')")
        self.assertOk(c)
        self.assertEqual(c.out, "'again'\n")

    def test_keyboardinterrupt_raised_by_code_is_interrupted(self):
        k = self.kernel()
        c = k.execute("raise KeyboardInterrupt")
        self.assertEqual(c.status, "interrupted")

    def test_system_exit_3(self):
        k = self.kernel()
        c = k.execute("x = 1\nraise SystemExit(3)")
        self.assertEqual(c.status, "exit")
        self.assertEqual(c.result["exit_code"], 3)
        self.assertEqual(c.tb, "")
        self.assertEqual(k.wait_exit(5), 3)

    def test_sys_exit_without_code_is_zero(self):
        k = self.kernel()
        c = k.execute("import sys\ndef leave():\n    sys.exit()\nleave()")
        self.assertEqual((c.status, c.result["exit_code"]), ("exit", 0))
        self.assertEqual(k.wait_exit(5), 0)

    def test_sys_exit_with_a_message_is_one_and_prints_it(self):
        k = self.kernel()
        c = k.execute("import sys\nsys.exit('goodbye, world')")
        self.assertEqual((c.status, c.result["exit_code"]), ("exit", 1))
        self.assertEqual(c.err, "goodbye, world\n")
        self.assertEqual(k.wait_exit(5), 1)

    def test_system_exit_inside_await_cell(self):
        k = self.kernel()
        c = k.execute("import asyncio\nawait asyncio.sleep(0)\nraise SystemExit(7)")
        self.assertEqual((c.status, c.result["exit_code"]), ("exit", 7))
        self.assertEqual(k.wait_exit(5), 7)

    def test_a_forked_child_falling_off_the_cell_does_not_answer_for_it(self):
        k = self.kernel()
        c1 = k.execute(
            "import os\npid = os.fork()\n"
            "if pid == 0:\n    print('in child', flush=True)\n    raise ValueError('child fails')"
        )
        self.assertOk(c1)
        c2 = k.execute("os.waitpid(pid, 0)[1] >> 8")
        self.assertOk(c2)
        self.assertTrue(c2.out.endswith("1\n"), c2)  # the child exited 1 (uncaught error)
        # The child's output lands in whichever cell was running when it wrote.
        self.assertIn("in child\n", c1.out + c2.out)
        self.assertIn("ValueError: child fails", c1.err + c2.err)
        self.assertNotIn("runner.py", c1.err + c2.err)
        self.assertEqual(c1.skipped + c2.skipped, [])  # no second result or end frame

    def test_bad_requests_are_reported_and_the_kernel_keeps_serving(self):
        k = self.kernel()
        k.send_raw(b"this is not json\n")
        k.send_raw(b"[1, 2]\n")
        k.send({"type": "frobnicate"})
        k.send({"type": "execute", "id": "no-code"})
        c = k.wait("no-code", 10)
        self.assertEqual(c.status, "error")
        self.assertIn("code must be a string", c.tb)
        # The complaints were written before the cell's end frame.
        self.assertIn("not JSON", c.err)
        self.assertIn("not a JSON object", c.err)
        self.assertIn("frobnicate", c.err)
        c = k.execute("1 + 1")
        self.assertEqual(c.out, "2\n")

    def test_execution_count_counts_every_cell(self):
        k = self.kernel()
        counts = [k.execute(code).result["execution_count"] for code in ("1", "1/0", "def (", "2")]
        self.assertEqual(counts, [1, 2, 3, 4])


class Namespace(RunnerTest):
    def test_state_persists_in_a_real_main_module(self):
        k = self.kernel()
        self.assertOk(k.execute("import math\nx = 10\nclass Point:\n    pass"))
        c = k.execute(
            dedent(
                """
                import sys, pickle, builtins
                x += 1
                print(x, math.pi > 3, __name__)
                print(sys.modules["__main__"].__dict__ is globals())
                print(__builtins__ is builtins, len([1, 2]))
                p = pickle.loads(pickle.dumps(Point()))
                print(type(p) is Point)
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "11 True __main__\nTrue\nTrue 2\nTrue\n")

    def test_cells_run_on_the_main_thread(self):
        k = self.kernel()
        c = k.execute("import threading\nthreading.current_thread() is threading.main_thread()")
        self.assertEqual(c.out, "True\n")

    def test_helpers_come_from_toolcell_tools(self):
        tools = dedent(
            """
            import json
            def json_parse(text):
                return json.loads(text.lstrip("\\ufeff"))
            def shell_quote(s):
                return "'" + s.replace("'", "'\\\\''") + "'"
            def retry(fn, attempts=3):
                return fn()
            def read_file(path):
                raise RuntimeError("no host here")
            """
        )
        k = self.kernel(tools_module=tools)
        c = k.execute(
            dedent(
                """
                import toolcell_tools
                print(json_parse is toolcell_tools.json_parse, shell_quote is toolcell_tools.shell_quote,
                      retry is toolcell_tools.retry)
                print(json_parse('\\ufeff{"a": 1}'), shell_quote("it's"))
                print('read_file' in globals())
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "True True True\n{'a': 1} 'it'\\''s'\nFalse\n")

    def test_helpers_absent_without_the_stub_module(self):
        k = self.kernel()
        c = k.execute("print([n for n in ('json_parse', 'shell_quote', 'retry') if n in globals()])")
        self.assertEqual(c.out, "[]\n")

    def test_stub_module_found_even_in_isolated_mode(self):
        k = self.kernel(flags=("-u", "-I", "-S"), tools_module="def json_parse(t):\n    return 'stub'\n")
        c = k.execute("print(json_parse('x'))\nimport sys\nprint('' in sys.path)")
        self.assertOk(c)
        self.assertEqual(c.out, "stub\nFalse\n")

    def test_broken_stub_module_is_reported_not_fatal(self):
        k = self.kernel(tools_module="raise RuntimeError('stub exploded')\n")
        self.assertIn(b"stub exploded", k.stderr.wait_raw(b"stub exploded", 5))
        self.assertOk(k.execute("x = 1"))


class Echo(RunnerTest):
    def test_trailing_expression_is_echoed_like_the_repl(self):
        k = self.kernel()
        cases = [
            ("1 + 1", "2\n"),
            ("'s'", "'s'\n"),
            ("None", ""),
            ("x = 5", ""),
            ("1\n2", "2\n"),
            ("for i in range(3):\n    i", ""),
            ("def f():\n    return 3\nf()", "3\n"),
            ("x; x * 2", "10\n"),
            ("print('p')", "p\n"),
        ]
        for code, expected in cases:
            c = k.execute(code)
            self.assertOk(c)
            self.assertEqual(c.out, expected, code)

    def test_underscore_holds_the_last_echoed_value(self):
        k = self.kernel()
        k.execute("41 + 1")
        c = k.execute("_ + 0")
        self.assertEqual(c.out, "42\n")

    def test_trailing_await_is_echoed(self):
        k = self.kernel()
        c = k.execute("import asyncio\nawait asyncio.sleep(0, result=7)")
        self.assertOk(c)
        self.assertEqual(c.out, "7\n")

    def test_echo_error_in_repr_is_a_cell_error(self):
        k = self.kernel()
        c = k.execute("class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')\nBad()")
        self.assertEqual(c.status, "error")
        self.assertIn("ValueError: no repr", c.tb)
        self.assertNoRunnerFrames(c.tb)


class TopLevelAwait(RunnerTest):
    def test_one_event_loop_persists_across_cells(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import asyncio
                ev = asyncio.Event()
                async def waiter():
                    await ev.wait()
                    return 42
                task = asyncio.ensure_future(waiter())
                loop1 = asyncio.get_running_loop()
                await asyncio.sleep(0)
                task.done()
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "False\n")
        c = k.execute("ev.set()\nprint(asyncio.get_running_loop() is loop1)\nawait task")
        self.assertOk(c)
        self.assertEqual(c.out, "True\n42\n")

    def test_asyncio_run_in_a_plain_cell_does_not_break_await_cells(self):
        k = self.kernel()
        self.assertOk(k.execute("import asyncio\nasync def f():\n    return 1\nprint(asyncio.run(f()))"))
        c = k.execute("await f()")
        self.assertOk(c)
        self.assertEqual(c.out, "1\n")

    def test_async_for_and_with_at_top_level(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import asyncio, contextlib
                async def gen():
                    for i in range(3):
                        await asyncio.sleep(0)
                        yield i
                @contextlib.asynccontextmanager
                async def ctx():
                    yield "in"
                async with ctx() as v:
                    print(v)
                print([i async for i in gen()])
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "in\n[0, 1, 2]\n")


class ShellLines(RunnerTest):
    def test_shell_output_streams_in_order(self):
        k = self.kernel()
        c = k.execute("print('a')\n!echo b\nprint('c')\n!echo e >&2\n!echo $0")
        self.assertOk(c)
        self.assertEqual(c.out, "a\nb\nc\n/bin/sh\n")
        self.assertEqual(c.err, "e\n")

    def test_shell_line_inside_a_block_keeps_indentation(self):
        k = self.kernel()
        c = k.execute("for i in range(2):\n    !echo loop\nif True:\n\t!echo tab")
        self.assertOk(c)
        self.assertEqual(c.out, "loop\nloop\ntab\n")

    def test_shell_line_runs_in_the_session_cwd_with_stdin_devnull(self):
        cwd = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
        k = self.kernel(cwd=cwd)
        c = k.execute("!pwd\n!cat; echo rc=$?")
        self.assertOk(c)
        self.assertEqual(c.out, cwd + "\nrc=0\n")

    def test_bang_and_percent_inside_strings_and_brackets_are_python(self):
        k = self.kernel()
        code = dedent(
            '''
            s = """
            !not a command
            %not a magic
            """
            t = \'\'\'x
              !still a string\'\'\'
            n = (7
            % 4)
            m = [1,
              !True]  if False else 0
            u = "a\\
            !b"
            print(repr(s), repr(t), n, repr(u))
            '''
        )
        c = k.execute(code)
        # `!True]` inside brackets is not a shell line: it is a Python syntax error.
        self.assertEqual(c.status, "error", c)
        self.assertIn("SyntaxError", c.tb)
        code = code.replace("m = [1,\n  !True]  if False else 0\n", "")
        c = k.execute(code)
        self.assertOk(c)
        self.assertEqual(c.out, "'\\n!not a command\\n%not a magic\\n' 'x\\n  !still a string' 3 'a!b'\n")

    def test_backslash_continuation_is_not_a_shell_line(self):
        k = self.kernel()
        c = k.execute("x = 5 \\\n%3\nx")
        self.assertOk(c)
        self.assertEqual(c.out, "2\n")

    def test_percent_pip_runs_this_interpreters_pip(self):
        k = self.kernel()
        c = k.execute("%pip --version")
        self.assertOk(c)
        self.assertIn("pip ", c.out)
        v = k.ready["python"].rsplit(".", 1)[0]
        self.assertIn("python %s" % v, c.out)

    def test_other_magics_are_a_clear_error_and_nothing_runs(self):
        k = self.kernel()
        c = k.execute("print('ran')\n%timeit sum(range(10))")
        self.assertEqual(c.status, "error")
        self.assertEqual(c.out, "")
        self.assertIn("unsupported magic %timeit", c.tb)
        self.assertIn('File "<cell-1>", line 2', c.tb)
        self.assertNoRunnerFrames(c.tb)
        c = k.execute("%matplotlib inline")
        self.assertIn("saved as PNG automatically", c.tb)
        c = k.execute("%%bash\necho hi")
        self.assertIn("unsupported magic %%bash", c.tb)

    def test_percent_pip_with_unbalanced_quotes_is_a_syntax_error(self):
        k = self.kernel()
        c = k.execute("x = 1\n%pip install 'oops")
        self.assertEqual(c.status, "error")
        self.assertIn("cannot parse %pip arguments", c.tb)
        self.assertIn('File "<cell-1>", line 2', c.tb)

    def test_failing_shell_command_does_not_raise(self):
        k = self.kernel()
        c = k.execute("!exit 3\nprint('after')")
        self.assertOk(c)
        self.assertEqual(c.out, "after\n")


class Tracebacks(RunnerTest):
    def test_syntax_error_shows_the_cell_line_and_no_runner_frame(self):
        k = self.kernel()
        k.execute("x = 1")
        c = k.execute("y = 2\nif x > 0\n    pass")
        self.assertEqual(c.status, "error")
        self.assertIn('File "<cell-2>", line 2', c.tb)
        self.assertIn("if x > 0", c.tb)
        self.assertIn("SyntaxError", c.tb)
        self.assertNotIn("Traceback (most recent call last)", c.tb)
        self.assertNoRunnerFrames(c.tb)

    def test_error_in_a_function_from_an_earlier_cell_shows_both_cells(self):
        k = self.kernel()
        k.execute("def divide(a, b):\n    return a / b")
        c = k.execute("z = 1\ndivide(z, 0)")
        self.assertEqual(c.status, "error")
        self.assertTrue(c.tb.startswith("Traceback (most recent call last):\n"), c.tb)
        self.assertIn('File "<cell-2>", line 2, in <module>\n    divide(z, 0)', c.tb)
        self.assertIn('File "<cell-1>", line 2, in divide\n    return a / b', c.tb)
        self.assertIn("ZeroDivisionError", c.tb)
        self.assertNoRunnerFrames(c.tb)

    def test_chained_exceptions_have_no_runner_frames(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                def inner():
                    raise KeyError("k")
                try:
                    inner()
                except KeyError as e:
                    try:
                        raise ValueError("during") from e
                    except ValueError:
                        raise RuntimeError("outer")
                """
            )
        )
        self.assertEqual(c.status, "error")
        self.assertIn("KeyError: 'k'", c.tb)
        self.assertIn("direct cause", c.tb)
        self.assertIn("During handling", c.tb)
        self.assertIn("RuntimeError: outer", c.tb)
        self.assertEqual(c.tb.count("Traceback (most recent call last)"), 3)
        self.assertNoRunnerFrames(c.tb)

    def test_error_inside_a_coroutine_starts_at_the_cell(self):
        k = self.kernel()
        c = k.execute(
            "import asyncio\nasync def boom():\n    await asyncio.sleep(0)\n    raise ValueError('async')\nawait boom()"
        )
        self.assertEqual(c.status, "error")
        first_frame = c.tb.split("\n")[1]
        self.assertIn('File "<cell-1>", line 5', first_frame)
        self.assertIn("ValueError: async", c.tb)
        self.assertNotIn("base_events", c.tb)
        self.assertNoRunnerFrames(c.tb)

    def test_linecache_keeps_cell_sources(self):
        k = self.kernel()
        k.execute("def f():\n    return 'source line'")
        c = k.execute("import linecache, inspect\nprint(linecache.getline('<cell-1>', 2).strip())")
        self.assertOk(c)
        self.assertEqual(c.out, "return 'source line'\n")

    def test_tracebacks_printed_by_the_cell_itself_show_cell_lines(self):
        # linecache may be imported for the first time by the cell: it must
        # still know this cell and the earlier ones.
        k = self.kernel()
        self.assertOk(k.execute("def f():\n    raise ValueError('from f')"))
        c = k.execute(
            dedent(
                """
                import traceback
                try:
                    f()
                except ValueError:
                    traceback.print_exc()
                """
            )
        )
        self.assertOk(c)
        self.assertIn('File "<cell-2>", line 3, in <module>\n    f()\n', c.err)
        self.assertIn("File \"<cell-1>\", line 2, in f\n    raise ValueError('from f')\n", c.err)
        self.assertNotIn(RUNNER_NAME, c.err)

    def test_warnings_show_the_cell_line(self):
        k = self.kernel()
        c = k.execute("import warnings\nx = 1\nwarnings.warn('careful')")
        self.assertOk(c)
        self.assertIn("<cell-1>:3: UserWarning: careful\n  warnings.warn('careful')\n", c.err)

    def test_a_huge_traceback_keeps_whole_head_and_tail_lines_only(self):
        # The host redacts secrets line by line after this cut, so the runner
        # never cuts inside a line.
        k = self.kernel()
        c = k.execute("x = 1\nraise ValueError(''.join('line %07d\\n' % i for i in range(500000)))")
        self.assertEqual(c.status, "error")
        self.assertLessEqual(len(c.tb), (4 << 20) + 200)
        self.assertIn('File "<cell-1>", line 2', c.tb)
        self.assertIn("ValueError: line 0000000\nline 0000001\n", c.tb)
        self.assertTrue(c.tb.endswith("line 0499999\n\n"), c.tb[-100:])
        head, tail = c.tb.split("... [traceback truncated: ", 1)
        self.assertTrue(head.endswith("\n"), head[-50:])
        self.assertTrue(tail.split("\n", 1)[1].startswith("line "), tail[:100])
        for line in tail.split("\n")[1:]:
            self.assertIn(len(line), (0, 12), line)

    def test_a_line_over_the_bound_is_left_out_whole(self):
        k = self.kernel()
        c = k.execute("x = 1\nraise ValueError('A' * 3000000 + 'Z' * 3000000)")
        self.assertEqual(c.status, "error")
        self.assertLessEqual(len(c.tb), 1000)
        self.assertIn('File "<cell-1>", line 2', c.tb)
        self.assertNotIn("AAAA", c.tb)
        self.assertNotIn("ZZZZ", c.tb)
        self.assertTrue(c.tb.endswith("ValueError: (message too long to show)\n"), c.tb[-200:])
        self.assertIn("[traceback truncated: ", c.tb)

    def test_sys_last_value_is_set(self):
        k = self.kernel()
        k.execute("1/0")
        c = k.execute("import sys\ntype(sys.last_value).__name__")
        self.assertEqual(c.out, "'ZeroDivisionError'\n")

    def test_runner_internal_error_still_gives_a_result(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import sys
                g = type(sys.stdin).readline.__globals__
                original = g["_save_figures"]
                def broken(count):
                    g["_save_figures"] = original
                    raise RuntimeError("injected runner fault")
                g["_save_figures"] = broken
                """
            )
        )
        self.assertEqual(c.status, "error")
        self.assertIn("internal error", c.tb)
        self.assertIn("injected runner fault", c.tb)
        self.assertEqual(c.result["execution_count"], 1)
        c = k.execute("print('still alive')")
        self.assertOk(c)
        self.assertEqual(c.out, "still alive\n")


class Stdin(RunnerTest):
    def test_input_raises_at_once_and_is_flagged(self):
        k = self.kernel()
        c = k.execute("name = input('Name? ')")
        self.assertEqual(c.status, "error")
        self.assertTrue(c.result["stdin_requested"])
        self.assertIn("interactive input is not supported", c.tb)
        self.assertIn("read the file", c.tb)
        self.assertIn("name = input('Name? ')", c.tb)
        self.assertNoRunnerFrames(c.tb)
        c = k.execute("x = 1")
        self.assertFalse(c.result["stdin_requested"])

    def test_every_way_of_reading_stdin_is_refused(self):
        k = self.kernel()
        for code in (
            "import sys\nsys.stdin.read()",
            "import sys\nsys.stdin.readline()",
            "import sys\nfor line in sys.stdin:\n    pass",
            "import sys\nsys.stdin.buffer.read()",
            "import sys\nsys.stdin.readlines()",
        ):
            c = k.execute(code)
            self.assertEqual(c.status, "error", code)
            self.assertTrue(c.result["stdin_requested"], code)
            self.assertIn("interactive input is not supported", c.tb, code)

    def test_caught_input_error_still_flags_the_request(self):
        k = self.kernel()
        c = k.execute("try:\n    input()\nexcept Exception as e:\n    print(type(e).__name__)")
        self.assertOk(c)
        self.assertTrue(c.result["stdin_requested"])
        self.assertEqual(c.out, "StdinNotImplementedError\n")


class Usage(RunnerTest):
    def test_cpu_and_wall_of_the_cell(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import time
                t = time.process_time()
                while time.process_time() - t < 0.3:
                    pass
                time.sleep(0.2)
                """
            )
        )
        u = c.result["usage"]
        self.assertGreaterEqual(u["cpu_seconds"], 0.3)
        self.assertGreaterEqual(u["wall_seconds"], 0.5)
        c = k.execute("pass")
        self.assertLess(c.result["usage"]["cpu_seconds"], 0.3)  # a delta, not a running total

    def test_cpu_of_child_processes_counts(self):
        k = self.kernel()
        burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
        c = k.execute("import subprocess, sys\nsubprocess.run([sys.executable, '-c', %r])" % burn)
        self.assertOk(c)
        self.assertGreaterEqual(c.result["usage"]["cpu_seconds"], 0.3)

    def test_peak_rss_reflects_an_allocation(self):
        k = self.kernel()
        before = k.execute("pass").result["usage"]["peak_rss_kb"]
        self.assertGreater(before, 1000)
        c = k.execute("blob = b'x' * (200 * 1024 * 1024)\ndel blob")
        # 200 MiB allocated; allow for pages the allocator never touched.
        self.assertGreaterEqual(c.result["usage"]["peak_rss_kb"], before + 150 * 1024)


class Reads(RunnerTest):
    """The files a cell opened for reading: result["read"] (files.read)."""

    def test_reads_are_listed_once_in_first_read_order_and_only_reads(self):
        k = self.kernel()
        work = k.execute("import os, tempfile; d = tempfile.mkdtemp(); print(d)").out.strip()
        for name in ("a.txt", "b.txt", "w.txt"):
            with open(os.path.join(work, name), "w") as f:
                f.write("x\n")
        c = k.execute(
            dedent(
                """
                import os, json, csv  # imports are not the cell's reads
                for _ in range(1000):
                    open(os.path.join(d, 'b.txt')).read()
                os.close(os.open(os.path.join(d, 'a.txt'), os.O_RDONLY))
                open(os.path.join(d, 'w.txt'), 'w').write('y')     # a write only
                open(os.path.join(d, 'new.txt'), 'w').write('n')
                open(os.path.join(d, 'new.txt')).read()            # written, then read
                open(os.devnull).read()                            # not a regular file
                text = 'open("never.txt")'                         # named, not read
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(
            c.result["read"],
            {"paths": [os.path.join(work, n) for n in ("b.txt", "a.txt", "new.txt")], "total": 3},
        )

    def test_a_name_that_is_not_utf8_is_reported_with_replacement_characters(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import os, tempfile
                d = tempfile.mkdtemp()
                p = os.path.join(os.fsencode(d), b'caf\\xe9.txt')
                open(p, 'wb').close()
                open(p, 'rb').close()
                print(d)
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.result["read"]["paths"], [os.path.join(c.out.strip(), "caf\ufffd.txt")])

    def test_a_cell_that_reads_nothing_has_no_read_key(self):
        k = self.kernel()
        c = k.execute("import json\nx = 1 + 1")
        self.assertOk(c)
        self.assertNotIn("read", c.result)

    def test_past_fifty_files_are_counted_not_listed(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import os, tempfile
                d = tempfile.mkdtemp()
                for i in range(60):
                    p = os.path.join(d, 'f%02d' % i)
                    open(p, 'w').close()
                    open(p).close()
                    open(p).close()
                """
            )
        )
        self.assertOk(c)
        read = c.result["read"]
        self.assertEqual(len(read["paths"]), 50)
        self.assertTrue(read["paths"][0].endswith("/f00") and read["paths"][-1].endswith("/f49"), read)
        self.assertEqual(read["total"], 60)

    def test_reads_of_a_failed_cell_are_reported_and_the_next_cell_starts_empty(self):
        k = self.kernel()
        c = k.execute("p = __import__('tempfile').mktemp(); open(p, 'w').close(); open(p).read(); 1 / 0")
        self.assertEqual(c.status, "error")
        self.assertEqual(len(c.result["read"]["paths"]), 1)
        self.assertNotIn("read", k.execute("y = 2").result)


class BetweenCells(RunnerTest):
    def test_output_of_a_thread_left_running_is_not_lost(self):
        k = self.kernel()
        c = k.execute(
            dedent(
                """
                import threading, time, sys
                def later():
                    time.sleep(0.3)
                    print("tick from thread")
                    sys.stderr.write("tock from thread\\n")
                threading.Thread(target=later).start()
                """
            )
        )
        self.assertOk(c)
        self.assertNotIn("tick", c.out)
        k.stdout.wait_raw(b"tick from thread", 5)
        k.stderr.wait_raw(b"tock from thread", 5)
        c = k.execute("print('next')")
        self.assertOk(c)
        self.assertEqual(c.out, "tick from thread\nnext\n")
        self.assertEqual(c.err, "tock from thread\n")

    def test_a_chatty_thread_does_not_disturb_results(self):
        k = self.kernel()
        self.assertOk(
            k.execute(
                dedent(
                    """
                    import threading, time
                    stop = False
                    def chatter():
                        while not stop:
                            print("chatter " * 20)
                            time.sleep(0.001)
                    th = threading.Thread(target=chatter, daemon=True)
                    th.start()
                    """
                )
            )
        )
        for i in range(50):
            c = k.execute("%d * 2" % i)
            self.assertOk(c)
            # Chatter may come before, after or between the echo's writes
            # (as in any interpreter); with it removed, the echo is intact.
            self.assertEqual(c.out.replace("chatter ", "").replace("\n", ""), str(i * 2), c)
        self.assertOk(k.execute("stop = True\nth.join()"))


def _load_runner_module():
    """runner.py imported as a module (main() does not run) for pure-function checks."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("toolcell_runner_under_test", harness.RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ShellLineRuleProperty(unittest.TestCase):
    """Randomised check of the rule: valid Python is never rewritten."""

    @staticmethod
    def _lines(*lines):
        return "\n".join(lines) + "\n"

    PIECES = [
        ("a = 1",),
        ('s = """', "!not a command", "%not a magic", '"""'),
        ("t = '''x", "  !still", "'''"),
        ('u = "a\\', '!b"'),
        ("v = (5", "% 3)"),
        ("w = [1,", "     2]"),
        ("c = (1", "!= 2)"),
        ("d = 5 \\", "% 2"),
        ("# it's a comment with ' and \"",),
        ("x = 1  # ( [ { unclosed in a comment",),
        ('# """ not a string',),
        ('e = "#" + (', '"!x")'),
        ("f = 'it\\'s'",),
        ('g = rb"\\\\"',),
        ("h = {'k': 7", "% 2}"),
        ("def fn():", '    return """', "!in body", '"""'),
        ("if a:", "    x = ('(', 9", "%5)"),
        ('k = f"{a!r}"',),
        ("m = '\\\\'",),
    ]

    def test_valid_python_is_never_rewritten(self):
        import random

        runner = _load_runner_module()
        rng = random.Random(1234)
        checked = 0
        for _ in range(400):
            src = "".join(self._lines(*rng.choice(self.PIECES)) for _ in range(rng.randint(1, 8)))
            try:
                compile(src, "<gen>", "exec")
            except SyntaxError:
                continue
            checked += 1
            self.assertEqual(runner._transform(src, "<gen>"), src, src)
            # The same source followed by a real shell line: only that line changes.
            out = runner._transform(src + "!echo done\n", "<gen>")
            self.assertEqual(out, src + "__toolcell_shell__('echo done')\n", src)
        self.assertGreater(checked, 300)


def _mpl_python():
    for candidate in (harness.test_python(), os.environ.get("TOOLCELL_TEST_MPL_PYTHON")):
        if candidate and subprocess.call([candidate, "-c", "import matplotlib"], stderr=subprocess.DEVNULL) == 0:
            return candidate
    return None


class Matplotlib(RunnerTest):
    @classmethod
    def setUpClass(cls):
        cls.mpl_python = _mpl_python()
        if cls.mpl_python is None:
            raise unittest.SkipTest(
                "matplotlib is not importable by the interpreter under test; set TOOLCELL_TEST_MPL_PYTHON "
                "to a python with matplotlib (e.g. a throwaway venv: python3 -m venv /tmp/mpl && "
                "/tmp/mpl/bin/pip install matplotlib)"
            )

    def test_open_figures_become_pngs_and_are_closed(self):
        k = self.kernel(python=self.mpl_python)
        c = k.execute("import sys\nprint('matplotlib' in sys.modules)")
        self.assertEqual(c.out, "False\n")  # the runner never imports it itself
        self.assertEqual(c.result["display"], [])
        c = k.execute(
            dedent(
                """
                import matplotlib.pyplot as plt
                plt.plot([1, 2, 3])
                plt.figure()
                plt.bar(["a", "b"], [3, 4])
                len(plt.get_fignums())
                """
            )
        )
        self.assertOk(c)
        self.assertEqual(c.out, "2\n")
        display = c.result["display"]
        self.assertEqual([d["mime"] for d in display], ["image/png", "image/png"])
        artifacts = os.path.join(k.kdir, "artifacts")
        self.assertEqual(stat.S_IMODE(os.stat(artifacts).st_mode), 0o700)
        for d in display:
            self.assertEqual(os.path.dirname(d["path"]), artifacts)
            with open(d["path"], "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(len({d["path"] for d in display}), 2)
        c = k.execute("len(plt.get_fignums())")
        self.assertEqual(c.out, "0\n")
        self.assertEqual(c.result["display"], [])

    def test_plt_show_leaves_the_figure_to_be_saved(self):
        k = self.kernel(python=self.mpl_python)
        c = k.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
        self.assertOk(c)
        self.assertEqual(c.err, "")
        self.assertEqual(len(c.result["display"]), 1)

    def test_figures_are_saved_even_when_the_cell_fails(self):
        k = self.kernel(python=self.mpl_python)
        c = k.execute("import matplotlib.pyplot as plt\nplt.plot([1])\n1/0")
        self.assertEqual(c.status, "error")
        self.assertEqual(len(c.result["display"]), 1)


if __name__ == "__main__":
    unittest.main()
