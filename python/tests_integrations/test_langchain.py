"""toolcell.integrations.langchain: a real `toolcell serve`, LangGraph agents driven by LangChain's fake chat model.

The model is ``GenericFakeChatModel`` (langchain_core's test double) with a
script of replies; it records the messages of every request, so a test can
check what the model was shown (a ToolError, the cell's output).
"""

import asyncio
import datetime
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import MemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph_codeact import create_codeact
from pydantic import Field

import toolcell
from toolcell import ExecuteResult, Toolcell
from toolcell.integrations.langchain import OUTPUT_EVENT, ToolcellCodeAct, ToolcellTool, make_eval_fn

from procs import gone

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, recording each request's messages; tools binding is a no-op."""

    seen: List[List[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: List[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedModel":
        return self


def scripted(steps: List[Any]) -> ScriptedModel:
    """A model answering with `steps` in order; a callable step gets the messages of its request."""
    model: ScriptedModel

    def replies() -> Iterator[AIMessage]:
        for step in steps:
            yield step(model.seen[-1]) if callable(step) else step

    model = ScriptedModel(messages=replies())
    return model


def run_code(code: str, call_id: str = "c1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "execute_code", "args": {"code": code}, "id": call_id}])


def answer_with_last(messages: List[BaseMessage]) -> AIMessage:
    return AIMessage(content=f"answer: {messages[-1].content}")


@pytest.fixture(scope="module")
def tc() -> Iterator[Toolcell]:
    with Toolcell(config={"tools": {"enabled": []}}) as client:
        yield client


@pytest.fixture
def shop() -> Dict[str, Any]:
    """The agent's own tools, recording the calls that reached the host."""
    calls: List[Any] = []

    @tool
    def get_order(id: str) -> dict:
        """One order, by id.

        Args:
            id: The order id, like "A-1".
        """
        calls.append(("get_order", id, threading.current_thread().name))
        if id not in ORDERS:
            raise ValueError(f"no order {id}")
        return {"id": id, "total": ORDERS[id]}

    @tool
    def list_orders() -> list:
        """Ids of all orders."""
        calls.append(("list_orders",))
        return sorted(ORDERS)

    return {"tools": [get_order, list_orders], "calls": calls}


def react(model: ScriptedModel, code_tool: ToolcellTool) -> Any:
    return create_react_agent(model, [code_tool], checkpointer=MemorySaver())


# ---------------------------------------------------------------- ToolcellTool in create_react_agent


def test_one_cell_loops_over_the_agents_tools(tc: Toolcell, shop: Dict[str, Any]) -> None:
    code_tool = ToolcellTool(shop["tools"], tc)
    assert "get_order(id: str) -> dict" in code_tool.description  # the model is shown the tools
    assert "list_orders()" in code_tool.description
    model = scripted([
        run_code("total = sum(get_order(i)['total'] for i in list_orders())\nprint(total)"),
        answer_with_last,
    ])
    out = react(model, code_tool).invoke({"messages": [("user", "total of all orders?")]},
                                         {"configurable": {"thread_id": "loop"}})
    tool_msg = out["messages"][2]
    assert isinstance(tool_msg, ToolMessage) and tool_msg.content == "1145.5"
    assert out["messages"][-1].content == "answer: 1145.5"
    # the nested calls ran here, in the host, on the client's tool threads
    assert [c[:2] for c in shop["calls"]] == [("list_orders",), ("get_order", "A-1"), ("get_order", "A-2"),
                                             ("get_order", "A-3")]
    assert all(c[2].startswith("toolcell-tool") for c in shop["calls"][1:])
    # the artifact is the structured result
    result = ExecuteResult.from_dict(tool_msg.artifact)
    assert result.ok and result.tool_calls_made == 4
    code_tool.close()


def test_second_turn_of_a_thread_reuses_a_variable(tc: Toolcell, shop: Dict[str, Any]) -> None:
    code_tool = ToolcellTool(shop["tools"], tc)
    model = scripted([
        run_code("big = [i for i in list_orders() if get_order(i)['total'] > 100]\nprint(len(big))"),
        answer_with_last,
        run_code("print(', '.join(big))", "c2"),
        answer_with_last,
    ])
    agent = react(model, code_tool)
    cfg: RunnableConfig = {"configurable": {"thread_id": "t-reuse"}}
    first = agent.invoke({"messages": [("user", "how many big orders?")]}, cfg)
    assert first["messages"][-1].content == "answer: 2"
    second = agent.invoke({"messages": [("user", "which ones?")]}, cfg)
    assert second["messages"][-1].content == "answer: A-1, A-3"
    assert code_tool.session_for(cfg) in code_tool.sessions
    code_tool.close()


def test_failing_tool_error_reaches_the_model(tc: Toolcell, shop: Dict[str, Any]) -> None:
    code_tool = ToolcellTool(shop["tools"], tc)
    model = scripted([
        run_code("print(get_order('Z-9'))"),
        run_code(
            "try:\n    get_order('Z-9')\nexcept ToolError as e:\n    print('caught:', e)", "c2"),
        answer_with_last,
    ])
    out = react(model, code_tool).invoke({"messages": [("user", "order Z-9?")]},
                                         {"configurable": {"thread_id": "t-err"}})
    # the second request to the model carries the first cell's ToolError
    shown = model.seen[1][-1]
    assert isinstance(shown, ToolMessage)
    assert "ToolError: get_order: ValueError: no order Z-9" in shown.content
    assert "status: error" in shown.content
    # the code can catch it, too
    assert out["messages"][-1].content == "answer: caught: get_order: ValueError: no order Z-9"
    code_tool.close()


def test_two_threads_have_separate_kernels(tc: Toolcell, shop: Dict[str, Any]) -> None:
    code_tool = ToolcellTool(shop["tools"], tc)
    model = scripted([
        run_code("x = 'thread A'"), answer_with_last,
        run_code("print(x)", "c2"), answer_with_last,
        run_code("print(x)", "c3"), answer_with_last,
    ])
    agent = react(model, code_tool)
    a: RunnableConfig = {"configurable": {"thread_id": "A"}}
    b: RunnableConfig = {"configurable": {"thread_id": "B"}}
    agent.invoke({"messages": [("user", "set")]}, a)
    out_b = agent.invoke({"messages": [("user", "read")]}, b)
    assert "NameError: name 'x' is not defined" in out_b["messages"][-1].content
    out_a = agent.invoke({"messages": [("user", "read")]}, a)
    assert out_a["messages"][-1].content == "answer: thread A"
    assert sorted(code_tool.sessions) == sorted([code_tool.default_session, "langgraph-A", "langgraph-B"])
    code_tool.close()


def test_ainvoke_runs_async_tools_on_the_agents_loop(tc: Toolcell) -> None:
    loops: List[Any] = []

    @tool
    async def stock(sku: str) -> int:
        """Units in stock."""
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return {"a": 3, "b": 4}[sku]

    code_tool = ToolcellTool([stock], tc)
    model = scripted([run_code("n = stock('a') + stock('b')\nn"), answer_with_last,
                      run_code("print(n * 10)", "c2"), answer_with_last])
    agent = react(model, code_tool)

    async def main() -> List[str]:
        cfg: RunnableConfig = {"configurable": {"thread_id": "async"}}
        one = await agent.ainvoke({"messages": [("user", "stock?")]}, cfg)
        two = await agent.ainvoke({"messages": [("user", "times ten?")]}, cfg)
        assert loops == [asyncio.get_running_loop()] * 2  # both calls ran on this loop
        return [one["messages"][-1].content, two["messages"][-1].content]

    assert asyncio.run(main()) == ["answer: 7", "answer: 70"]
    # the same tool still works from sync code afterwards (another loop, none at all)
    assert code_tool.invoke({"code": "print(stock('b'))"}) == "4"
    code_tool.close()


def test_nested_calls_get_the_runs_config_and_are_traced(tc: Toolcell) -> None:
    seen: List[Any] = []

    @tool
    def whoami(config: RunnableConfig) -> str:
        """The user of this run."""
        from langchain_core.runnables.config import var_child_runnable_config

        assert var_child_runnable_config.get()["configurable"]["user"] == config["configurable"]["user"]
        return config["configurable"]["user"]

    class Runs(BaseCallbackHandler):
        def on_tool_start(self, serialized: Dict[str, Any], input_str: str, *, run_id: UUID,
                          parent_run_id: Optional[UUID] = None, **kw: Any) -> None:
            seen.append((serialized["name"], run_id, parent_run_id))

    code_tool = ToolcellTool([whoami], tc)
    model = scripted([run_code("print(whoami())"), answer_with_last, run_code("print(whoami())"), answer_with_last])
    agent = react(model, code_tool)
    # no handler: the tool is called directly, with the run's config
    out = agent.invoke({"messages": [("user", "who?")]}, {"configurable": {"thread_id": "cfg", "user": "ada"}})
    assert out["messages"][-1].content == "answer: ada"
    # with a handler: through tool.invoke, a child run of execute_code
    out = agent.invoke({"messages": [("user", "who?")]},
                       {"configurable": {"thread_id": "cfg2", "user": "bob"}, "callbacks": [Runs()]})
    assert out["messages"][-1].content == "answer: bob"
    assert [s[0] for s in seen] == ["execute_code", "whoami"]
    assert seen[1][2] == seen[0][1]
    code_tool.close()


def test_output_streams_while_the_cell_runs(tc: Toolcell) -> None:
    code_tool = ToolcellTool([], tc)
    model = scripted([run_code("import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')"),
                      answer_with_last])
    agent = react(model, code_tool)
    got: List[Any] = []
    start = time.monotonic()
    for item in agent.stream({"messages": [("user", "go")]}, {"configurable": {"thread_id": "s"}},
                             stream_mode=["custom", "updates"]):
        got.append((time.monotonic() - start, item))
    custom = [(t, data) for t, (mode, data) in got if mode == "custom"]
    assert "".join(d["text"] for _, d in custom) == "one\ntwo\n"
    assert all(d["type"] == OUTPUT_EVENT and d["stream"] == "stdout" for _, d in custom)
    tool_update = next(t for t, (mode, data) in got if mode == "updates" and "tools" in data)
    assert custom[0][0] < tool_update - 0.3  # "one" came before the cell ended
    code_tool.close()


def test_output_reaches_callbacks_as_custom_events(tc: Toolcell) -> None:
    events: List[Any] = []

    class Handler(BaseCallbackHandler):
        def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kw: Any) -> None:
            events.append((name, data["text"]))

    with ToolcellTool([], tc) as code_tool:
        msg = code_tool.invoke({"type": "tool_call", "id": "x", "name": "execute_code",
                                "args": {"code": "print('a')\nimport sys; print('b', file=sys.stderr)"}},
                               {"callbacks": [Handler()]})
        assert sorted(events) == [(OUTPUT_EVENT, "a\n"), (OUTPUT_EVENT, "b\n")]  # two streams: either first
        assert msg.content == "a\n\n--- stderr ---\nb"

        async def via_astream_events() -> List[str]:
            texts = []
            async for ev in code_tool.astream_events({"code": "print('c')"}, version="v2"):
                if ev["event"] == "on_custom_event" and ev["name"] == OUTPUT_EVENT:
                    texts.append(ev["data"]["text"])
            return texts

        assert asyncio.run(via_astream_events()) == ["c\n"]


def test_reset_and_cell_errors_are_results(tc: Toolcell) -> None:
    with ToolcellTool([], tc) as code_tool:
        def call(args: Dict[str, Any]) -> ToolMessage:
            return code_tool.invoke({"type": "tool_call", "id": "x", "name": "execute_code", "args": args})

        assert call({"code": "y = 5"}).content == "(no output)"
        failed = call({"code": "1/0"})
        assert "ZeroDivisionError" in failed.content and failed.artifact["status"] == "error"
        assert call({"code": "print(y)"}).content == "5"  # an error keeps the state
        fresh = call({"code": "print('y' in globals())", "reset": True})
        assert fresh.content == "False" and fresh.artifact["kernel"]["state_reset"] is True


def test_session_cleanup_and_owned_server() -> None:
    code_tool = ToolcellTool([], session="fixed")
    client = code_tool.client
    code_tool.invoke({"code": "a = 1"})
    code_tool.invoke({"code": "a = 2"}, {"configurable": {"thread_id": "t9"}})
    live = {s["session"] for s in client.sessions()}
    assert {"fixed", "langgraph-t9"} <= live
    assert code_tool.close_session("t9") is True
    assert "langgraph-t9" not in {s["session"] for s in client.sessions()}
    assert code_tool.sessions == ["fixed"]
    code_tool.close()
    with pytest.raises(toolcell.ServerExited):  # the tool started this server, so it ended it
        client.sessions()


def test_a_dead_server_raises_tool_exception() -> None:
    client = Toolcell(config={"tools": {"enabled": []}})
    code_tool = ToolcellTool([], client)
    os.kill(client.pid, signal.SIGKILL)
    with pytest.raises(ToolException, match="toolcell could not run the cell"):
        code_tool.invoke({"code": "print(1)"})
    client.close()


def test_bad_arguments_are_refused_before_the_tool(tc: Toolcell, shop: Dict[str, Any]) -> None:
    with ToolcellTool(shop["tools"], tc) as code_tool:
        text = code_tool.invoke({"code": "get_order(42)"})  # a plain dict input: the content alone
        assert "ToolError: get_order: bad arguments: /id: 42 is not of type \"string\"" in text
        assert shop["calls"] == []
    with pytest.raises(TypeError, match="toolcell.Toolcell"):
        ToolcellTool([], client=object())  # type: ignore[arg-type]


# ---------------------------------------------------------------- create_codeact with make_eval_fn


def run_python(code: str) -> AIMessage:
    return AIMessage(content=f"Let me compute it.\n```python\n{code}\n```")


def codeact(model: ScriptedModel, tools: List[Any], eval_fn: Callable[..., Any]) -> Any:
    return create_codeact(model, tools, eval_fn).compile(checkpointer=MemorySaver())


def test_codeact_loop_state_and_returned_context(tc: Toolcell, shop: Dict[str, Any]) -> None:
    evaluator = make_eval_fn(shop["tools"], tc)
    model = scripted([
        run_python("totals = {i: get_order(i)['total'] for i in list_orders()}\nbest = max(totals, key=totals.get)\n"
                   "print(sum(totals.values()))"),
        answer_with_last,
        run_python("print(best, totals[best])"),
        answer_with_last,
    ])
    agent = codeact(model, shop["tools"], evaluator)
    cfg: RunnableConfig = {"configurable": {"thread_id": "ca-1"}}
    out = agent.invoke({"messages": [("user", "sum?")]}, cfg)
    assert out["messages"][-1].content == "answer: 1145.5"
    assert len([c for c in shop["calls"] if c[0] == "get_order"]) == 3
    # the cell's JSON variables are merged into the state's context
    assert out["context"] == {"totals": ORDERS, "best": "A-3"}
    second = agent.invoke({"messages": [("user", "largest?")]}, cfg)
    assert second["messages"][-1].content == "answer: A-3 990.0"
    assert evaluator.last_result is not None and evaluator.last_result.ok
    evaluator.close()


def test_codeact_tool_error_is_shown_to_the_model(tc: Toolcell, shop: Dict[str, Any]) -> None:
    evaluator = make_eval_fn(shop["tools"], tc)
    model = scripted([run_python("get_order('Z-9')"), answer_with_last])
    agent = codeact(model, shop["tools"], evaluator)
    agent.invoke({"messages": [("user", "Z-9?")]}, {"configurable": {"thread_id": "ca-err"}})
    shown = model.seen[1][-1]
    assert "ToolError: get_order: ValueError: no order Z-9" in shown.content
    evaluator.close()


def test_codeact_context_goes_into_the_kernel_and_threads_are_separate(tc: Toolcell, shop: Dict[str, Any]) -> None:
    evaluator = ToolcellCodeAct(shop["tools"], tc)
    model = scripted([
        run_python("print(budget - get_order('A-2')['total'], 'when' in globals())"), answer_with_last,
        run_python("print(budget)"), answer_with_last,
    ])
    agent = codeact(model, shop["tools"], evaluator)
    # a context given with the input (not JSON values are left out) is set in the kernel
    out = agent.invoke({"messages": [("user", "left?")],
                        "context": {"budget": 100, "when": datetime.date(2024, 5, 1)}},
                       {"configurable": {"thread_id": "ca-ctx"}})
    assert out["messages"][-1].content == "answer: 64.5 False"
    other = agent.invoke({"messages": [("user", "budget?")]}, {"configurable": {"thread_id": "ca-other"}})
    assert "NameError: name 'budget' is not defined" in other["messages"][-1].content
    assert {"codeact-ca-ctx", "codeact-ca-other"} <= set(evaluator.sessions)
    evaluator.close()
    assert not {"codeact-ca-ctx", "codeact-ca-other"} & {s["session"] for s in tc.sessions()}


def test_codeact_restores_a_checkpointed_context_in_a_new_kernel(tc: Toolcell, shop: Dict[str, Any]) -> None:
    saver = MemorySaver()
    cfg: RunnableConfig = {"configurable": {"thread_id": "ca-resume"}}
    first = ToolcellCodeAct(shop["tools"], tc)
    model = scripted([run_python("rate = 0.2\nprint(rate)"), answer_with_last])
    create_codeact(model, shop["tools"], first).compile(checkpointer=saver).invoke(
        {"messages": [("user", "set")]}, cfg)
    first.close()  # the kernel is gone (a restart, say); the checkpoint keeps the context
    second = ToolcellCodeAct(shop["tools"], tc)
    model2 = scripted([run_python("print(rate * 10)"), answer_with_last])
    out = create_codeact(model2, shop["tools"], second).compile(checkpointer=saver).invoke(
        {"messages": [("user", "use it")]}, cfg)
    assert out["messages"][-1].content == "answer: 2.0"
    second.close()


def test_codeact_async_eval_fn(tc: Toolcell) -> None:
    loops: List[Any] = []

    @tool
    async def price(sku: str) -> float:
        """A unit price."""
        loops.append(asyncio.get_running_loop())
        return {"a": 2.5}[sku]

    evaluator = make_eval_fn([price], tc, return_variables=False)
    model = scripted([run_python("p = price('a') * 4\nprint(p)"), answer_with_last,
                      run_python("print(p + 1)"), answer_with_last])
    # codeact's default prompt reads `tool.func`, which an async-only tool lacks: give a prompt
    agent = create_codeact(model, [price], evaluator.acall, prompt="Use price(sku).").compile(
        checkpointer=MemorySaver())

    async def main() -> List[Any]:
        cfg: RunnableConfig = {"configurable": {"thread_id": "ca-async"}}
        one = await agent.ainvoke({"messages": [("user", "x")]}, cfg)
        two = await agent.ainvoke({"messages": [("user", "y")]}, cfg)
        assert loops == [asyncio.get_running_loop()]
        return [one["messages"][-1].content, two["messages"][-1].content, two.get("context")]

    # with return_variables=False the context stays empty: the state lives in the kernel alone
    assert asyncio.run(main()) == ["answer: 10.0", "answer: 11.0", {}]
    evaluator.close()


def test_a_tools_own_error_handling_is_kept(tc: Toolcell) -> None:
    def odd_fails(n: int) -> int:
        """Fails for odd n."""
        if n % 2:
            raise ToolException(f"{n} is odd")
        return n

    flaky = StructuredTool.from_function(odd_fails, name="flaky", handle_tool_error=True)

    # handle_tool_error turns the exception into the tool's result, as for a direct call
    with ToolcellTool([flaky], tc) as code_tool:
        assert code_tool.invoke({"code": "print(flaky(2), flaky(3))"}) == "2 3 is odd"


def test_cancelling_ainvoke_interrupts_the_cell(tc: Toolcell) -> None:
    async def main() -> None:
        with ToolcellTool([], tc) as code_tool:
            await code_tool.ainvoke({"code": "x = 1"})
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(code_tool.ainvoke({"code": "import time\ntime.sleep(30)"}), 0.5)
            start = time.monotonic()
            assert await code_tool.ainvoke({"code": "print(x)"}) == "1"  # the kernel and its state survived
            assert time.monotonic() - start < 5  # the sleeping cell was interrupted, not waited for

    asyncio.run(main())


# ---------------------------------------------------------------- many conversations, shared clients, lifecycle


def ten_tools(calls: List[Any]) -> List[Any]:
    def make(k: int) -> Any:
        def f(x: int) -> int:
            calls.append((k, x))
            return x + k

        return StructuredTool.from_function(f, name=f"add{k}", description=f"x plus {k}.")

    return [make(k) for k in range(10)]


def test_many_conversations_keep_working_on_one_client() -> None:
    # 130 threads x 10 tools: more than the 1024 client tools a connection may hold, were
    # they registered per conversation; each is registered once for every session instead
    calls: List[Any] = []
    with Toolcell(config={"tools": {"enabled": []}}) as client:
        with ToolcellTool(ten_tools(calls), client) as code_tool:
            assert sorted(client.tools) == [f"add{k}" for k in range(10)]
            for i in range(130):
                out = code_tool.invoke({"code": f"print(add{i % 10}({i}))"}, {"configurable": {"thread_id": f"c{i}"}})
                assert out == str(i + i % 10), (i, out)
                if i % 20 == 19:
                    code_tool.close_session(f"c{i}")
            assert len(calls) == 130
            assert sorted(client.tools) == [f"add{k}" for k in range(10)]  # nothing per conversation
        assert client.tools == {}  # close() released them


def test_adapters_sharing_a_client_each_get_their_own_tools(tc: Toolcell) -> None:
    @tool("lookup")
    def lookup_a(id: str) -> str:
        """Look an id up in A."""
        return f"A:{id}"

    @tool("lookup")
    def lookup_b(id: str, upper: bool = False) -> str:
        """Look an id up in B (a different definition under the same name)."""
        return f"B:{id.upper() if upper else id}"

    @tc.tool
    def app_tool() -> str:  # the app's own tool for every session, named like an agent's
        return "app"

    @tool("app_tool")
    def agent_app_tool() -> str:
        """The agent's tool of that name."""
        return "agent"

    with ToolcellTool([lookup_a], tc) as a, ToolcellTool([lookup_b, agent_app_tool], tc) as b:
        assert "lookup(id: str, upper: bool = False)" in b.description
        assert a.invoke({"code": "print(lookup('x'))"}, {"configurable": {"thread_id": "share"}}) == "A:x"
        assert b.invoke({"code": "print(lookup('x', upper=True), app_tool())"},
                        {"configurable": {"thread_id": "share"}}) == "B:X agent"
        assert a.invoke({"code": "print(lookup('y'))"}) == "A:y"
        assert tc.execute("print(app_tool())").output == "app\n"  # the app's tool is untouched
    assert "lookup" not in tc.tools and "app_tool" in tc.tools
    tc.unregister("app_tool")


def test_a_registration_the_server_refuses_is_a_clear_error() -> None:
    @tool("read_file")
    def read_file(path: str) -> str:
        """Clashes with toolcell's enabled built-in."""
        return path

    with Toolcell() as client:  # built-ins on
        with pytest.raises(ValueError, match="refused the tools"):
            ToolcellTool([read_file], client)
        assert "read_file" not in client.tools  # all or nothing


def test_a_nested_run_in_the_same_session_fails_at_once(tc: Toolcell) -> None:
    holder: Dict[str, Any] = {}

    @tool
    def ask(question: str) -> str:
        """A sub-agent sharing the code tool and the thread."""
        return holder["tool"].invoke({"code": f"print({question!r})"}, holder["config"])

    with ToolcellTool([ask], tc, timeout=30) as code_tool:
        holder["tool"] = code_tool
        holder["config"] = {"configurable": {"thread_id": "reenter"}}
        start = time.monotonic()
        out = code_tool.invoke({"code": "print(ask('hi'))"}, holder["config"])
        assert time.monotonic() - start < 5  # not the 30 s cell timeout
        assert "ToolException: ToolcellTool was called from inside a cell of the same toolcell session" in out
        assert "error: " in out
        # another thread (another session) is fine
        holder["config"] = {"configurable": {"thread_id": "elsewhere"}}
        assert code_tool.invoke({"code": "print(ask('hi'))"}, {"configurable": {"thread_id": "reenter"}}) == "hi"


def test_a_nested_async_run_in_the_same_session_fails_at_once(tc: Toolcell) -> None:
    holder: Dict[str, Any] = {}

    @tool
    async def aask(question: str) -> str:
        """An async sub-agent sharing the code tool and the thread."""
        return await holder["tool"].ainvoke({"code": f"print({question!r})"}, holder["config"])

    async def main() -> str:
        with ToolcellTool([aask], tc, timeout=30) as code_tool:
            holder["tool"] = code_tool
            holder["config"] = {"configurable": {"thread_id": "areenter"}}
            return await code_tool.ainvoke({"code": "print(aask('hi'))"}, holder["config"])

    start = time.monotonic()
    out = asyncio.run(main())
    assert time.monotonic() - start < 5
    assert "was called from inside a cell of the same toolcell session" in out


def test_a_dropped_tool_ends_the_server_it_started() -> None:
    import gc

    code_tool = ToolcellTool([])
    assert code_tool.invoke({"code": "print(1)"}) == "1"
    pid = code_tool.client.pid
    del code_tool
    gc.collect()
    assert gone(pid)


def test_tools_with_an_injected_tool_call_id_get_one(tc: Toolcell) -> None:
    from langchain_core.tools import InjectedToolCallId
    from typing_extensions import Annotated

    seen: List[str] = []

    @tool
    def tag(label: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Tag something."""
        seen.append(tool_call_id)
        return f"{label}#{len(seen)}"

    @tool(response_format="content_and_artifact")
    def tagged(label: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        """Tag something, with an artifact."""
        seen.append(tool_call_id)
        return f"<{label}>", {"id": tool_call_id}

    with ToolcellTool([tag, tagged], tc) as code_tool:
        msg = code_tool.invoke({"type": "tool_call", "id": "outer-7", "name": "execute_code",
                                "args": {"code": "print(tag('a'), tag('b'), tagged('c'))"}})
        assert msg.content == "a#1 b#2 <c>"
        assert seen == ["outer-7-1", "outer-7-2", "outer-7-3"]
        # with a callback handler: through tool.invoke, with a full ToolCall
        assert code_tool.invoke({"code": "print(tag('d'))"}, {"callbacks": [BaseCallbackHandler()]}) == "d#4"


def test_tools_needing_the_graphs_state_are_refused_clearly(tc: Toolcell) -> None:
    from langgraph.prebuilt import InjectedState
    from typing_extensions import Annotated

    @tool
    def count_messages(state: Annotated[dict, InjectedState]) -> int:
        """Messages so far."""
        return len(state["messages"])

    with pytest.raises(ValueError, match="InjectedState"):
        ToolcellTool([count_messages], tc)


def test_codeact_returns_long_non_ascii_variables_whole(tc: Toolcell) -> None:
    evaluator = make_eval_fn([], tc)
    model = scripted([run_python("a = '名' * 15000\nb = '字' * 15000\nm = 2\nprint(len(a) + len(b))"),
                      answer_with_last])
    agent = codeact(model, [], evaluator)
    out = agent.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "ca-long"}})
    assert out["messages"][-1].content == "answer: 30000"
    assert out["context"] == {"a": "名" * 15000, "b": "字" * 15000, "m": 2}
    evaluator.close()


def test_result_text_and_the_error_and_hint_lines_reach_the_model(tc: Toolcell) -> None:
    with ToolcellTool([], tc) as code_tool:
        text = code_tool.invoke({"code": "from toolcell_tools import no_such_tool"})
    lines = text.splitlines()
    assert "status: error" in lines
    assert any(line.startswith("error: ImportError: cannot import name 'no_such_tool'") for line in lines)
    assert any(line.startswith("hint: toolcell_tools has no `no_such_tool`") for line in lines)


def test_a_structured_tool_subclass_is_called_through_its_own_invoke(tc: Toolcell) -> None:
    """A StructuredTool subclass may check permissions in `_run` or audit in `invoke`: a call from a
    cell goes through them (the direct shortcut is for StructuredTool itself only)."""
    audit: List[Any] = []

    class GuardedTool(StructuredTool):
        def _run(self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any) -> Any:
            if not (config.get("configurable") or {}).get("admin"):
                raise PermissionError("admin only")
            return super()._run(*args, config=config, run_manager=run_manager, **kwargs)

        def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kw: Any) -> Any:
            audit.append(input)
            return super().invoke(input, config, **kw)

    def delete_all(table: str) -> str:
        """Delete every row of a table."""
        return f"deleted all rows of {table}"

    guarded = GuardedTool.from_function(delete_all)
    code = "try:\n    print(delete_all(table='users'))\nexcept ToolError as e:\n    print(e)"
    with ToolcellTool([guarded], tc) as code_tool:
        assert code_tool.invoke({"code": code}) == "delete_all: PermissionError: admin only"
        assert code_tool.invoke({"code": code}, {"configurable": {"admin": True}}) == "deleted all rows of users"
    assert audit == [{"table": "users"}, {"table": "users"}]


def test_a_cancelled_run_waiting_behind_another_adapters_cell_runs_nothing_and_stops_nothing(tc: Toolcell) -> None:
    """Two code tools on one client and one thread: a run cancelled while it waits for the other's
    cell is dropped (none of its code runs) and does not interrupt that cell."""

    async def main() -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        cfg: RunnableConfig = {"configurable": {"thread_id": "turns"}}
        with ToolcellTool([], tc) as a, ToolcellTool([], tc) as b:
            await a.ainvoke({"code": "ran = []"}, cfg)
            slow = asyncio.ensure_future(
                a.ainvoke({"code": "import time\ntime.sleep(1.5)\nprint('a done')"}, cfg))
            await asyncio.sleep(0.3)  # a's cell runs
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(b.ainvoke({"code": "ran.append('b')"}, cfg), 0.3)
            out["a"] = await slow
            out["ran"] = await a.ainvoke({"code": "print(ran)"}, cfg)
        return out

    out = asyncio.run(main())
    assert out == {"a": "a done", "ran": "[]"}


def test_a_late_stop_never_interrupts_the_sessions_next_cell(tc: Toolcell) -> None:
    """The caller of a cell that has ended stops waiting (its stop ran late, on a busy host): the
    session's next cell, running by then, is not interrupted."""
    from toolcell.integrations.langchain import _Job, _Scope

    with ToolcellTool([], tc) as code_tool:
        rt = code_tool._rt
        st = rt.session("late-stop")
        job = _Job(rt, st, _Scope(), lambda on_chunk: rt.execute(st, "x = 1"), None)
        assert job().ok  # its cell ran and ended
        out: Dict[str, str] = {}
        t = threading.Thread(target=lambda: out.setdefault("next", rt.run(
            st, _Scope(), lambda on_chunk: rt.execute(st, "import time\ntime.sleep(1.0)\nprint('next done')"),
            None).output))
        t.start()
        time.sleep(0.4)
        rt._stop(job)
        t.join()
    assert out["next"] == "next done\n"


def test_codeact_checks_the_variables_the_kernel_hands_back(tc: Toolcell) -> None:
    """The hidden variables tool takes one checked payload per collect cell: code that replaced it, or
    calls it itself, cannot put private names, oversized or malformed values into the state, nor
    make the eval fail."""
    evaluator = make_eval_fn([], tc, session="codeact-checks")
    try:
        assert evaluator("x = 1", {}) == ("(no output)", {"x": 1})
        # a user cell calling the internal tool itself is refused
        text, _ = evaluator(
            "import toolcell_tools\n"
            "try:\n"
            "    toolcell_tools._toolcell_codeact_vars(payload='{\"y\": 1}', nonce='guess')\n"
            "except toolcell_tools.ToolError as e:\n"
            "    print(e)", {})
        assert "takes the variables from toolcell's own collect cell only" in text
        patch = (
            "import toolcell_tools\n"
            "_orig = getattr(toolcell_tools, '_toolcell_orig', None) or toolcell_tools._toolcell_codeact_vars\n"
            "toolcell_tools._toolcell_orig = _orig\n"
            "toolcell_tools._toolcell_codeact_vars = lambda payload, nonce: _orig(payload=PAYLOAD, nonce=nonce)\n"
        )
        injected = '{"_secret": 1, "ok": 2, "big": "' + "A" * 30000 + '", "deep": ' + "[" * 150 + "]" * 150 + "}"
        assert evaluator(patch.replace("PAYLOAD", repr(injected)), {})[1] == {"ok": 2}
        for payload in ("[1, 2]", "not json", "[" * 100000 + "]" * 100000, '{"k": ' + "[" * 5000 + "]" * 5000 + "}"):
            assert evaluator(patch.replace("PAYLOAD", repr(payload)), {}) == ("(no output)", {}), payload
    finally:
        evaluator.close()
