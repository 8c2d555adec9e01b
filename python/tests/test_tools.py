"""Client tools: Python functions the cell calls."""

import asyncio
import os
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Literal, Optional

import pytest

from toolcell import RPCError, Toolcell, ToolError

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


def test_sync_tool_with_derived_signature(tc):
    @tc.tool
    def order_total(id: str, currency: Literal["EUR", "USD"] = "EUR") -> Dict[str, float]:
        """One order's total.

        Args:
            id: The order id, like A-1.
            currency: The currency of the total.
        """
        return {"total": ORDERS[id]}

    assert order_total("A-2") == {"total": 35.5}  # the decorator returns the function
    r = tc.execute("print(order_total('A-3')['total'])\nimport inspect\nprint(inspect.signature(order_total))")
    assert r.ok, r.output
    lines = r.output.splitlines()
    assert lines[0] == "990.0"
    assert "id: str" in lines[1] and "currency: Literal['EUR', 'USD'] = 'EUR'" in lines[1]
    assert r.tool_calls_made == 1
    # the model sees it
    description = tc.schema(format="anthropic")["description"]
    assert "order_total(" in description and "One order's total." in description


def test_name_and_description_overrides(tc):
    @tc.tool(name="lookup-user", description="Find a user.")
    def find(user_id: int) -> dict:
        return {"id": user_id, "name": "ada"}

    r = tc.execute("print(lookup_user(7)['name'])")
    assert r.output == "ada\n"
    assert "Find a user." in tc.schema()["function"]["description"]


def test_async_tool(tc):
    seen = []

    @tc.tool
    async def fetch(url: str) -> str:
        """Fetch a page (pretend)."""
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        return "<html>" + url

    r = tc.execute("print(fetch('x'))")
    assert r.output == "<html>x\n"
    assert len(seen) == 1


def test_exceptions_reach_the_cell_as_tool_error(tc):
    @tc.tool
    def explode(why: str):
        raise ValueError("boom: " + why)

    @tc.tool
    def refuse(amount: float):
        raise ToolError(f"amount {amount} is over the limit")

    @tc.tool
    async def aexplode():
        raise KeyError("missing")

    code = """
for f, args in [(explode, ("on purpose",)), (refuse, (5.0,)), (aexplode, ())]:
    try:
        f(*args)
    except ToolError as e:
        print(e)
"""
    r = tc.execute(code)
    assert r.ok, r.output
    assert r.output.splitlines() == [
        "explode: ValueError: boom: on purpose",
        "refuse: amount 5.0 is over the limit",
        "aexplode: KeyError: 'missing'",
    ]
    # uncaught: the cell fails with ToolError
    r = tc.execute("explode('again')")
    assert r.status == "error" and "ToolError" in r.output


def test_bad_arguments_never_reach_the_function(tc):
    calls = []

    @tc.tool
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    r = tc.execute("try:\n    square('seven')\nexcept ToolError as e:\n    print(e)")
    assert r.output == 'square: bad arguments: /x: "seven" is not of type "integer"\n'
    assert calls == [] and r.tool_calls_made == 0


def test_calls_from_threads_run_concurrently(tc):
    active, peak = [0], [0]
    lock = threading.Lock()

    @tc.tool
    def slow_square(x: int, delay: float = 0.2) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(delay)
        with lock:
            active[0] -= 1
        return x * x

    code = """
import time
from concurrent.futures import ThreadPoolExecutor
t0 = time.perf_counter()
with ThreadPoolExecutor(8) as ex:
    total = sum(ex.map(slow_square, range(16)))
print(total, round(time.perf_counter() - t0, 2))
"""
    r = tc.execute(code)
    assert r.ok, r.output
    total, took = r.output.split()
    assert int(total) == sum(i * i for i in range(16))
    # 16 calls of 0.2 s one after another would take 3.2 s
    assert float(took) < 2.0 and peak[0] >= 4
    assert r.tool_calls_made == 16


def test_async_calls_run_concurrently(tc):
    @tc.tool
    async def wait(x: int) -> int:
        await asyncio.sleep(0.3)
        return x

    code = """
import time
from concurrent.futures import ThreadPoolExecutor
t0 = time.perf_counter()
with ThreadPoolExecutor(10) as ex:
    print(sum(ex.map(wait, range(10))), time.perf_counter() - t0 < 2.0)
"""
    assert tc.execute(code).output == "45 True\n"


def test_cancelled_calls_stop_waiting(tc):
    started, cancelled = threading.Event(), threading.Event()

    @tc.tool
    async def forever() -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @tc.tool
    def sleepy(seconds: float) -> str:
        time.sleep(seconds)
        return "late"

    t0 = time.monotonic()
    r = tc.execute("forever()", timeout=1)
    # the call is given up just before the cell's deadline: ToolError in the cell
    assert r.status == "error" and "was cancelled" in r.output, r
    assert time.monotonic() - t0 < 10
    assert started.is_set() and cancelled.wait(5)
    assert len(tc.cancelled_calls) == 1

    r = tc.execute("try:\n    sleepy(2)\nexcept ToolError as e:\n    print(e)", timeout=1)
    assert r.status in ("success", "timeout")
    assert len(tc.cancelled_calls) == 2
    time.sleep(1.5)  # the late answer is dropped; the client and server go on
    assert tc.execute("print(sleepy(0))").output == "late\n"


def test_dataclass_arguments_and_results(tc):
    @dataclass
    class Point:
        x: float
        y: float = 0.0

    @tc.tool
    def shift(p: Point, by: float) -> Point:
        return Point(p.x + by, p.y + by)

    r = tc.execute("print(shift({'x': 1.5}, 2))")
    assert r.output == "{'x': 3.5, 'y': 2.0}\n"


def test_result_that_is_not_json(tc):
    @tc.tool
    def thing() -> dict:
        return {"f": object()}

    r = tc.execute("try:\n    thing()\nexcept ToolError as e:\n    print(e)")
    assert "not JSON" in r.output


def test_session_scoped_tools_and_unregister(tc):
    @tc.tool(session="a")
    def only_a() -> str:
        return "a"

    assert tc.execute("print(only_a())", session="a").output == "a\n"
    r = tc.execute("only_a()", session="b")
    assert r.status == "error" and "NameError" in r.output
    assert tc.unregister("only_a", session="a") == ["only_a"]
    assert tc.execute("only_a()", session="a").status == "error"


def test_optional_and_list_arguments(tc):
    @tc.tool
    def summarize(values: List[float], label: Optional[str] = None) -> dict:
        return {"label": label, "sum": sum(values)}

    r = tc.execute("print(summarize([1, 2.5]), summarize([1], label='x'))")
    assert r.output == "{'label': None, 'sum': 3.5} {'label': 'x', 'sum': 1}\n"


def test_a_name_that_clashes_is_refused(tc):
    def read_file(path: str) -> str:
        return ""

    with pytest.raises(RPCError) as e:
        tc.tool(read_file)
    assert e.value.code == -32602 and "read_file" in e.value.message
    assert "read_file" not in tc.tools


def test_register_tool_from_a_json_schema(tc):
    """A tool whose schema already exists (a framework's): `register_tool`."""
    calls = []

    def get_order(**kwargs):
        calls.append(kwargs)
        return {"id": kwargs["id"], "total": ORDERS[kwargs["id"]]}

    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "description": "The order id."}},
        "required": ["id"],
    }
    assert tc.register_tool("get-order", get_order, schema, description="One order.",
                            output_schema={"type": "object"}) == ["get-order"]
    r = tc.execute("print(sum(get_order(i)['total'] for i in ['A-1', 'A-3']))")
    assert r.output == "1110.0\n", r.output
    assert calls == [{"id": "A-1"}, {"id": "A-3"}]
    # the server checks the schema before the function runs
    r = tc.execute("get_order(7)")
    assert r.status == "error" and "bad arguments" in r.output and len(calls) == 2
    assert "One order." in tc.schema()["function"]["description"]
    with pytest.raises(TypeError):
        tc.register_tool("x", get_order, "not a schema")  # type: ignore[arg-type]


def test_register_tool_async_and_session_scoped(tc):
    async def slow_echo(text: str) -> str:
        await asyncio.sleep(0.01)
        return text.upper()

    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    tc.register_tool("shout", slow_echo, schema, session="s1")
    assert tc.execute("print(shout('hi'))", session="s1").output == "HI\n"
    assert tc.execute("shout('hi')", session="s2").status == "error"


def test_a_tool_knows_which_call_it_serves(tc):
    """`current_tool_call()`: one tool for every session tells them apart."""
    from toolcell import current_tool_call

    def whoami() -> dict:
        call = current_tool_call()
        return {"session": call.session, "name": call.name, "has_deadline": call.deadline_ms is not None}

    async def whoami_async() -> str:
        await asyncio.sleep(0)
        return current_tool_call().session

    tc.register_tools([
        {"name": "whoami", "fn": whoami, "input_schema": {"type": "object", "properties": {}}},
        {"name": "whoami_async", "fn": whoami_async, "input_schema": {"type": "object", "properties": {}}},
    ])
    assert tc.execute("print(whoami())", session="alpha").output == \
        "{'session': 'alpha', 'name': 'whoami', 'has_deadline': True}\n"
    assert tc.execute("print(whoami_async())", session="beta").output == "beta\n"
    assert current_tool_call() is None  # outside a call
    with pytest.raises(TypeError):
        tc.register_tools([{"name": "x", "fn": whoami}])


def test_results_with_enums_sets_and_dataclasses_are_sent_as_json(tc):
    import enum

    class Color(enum.Enum):
        RED = "red"

    @dataclass
    class Box:
        color: Color
        tags: frozenset

    @tc.tool
    def box() -> dict:
        return {"box": Box(Color.RED, frozenset(["a"])), "colors": {Color.RED}, "pair": (1, 2), 3: "int key"}

    @tc.tool
    def odd_keys() -> dict:
        return {(1, 2): "tuple key"}  # JSON has no such key: converted with str()

    r = tc.execute("print(box())\nprint(odd_keys())")
    assert r.output == "{'box': {'color': 'red', 'tags': ['a']}, 'colors': ['red'], 'pair': [1, 2], '3': 'int key'}\n" \
                       "{'(1, 2)': 'tuple key'}\n"


def test_a_nested_execute_of_the_same_session_is_refused_at_once(tc):
    @tc.tool
    def again() -> str:
        return tc.execute("print('inner')").output  # the session running the outer cell: "default"

    @tc.tool
    def elsewhere() -> str:
        return tc.execute("print('inner')", session="other").output

    start = time.monotonic()
    r = tc.execute("try:\n    again()\nexcept ToolError as e:\n    print(e)\nprint(elsewhere())", timeout=30)
    assert time.monotonic() - start < 10
    assert "execute: called from inside the tool call 'again' of a cell of session 'default'" in r.output
    assert r.output.endswith("inner\n\n")


def test_a_result_json_cannot_carry_is_answered_at_once_with_an_error(tc):
    """NaN/Infinity or a lone surrogate would make an answer line serve cannot parse: the cell
    would wait until its timeout. The cell gets a ToolError naming the problem, at once."""

    @tc.tool
    def nan() -> float:
        return float("nan")

    @tc.tool
    def infinite() -> dict:
        return {"x": [float("inf")]}

    @tc.tool
    def lone() -> str:
        return "abc\ud800"

    @tc.tool
    def key() -> dict:
        return {"k\udfff": 1}

    @tc.tool
    def fails() -> None:
        raise ValueError("bad \ud800 text")  # the error message itself: answered all the same

    code = (
        "for f in (nan, infinite, lone, key, fails):\n"
        "    try:\n"
        "        print(f())\n"
        "    except ToolError as e:\n"
        "        print(e)\n"
    )
    start = time.monotonic()
    r = tc.execute(code, timeout=20)
    assert time.monotonic() - start < 8, r.output
    lines = r.output.splitlines()
    assert len(lines) == 5, r.output
    assert lines[0].startswith("nan: the tool returned a value that is not JSON: it holds NaN or Infinity")
    assert lines[1].startswith("infinite: the tool returned a value that is not JSON: it holds NaN or Infinity")
    assert lines[2].startswith("lone: the tool returned text that is not valid Unicode: a lone surrogate ('\\ud800')")
    assert lines[3].startswith("key: the tool returned text that is not valid Unicode")
    assert lines[4] == "fails: ValueError: bad ? text"


# A cell that can write into the server's stdout (a root host without the
# sandbox, or any host before it made itself non-dumpable) can forge lines
# the client reads. These tests attack the layer under the sandbox, so
# they turn it off; sandboxed, the server is not in the cell's view at all
# (test_a_sandboxed_cell_cannot_open_the_servers_descriptors).
UNSANDBOXED = {"execution": {"max_tool_calls": 500, "timeout": 60}, "sandbox": {"mode": "off"}}


@pytest.fixture
def tc_off(tmp_path):
    with Toolcell(config=UNSANDBOXED, cwd=tmp_path) as client:
        yield client


def test_a_sandboxed_cell_cannot_open_the_servers_descriptors(tc):
    r = tc.execute(_FORGE + "forge({'jsonrpc': '2.0', 'id': 1, 'result': {}})\nprint('forged')")
    assert not r.ok and "No such file or directory" in r.output, r.output


_FORGE = r'''
import json, os
host = os.getppid()
def forge(msg):
    with open(f"/proc/{host}/fd/1", "w") as out:
        out.write(json.dumps(msg) + "\n")
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root cell cannot open the non-dumpable server's fds")
def test_review_01_a_tool_call_forged_for_a_session_with_no_running_cell_is_refused(tc_off):
    tc = tc_off
    ran = []

    @tc.tool(session="victim")
    def transfer(amount: int) -> str:
        ran.append(amount)
        return "sent"

    # The victim's tool works from the victim's own cell.
    assert tc.execute("print(transfer(1))", session="victim").output == "sent\n"
    code = _FORGE + (
        "forge({'jsonrpc': '2.0', 'id': 'forged-1', 'method': 'tool/call',"
        " 'params': {'session': 'victim', 'name': 'transfer', 'arguments': {'amount': 1000}}})\n"
        "import time; time.sleep(1.0)\nprint('forged')"
    )
    r = tc.execute(code, session="attacker")
    assert r.ok and r.output == "forged\n", r.output
    assert ran == [1], f"a forged tool/call ran the victim's tool outside any cell: {ran}"


@pytest.mark.skipif(os.geteuid() != 0, reason="a non-root cell cannot open the non-dumpable server's fds")
def test_review_01_results_forged_for_guessed_request_ids_never_answer_a_request(tc_off):
    tc = tc_off
    # The victim's cell is in flight while the attacker forges results for every small id.
    victim = threading.Thread(target=lambda: out.append(tc.execute("import time; time.sleep(3); print('real')", session="victim")))
    out: list = []
    victim.start()
    time.sleep(0.5)
    code = _FORGE + (
        "for i in range(1, 2000):\n"
        "    forge({'jsonrpc': '2.0', 'id': i, 'result': {'status': 'ok', 'output': 'FORGED', 'session': 'victim'}})\n"
        "print('forged')"
    )
    r = tc.execute(code, session="attacker")
    assert r.ok and r.output == "forged\n", r.output
    victim.join(30)
    assert out and out[0].output == "real\n", out and out[0].output
