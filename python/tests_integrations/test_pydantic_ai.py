"""toolcell.integrations.pydantic_ai against a real toolcell server and pydantic-ai's FunctionModel.

Each test scripts the model (FunctionModel plays the steps in order and
keeps every request it got), runs a real agent, and checks what a user
would see: the answer, the tool return and its metadata, the host-side
calls, the messages the model received.
"""

import asyncio
import dataclasses
import inspect
import json
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Union

import pytest
from pydantic_ai import Agent, DeferredToolRequests, RunContext, Tool, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits

from toolcell import AsyncToolcell, ExecuteResult
from toolcell.integrations import pydantic_ai as _integration
from toolcell.integrations.pydantic_ai import (
    RUN_CODE_TOOL_NAME,
    ToolcellCodeMode,
    ToolcellCodeModeToolset,
    ToolcellOutputEvent,
)

try:
    from pydantic_ai.messages import CustomEvent  # noqa: F401

    HAS_CUSTOM_EVENTS = True
except ImportError:  # older pydantic-ai: no events, on_output only
    HAS_CUSTOM_EVENTS = False

HAS_RETURN_SCHEMAS = "return_schema" in {f.name for f in dataclasses.fields(ToolDefinition)}
_CTX_FIELDS = {f.name for f in dataclasses.fields(RunContext)}
# pydantic-ai 2.x gives a tool's context the run's tool manager, through which calls from code run the hooks
CALLS_SEE_HOOKS = _integration._MANAGED and bool({"tool_manager", "root_capability"} & _CTX_FIELDS)
HAS_USAGE_LIMITS = "usage_limits" in _CTX_FIELDS  # the run's limits, in its context

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 10.0}


def get_order(id: str) -> dict:
    """One order, with its total in EUR."""
    return {"id": id, "total": ORDERS[id]}


class Code:
    """A model step: call run_code with this code."""

    def __init__(self, code: str, restart: bool = False):
        self.args: Dict[str, Any] = {"code": textwrap.dedent(code).strip() + "\n"}
        if restart:
            self.args["restart"] = True


Step = Union[Code, Callable[[List[ModelMessage]], str]]


class Script:
    """A scripted model: plays its steps one request at a time and keeps what it was sent."""

    def __init__(self, *steps: Step):
        self.steps = list(steps)
        self.requests: List[List[ModelMessage]] = []
        self.infos: List[AgentInfo] = []

    def _next(self, messages: List[ModelMessage], info: AgentInfo) -> Step:
        self.requests.append(list(messages))
        self.infos.append(info)
        i = len(self.requests) - 1
        assert i < len(self.steps), f"the model was asked more often than scripted ({i + 1} requests)"
        return self.steps[i]

    def respond(self, messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = self._next(messages, info)
        if isinstance(step, Code):
            n = len(self.requests)
            return ModelResponse(parts=[ToolCallPart(RUN_CODE_TOOL_NAME, step.args, tool_call_id=f"call-{n}")])
        return ModelResponse(parts=[TextPart(step(messages))])

    async def stream(self, messages: List[ModelMessage], info: AgentInfo):  # type: ignore[no-untyped-def]
        step = self._next(messages, info)
        if isinstance(step, Code):
            n = len(self.requests)
            yield {0: DeltaToolCall(name=RUN_CODE_TOOL_NAME, json_args=json.dumps(step.args), tool_call_id=f"call-{n}")}
        else:
            yield step(messages)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, stream_function=self.stream)


def last_return(messages: List[ModelMessage]) -> ToolReturnPart:
    """The latest run_code return in a message list."""
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
             if isinstance(p, ToolReturnPart) and p.tool_name == RUN_CODE_TOOL_NAME]
    assert parts, "no run_code return in the messages"
    return parts[-1]


def code_returns(messages: List[ModelMessage]) -> List[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == RUN_CODE_TOOL_NAME]


def answer_with_last_return(messages: List[ModelMessage]) -> str:
    return f"answer: {last_return(messages).content}"


def usage_of(result: Any) -> Any:
    """The run's usage (a property in new pydantic-ai, a method in old)."""
    usage = result.usage
    return usage if hasattr(usage, "tool_calls") else usage()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------- the required scenarios


def test_one_cell_loops_over_the_agents_tools_and_the_calls_run_in_the_host() -> None:
    host_calls: List[str] = []
    script = Script(
        Code("""
            total = sum(get_order(id=i)["total"] for i in ["A-1", "A-2", "A-3"])
            print(f"total={total}")
        """),
        answer_with_last_return,
    )
    cap = ToolcellCodeMode()
    agent = Agent(script.model, capabilities=[cap])

    @agent.tool_plain
    def get_order(id: str) -> dict:
        """One order, with its total in EUR."""
        host_calls.append(id)
        return {"id": id, "total": ORDERS[id]}

    async def main() -> Any:
        try:
            return await agent.run("What do the three orders come to?")
        finally:
            await cap.aclose()

    result = run(main())
    assert result.output == "answer: total=165.5"
    assert host_calls == ["A-1", "A-2", "A-3"]
    # the model was offered one tool, whose description lists get_order with its signature
    tools = script.infos[0].function_tools
    assert [t.name for t in tools] == [RUN_CODE_TOOL_NAME]
    shape = "dict" if HAS_RETURN_SCHEMAS else "Any"  # pydantic-ai before 1.78 has no return schemas
    assert f"get_order(id: str) -> {shape}: One order, with its total in EUR." in tools[0].description
    assert "restart=true" in tools[0].description
    # the nested calls are recorded on the tool return, as CodeMode records them
    ret = last_return(result.all_messages())
    meta = ret.metadata
    assert meta["toolcell"] is True
    assert [c.args for c in meta["tool_calls"].values()] == [{"id": "A-1"}, {"id": "A-2"}, {"id": "A-3"}]
    assert [r.content["total"] for r in meta["tool_returns"].values()] == [120.0, 35.5, 10.0]
    assert all(k.startswith("call-1__") for k in meta["tool_calls"])
    assert meta["tool_errors"] == {}
    res = ExecuteResult.from_dict(meta["result"])
    assert res.status == "success" and res.tool_calls_made == 3
    # the nested calls count as tool calls of the run
    assert usage_of(result).tool_calls == 4


def test_a_later_step_uses_a_variable_the_first_cell_defined() -> None:
    script = Script(
        Code("orders = {i: get_order(id=i) for i in ['A-1', 'A-2']}"),
        Code("print(round(sum(o['total'] for o in orders.values()) * 2, 1))"),
        answer_with_last_return,
    )
    ts = ToolcellCodeModeToolset(get_order)
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("twice the sum")
        finally:
            await ts.aclose()

    result = run(main())
    assert result.output == "answer: 311.0"
    first, second = code_returns(result.all_messages())
    assert first.content == "(no output)"
    assert first.metadata["session"] == second.metadata["session"]
    assert second.metadata["result"]["kernel"]["reused"] is True


def test_a_failing_tool_raises_ToolError_in_the_cell_and_the_model_reads_it() -> None:
    def get_order(id: str) -> dict:
        """One order."""
        raise LookupError(f"no order {id!r} in the shop")

    script = Script(Code("print(get_order(id='Z-9'))"), answer_with_last_return)
    ts = ToolcellCodeModeToolset(get_order)
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("look Z-9 up")
        finally:
            await ts.aclose()

    result = run(main())
    # the request after the cell carries the ToolError text
    seen = last_return(script.requests[1])
    assert "ToolError" in seen.content
    assert "LookupError: no order 'Z-9' in the shop" in seen.content
    assert "status: error" in seen.content
    assert result.output.startswith("answer: ")
    meta = seen.metadata
    (err,) = meta["tool_errors"].values()
    assert err == "LookupError: no order 'Z-9' in the shop"
    assert meta["tool_returns"] == {}


def test_ModelRetry_from_a_wrapped_tool_is_a_ToolError_the_code_can_catch() -> None:
    def get_order(id: str) -> dict:
        """One order."""
        if not id.startswith("A-"):
            raise ModelRetry("order ids look like A-1")
        return {"id": id, "total": ORDERS[id]}

    script = Script(
        Code("""
            try:
                get_order(id="1")
            except ToolError as e:
                print("caught:", e)
            print(get_order(id="A-2")["total"])
        """),
        answer_with_last_return,
    )
    ts = ToolcellCodeModeToolset(get_order)
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("go")
        finally:
            await ts.aclose()

    result = run(main())
    ret = last_return(result.all_messages())
    assert "caught:" in ret.content and "order ids look like A-1" in ret.content
    assert ret.content.endswith("35.5")
    assert list(ret.metadata["tool_errors"].values()) == ["order ids look like A-1"]
    assert len(ret.metadata["tool_returns"]) == 1


# ---------------------------------------------------------------- tools and toolsets


def test_plain_functions_Tool_objects_and_a_FunctionToolset_all_become_functions() -> None:
    def get_order(id: str) -> dict:
        """One order."""
        return {"id": id, "total": ORDERS[id]}

    def vat(amount: float, rate: float = 0.2) -> float:
        """The VAT on an amount."""
        return round(amount * rate, 2)

    def shipping(weight_kg: float) -> float:
        """Shipping cost for a parcel."""
        return 4.5 if weight_kg < 2 else 9.0

    script = Script(
        Code("t = get_order(id='A-1')['total']\nprint(t + vat(amount=t) + shipping(weight_kg=3))"),
        answer_with_last_return,
    )
    ts = ToolcellCodeModeToolset(get_order, Tool(vat), FunctionToolset([shipping]))
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("price it")
        finally:
            await ts.aclose()

    result = run(main())
    assert result.output == "answer: 153.0"
    desc = script.infos[0].function_tools[0].description
    assert "get_order(id: str)" in desc
    assert "vat(amount: float, rate: float = 0.2)" in desc
    assert "shipping(weight_kg: float)" in desc


def test_a_nested_ToolReturn_gives_the_code_its_value_and_the_model_its_content() -> None:
    def chart(sku: str) -> ToolReturn:
        """Sales of a SKU, with a chart for the model."""
        return ToolReturn(return_value={"sold": 12}, content=f"[chart of {sku} sales]", metadata={"rows": 3})

    script = Script(Code("print(chart(sku='X')['sold'] * 2)"), answer_with_last_return)
    ts = ToolcellCodeModeToolset(chart)
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("sales")
        finally:
            await ts.aclose()

    result = run(main())
    assert result.output == "answer: 24"
    (ret,) = last_return(result.all_messages()).metadata["tool_returns"].values()
    assert ret.content == {"sold": 12} and ret.metadata == {"rows": 3}
    sent = [p.content for m in script.requests[1] if isinstance(m, ModelRequest) for p in m.parts]
    assert any("[chart of X sales]" in str(c) for c in sent)


def test_nested_calls_get_the_runs_context_and_deps() -> None:
    seen: List[Any] = []
    script = Script(Code("print(price(sku='X'))"), answer_with_last_return)
    agent = Agent(script.model, deps_type=dict, capabilities=[cap := ToolcellCodeMode()])

    @agent.tool
    def price(ctx: RunContext[dict], sku: str) -> float:
        """A price, after the customer's discount."""
        seen.append((ctx.tool_name, ctx.tool_call_id, ctx.deps["discount"]))
        return 100.0 * (1 - ctx.deps["discount"])

    async def main() -> Any:
        try:
            return await agent.run("price X", deps={"discount": 0.25})
        finally:
            await cap.aclose()

    result = run(main())
    assert result.output == "answer: 75.0"
    assert seen == [("price", "call-1__1", 0.25)]


def test_a_nested_tool_sees_the_sandboxed_tools_in_its_context_on_either_path() -> None:
    """``ctx.tools`` and ``ctx.is_tool_available`` in a tool called from code
    name the tools the code can call (not just ``run_code``), whether the call
    is made directly (a plain ``def``) or through the tool manager (``async def``)."""
    seen: Dict[str, Any] = {}
    script = Script(Code("sync_view(); async_view()"), answer_with_last_return)
    agent = Agent(script.model, capabilities=[cap := ToolcellCodeMode()])

    @agent.tool
    def sync_view(ctx: RunContext[None]) -> None:
        """What a plain tool sees."""
        seen["sync"] = (sorted(ctx.tools), ctx.is_tool_available("async_view"))

    @agent.tool
    async def async_view(ctx: RunContext[None]) -> None:
        """What an async tool sees."""
        seen["async"] = (sorted(ctx.tools), ctx.is_tool_available("sync_view"))

    async def main() -> Any:
        try:
            return await agent.run("look")
        finally:
            await cap.aclose()

    run(main())
    assert seen["sync"] == seen["async"] == (["async_view", "sync_view"], True), seen


def test_plain_tools_called_from_threads_of_the_cell_run_off_the_event_loop() -> None:
    """A plain `def` tool runs on a thread of its own, as pydantic-ai runs one,
    never on the run's event loop; calls from several threads of one cell
    each get their own call id, and all are recorded and counted."""
    loop_thread: List[Any] = []
    seen: List[Any] = []
    script = Script(
        Code("""
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(8) as pool:
                print(sum(pool.map(lambda i: square(n=i), range(40))))
        """),
        answer_with_last_return,
    )
    agent = Agent(script.model, capabilities=[cap := ToolcellCodeMode()])

    @agent.tool
    def square(ctx: RunContext[None], n: int) -> int:
        """n squared."""
        import threading

        seen.append((threading.get_ident(), ctx.tool_call_id))
        return n * n

    async def main() -> Any:
        import threading

        loop_thread.append(threading.get_ident())
        try:
            return await agent.run("sum of squares")
        finally:
            await cap.aclose()

    result = run(main())
    assert result.output == f"answer: {sum(i * i for i in range(40))}"
    assert len(seen) == 40
    assert loop_thread[0] not in {t for t, _ in seen}
    ids = [c for _, c in seen]
    assert len(set(ids)) == 40 and all(c.startswith("call-1__") for c in ids)
    meta = last_return(result.all_messages()).metadata
    assert len(meta["tool_calls"]) == 40 and len(meta["tool_returns"]) == 40
    assert usage_of(result).tool_calls >= 40


MCP_SERVER = '''
try:
    from mcp.server.mcpserver import MCPServer as Server   # mcp 2
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server       # mcp 1
    from mcp.server.fastmcp.exceptions import ToolError
server = Server("inventory")

@server.tool()
def stock(sku: str) -> int:
    """Units of one SKU in stock."""
    return {"X-1": 4, "X-2": 7}[sku]

@server.tool(name="price-of")
def price_of(sku: str) -> float:
    """Unit price of one SKU, in EUR."""
    if sku not in ("X-1", "X-2"):
        raise ToolError(f"unknown sku {sku}")
    return {"X-1": 2.5, "X-2": 10.0}[sku]

if __name__ == "__main__":
    server.run()
'''


def mcp_toolset(script: Path) -> Any:
    """An MCP toolset running `script` over stdio, in the shape this pydantic-ai has.

    The server may take seconds to import on a busy machine: wait up to a minute for it.
    """
    try:
        from fastmcp.client.transports import StdioTransport
        from pydantic_ai.mcp import MCPToolset
    except ImportError:  # pydantic-ai 1.x
        from pydantic_ai.mcp import MCPServerStdio

        return MCPServerStdio(sys.executable, args=[str(script)], timeout=60)
    transport = StdioTransport(command=sys.executable, args=[str(script)])
    if "init_timeout" in inspect.signature(MCPToolset).parameters:
        return MCPToolset(transport, init_timeout=60)
    from fastmcp import Client

    return MCPToolset(Client(transport, init_timeout=60))


def test_an_mcp_servers_tools_are_functions_in_the_cell(tmp_path: Path) -> None:
    script_path = tmp_path / "inventory_server.py"
    script_path.write_text(MCP_SERVER)
    script = Script(
        Code("""
            value = sum(stock(sku=s) * price_of(sku=s) for s in ["X-1", "X-2"])
            print("value", value)
            try:
                price_of(sku="nope")
            except ToolError as e:
                print("error:", e)
        """),
        answer_with_last_return,
    )
    ts = ToolcellCodeModeToolset(mcp_toolset(script_path))
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("stock value")
        finally:
            await ts.aclose()

    result = run(main())
    ret = last_return(result.all_messages())
    assert "value 80.0" in ret.content
    assert "error:" in ret.content and "unknown sku nope" in ret.content
    desc = script.infos[0].function_tools[0].description
    # the hyphenated MCP name is a Python name in the cell; the result shape is the unwrapped value
    if HAS_RETURN_SCHEMAS:
        assert "price_of(sku: str) -> float: Unit price of one SKU, in EUR." in desc
        assert "stock(sku: str) -> int: Units of one SKU in stock." in desc
    else:
        assert "price_of(sku: str) -> Any: Unit price of one SKU, in EUR." in desc
    names = [c.tool_name for c in ret.metadata["tool_calls"].values()]
    assert names == ["stock", "price-of", "stock", "price-of", "price-of"]


def test_the_selector_keeps_other_tools_native_and_approval_tools_stay_out() -> None:
    script = Script(lambda messages: "done")
    cap = ToolcellCodeMode(tools=["get_order"])
    agent = Agent(script.model, capabilities=[cap], output_type=[str, DeferredToolRequests])
    agent.tool_plain(get_order)

    @agent.tool_plain
    def notify(text: str) -> str:
        """Tell the customer something."""
        return "sent"

    @agent.tool_plain(requires_approval=True)
    def refund(id: str) -> str:
        """Refund an order."""
        return "refunded"

    async def main() -> Any:
        try:
            return await agent.run("hi")
        finally:
            await cap.aclose()

    run(main())
    tools = {t.name: t for t in script.infos[0].function_tools}
    # refund needs approval, which code cannot wait for: it stays a tool the model calls itself
    assert set(tools) == {RUN_CODE_TOOL_NAME, "notify", "refund"}
    desc = tools[RUN_CODE_TOOL_NAME].description
    assert "get_order(id: str)" in desc
    assert "notify(" not in desc and "refund(" not in desc


# ---------------------------------------------------------------- sessions


def test_restart_starts_a_fresh_kernel() -> None:
    script = Script(
        Code("x = 41"),
        Code("print('x' in globals())", restart=True),
        answer_with_last_return,
    )
    ts = ToolcellCodeModeToolset()
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("go")
        finally:
            await ts.aclose()

    result = run(main())
    assert result.output == "answer: False"
    assert last_return(result.all_messages()).metadata["result"]["kernel"]["state_reset"] is True
    schema = script.infos[0].function_tools[0].parameters_json_schema
    assert set(schema["properties"]) == {"code", "restart"}


def test_a_named_session_keeps_state_across_runs_and_default_sessions_do_not_leak() -> None:
    shared = ToolcellCodeModeToolset(get_order, session="conversation-1")
    fresh = ToolcellCodeModeToolset(get_order)

    async def main() -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        try:
            s1 = Script(Code("basket = [get_order(id='A-1')]"), answer_with_last_return)
            await Agent(s1.model, toolsets=[shared]).run("put A-1 in")
            s2 = Script(Code("basket.append(get_order(id='A-3'))\nprint(sum(o['total'] for o in basket))"),
                        answer_with_last_return)
            out["shared"] = (await Agent(s2.model, toolsets=[shared]).run("add A-3")).output

            f1 = Script(Code("basket = [1]"), answer_with_last_return)
            r1 = await Agent(f1.model, toolsets=[fresh]).run("one")
            first_session = last_return(r1.all_messages()).metadata["session"]
            tc = fresh.toolcell
            assert tc is not None
            out["alive_after_run"] = [s["session"] for s in await tc.sessions()]
            out["tools_after_run"] = list(tc.tools)
            f2 = Script(Code("print(basket)"), answer_with_last_return)
            r2 = await Agent(f2.model, toolsets=[fresh]).run("two")
            out["fresh"] = last_return(r2.all_messages()).content
            out["sessions"] = (first_session, last_return(r2.all_messages()).metadata["session"])
        finally:
            await shared.aclose()
            await fresh.aclose()
        return out

    out = run(main())
    assert out["shared"] == "answer: 130.0"
    assert "NameError: name 'basket' is not defined" in out["fresh"]
    first, second = out["sessions"]
    assert first != second
    assert first not in out["alive_after_run"]  # its kernel ended with its run
    assert not any(name.startswith(first) for name in out["tools_after_run"])  # and its tools are gone


def test_concurrent_runs_get_their_own_sessions_and_their_own_deps() -> None:
    cap = ToolcellCodeMode()

    def agent_for(name: str) -> Agent:
        script = Script(
            Code("""
                import time
                me = whoami()
                time.sleep(0.3)
                print(me, whoami())
            """),
            answer_with_last_return,
        )
        agent = Agent(script.model, deps_type=str, capabilities=[cap])

        @agent.tool
        def whoami(ctx: RunContext[str]) -> str:
            """Who this run is for."""
            return ctx.deps

        return agent

    async def main() -> List[Any]:
        try:
            return list(await asyncio.gather(agent_for("a").run("x", deps="alice"), agent_for("b").run("x", deps="bob")))
        finally:
            await cap.aclose()

    alice, bob = run(main())
    assert alice.output == "answer: alice alice"
    assert bob.output == "answer: bob bob"
    assert last_return(alice.all_messages()).metadata["session"] != last_return(bob.all_messages()).metadata["session"]


def test_toolsets_sharing_a_client_and_a_session_each_reach_their_own_tools() -> None:
    """Two agents (a router and a specialist, say) on one AsyncToolcell with one session name: they
    share the session's lock and its registrations, so a cell is always served by its own run's tool
    with its own deps, in turn or at once."""

    def make_account(who: str) -> Callable[..., str]:
        def account(ctx: RunContext[str]) -> str:
            """The caller's account."""
            return f"{who}'s tool, deps={ctx.deps}"

        return account

    def agent(who: str, tc: AsyncToolcell, *codes: str) -> Agent:
        steps: List[Step] = []
        for code in codes:  # one run per code
            steps += [Code(code), answer_with_last_return]
        return Agent(Script(*steps).model, deps_type=str, tools=[make_account(who)],
                     capabilities=[ToolcellCodeMode(toolcell=tc, session="conv-1")])

    async def main() -> Dict[str, str]:
        tc = AsyncToolcell(config={"tools": {"enabled": []}})
        out: Dict[str, str] = {}
        try:
            a = agent("A", tc, *["print(account())"] * 3)
            b = agent("B", tc, "print(account())", "import time; time.sleep(1.0); print(account())")
            out["A"] = (await a.run("go", deps="alice")).output
            out["B"] = (await b.run("go", deps="bob")).output
            out["A again"] = (await a.run("go", deps="alice")).output
            slow_b = asyncio.ensure_future(b.run("go", deps="bob"))
            await asyncio.sleep(0.4)  # B's cell runs
            out["A meanwhile"] = (await a.run("go", deps="alice")).output
            out["B slow"] = (await slow_b).output
        finally:
            await tc.aclose()
        return out

    out = run(main())
    assert out == {
        "A": "answer: A's tool, deps=alice",
        "B": "answer: B's tool, deps=bob",
        "A again": "answer: A's tool, deps=alice",
        "A meanwhile": "answer: A's tool, deps=alice",
        "B slow": "answer: B's tool, deps=bob",
    }


def test_run_sync_twice_with_a_given_client_and_session() -> None:
    async def make() -> AsyncToolcell:
        return AsyncToolcell(config={"tools": {"enabled": []}})

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        tc = loop.run_until_complete(make())
        ts = ToolcellCodeModeToolset(get_order, toolcell=tc, session="chat")
        a = Agent(Script(Code("n = 1"), answer_with_last_return).model, toolsets=[ts])
        a.run_sync("one")
        b = Agent(Script(Code("n += 1\nprint(n)"), answer_with_last_return).model, toolsets=[ts])
        assert b.run_sync("two").output == "answer: 2"
        assert ts.toolcell is tc
        loop.run_until_complete(ts.end_session())
        c = Agent(Script(Code("print('n' in globals())"), answer_with_last_return).model, toolsets=[ts])
        assert c.run_sync("three").output == "answer: False"
        tc.close()
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def test_a_second_asyncio_run_keeps_the_server_and_the_named_sessions_state(caplog: Any) -> None:
    """The client a capability starts is tied to no event loop: a later
    ``asyncio.run`` (the first one's loop closed) uses the same server, and a
    named session keeps its kernel and its variables."""
    cap = ToolcellCodeMode(session="chat")

    def one_run(code: str) -> str:
        agent = Agent(Script(Code(code), answer_with_last_return).model, capabilities=[cap])
        agent.tool_plain(get_order)
        return str(run(agent.run("x")).output)

    try:
        assert one_run("seen = get_order(id='A-2')['total']\nprint(seen)") == "answer: 35.5"
        first = cap.toolcell
        with caplog.at_level("WARNING", logger="toolcell"):
            out = one_run("print('seen' in globals(), get_order(id='A-3')['total'])")
        assert cap.toolcell is first
    finally:
        if cap.toolcell is not None:
            cap.toolcell.close()
    assert out == "answer: True 10.0"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


# ---------------------------------------------------------------- streaming


@pytest.mark.parametrize("shape", ["toolset", "capability"])
def test_output_streams_while_the_cell_runs(shape: str) -> None:
    chunks: List[str] = []
    script = Script(
        Code("""
            import time
            for i in range(3):
                print(f"tick {i}", flush=True)
                time.sleep(0.25)
        """),
        answer_with_last_return,
    )

    async def on_output_async(chunk: Any) -> None:
        chunks.append(chunk.text)

    if shape == "toolset":
        owner: Any = ToolcellCodeModeToolset(on_output=lambda chunk: chunks.append(chunk.text))
        agent = Agent(script.model, toolsets=[owner])
    else:
        owner = ToolcellCodeMode(on_output=on_output_async)
        agent = Agent(script.model, capabilities=[owner])
    timeline: List[Any] = []

    async def handler(ctx: Any, events: Any) -> None:
        async for ev in events:
            timeline.append((time.monotonic() - t0, ev))

    async def main() -> None:
        try:
            await agent.run("tick", event_stream_handler=handler)
        finally:
            await owner.aclose()

    t0 = time.monotonic()
    run(main())
    assert "".join(chunks) == "tick 0\ntick 1\ntick 2\n"
    if not HAS_CUSTOM_EVENTS:  # pydantic-ai before 2.38: no custom events, on_output only
        return
    out = [(t, ev) for t, ev in timeline if isinstance(ev, ToolcellOutputEvent)]
    assert "".join(ev.text for _, ev in out) == "tick 0\ntick 1\ntick 2\n"
    assert all(ev.tool_call_id == "call-1" and ev.stream == "stdout" for _, ev in out)
    done = next(t for t, ev in timeline if type(ev).__name__ == "FunctionToolResultEvent")
    assert out[0][0] < done - 0.3  # the first tick arrived while the cell was still running


# ---------------------------------------------------------------- errors and history


def test_a_failing_cell_is_a_result_the_model_reads_not_a_retry() -> None:
    script = Script(Code("1 / 0"), Code("print('still here')"), answer_with_last_return)
    ts = ToolcellCodeModeToolset()
    agent = Agent(script.model, toolsets=[ts])

    async def main() -> Any:
        try:
            return await agent.run("divide")
        finally:
            await ts.aclose()

    result = run(main())
    failed, ok = code_returns(result.all_messages())
    assert "ZeroDivisionError" in failed.content and "status: error" in failed.content
    assert failed.metadata["result"]["status"] == "error"
    assert result.output == "answer: still here"
    # the history, metadata included, survives a JSON round trip
    back = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    assert last_return(back).metadata["result"]["status"] == "success"


def test_misconfiguration_says_what_to_do() -> None:
    async def with_client() -> None:
        tc = AsyncToolcell()
        try:
            with pytest.raises(TypeError, match="pass them to your AsyncToolcell"):
                ToolcellCodeModeToolset(toolcell=tc, config={"execution": {"timeout": 5}})
        finally:
            await tc.aclose()

    run(with_client())

    def run_code(code: str) -> str:
        """A tool that would shadow the code tool."""
        return code

    ts = ToolcellCodeModeToolset(run_code)
    agent = Agent(Script(lambda m: "never").model, toolsets=[ts])

    async def main() -> None:
        try:
            await agent.run("hi")
        finally:
            await ts.aclose()

    with pytest.raises(UserError, match="rename it"):
        run(main())
    with pytest.raises(TypeError, match="expected tools"):
        ToolcellCodeModeToolset(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- threads and event loops


def test_run_sync_from_two_threads_runs_async_tools_on_each_runs_own_loop() -> None:
    """``run_sync`` from worker threads (a web server's pool) on one agent: the
    second thread's async tool used to be scheduled on the first thread's idle
    loop and hang until the cell's timeout."""
    cap = ToolcellCodeMode(config={"execution": {"timeout": 20}})

    def respond(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        if code_returns(messages):
            return ModelResponse(parts=[TextPart(answer_with_last_return(messages))])
        x = messages[0].parts[-1].content  # type: ignore[union-attr]
        return ModelResponse(parts=[ToolCallPart(RUN_CODE_TOOL_NAME, {"code": f"print(times_ten(x={x}))"})])

    agent = Agent(FunctionModel(respond), capabilities=[cap])
    ran_in: List[str] = []

    @agent.tool_plain
    async def times_ten(x: int) -> int:
        """x times ten."""
        ran_in.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return x * 10

    out: Dict[str, Any] = {}

    def worker(name: str) -> None:
        t = time.monotonic()
        out[name] = (agent.run_sync({"a": "2", "b": "3", "c": "4", "d": "5"}[name]).output, time.monotonic() - t)

    try:
        for name in ("a", "b"):  # one after the other: a's loop stays open, idle
            th = threading.Thread(target=worker, args=(name,), name=f"run-{name}")
            th.start()
            th.join(60)
        both = [threading.Thread(target=worker, args=(name,), name=f"run-{name}") for name in ("c", "d")]  # at once
        for th in both:
            th.start()
        for th in both:
            th.join(60)
    finally:
        if cap.toolcell is not None:
            cap.toolcell.close()
    assert sorted(v[0] for v in out.values()) == ["answer: 20", "answer: 30", "answer: 40", "answer: 50"]
    assert all(v[1] < 10 for v in out.values()), out
    # each async tool ran on the loop of the run that made the call, in that run's thread
    assert sorted(ran_in) == ["run-a", "run-b", "run-c", "run-d"]


def test_a_run_keeps_its_kernel_when_another_threads_run_ends_first() -> None:
    """Thread a starts the server; thread b's run is between two cells when a's
    ``asyncio.run`` ends and closes its loop. b's second cell still finds the
    variable its first one set (it used to get a new server and a NameError)."""
    cap = ToolcellCodeMode()
    a_between_cells = threading.Event()
    b_between_cells = threading.Event()
    a_done = threading.Event()

    def model(first: str, second: str, between: threading.Event, wait_for: threading.Event) -> FunctionModel:
        def respond(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
            done = len(code_returns(messages))
            if done == 1:
                between.set()
                assert wait_for.wait(30)
            if done < 2 and (first, second)[done]:
                return ModelResponse(parts=[ToolCallPart(RUN_CODE_TOOL_NAME, {"code": (first, second)[done]})])
            return ModelResponse(parts=[TextPart(answer_with_last_return(messages))])

        return FunctionModel(respond)

    # a: one cell, then waits (its loop still open) until b is between its two cells
    agent_a = Agent(model("print('a')", "", a_between_cells, b_between_cells), capabilities=[cap])
    # b: its second cell once a's asyncio.run is over
    agent_b = Agent(model("x = 41", "print(x + 1)", b_between_cells, a_done), capabilities=[cap])
    out: Dict[str, Any] = {}

    def run_a() -> None:
        out["a"] = asyncio.run(agent_a.run("go")).output
        a_done.set()

    def run_b() -> None:
        assert a_between_cells.wait(30)  # the server is a's
        out["b"] = asyncio.run(agent_b.run("go")).output

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    finally:
        if cap.toolcell is not None:
            cap.toolcell.close()
    assert out == {"a": "answer: a", "b": "answer: 42"}


def test_one_named_session_used_from_two_threads_runs_one_cell_at_a_time() -> None:
    """Two runs in two threads on one named session: the second cell waits for
    the first, and each cell's nested calls get its own run's context (a lock
    per event loop let both in, and a cell's calls reached the other run's deps)."""
    cap = ToolcellCodeMode(session="shared")
    code = Code("""
        import time
        me = whoami()
        time.sleep(0.4)
        print(me, whoami())
    """)
    start = threading.Barrier(2)

    def agent_for() -> Agent:
        agent = Agent(Script(code, answer_with_last_return).model, deps_type=str, capabilities=[cap])

        @agent.tool
        def whoami(ctx: RunContext[str]) -> str:
            """Who this run is for."""
            return ctx.deps

        return agent

    agents = {"alice": agent_for(), "bob": agent_for()}
    out: Dict[str, Any] = {}

    def worker(name: str) -> None:
        start.wait(30)
        out[name] = asyncio.run(agents[name].run("x", deps=name)).output

    threads = [threading.Thread(target=worker, args=(name,)) for name in agents]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    finally:
        if cap.toolcell is not None:
            cap.toolcell.close()
    assert out == {"alice": "answer: alice alice", "bob": "answer: bob bob"}


def test_a_session_lock_held_by_a_stopped_loop_is_an_error_and_by_a_closed_one_is_taken_over(
    monkeypatch: Any,
) -> None:
    """A run left pending when its loop stopped holds its session: another
    run gets a UserError naming the session instead of waiting forever, and
    once that loop is closed the lock is taken over."""
    monkeypatch.setattr(_integration._SessionLock, "POLL", 0.05)
    monkeypatch.setattr(_integration._SessionLock, "STALLED", 0.3)
    lock = _integration._SessionLock("chat")
    stuck = asyncio.new_event_loop()

    async def hold_forever() -> None:
        async with lock:
            await asyncio.Event().wait()

    task = stuck.create_task(hold_forever())
    stuck.run_until_complete(asyncio.sleep(0.01))  # the task holds the lock; the loop stops
    assert not task.done()

    async def take() -> str:
        async with lock:
            return "got it"

    t = time.monotonic()
    with pytest.raises(UserError, match="session 'chat' is held by a run whose event loop has not run"):
        asyncio.run(take())
    assert time.monotonic() - t < 5
    stuck.close()
    assert asyncio.run(take()) == "got it"
    assert asyncio.run(take()) == "got it"  # and given back


def test_a_sub_agent_sharing_the_session_fails_fast_instead_of_waiting_for_itself() -> None:
    cap = ToolcellCodeMode(session="chat", config={"execution": {"timeout": 30}})
    inner = Agent(Script(Code("print('inner')"), answer_with_last_return).model, capabilities=[cap])
    outer = Agent(Script(Code("""
        try:
            ask_helper(question="hi")
        except ToolError as e:
            print("refused:", e)
    """), answer_with_last_return).model, capabilities=[cap])

    @outer.tool_plain
    async def ask_helper(question: str) -> str:
        """Ask the helper agent."""
        return str((await inner.run(question)).output)

    async def main() -> Any:
        try:
            return await outer.run("go")
        finally:
            await cap.aclose()

    t = time.monotonic()
    result = run(main())
    assert time.monotonic() - t < 15
    assert "refused:" in result.output and "same toolcell session 'chat'" in result.output


def test_an_async_tool_still_running_when_the_cell_times_out_is_cancelled() -> None:
    cancelled = threading.Event()

    async def slow() -> str:
        """Takes its time."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "done"

    ts = ToolcellCodeModeToolset(slow, timeout=2)
    agent = Agent(Script(Code("print(slow())"), answer_with_last_return).model, toolsets=[ts])

    async def main() -> Any:
        try:
            out = await agent.run("go")
            await asyncio.sleep(0.5)
            return out
        finally:
            await ts.aclose()

    t = time.monotonic()
    result = run(main())
    assert "the call was cancelled" in result.output
    assert cancelled.wait(5) and time.monotonic() - t < 10


# ---------------------------------------------------------------- capabilities and limits


class Audit(AbstractCapability[Any]):
    """A policy capability: sees every tool call, blocks some, rewrites others."""

    def __init__(self) -> None:
        self.validated: List[str] = []
        self.executed: List[str] = []

    async def before_tool_validate(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition,
                                   args: Any) -> Any:
        self.validated.append(call.tool_name)
        if call.tool_name == "get_order" and isinstance(args, dict):
            return {**args, "id": str(args.get("id", "")).upper()}  # normalise ids
        return args

    async def before_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition,
                                  args: Dict[str, Any]) -> Dict[str, Any]:
        self.executed.append(f"{call.tool_name}:{ctx.tool_call_id}")
        if tool_def.name == "delete_all":
            raise PermissionError("blocked by policy")
        if tool_def.name == "refund":
            raise ApprovalRequired()
        return args

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition,
                                args: Dict[str, Any], handler: Any) -> Any:
        result = await handler(args)
        if tool_def.name == "get_order":
            return {**result, "audited": True}
        return result

    async def on_tool_execute_error(self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition,
                                    args: Dict[str, Any], error: Exception) -> Any:
        if isinstance(error, LookupError):
            return {"id": args.get("id"), "total": None, "missing": True}
        raise error


@pytest.mark.skipif(not CALLS_SEE_HOOKS, reason="this pydantic-ai gives a tool no way to the run's hooks")
@pytest.mark.parametrize("tool_kind", ["plain", "async"])
def test_capability_tool_hooks_check_calls_made_from_code(tool_kind: str) -> None:
    """A call from a cell goes through the run's capability hooks as a direct
    call would: it is blocked, deferred, rewritten or recovered the same way."""
    deleted: List[str] = []
    refunded: List[str] = []
    script = Script(
        Code("""
            print(get_order(id="a-1"))
            print(get_order(id="z-9"))
            for f in (delete_all, lambda: refund(id="A-1")):
                try:
                    f()
                except ToolError as e:
                    print("refused:", e)
        """),
        answer_with_last_return,
    )
    audit = Audit()
    agent = Agent(script.model, capabilities=[ToolcellCodeMode(), audit])

    if tool_kind == "plain":
        @agent.tool_plain
        def get_order(id: str) -> dict:
            """One order."""
            return {"id": id, "total": ORDERS[id]}
    else:
        @agent.tool_plain
        async def get_order(id: str) -> dict:
            """One order."""
            return {"id": id, "total": ORDERS[id]}

    @agent.tool_plain
    def delete_all() -> str:
        """Delete every order."""
        deleted.append("all")
        return "EVERYTHING DELETED"

    @agent.tool_plain
    def refund(id: str) -> str:
        """Refund an order."""
        refunded.append(id)
        return "refunded"

    result = agent.run_sync("go")
    out = last_return(result.all_messages()).content
    assert "{'id': 'A-1', 'total': 120.0, 'audited': True}" in out
    # recovered by on_tool_execute_error (inside wrap_tool_execute on pydantic-ai 2.68, outside it before)
    assert "{'id': 'Z-9', 'total': None, 'missing': True" in out
    assert "refused: delete_all: PermissionError: blocked by policy" in out
    assert "refused: refund: ApprovalRequired" in out and "it was not made" in out
    assert deleted == [] and refunded == []
    assert audit.validated == ["run_code", "get_order", "get_order", "delete_all", "refund"]
    assert audit.executed == ["run_code:call-1", "get_order:call-1__1", "get_order:call-1__2",
                              "delete_all:call-1__3", "refund:call-1__4"]
    meta = last_return(result.all_messages()).metadata
    assert set(meta["tool_errors"]) == {"call-1__3", "call-1__4"}


@pytest.mark.skipif(not HAS_USAGE_LIMITS, reason="this pydantic-ai does not give a tool the run's usage limits")
def test_nested_calls_count_against_the_runs_tool_calls_limit() -> None:
    script = Script(
        Code("""
            got = []
            for i in ["A-1", "A-2", "A-3", "A-1"]:
                try:
                    got.append(get_order(id=i)["total"])
                except ToolError as e:
                    print("stopped:", e)
                    break
            print(got)
        """),
        answer_with_last_return,
    )
    agent = Agent(script.model, capabilities=[cap := ToolcellCodeMode()])
    agent.tool_plain(get_order)

    async def main() -> Any:
        try:
            return await agent.run("go", usage_limits=UsageLimits(tool_calls_limit=3))
        finally:
            await cap.aclose()

    result = run(main())
    out = last_return(result.all_messages()).content
    assert "stopped: get_order: UsageLimitExceeded: The next tool call(s) would exceed the tool_calls_limit of 3" in out
    assert out.endswith("[120.0, 35.5]")
    assert usage_of(result).tool_calls == 3  # two nested calls and run_code itself


def test_the_direct_call_of_plain_tools_is_checked_against_pydantic_ai_and_off_when_they_disagree(
    monkeypatch: Any,
) -> None:
    """The direct call of a plain function tool (no hop to the event loop) uses
    private parts of pydantic-ai; a self-check at import compares it with
    pydantic-ai's own call, and a pydantic-ai that passes the arguments
    differently turns it off."""
    from pydantic_ai._function_schema import FunctionSchema

    integration = _integration
    assert integration._FAST_PATH is True  # on the pinned pydantic-ai
    assert integration._fast_path_works() is True
    original = FunctionSchema._call_args

    def reordered(self: Any, args_dict: Dict[str, Any], ctx: Any) -> Any:
        pos, kw = original(self, args_dict, ctx)
        return pos, dict(reversed(list(kw.items())))  # same keywords: still right

    monkeypatch.setattr(FunctionSchema, "_call_args", reordered)
    assert integration._fast_path_works() is True

    def changed(self: Any, args_dict: Dict[str, Any], ctx: Any) -> Any:
        pos, kw = original(self, args_dict, ctx)
        return pos[1:], kw  # say a new pydantic-ai passed the context some other way

    monkeypatch.setattr(FunctionSchema, "_call_args", changed)
    assert integration._fast_path_works() is False


def test_with_the_direct_call_off_plain_tools_go_through_the_tool_manager(monkeypatch: Any) -> None:
    monkeypatch.setattr(_integration, "_FAST_PATH", False)
    threads: List[str] = []
    script = Script(Code("print(sum(get_order(id=i)['total'] for i in ['A-1', 'A-2']))"), answer_with_last_return)
    agent = Agent(script.model, capabilities=[cap := ToolcellCodeMode()])

    @agent.tool_plain
    def get_order(id: str) -> dict:
        """One order."""
        threads.append(threading.current_thread().name)
        return {"id": id, "total": ORDERS[id]}

    async def main() -> Any:
        try:
            return await agent.run("go")
        finally:
            await cap.aclose()

    result = run(main())
    assert result.output == "answer: 155.5"
    assert usage_of(result).tool_calls == 3
    assert not any(t.startswith("toolcell-tool") for t in threads)  # pydantic-ai's worker threads


def test_streamed_output_keeps_only_the_pending_emits() -> None:
    """A chatty cell: the futures of the emitted output events are dropped as
    they finish, not kept until the end of the cell (memory O(output))."""
    cap = ToolcellCodeMode(session="chatty")
    seen: List[int] = []

    async def on_output(chunk: Any) -> None:
        active = cap._shared.session("chatty").active
        if active is not None:
            seen.append(len(active.emits))

    cap.on_output = on_output
    script = Script(Code("""
        import sys, time
        for i in range(300):
            print(i, flush=True)
            time.sleep(0.002)
    """), answer_with_last_return)
    agent = Agent(script.model, capabilities=[cap])

    async def main() -> None:
        try:
            await agent.run("go")
        finally:
            await cap.aclose()

    run(main())
    assert len(seen) > 50, len(seen)
    assert max(seen) < len(seen) // 2, (max(seen), len(seen))  # kept them all: 2 per chunk so far
