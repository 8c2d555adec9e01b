import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from conftest import CONFIG, gone

import toolcell
from toolcell import Chunk, ExecuteResult, RPCError, Toolcell


def test_binary_comes_with_the_package():
    if os.environ.get("TOOLCELL"):
        pytest.skip("TOOLCELL overrides the binary")
    path = toolcell.find_toolcell_bin()
    assert path == os.path.join(sysconfig.get_path("scripts"), "toolcell")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "toolcell " + toolcell.__version__
    # `python -m toolcell` runs it too
    out = subprocess.run([sys.executable, "-m", "toolcell", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "toolcell " + toolcell.__version__


def test_execute_returns_a_typed_result_and_keeps_state(tc):
    r = tc.execute("x = 6 * 7\nprint(x)")
    assert isinstance(r, ExecuteResult)
    assert r.ok and r.status == "success" and r.exit_code == 0
    assert r.output == "42\n"
    assert r.kernel.execution_count == 1 and not r.kernel.reused
    assert r.stdout_bytes_total == 3 and r.usage is not None
    r = tc.execute("x + 1")
    assert r.output == "43\n" and r.kernel.reused and r.kernel.execution_count == 2
    assert r.raw["status"] == "success"


def test_sessions_are_separate(tc):
    tc.execute("v = 'a'", session="a")
    tc.execute("v = 'b'", session="b")
    assert tc.execute("print(v)", session="a").output == "a\n"
    names = sorted(s["session"] for s in tc.sessions())
    assert names == ["a", "b"]


def test_errors_and_timeouts_are_results(tc):
    r = tc.execute("1 / 0")
    assert r.status == "error" and r.exit_code == 1
    assert "ZeroDivisionError" in r.error and "ZeroDivisionError" in r.output
    r = tc.execute("import time\nprint('working', flush=True)\ntime.sleep(30)", timeout=1)
    assert r.status == "timeout" and r.kernel.state_kept is True
    assert r.output.startswith("working\n")
    r = tc.execute("import nonexistent_module_xyz")
    assert r.hint and "pip install" in r.hint


def test_bad_request_raises_rpc_error(tc):
    with pytest.raises(RPCError) as e:
        tc.execute("")
    assert e.value.code == -32602 and "code" in e.value.message
    # the server keeps serving
    assert tc.execute("print(1)").output == "1\n"


def test_unknown_fields_are_kept():
    r = ExecuteResult.from_dict({"status": "success", "output": "", "kernel": {"id": "k", "new_kernel_field": 1},
                                 "brand_new": {"x": 1}})
    assert r.extra == {"brand_new": {"x": 1}}
    assert r.kernel.extra == {"new_kernel_field": 1}


def test_stream_sends_chunks_before_the_result(tc):
    chunks = []
    code = "import sys, time\nfor i in range(3):\n    print('step', i, flush=True); time.sleep(0.2)\nprint('oops', file=sys.stderr)"
    r = tc.execute(code, stream=chunks.append)
    assert r.ok
    assert all(isinstance(c, Chunk) and c.session == "default" for c in chunks)
    out = "".join(c.text for c in chunks if c.stream == "stdout")
    assert out == "step 0\nstep 1\nstep 2\n"
    assert "".join(c.text for c in chunks if c.stream == "stderr") == "oops\n"
    # more than one chunk arrived: the output was live
    assert len([c for c in chunks if c.stream == "stdout"]) >= 2
    # no stream callback: nothing is sent
    chunks.clear()
    tc.execute("print('quiet')")
    assert chunks == []


def test_interrupt_and_shutdown_session(tc):
    import threading

    tc.execute("y = 1", session="s")
    started, result = threading.Event(), {}
    code = "import time\nprint('sleeping', flush=True)\ntime.sleep(30)"
    t = threading.Thread(target=lambda: result.update(r=tc.execute(code, session="s", stream=lambda c: started.set())))
    t.start()
    assert started.wait(10)  # the cell is running (it printed)
    assert tc.interrupt("s") == 1
    t.join(10)
    r = result["r"]
    assert r.status == "interrupted" and r.kernel.state_kept, r
    assert "KeyboardInterrupt" in r.output
    assert tc.execute("print(y)", session="s").output == "1\n"
    assert tc.shutdown_session("s") == 1
    r = tc.execute("print('y' in dir())", session="s")
    assert r.output == "False\n" and r.kernel.state_reset


def test_context_manager_ends_the_child_and_its_kernels(tmp_path):
    with Toolcell(config=CONFIG, cwd=tmp_path) as tc:
        serve_pid = tc.pid
        tc.execute("1")
        # The kernel's pid on this host (inside its sandbox it is 2).
        kernel_pid = tc.sessions()[0]["pid"]
    assert gone(serve_pid) and gone(kernel_pid)
    assert tc.close() == 0  # closing again is harmless
    with pytest.raises(toolcell.ServerExited):
        tc.execute("1")


def test_interpreter_exit_ends_the_child(tmp_path):
    script = textwrap.dedent(
        """
        from toolcell import Toolcell
        tc = Toolcell()
        tc.execute("1")
        print(tc.pid, tc.sessions()[0]["pid"], flush=True)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    serve_pid, kernel_pid = map(int, out.stdout.split())
    assert gone(serve_pid) and gone(kernel_pid)


def test_cwd_is_the_kernels_directory(tmp_path):
    (tmp_path / "data.txt").write_text("hello\n")
    with Toolcell(cwd=tmp_path) as tc:
        assert tc.execute("print(open('data.txt').read(), end='')").output == "hello\n"


def test_schema_formats(tc):
    anthropic = tc.schema(format="anthropic")
    assert anthropic["name"] == "execute_code" and "input_schema" in anthropic
    openai = tc.schema()
    assert openai["type"] == "function" and openai["function"]["name"] == "execute_code"


def test_a_server_that_cannot_start_says_why(tmp_path):
    tc = Toolcell(config={"execution": {"no_such_key": 1}}, cwd=tmp_path)
    with pytest.raises(toolcell.ServerExited) as e:
        tc.execute("1")
    assert "status 2" in str(e.value) and "no_such_key" in str(e.value)
    with pytest.raises(toolcell.ServerExited, match="no_such_key"):
        tc.execute("2")  # sent after the exit: the same message
    assert any("no_such_key" in line for line in tc.stderr_tail)
    assert tc.close() == 2


def test_close_leaves_no_pipe_open(tmp_path):
    import gc
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        tc = Toolcell(cwd=tmp_path)
        assert tc.execute("print(1)").output == "1\n"
        tc.close()
        del tc
        gc.collect()
    leaks = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert leaks == []
