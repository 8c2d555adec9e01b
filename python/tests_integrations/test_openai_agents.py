"""toolcell.integrations.openai_agents driven by a real Agent and Runner.

The model is the SDK's own test double, ``agents.testing.ScriptedModel``:
it answers each model call with the next scripted step and records every
call's ``input`` (what the model would read). The toolcell server is real.
"""

import asyncio
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

import pytest
from agents import (
    Agent,
    RunConfig,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    set_trace_processors,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.tracing import TracingProcessor
from agents.items import ToolCallOutputItem
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

from toolcell import Toolcell
from toolcell.integrations.openai_agents import (
    ExecuteCodeStreamEvent,
    ExecuteCodeTool,
    execute_code_tool,
)

from procs import gone

set_tracing_disabled(True)

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 14.5}


@pytest.fixture(scope="module")
def tc():
    client = Toolcell(config={"tools": {"enabled": []}})
    yield client
    client.close()


class Recorder:
    """The host side of the agent's tools: what really ran here."""

    def __init__(self) -> None:
        self.calls: List[Any] = []
        self.pids: List[int] = []

    def note(self, *what: Any) -> None:
        self.calls.append(what if len(what) > 1 else what[0])
        self.pids.append(os.getpid())


def order_tools(rec: Recorder) -> List[Any]:
    @function_tool
    def get_order(id: str) -> dict:
        """One order, by id.

        Args:
            id: The order id, like "A-1".
        """
        rec.note(id)
        if id not in ORDERS:
            raise ValueError(f"no such order: {id}")
        return {"id": id, "total": ORDERS[id]}

    return [get_order]


def code_call(code: str, call_id: str, reset: bool = False) -> List[Any]:
    return [function_call("execute_code", {"code": code, "reset": reset}, call_id=call_id)]


def tool_outputs(model: ScriptedModel, index: int = -1) -> Dict[str, str]:
    """The function_call_output items (call_id -> output) in one recorded model input."""
    call = model.calls[index]
    items = call.input if isinstance(call.input, list) else []
    return {i["call_id"]: i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}


def answer_with_last_output(call: Any) -> List[Any]:
    outputs = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return [assistant_message("the answer is " + outputs[-1]["output"].strip())]


def toolcell_data(result: Any) -> List[Dict[str, Any]]:
    return [
        it.custom_data["toolcell"]
        for it in result.new_items
        if isinstance(it, ToolCallOutputItem) and it.custom_data and "toolcell" in it.custom_data
    ]


# ------------------------------------------------------------------ the three scenarios


def test_one_cell_loops_over_the_agents_tools(tc: Toolcell) -> None:
    rec = Recorder()
    code = execute_code_tool(order_tools(rec), toolcell=tc, session="loop")
    model = ScriptedModel([
        code_call("total = 0\nfor i in ['A-1', 'A-2', 'A-3']:\n    total += get_order(i)['total']\nprint(total)", "c1"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="shop", instructions="Use execute_code.", tools=[code], model=model)
    result = asyncio.run(Runner.run(agent, "What do orders A-1..A-3 add up to?"))

    assert result.final_output == "the answer is 170.0"
    assert tool_outputs(model) == {"c1": "170.0"}
    assert rec.calls == ["A-1", "A-2", "A-3"]  # the nested calls ran, in order, here
    assert set(rec.pids) == {os.getpid()}
    (data,) = toolcell_data(result)  # the structured result, beside the output item
    assert data["session"] == "loop"
    assert data["result"]["status"] == "success"
    assert data["result"]["tool_calls_made"] == 3
    code.close()


def test_a_second_turn_uses_the_first_cells_variable(tc: Toolcell) -> None:
    rec = Recorder()
    conversation = SQLiteSession("conv-42")
    code = execute_code_tool(order_tools(rec), toolcell=tc, session=conversation)
    model = ScriptedModel([
        code_call("big = [i for i in ['A-1', 'A-2', 'A-3'] if get_order(i)['total'] > 20]\nprint(big)", "t1"),
        ModelStep.respond(answer_with_last_output),
        code_call("print(len(big), big[-1])", "t2"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="shop", instructions="Use execute_code.", tools=[code], model=model)

    async def conversation_of_two_turns() -> Any:
        first = await Runner.run(agent, "Which orders are over 20?", session=conversation)
        second = await Runner.run(agent, "How many, and the last one?", session=conversation)
        return first, second

    first, second = asyncio.run(conversation_of_two_turns())
    assert first.final_output == "the answer is ['A-1', 'A-2']"
    assert second.final_output == "the answer is 2 A-2"
    assert rec.calls == ["A-1", "A-2", "A-3"]  # the second turn called no tool: `big` was kept
    assert [d["session"] for d in toolcell_data(first) + toolcell_data(second)] == ["conv-42", "conv-42"]
    # the SDK session replays turn one to the model, and the kernel kept its variables
    assert tool_outputs(model, 3) == {"t1": "['A-1', 'A-2']", "t2": "2 A-2"}
    code.close()


def test_a_failing_tool_gives_a_tool_error_the_model_reads(tc: Toolcell) -> None:
    rec = Recorder()
    code = execute_code_tool(order_tools(rec), toolcell=tc, session="fail")
    model = ScriptedModel([
        code_call(
            "try:\n    get_order('Z-9')\nexcept ToolError as e:\n    print('caught:', e)\n"
            "print(get_order('A-1')['total'])\nget_order('Z-8')",
            "c1",
        ),
        [assistant_message("sorry")],
    ])
    agent = Agent(name="shop", instructions="Use execute_code.", tools=[code], model=model)
    result = asyncio.run(Runner.run(agent, "Look up Z-9"))

    out = tool_outputs(model)["c1"]
    assert out.startswith("caught: get_order: ValueError: no such order: Z-9\n120.0\n")
    assert "ToolError: get_order: ValueError: no such order: Z-8" in out  # the uncaught one, in the traceback
    assert "status: error" in out
    assert rec.calls == ["Z-9", "A-1", "Z-8"]
    assert toolcell_data(result)[0]["result"]["status"] == "error"
    code.close()


def test_the_runs_tool_error_formatter_words_the_error(tc: Toolcell) -> None:
    rec = Recorder()
    code = execute_code_tool(order_tools(rec), toolcell=tc, session="formatter")
    model = ScriptedModel([code_call("get_order('Z-1')", "f1"), [assistant_message("sorry")]])
    agent = Agent(name="shop", instructions="x", tools=[code], model=model)
    seen: List[Any] = []

    def formatter(args: Any) -> str:
        seen.append((args.tool_name, args.default_message))
        return "that order is unknown"

    Runner.run_sync(agent, "look up Z-1", run_config=RunConfig(tool_error_formatter=formatter))
    assert seen == [("get_order", "ValueError: no such order: Z-1")]
    assert "ToolError: get_order: that order is unknown" in tool_outputs(model)["f1"]
    assert "no such order" not in tool_outputs(model)["f1"]
    code.close()


def test_nested_calls_are_traced_under_execute_code(tc: Toolcell) -> None:
    class Spans(TracingProcessor):  # kept in memory: nothing is exported
        def __init__(self) -> None:
            self.ended: List[Any] = []

        def on_trace_start(self, trace: Any) -> None: ...
        def on_trace_end(self, trace: Any) -> None: ...
        def on_span_start(self, span: Any) -> None: ...
        def on_span_end(self, span: Any) -> None:
            self.ended.append(span)

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    spans = Spans()
    set_trace_processors([spans])
    set_tracing_disabled(False)
    try:
        rec = Recorder()
        code = execute_code_tool(order_tools(rec), toolcell=tc, session="traced")
        model = ScriptedModel([
            code_call("get_order('A-1')\ntry:\n    get_order('Z-1')\nexcept ToolError:\n    pass", "t1"),
            [assistant_message("ok")],
        ])
        Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "go")
        code.close()
    finally:
        set_tracing_disabled(True)
    by_id = {s.span_id: s for s in spans.ended}
    functions = [s for s in spans.ended if s.span_data.export().get("type") == "function"]
    nested = [s for s in functions if s.span_data.name == "get_order"]
    (outer,) = [s for s in functions if s.span_data.name == "execute_code"]
    assert [s.span_data.input for s in nested] == ['{"id": "A-1"}', '{"id": "Z-1"}']
    assert all(by_id[s.parent_id] is outer for s in nested)
    assert nested[0].error is None and nested[1].error is not None


# ------------------------------------------------------------------ the SDK's ways of running


def test_async_tools_get_a_tool_context_of_the_same_run(tc: Toolcell) -> None:
    class Shop:
        def __init__(self) -> None:
            self.user = "ada"
            self.seen: List[Any] = []

    @function_tool
    async def whoami(ctx: RunContextWrapper[Shop], greeting: str) -> str:
        """Greets the current user."""
        await asyncio.sleep(0.01)
        ctx.context.seen.append((ctx.tool_name, ctx.tool_call_id, ctx.tool_arguments, threading.current_thread().name))
        return f"{greeting}, {ctx.context.user}"

    shop = Shop()
    code = execute_code_tool([whoami], toolcell=tc, session="ctx")
    model = ScriptedModel([
        code_call("print(whoami('hi'))\nprint(whoami(greeting='bye'))", "call-7"),
        [assistant_message("ok")],
    ])
    agent: Agent[Shop] = Agent(name="a", instructions="x", tools=[code], model=model)

    async def run() -> str:
        loop_thread = threading.current_thread().name
        async with code:
            await Runner.run(agent, "who am I?", context=shop)
            await code.aend_session("ctx")
            assert not any(s["session"] == "ctx" for s in tc.sessions())
        return loop_thread

    loop_thread = asyncio.run(run())
    assert tool_outputs(model) == {"call-7": "hi, ada\nbye, ada"}
    assert [s[:3] for s in shop.seen] == [
        ("whoami", "call-7-1", '{"greeting": "hi"}'),
        ("whoami", "call-7-2", '{"greeting": "bye"}'),
    ]
    assert {s[3] for s in shop.seen} == {loop_thread}  # async tools run on the run's own event loop
    assert "whoami" not in tc.tools  # `async with` closed it


def test_parallel_code_calls_of_one_turn_queue_in_their_session(tc: Toolcell) -> None:
    seen: Dict[str, str] = {}

    @function_tool
    def get_total(ctx: RunContextWrapper[Any], id: str) -> float:
        """One order's total."""
        seen[id] = ctx.tool_call_id  # type: ignore[attr-defined]
        time.sleep(0.05)
        return ORDERS[id]

    code = execute_code_tool([get_total], toolcell=tc, session="parallel")
    model = ScriptedModel([
        code_call("print(get_total('A-1'))", "p1") + code_call("print(get_total('A-2') + get_total('A-3'))", "p2"),
        [assistant_message("ok")],
    ])
    Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "both at once")
    assert tool_outputs(model) == {"p1": "120.0", "p2": "50.0"}
    assert seen == {"A-1": "p1-1", "A-2": "p2-1", "A-3": "p2-2"}  # each nested call knows its own cell
    code.close()


def test_run_sync_keeps_state_across_calls_on_new_loops(tc: Toolcell) -> None:
    rec = Recorder()
    code = execute_code_tool(order_tools(rec), toolcell=tc, session="sync")
    model = ScriptedModel([
        code_call("first = get_order('A-2')\nprint('ok')", "s1"),
        [assistant_message("stored")],
        code_call("print(first['total'] + get_order('A-3')['total'])", "s2"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    assert Runner.run_sync(agent, "store A-2").final_output == "stored"
    assert Runner.run_sync(agent, "add A-3").final_output == "the answer is 50.0"
    assert rec.calls == ["A-2", "A-3"]
    code.close()


def test_streamed_run_with_output_chunks(tc: Toolcell) -> None:
    rec = Recorder()
    chunks: List[ExecuteCodeStreamEvent] = []
    order: List[str] = []

    async def on_stream(event: ExecuteCodeStreamEvent) -> None:
        chunks.append(event)
        order.append("chunk")

    code = execute_code_tool(order_tools(rec), toolcell=tc, session="stream", on_stream=on_stream)
    model = ScriptedModel([
        code_call(
            "import time\nfor i in ['A-1', 'A-2']:\n    print(i, get_order(i)['total'], flush=True)\n    time.sleep(0.3)",
            "st1",
        ),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)

    async def run() -> Any:
        streamed = Runner.run_streamed(agent, "stream it")
        async for event in streamed.stream_events():
            if event.type == "run_item_stream_event" and event.name == "tool_output":
                order.append("tool_output")
        return streamed

    streamed = asyncio.run(run())
    assert streamed.final_output == "the answer is A-1 120.0\nA-2 35.5"
    assert "".join(c.text for c in chunks) == "A-1 120.0\nA-2 35.5\n"
    assert len(chunks) >= 2  # the first line came while the cell still ran
    assert {(c.stream, c.session, c.tool_context.tool_call_id) for c in chunks} == {("stdout", "stream", "st1")}
    assert order[-1] == "tool_output" and set(order[:-1]) == {"chunk"}  # every chunk before the result
    code.close()


def test_cancelling_a_run_interrupts_its_cell(tc: Toolcell) -> None:
    code = execute_code_tool([], toolcell=tc, session="cancel")
    model = ScriptedModel([
        code_call("kept = 7\nprint('ok')", "k1"),
        [assistant_message("ok")],
        code_call("import time\ntime.sleep(60)", "k2"),
        code_call("print(kept * 6)", "k3"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)

    async def run() -> Any:
        await Runner.run(agent, "set")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(Runner.run(agent, "sleep"), timeout=1.5)
        return await Runner.run(agent, "answer")

    started = time.monotonic()
    assert asyncio.run(run()).final_output == "the answer is 42"
    assert time.monotonic() - started < 20  # the sleeping cell was interrupted, not waited for
    code.close()


# ------------------------------------------------------------------ sessions


def test_group_id_names_the_conversation(tc: Toolcell) -> None:
    code = execute_code_tool([], toolcell=tc)
    model = ScriptedModel([
        code_call("x = 'one'\nprint(x)", "g1"),
        [assistant_message("ok")],
        code_call("print(globals().get('x', 'unset'))", "g2"),
        ModelStep.respond(answer_with_last_output),
        code_call("print(x)", "g3"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    first = Runner.run_sync(agent, "a", run_config=RunConfig(group_id="thread-1"))
    other = Runner.run_sync(agent, "b", run_config=RunConfig(group_id="thread-2"))
    again = Runner.run_sync(agent, "c", run_config=RunConfig(group_id="thread-1"))
    assert other.final_output == "the answer is unset"
    assert again.final_output == "the answer is one"
    assert [d["session"] for r in (first, other, again) for d in toolcell_data(r)] == ["thread-1", "thread-2", "thread-1"]
    code.close()


def test_a_session_function_and_end_session(tc: Toolcell) -> None:
    code = execute_code_tool([], toolcell=tc, session=lambda ctx: f"user-{ctx.context['user']}")
    model = ScriptedModel([
        code_call("n = 1\nprint(n)", "e1"),
        [assistant_message("ok")],
        code_call("print(globals().get('n', 'gone'))", "e2"),
        ModelStep.respond(answer_with_last_output),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    Runner.run_sync(agent, "a", context={"user": "bo"})
    assert any(s["session"] == "user-bo" for s in tc.sessions())
    code.end_session("user-bo")
    assert not any(s["session"] == "user-bo" for s in tc.sessions())
    assert Runner.run_sync(agent, "b", context={"user": "bo"}).final_output == "the answer is gone"
    code.close()


def test_close_ends_sessions_and_an_owned_server() -> None:
    code = execute_code_tool([])
    model = ScriptedModel([code_call("print(2 + 2)", "o1"), ModelStep.respond(answer_with_last_output)])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    assert Runner.run_sync(agent, "add").final_output == "the answer is 4"
    server = code.toolcell
    with code:
        pass
    assert server._conn.proc.poll() is not None  # the server the tool started has exited


def test_close_on_a_shared_client_removes_the_tools_and_kernels(tc: Toolcell) -> None:
    rec = Recorder()
    code = execute_code_tool(order_tools(rec), toolcell=tc, session="shared")
    model = ScriptedModel([code_call("print(get_order('A-1')['id'])", "x1"), [assistant_message("ok")]])
    Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "go")
    assert "get_order" in tc.tools and "shared/get_order" not in tc.tools  # once for every session
    code.close()
    assert "get_order" not in tc.tools
    assert not any(s["session"] == "shared" for s in tc.sessions())


# ------------------------------------------------------------------ what the model is shown


def test_description_schema_and_only_the_agents_tools() -> None:
    class Line(BaseModel):
        sku: str
        qty: int = 1

    @function_tool
    def price(line: Line, currency: str = "EUR", note: Optional[str] = None) -> Line:
        """Price one order line."""
        return Line(sku=line.sku.upper(), qty=line.qty * 2)

    with execute_code_tool([price]) as code:
        assert isinstance(code, ExecuteCodeTool)
        assert code.name == "execute_code" and code.strict_json_schema
        assert code.params_json_schema["required"] == ["code", "reset"]
        assert code.params_json_schema["additionalProperties"] is False
        assert '- price(line: Dict[str, Any], currency: str = "EUR", note: Optional[str] = None)' in code.description
        assert "Price one order line." in code.description
        assert "read_file" not in code.description and "terminal" not in code.description
        model = ScriptedModel([
            code_call(
                "print(price({'sku': 'ab'}))\n"
                "try:\n    read_file('/etc/hostname')\nexcept NameError as e:\n    print('no built-ins:', e)",
                "d1",
            ),
            [assistant_message("ok")],
        ])
        Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "price it")
        assert tool_outputs(model) == {"d1": "{'sku': 'AB', 'qty': 2}\nno built-ins: name 'read_file' is not defined"}


# ------------------------------------------------------------------ the SDK's policies on the nested calls


def test_failure_error_function_timeout_and_is_enabled(tc: Toolcell) -> None:
    @function_tool(failure_error_function=lambda ctx, e: "the order service is down, try later")
    def flaky(id: str) -> str:
        """Always fails."""
        raise ConnectionError("10.0.0.7 refused")

    @function_tool(timeout=0.3)
    async def slow() -> str:
        """Too slow."""
        await asyncio.sleep(10)
        return "late"

    @function_tool(is_enabled=lambda ctx, agent: ctx.context["admin"])
    def wipe() -> str:
        """Admins only."""
        return "wiped"

    code = execute_code_tool([flaky, slow, wipe], toolcell=tc, session="policies")
    cell = (
        "for f in (lambda: flaky('A-1'), slow, wipe):\n"
        "    try:\n        print(f())\n    except ToolError as e:\n        print(e)"
    )
    model = ScriptedModel([code_call(cell, "p1"), [assistant_message("ok")]])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    Runner.run_sync(agent, "go", context={"admin": False})
    assert tool_outputs(model)["p1"].splitlines() == [
        "flaky: the order service is down, try later",  # the tool's own text, not the exception
        "slow: Tool 'slow' timed out after 0.3 seconds.",
        "wipe: this tool is disabled for this run (its is_enabled says no)",
    ]
    code.close()


def test_approval_and_guardrails_are_not_bypassed(tc: Toolcell) -> None:
    @function_tool(needs_approval=True)
    def refund(id: str) -> str:
        """Refund an order."""
        return "refunded"

    with pytest.raises(ValueError, match="needs_approval=True"):
        execute_code_tool([refund], toolcell=tc)

    async def big_amounts(ctx: RunContextWrapper[Any], params: Dict[str, Any], call_id: str) -> bool:
        return params["amount"] > 100

    @function_tool(needs_approval=big_amounts)
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @tool_input_guardrail
    def no_secrets(data: Any) -> ToolGuardrailFunctionOutput:
        if "secret" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("secrets are not searched")
        if "drop" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.raise_exception()
        return ToolGuardrailFunctionOutput.allow()

    ran: List[str] = []

    @function_tool(tool_input_guardrails=[no_secrets])
    def search(query: str) -> str:
        """Search."""
        ran.append(query)
        return f"found {query}"

    code = execute_code_tool([pay, search], toolcell=tc, session="guard")
    cell = (
        "for f in (lambda: pay(5), lambda: pay(500), lambda: search('shoes'), lambda: search('secret')):\n"
        "    try:\n        print(f())\n    except ToolError as e:\n        print(e)"
    )
    model = ScriptedModel([
        code_call(cell, "g1"),
        [assistant_message("ok")],
        code_call("search('drop tables')\nprint('not reached')", "g2"),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    Runner.run_sync(agent, "go")
    assert tool_outputs(model)["g1"].splitlines() == [
        "paid 5",
        "pay: this call needs a human's approval (needs_approval), which a cell cannot wait for; the call was not made",
        "found shoes",
        "search: secrets are not searched",
    ]
    with pytest.raises(ToolInputGuardrailTripwireTriggered):  # a tripwire fails the run, as on a direct call
        Runner.run_sync(agent, "again")
    assert ran == ["shoes"]
    code.close()


# ------------------------------------------------------------------ errors a user can make


def test_misuse_is_refused_clearly(tc: Toolcell) -> None:
    from agents import WebSearchTool

    with pytest.raises(TypeError, match="keep hosted tools"):
        execute_code_tool([WebSearchTool()], toolcell=tc)
    rec = Recorder()
    with pytest.raises(ValueError, match="two tools are named 'get_order'"):
        execute_code_tool(order_tools(rec) + order_tools(rec), toolcell=tc)
    with pytest.raises(ValueError, match="either toolcell="):
        execute_code_tool([], toolcell=tc, config={"execution": {"timeout": 5}})
    with pytest.raises(TypeError, match="session="):
        execute_code_tool([], toolcell=tc, session=42)

    code = execute_code_tool([], toolcell=tc, session="misuse")
    model = ScriptedModel([
        [function_call("execute_code", {"code": "   ", "reset": False}, call_id="m1")],
        ModelStep.respond(answer_with_last_output),
    ])
    result = Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "go")
    assert result.final_output == "the answer is error: execute_code needs `code`, a non-empty string of Python source"
    code.close()


def test_plain_functions_are_wrapped_and_reset_starts_over(tc: Toolcell) -> None:
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    @function_tool
    def sync_over_async(x: int) -> int:
        """A sync tool that runs a coroutine of its own, as sync wrappers of async clients do."""

        async def fetch() -> int:
            await asyncio.sleep(0)
            return x + 1

        return asyncio.run(fetch())

    code = execute_code_tool([double, sync_over_async], toolcell=tc, session="plain")
    model = ScriptedModel([
        code_call("y = double(sync_over_async(20))\nprint(y)", "r1"),
        code_call("print(globals().get('y', 'fresh'))", "r2", reset=True),
        [assistant_message("ok")],
    ])
    Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "go")
    assert tool_outputs(model) == {"r1": "42", "r2": "fresh"}
    code.close()


# ------------------------------------------------------------------ many conversations, nesting, lifecycle


def invoke_directly(code: ExecuteCodeTool, source: str, call_id: str, context: Any = None) -> str:
    """execute_code invoked as the SDK invokes a function tool (no model, no Runner)."""
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseFunctionToolCall

    args = json.dumps({"code": source, "reset": False})
    call = ResponseFunctionToolCall(type="function_call", call_id=call_id, name="execute_code", arguments=args)
    ctx = ToolContext.from_agent_context(RunContextWrapper(context=context), call_id, tool_call=call)
    return str(asyncio.run(code.on_invoke_tool(ctx, args)))


def test_many_conversations_keep_working_on_one_client() -> None:
    def make(k: int) -> Any:
        def add(x: int) -> int:
            """x plus k."""
            return x + k

        return function_tool(add, name_override=f"add{k}")

    with Toolcell(config={"tools": {"enabled": []}}) as client:
        code = execute_code_tool([make(k) for k in range(10)], toolcell=client,
                                 session=lambda ctx: f"conv-{ctx.context['conv']}")
        for i in range(130):  # 1300 tools, were they registered per conversation (the server holds 1024)
            out = invoke_directly(code, f"print(add{i % 10}({i}))", f"m{i}", {"conv": i})
            assert out == str(i + i % 10), (i, out)
        assert sorted(client.tools) == [f"add{k}" for k in range(10)]
        code.close()
        assert client.tools == {}


def test_a_sub_agent_using_the_same_session_fails_at_once(tc: Toolcell) -> None:
    code = execute_code_tool([], toolcell=tc, session="nested", timeout=30)
    inner_model = ScriptedModel([code_call("print('inner')", "i1"), ModelStep.respond(answer_with_last_output)])
    helper = Agent(name="helper", instructions="x", tools=[code], model=inner_model)
    outer = execute_code_tool([helper.as_tool(tool_name="ask_helper", tool_description="Ask the helper.")],
                              toolcell=tc, session="nested", timeout=30)
    model = ScriptedModel([code_call("print(ask_helper(input='go'))", "o1"), ModelStep.respond(answer_with_last_output)])
    start = time.monotonic()
    result = Runner.run_sync(Agent(name="a", instructions="x", tools=[outer], model=model), "go")
    assert time.monotonic() - start < 10  # not the 30 s cell timeout
    assert "execute_code was called from inside a cell of the same toolcell session ('nested')" in result.final_output
    outer.close()
    code.close()


def test_a_dropped_tool_ends_the_server_it_started() -> None:
    import gc

    code = execute_code_tool([])
    assert invoke_directly(code, "print(3)", "d1") == "3"
    pid = code.toolcell.pid
    del code
    gc.collect()
    assert gone(pid), f"toolcell serve (pid {pid}) still runs"


def test_allowed_callers_and_timeout_behavior_are_honoured(tc: Toolcell) -> None:
    from agents.exceptions import ToolTimeoutError

    @function_tool(allowed_callers=["direct"])
    def direct_only() -> str:
        """Not for code."""
        return "no"

    @function_tool(allowed_callers=["direct", "programmatic"])
    def both() -> str:
        """For code too."""
        return "yes"

    @function_tool(timeout=0.3, timeout_behavior="raise_exception")
    async def stuck() -> str:
        """Never answers in time."""
        await asyncio.sleep(10)
        return "late"

    code = execute_code_tool([direct_only, both, stuck], toolcell=tc, session="callers")
    assert "both()" in code.description and "direct_only" not in code.description
    assert set(code.wrapped_tools) == {"both", "stuck"}
    model = ScriptedModel([
        code_call("print(both())\ntry:\n    direct_only()\nexcept NameError:\n    print('not here')", "a1"),
        [assistant_message("ok")],
        code_call("stuck()\nprint('not reached')", "a2"),
    ])
    agent = Agent(name="a", instructions="x", tools=[code], model=model)
    Runner.run_sync(agent, "go")
    assert tool_outputs(model)["a1"] == "yes\nnot here"
    with pytest.raises(ToolTimeoutError):  # as on a direct call, the run fails
        Runner.run_sync(agent, "again")
    code.close()


def test_plain_function_tools_skip_the_sdk_invoker_with_the_same_results(tc: Toolcell) -> None:
    from toolcell.integrations.openai_agents import _Wrapped

    class Line(BaseModel):
        sku: str
        qty: int = 1

    @function_tool
    def total(line: Line, ctx_free: bool = True) -> float:
        """A line's total."""
        return line.qty * 2.5

    @function_tool
    def who(ctx: RunContextWrapper[Any], greeting: str) -> str:
        """Greets."""
        return f"{greeting} {ctx.context['user']} ({ctx.tool_call_id})"

    def plain(n: int) -> int:
        """A plain function."""
        return n * 3

    code = execute_code_tool([total, who, plain], toolcell=tc, session="plainpath")
    assert all(_Wrapped(t).plain is not None for t in code.wrapped_tools.values())
    out = invoke_directly(code, "print(total({'sku': 'a', 'qty': 4}), who('hi'), plain(2))\n"
                                "try:\n    total({'qty': 1})\nexcept ToolError as e:\n    print(e)", "pp",
                          {"user": "ada"})
    first, second = out.splitlines()
    assert first == "10.0 hi ada (pp-2) 6"
    assert second.startswith("total: bad arguments")  # the server checks the schema first
    code.close()


def test_the_error_and_hint_lines_reach_the_model(tc: Toolcell) -> None:
    code = execute_code_tool([], toolcell=tc, session="hints")
    model = ScriptedModel([code_call("from toolcell_tools import no_such_tool", "h1"), [assistant_message("ok")]])
    Runner.run_sync(Agent(name="a", instructions="x", tools=[code], model=model), "go")
    lines = tool_outputs(model)["h1"].splitlines()
    assert "status: error" in lines
    assert any(line.startswith("error: ImportError: cannot import name 'no_such_tool'") for line in lines)
    assert any(line.startswith("hint: toolcell_tools has no `no_such_tool`") for line in lines)
    code.close()


def test_a_cancelled_call_waiting_behind_another_tools_cell_runs_nothing_and_stops_nothing(tc: Toolcell) -> None:
    """Two code tools on one client and one session: a call cancelled while it waits for the other's
    cell is dropped (none of its code runs) and does not interrupt that cell; no lock is kept per
    session once its cells are done."""
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseFunctionToolCall

    a = execute_code_tool([], toolcell=tc, session="turns")
    b = execute_code_tool([], toolcell=tc, session="turns")

    async def call(code_tool: ExecuteCodeTool, source: str, call_id: str) -> str:
        args = json.dumps({"code": source, "reset": False})
        tool_call = ResponseFunctionToolCall(type="function_call", call_id=call_id, name="execute_code",
                                             arguments=args)
        ctx = ToolContext.from_agent_context(RunContextWrapper(context=None), call_id, tool_call=tool_call)
        return str(await code_tool.on_invoke_tool(ctx, args))

    async def main() -> Any:
        await call(a, "ran = []", "t0")
        slow = asyncio.ensure_future(call(a, "import time\ntime.sleep(1.5)\nprint('a done')", "t1"))
        await asyncio.sleep(0.3)  # a's cell runs
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call(b, "ran.append('b')", "t2"), 0.3)
        return await slow, await call(a, "print(ran)", "t3")

    try:
        assert asyncio.run(main()) == ("a done", "[]")
        assert a._toolcell_runner.session_locks == {} and b._toolcell_runner.session_locks == {}
    finally:
        a.close()
        b.close()
