"""toolcell.integrations.llama_index: a real `toolcell serve`, a real CodeActAgent workflow, a scripted MockLLM.

LlamaIndex's ``MockLLM`` echoes its prompt; ``ScriptedLLM`` (a MockLLM)
answers with a script instead (text with ``<execute>`` blocks, which the
pinned CodeActAgent parses) and records the messages of every request, so
a test can check what the model was shown.
"""

import asyncio
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Union

import pytest
from llama_index.core.agent.workflow import CodeActAgent, ToolCallResult
from llama_index.core.llms import ChatMessage, ChatResponse, MockLLM
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from pydantic import PrivateAttr

import toolcell
from toolcell import Toolcell
from toolcell.integrations.llama_index import CellOutput, ToolcellCodeExecutor, ToolcellOutput

from procs import gone

# LlamaIndex's workflows inspect the agent's members, which pydantic warns about on every agent built
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}
Step = Union[str, Callable[[List[ChatMessage]], str]]


class ScriptedLLM(MockLLM):
    """A MockLLM that answers with `script` in order (a callable step gets the request's messages)."""

    _script: List[Step] = PrivateAttr(default_factory=list)
    _seen: List[List[ChatMessage]] = PrivateAttr(default_factory=list)

    def __init__(self, script: List[Step]) -> None:
        super().__init__()
        self._script = list(script)

    @property
    def seen(self) -> List[List[ChatMessage]]:
        """The messages of each request, in order."""
        return self._seen

    def _reply(self, messages: Sequence[ChatMessage]) -> str:
        self._seen.append(list(messages))
        step = self._script.pop(0)
        return step(list(messages)) if callable(step) else step

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=ChatMessage(role="assistant", content=self._reply(messages)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Iterator[ChatResponse]:
        text = self._reply(messages)

        def gen() -> Iterator[ChatResponse]:
            yield ChatResponse(message=ChatMessage(role="assistant", content=text), delta=text)

        return gen()


def code(source: str) -> str:
    return f"Let me compute that.\n<execute>\n{source}\n</execute>"


def answer_with_result(messages: List[ChatMessage]) -> str:
    """Answers with the output of the last cell (CodeActAgent prefixes it with a line and a blank one)."""
    last = messages[-1].content or ""
    return "answer: " + last.split("\n\n", 1)[1]


@pytest.fixture(scope="module")
def tc() -> Iterator[Toolcell]:
    with Toolcell(config={"tools": {"enabled": []}}) as client:
        yield client


@pytest.fixture
def shop() -> Dict[str, Any]:
    calls: List[Any] = []

    def get_order(id: str) -> dict:
        """One order, by id.

        Args:
            id: The order id, like "A-1".
        """
        calls.append(("get_order", id, threading.current_thread().name))
        if id not in ORDERS:
            raise ValueError(f"no order {id}")
        return {"id": id, "total": ORDERS[id]}

    def list_orders() -> list:
        """Ids of all orders."""
        calls.append(("list_orders",))
        return sorted(ORDERS)

    return {"tools": [FunctionTool.from_defaults(get_order), FunctionTool.from_defaults(list_orders)],
            "calls": calls}


async def run(agent: CodeActAgent, msg: str, ctx: Context) -> List[Any]:
    """Run one turn; the events streamed (with their arrival times) and the final response last."""
    handler = agent.run(msg, ctx=ctx)
    events: List[Any] = []
    start = time.monotonic()
    async for ev in handler.stream_events():
        events.append((time.monotonic() - start, ev))
    events.append(await handler)
    return events


def test_one_cell_loops_over_the_agents_tools(tc: Toolcell, shop: Dict[str, Any]) -> None:
    llm = ScriptedLLM([code("total = sum(get_order(i)['total'] for i in list_orders())\nprint(total)"),
                       answer_with_result])

    async def main() -> None:
        async with ToolcellCodeExecutor(shop["tools"], tc) as executor:
            agent = executor.agent(llm=llm)
            events = await run(agent, "total of all orders?", Context(agent))
            assert str(events[-1]) == "answer: 1145.5"
            # the structured result rides along as the tool output's raw_output
            results = [ev for _, ev in events[:-1] if isinstance(ev, ToolCallResult)]
            assert len(results) == 1 and isinstance(results[0].tool_output.raw_output, CellOutput)
            assert results[0].tool_output.raw_output.result.tool_calls_made == 4
            assert results[0].tool_output.content == "1145.5"

    asyncio.run(main())
    # the model was shown the tools' signatures (by CodeActAgent), and the calls ran here
    assert "def get_order(id: str) -> dict" in (llm.seen[0][0].content or "")
    assert [c[:2] for c in shop["calls"]] == [("list_orders",), ("get_order", "A-1"), ("get_order", "A-2"),
                                             ("get_order", "A-3")]
    assert all(c[2].startswith("toolcell-tool") for c in shop["calls"][1:])


def test_state_persists_across_steps_and_turns(tc: Toolcell, shop: Dict[str, Any]) -> None:
    llm = ScriptedLLM([
        code("big = [i for i in list_orders() if get_order(i)['total'] > 100]"),
        code("print(len(big))"),  # a second step of the same turn
        answer_with_result,
        code("print(', '.join(big))"),  # the next turn, same conversation
        answer_with_result,
    ])

    async def main() -> List[str]:
        async with ToolcellCodeExecutor(shop["tools"], tc) as executor:
            agent = executor.agent(llm=llm)
            ctx = Context(agent)
            one = await run(agent, "how many big orders?", ctx)
            two = await run(agent, "which?", ctx)
            return [str(one[-1]), str(two[-1])]

    assert asyncio.run(main()) == ["answer: 2", "answer: A-1, A-3"]
    assert "(no output)" in (llm.seen[1][-1].content or "")  # the first cell printed nothing


def test_failing_tool_error_reaches_the_model(tc: Toolcell, shop: Dict[str, Any]) -> None:
    llm = ScriptedLLM([
        code("print(get_order('Z-9'))"),
        code("try:\n    get_order('Z-9')\nexcept ToolError as e:\n    print('caught:', e)"),
        answer_with_result,
    ])

    async def main() -> str:
        async with ToolcellCodeExecutor(shop["tools"], tc) as executor:
            agent = executor.agent(llm=llm)
            return str((await run(agent, "Z-9?", Context(agent)))[-1])

    assert asyncio.run(main()) == "answer: caught: get_order: ValueError: no order Z-9"
    shown = llm.seen[1][-1]  # the request after the first cell
    assert shown.role.value == "user" and (shown.content or "").startswith("Result of executing the code given:")
    assert "ToolError: get_order: ValueError: no order Z-9" in (shown.content or "")
    assert "status: error" in (shown.content or "")


def test_output_streams_while_the_cell_runs(tc: Toolcell) -> None:
    llm = ScriptedLLM([code("import time\nprint('one', flush=True)\ntime.sleep(0.5)\nprint('two')"),
                       answer_with_result])

    async def main() -> List[Any]:
        async with ToolcellCodeExecutor([], tc) as executor:
            agent = executor.agent(llm=llm)
            return await run(agent, "go", Context(agent))

    events = asyncio.run(main())
    outputs = [(t, ev) for t, ev in events[:-1] if isinstance(ev, ToolcellOutput)]
    assert "".join(ev.text for _, ev in outputs) == "one\ntwo\n"
    done = next(t for t, ev in events[:-1] if isinstance(ev, ToolCallResult))
    assert outputs[0][0] < done - 0.3  # "one" arrived before the cell ended
    assert str(events[-1]) == "answer: one\ntwo"


def test_async_tools_run_on_the_workflows_loop(tc: Toolcell) -> None:
    loops: List[Any] = []

    async def stock(sku: str) -> int:
        """Units in stock."""
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return {"a": 3, "b": 4}[sku]

    llm = ScriptedLLM([code("print(stock('a') + stock('b'))"), answer_with_result])

    async def main() -> str:
        async with ToolcellCodeExecutor([stock], tc) as executor:  # a plain function is wrapped
            agent = executor.agent(llm=llm)
            out = str((await run(agent, "stock?", Context(agent)))[-1])
            assert loops == [asyncio.get_running_loop()] * 2
            return out

    assert asyncio.run(main()) == "answer: 7"


def test_a_tool_taking_the_context_gets_the_workflows(tc: Toolcell, shop: Dict[str, Any]) -> None:
    async def remember(ctx: Context, key: str) -> str:
        """A value the workflow keeps."""
        return str(await ctx.store.get(key))

    executor = ToolcellCodeExecutor([*shop["tools"], FunctionTool.from_defaults(remember)], tc)
    llm = ScriptedLLM([code("print(remember('user_msg_str'))"), answer_with_result])
    # CodeActAgent refuses tools that take a Context, so only the executor has this one
    agent = CodeActAgent(code_execute_fn=executor.execute, tools=list(shop["tools"]), llm=llm)

    async def main() -> str:
        out = str((await run(agent, "what did I ask?", Context(agent)))[-1])
        await executor.aclose()
        return out

    assert asyncio.run(main()) == "answer: what did I ask?"


def test_two_executors_have_separate_kernels_and_close_ends_them(tc: Toolcell) -> None:
    async def main() -> None:
        a = ToolcellCodeExecutor([], tc)
        b = ToolcellCodeExecutor([], tc)
        assert a.session != b.session
        await a.execute("x = 'conversation A'")
        missing = await b.execute("print(x)")
        assert "NameError: name 'x' is not defined" in missing and missing.result.status == "error"
        assert await a.execute("print(x)") == "conversation A"
        await a.reset()
        assert await a.execute("print('x' in globals())") == "False"
        await a.aclose()
        await b.aclose()
        live = {s["session"] for s in tc.sessions()}
        assert a.session not in live and b.session not in live
        with pytest.raises(toolcell.ToolcellError, match="closed"):
            await a.execute("1")

    asyncio.run(main())


def test_owned_server_ends_with_the_executor() -> None:
    executor = ToolcellCodeExecutor([])
    client = executor.client
    assert asyncio.run(executor.execute("print(6 * 7)")) == "42"
    executor.close()
    with pytest.raises(toolcell.ServerExited):
        client.sessions()


def test_a_dead_server_is_reported_to_the_model() -> None:
    client = Toolcell(config={"tools": {"enabled": []}})
    executor = ToolcellCodeExecutor([], client)
    os.kill(client.pid, signal.SIGKILL)
    llm = ScriptedLLM([code("print(1)"), lambda m: "failed: " + (m[-1].content or "")])

    async def main() -> str:
        agent = executor.agent(llm=llm)
        return str((await run(agent, "go", Context(agent)))[-1])

    out = asyncio.run(main())
    assert "toolcell could not run the cell" in out
    executor.close()
    client.close()


def test_bad_arguments_are_refused_before_the_tool(tc: Toolcell, shop: Dict[str, Any]) -> None:
    async def main() -> str:
        async with ToolcellCodeExecutor(shop["tools"], tc) as executor:
            return await executor.execute("get_order(42)")

    out = asyncio.run(main())
    assert "ToolError: get_order: bad arguments: /id: 42 is not of type \"string\"" in out
    assert shop["calls"] == []
    with pytest.raises(TypeError, match="toolcell.Toolcell"):
        ToolcellCodeExecutor([], client=object())  # type: ignore[arg-type]


def test_tool_output_callbacks_still_run(tc: Toolcell) -> None:
    seen: List[Any] = []

    def double(n: int) -> int:
        """Twice n."""
        return 2 * n

    # a tool with an output callback goes through FunctionTool.call; the cell gets the raw output
    tool = FunctionTool.from_defaults(double, callback=lambda out: seen.append(out) or None)

    async def main() -> str:
        async with ToolcellCodeExecutor([tool], tc) as executor:
            return await executor.execute("print(double(4) + double(1))")

    assert asyncio.run(main()) == "10"
    assert seen == [8, 2]


def test_cancelling_execute_interrupts_the_cell(tc: Toolcell) -> None:
    async def main() -> None:
        async with ToolcellCodeExecutor([], tc) as executor:
            await executor.execute("x = 1")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(executor.execute("import time\ntime.sleep(30)"), 0.5)
            start = time.monotonic()
            assert await executor.execute("print(x)") == "1"  # the kernel and its state survived
            assert time.monotonic() - start < 5  # the sleeping cell was interrupted, not waited for

    asyncio.run(main())


def test_many_conversations_each_with_its_executor_on_one_client() -> None:
    def make(k: int) -> FunctionTool:
        def add(x: int) -> int:
            """x plus k."""
            return x + k

        return FunctionTool.from_defaults(add, name=f"add{k}")

    async def main(client: Toolcell) -> None:
        for i in range(130):  # one executor per conversation, dropped, not closed: 1300 tools were they per session
            executor = ToolcellCodeExecutor([make(k) for k in range(10)], client)
            out = await executor.execute(f"print(add{i % 10}({i}))")
            assert out == str(i + i % 10), (i, out)
        assert sorted(client.tools) == [f"add{k}" for k in range(10)]

    with Toolcell(config={"tools": {"enabled": []}}) as client:
        asyncio.run(main(client))


def test_cancelling_a_queued_execute_leaves_the_running_cell_alone(tc: Toolcell) -> None:
    async def main() -> None:
        async with ToolcellCodeExecutor([], tc) as executor:
            first = asyncio.ensure_future(executor.execute("import time\ntime.sleep(1)\nprint('first done')"))
            await asyncio.sleep(0.2)  # the first cell runs; the second queues behind it
            second = asyncio.ensure_future(executor.execute("ran = True\nprint('second ran')"))
            await asyncio.sleep(0.2)
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            out = await first
            assert out == "first done" and out.result.status == "success"  # not interrupted
            assert await executor.execute("print('ran' in globals())") == "False"  # the cancelled code never ran

    asyncio.run(main())


def test_a_nested_execute_in_the_same_session_fails_at_once(tc: Toolcell) -> None:
    holder: Dict[str, Any] = {}

    async def sub(question: str) -> str:
        """A sub-agent that runs code in the same executor."""
        return str(await holder["executor"].execute(f"print({question!r})"))

    async def main() -> str:
        async with ToolcellCodeExecutor([sub], tc, timeout=30) as executor:
            holder["executor"] = executor
            return await executor.execute("print(sub('hi'))")

    start = time.monotonic()
    out = asyncio.run(main())
    assert time.monotonic() - start < 5  # not the 30 s cell timeout
    assert "ToolcellCodeExecutor.execute was called from inside a cell of the same toolcell session" in out


def test_a_dropped_executor_ends_the_server_it_started() -> None:
    import gc

    executor = ToolcellCodeExecutor([])
    assert asyncio.run(executor.execute("print(5)")) == "5"
    pid = executor.client.pid
    del executor
    gc.collect()
    assert gone(pid), f"toolcell serve (pid {pid}) still runs"


def test_the_error_and_hint_lines_reach_the_model(tc: Toolcell) -> None:
    async def main() -> str:
        async with ToolcellCodeExecutor([], tc) as executor:
            return await executor.execute("from toolcell_tools import no_such_tool")

    lines = asyncio.run(main()).splitlines()
    assert "status: error" in lines
    assert any(line.startswith("error: ImportError: cannot import name 'no_such_tool'") for line in lines)
    assert any(line.startswith("hint: toolcell_tools has no `no_such_tool`") for line in lines)


def test_a_cancelled_execute_behind_another_executors_cell_on_the_session_runs_nothing(tc: Toolcell) -> None:
    """Two executors on one client and one session: an execute cancelled while it waits for the
    other's cell is dropped (none of its code runs) and does not interrupt that cell."""

    async def main() -> None:
        with ToolcellCodeExecutor([], tc, session="shared-turns") as a, \
                ToolcellCodeExecutor([], tc, session="shared-turns") as b:
            await a.execute("ran = []")
            slow = asyncio.ensure_future(a.execute("import time\ntime.sleep(1.5)\nprint('a done')"))
            await asyncio.sleep(0.3)  # a's cell runs
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(b.execute("ran.append('b')"), 0.3)
            assert await slow == "a done"
            assert await a.execute("print(ran)") == "[]"

    asyncio.run(main())
