"""What the framework adapters share (toolcell.integrations._common), with the plain client: no framework needed."""

import gc
import time

import pytest

from toolcell import ExecuteResult, RPCError, Toolcell, ToolError
from toolcell.integrations import result_text
from toolcell.integrations._common import ToolDef, ToolSet, finalize_adapter, jsonable, reentrant

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


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
