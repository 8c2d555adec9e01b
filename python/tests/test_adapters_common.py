"""What the framework adapters share (toolcell.integrations._common), with the plain client: no framework needed."""

import concurrent.futures
import gc
import threading
import time

import pytest

from toolcell import ExecuteResult, RPCError, Toolcell, ToolError
from toolcell.integrations import result_text
from toolcell.integrations._common import ToolDef, ToolSet, finalize_adapter, jsonable, reentrant

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
NO_ARGS = {"type": "object", "properties": {}}


def result(**fields):
    base = {"status": "success", "output": "", "exit_code": 0, "tool_calls_made": 0, "duration_seconds": 0.1,
            "kernel": {"id": "k", "mode": "project", "python": "3", "reused": True, "execution_count": 1,
                       "state_reset": False}}
    base.update(fields)
    return ExecuteResult.from_dict(base)


def test_result_text_puts_output_then_status_error_hint_warning_lines():
    assert result_text(result()) == "(no output)"
    assert result_text(result(output="42\n")) == "42"
    text = result_text(result(status="error", output="Traceback ...\nNameError: x\n", error="NameError: x",
                              hint="define x first", warning="output was cut"))
    assert text.splitlines() == ["Traceback ...", "NameError: x", "status: error", "error: NameError: x",
                                 "hint: define x first", "warning: output was cut"]
    assert result_text(result(warning="kernel replaced")) == "warning: kernel replaced"
    assert result_text(result(status="timeout", output="partial")) == "partial\nstatus: timeout"


def test_jsonable_returns_plain_values_as_they_are_and_converts_the_rest():
    value = {"a": [1, 2.5, None, True, "s"], "b": {"c": []}}
    assert jsonable(value, str) is value
    assert jsonable({"s": {2, 1}}, sorted) == {"s": [1, 2]}
    assert jsonable({"when": object}, lambda v: "converted") == {"when": "converted"}
    big = list(range(1000))
    assert jsonable(big, str) is big  # past the quick look: probed with json


def adder(k, seen=None):
    def add(x: int) -> int:
        if seen is not None:
            seen.append(k)
        return x + k
    return add


def test_a_tool_set_registers_once_and_routes_calls_by_session(tc):
    seen = []
    a = ToolSet(tc, [ToolDef("add", adder(1, seen), SCHEMA, "Adds.")])
    b = ToolSet(tc, [ToolDef("add", adder(100, seen), SCHEMA, "Adds.")])  # same definition: shared
    assert [n for n in tc.tools] == ["add"]
    with a.running("sa"), b.running("sb"):
        assert tc.execute("print(add(1))", session="sa").output == "2\n"
        assert tc.execute("print(add(1))", session="sb").output == "101\n"
    # no cell of an adapter runs in the session: refused, not misrouted
    r = tc.execute("try:\n    add(1)\nexcept ToolError as e:\n    print(e)", session="sa")
    assert "no agent run is using toolcell session 'sa' now" in r.output
    assert seen == [1, 100]
    a.close()
    assert "add" in tc.tools  # b still holds it
    b.close()
    b.close()  # twice is fine
    assert "add" not in tc.tools


def test_a_different_definition_of_a_name_is_registered_for_its_cells_only(tc):
    a = ToolSet(tc, [ToolDef("f", adder(1), SCHEMA, "A's f.")])
    other = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
             "required": ["x"]}
    b = ToolSet(tc, [ToolDef("f", lambda x, y=0: x * 10 + y, other, "B's f.")])
    assert b.shadowed and not a.shadowed
    with b.running("sb"):
        assert "B's f." in tc.schema(session="sb")["function"]["description"]
        assert tc.execute("print(f(1, y=2))", session="sb").output == "12\n"
        assert "sb/f" in tc.tools
    assert "sb/f" not in tc.tools  # gone with the cell
    with a.running("sa"):
        assert tc.execute("print(f(1))", session="sa").output == "2\n"
    a.close()
    b.close()
    assert tc.tools == {}


def test_registration_is_all_or_nothing(tc):
    good = ToolDef("fine", adder(1), SCHEMA)
    bad = ToolDef("also fine", adder(2), SCHEMA)  # whitespace in a name: refused
    with pytest.raises(RPCError):
        ToolSet(tc, [good, bad])
    assert tc.tools == {}


def test_reentrance_is_told_inside_a_call_of_the_same_session(tc):
    seen = []

    @tc.tool(session="outer")
    def probe() -> str:
        seen.append((reentrant(tc, "outer"), reentrant(tc, "other")))
        try:
            tc.execute("1", session="outer")
        except Exception as e:  # the core client refuses it too, at once
            return type(e).__name__ + ": " + str(e)
        return "ran"

    start = time.monotonic()
    out = tc.execute("print(probe())", session="outer", timeout=30).output
    assert time.monotonic() - start < 5
    assert out.startswith("ToolcellError: execute: called from inside the tool call 'probe'")
    assert seen == [(True, False)]
    assert not reentrant(tc, "outer")  # outside any call


def test_a_finalizer_closes_an_owned_client_when_the_adapter_is_dropped():
    class Adapter:
        pass

    client = Toolcell(config={"tools": {"enabled": []}})
    adapter = Adapter()
    finalize_adapter(adapter, client, True, None)
    pid = client.pid
    del adapter
    gc.collect()
    deadline = time.monotonic() + 10
    while client._conn.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client._conn.proc.poll() is not None, pid


def test_a_finalizer_releases_a_shared_clients_tools(tc):
    class Adapter:
        pass

    adapter = Adapter()
    ts = ToolSet(tc, [ToolDef("mine", adder(1), SCHEMA)])
    finalize_adapter(adapter, tc, False, ts)
    del adapter, ts
    gc.collect()
    deadline = time.monotonic() + 10
    while "mine" in tc.tools and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "mine" not in tc.tools


def test_a_tool_error_from_a_tool_set_function_reaches_the_cell(tc):
    def boom(x: int) -> int:
        raise ToolError(f"no {x}")

    ts = ToolSet(tc, [ToolDef("boom", boom, SCHEMA)])
    with ts.running("s"):
        r = tc.execute("try:\n    boom(3)\nexcept ToolError as e:\n    print(e)", session="s")
    assert r.output == "boom: no 3\n"
    ts.close()


def test_tool_sets_sharing_a_session_take_turns_so_each_cell_reaches_its_own_tools(tc):
    """A tool call names its session, not its cell: two adapters' cells in one session take turns,
    so a call goes to the tool set whose cell the server runs, never to one that merely entered first."""
    a = ToolSet(tc, [ToolDef("who", lambda: "A", NO_ARGS, "Who."), ToolDef("a_only", lambda: "a", NO_ARGS)])
    b = ToolSet(tc, [ToolDef("who", lambda: "B", NO_ARGS, "Who.")])  # the same definition: one shared name
    out = {}
    entered = threading.Event()

    def run_a():
        with a.running("s"):
            entered.set()
            time.sleep(0.3)  # A has the session, but its request goes out late (thread scheduling)
            out["A"] = tc.execute("print(who())", session="s").output

    t = threading.Thread(target=run_a)
    t.start()
    assert entered.wait(10)
    with b.running("s"):  # waits for A's cell
        out["B"] = tc.execute("print(who())\ntry:\n    a_only()\nexcept ToolError as e:\n    print(e)",
                              session="s").output
    t.join()
    assert out["A"] == "A\n"
    assert out["B"].splitlines() == ["B", "a_only: a_only is not one of the tools of the agent running session 's'"]
    a.close()
    b.close()
    assert tc.tools == {}


def test_a_tool_the_app_registered_for_a_session_is_never_replaced(tc):
    @tc.tool
    def f(x: int) -> int:  # the app's own, for every session: the adapter's f is registered per cell
        return -x

    @tc.tool(name="f", session="mine")
    def f_mine(x: int) -> int:  # the app's own, for one session
        return x * 1000

    ts = ToolSet(tc, [ToolDef("f", adder(1), SCHEMA, "Adds one.")])
    assert [t.name for t in ts.shadowed] == ["f"]
    with ts.running("other"):
        assert tc.execute("print(f(2))", session="other").output == "3\n"
    with ts.running("mine"):
        assert tc.execute("print(f(2))", session="mine").output == "2000\n"
    assert "mine/f" in tc.tools
    assert tc.execute("print(f(2))", session="mine").output == "2000\n"
    assert tc.execute("print(f(2))", session="other").output == "-2\n"
    ts.close()


def test_a_job_stopped_before_its_turn_runs_nothing_and_a_late_stop_interrupts_no_other_cell(tc):
    from toolcell.integrations._common import CellJob

    ts = ToolSet(tc, [])
    out = {}

    def run(key, job, code):
        try:
            with ts.running("s", job):
                out[key] = tc.execute(code, session="s", timeout=30)
        except concurrent.futures.CancelledError:
            out[key] = "dropped"

    first = CellJob()
    t1 = threading.Thread(target=run, args=("first", first, "import time; time.sleep(1.0); print('first done')"))
    t1.start()
    deadline = time.monotonic() + 10
    while not first.started and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting = CellJob()
    t2 = threading.Thread(target=run, args=("waiting", waiting, "print('ran')"))
    t2.start()
    time.sleep(0.2)
    waiting.stop(lambda: tc.interrupt("s"))  # its caller gave up while it waited for its turn
    t1.join()
    t2.join()
    assert out["waiting"] == "dropped"
    assert out["first"].ok and out["first"].output == "first done\n"

    second = CellJob()
    t3 = threading.Thread(target=run, args=("second", second, "import time; time.sleep(1.0); print('second done')"))
    t3.start()
    while not second.started and time.monotonic() < deadline + 10:
        time.sleep(0.01)
    first.stop(lambda: tc.interrupt("s"))  # late: the first cell ended, the session runs another one
    t3.join()
    assert out["second"].ok and out["second"].output == "second done\n", out["second"].output
