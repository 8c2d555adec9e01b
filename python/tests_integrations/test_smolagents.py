"""toolcell.integrations.smolagents: a real CodeAgent, a scripted Model, a real toolcell server.

The model is smolagents' own ``Model`` base class with ``generate`` answering
from a script (the way smolagents' tests fake a model); everything else is
real: ``CodeAgent`` parses the code blocks, ``ToolcellExecutor`` runs them in
a toolcell kernel and the tools run in this process.
"""

import fractions
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import pytest
from smolagents import CodeAgent, Tool, ToolCollection, tool
from smolagents.local_python_executor import InterpreterError
from smolagents.models import ChatMessage, MessageRole, Model

from toolcell import Chunk, Toolcell
from toolcell.integrations.smolagents import ToolcellExecutor

from procs import gone

DATA = Path(__file__).parent / "smolagents_data"


# ---- the scripted model


class ScriptedModel(Model):
    """Answers each ``generate`` call with the next reply of a script.

    A reply is a string (the assistant's text, with a ``<code>`` block) or a
    function of the messages received that returns one. Every request's
    messages are kept in ``requests``.
    """

    def __init__(self, replies: Sequence[Any]) -> None:
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.requests: List[List[ChatMessage]] = []

    def generate(
        self,
        messages: List[ChatMessage],
        stop_sequences: Optional[List[str]] = None,
        response_format: Optional[Dict[str, str]] = None,
        tools_to_call_from: Optional[List[Tool]] = None,
        **kwargs: Any,
    ) -> ChatMessage:
        self.requests.append(list(messages))
        if not self.replies:
            raise AssertionError("the scripted model ran out of replies")
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply(messages)
        return ChatMessage(role=MessageRole.ASSISTANT, content=reply)


def code(src: str) -> str:
    """An assistant reply in the format CodeAgent parses by default."""
    return f"Thought: run this.\n<code>\n{src.strip()}\n</code>"


def text_of(messages: Sequence[ChatMessage]) -> str:
    parts: List[str] = []
    for m in messages:
        content = m.content
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "\n".join(parts)


# ---- fixtures


@pytest.fixture(scope="module")
def tc() -> Iterator[Toolcell]:
    with Toolcell(config={"tools": {"enabled": []}, "execution": {"max_tool_calls": 200}}) as client:
        yield client


@pytest.fixture
def orders() -> Dict[str, Any]:
    """A `get_order` tool defined the smolagents way, recording the thread of each call."""
    totals = {"A-1": 120.0, "A-2": 35.5, "A-3": 9.25}
    calls: List[str] = []
    threads: List[str] = []

    @tool
    def get_order(id: str) -> dict:
        """Look an order up.

        Args:
            id: The order id, like "A-1".
        """
        calls.append(id)
        threads.append(threading.current_thread().name)
        if id not in totals:
            raise KeyError(f"no order {id}")
        return {"id": id, "total": totals[id]}

    return {"tool": get_order, "calls": calls, "threads": threads, "pid": os.getpid()}


def make_agent(tc: Toolcell, tools: List[Any], replies: Sequence[Any], **executor_kwargs: Any) -> CodeAgent:
    executor = ToolcellExecutor(tc, **executor_kwargs)
    return CodeAgent(tools=tools, model=ScriptedModel(replies), executor=executor, verbosity_level=0, max_steps=5)


def wait_until_dead(pid: int) -> None:
    """Until the killed process has exited (a zombie or gone), and the server had a moment to see it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone (FileNotFoundError), or gone mid-read (ProcessLookupError)
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.01)
    time.sleep(0.3)


def live_sessions(tc: Toolcell) -> List[str]:
    return [s["session"] for s in tc.sessions()]


# ---- the required scenarios


def test_one_cell_loops_over_the_agents_tool_and_the_calls_run_in_the_host(
    tc: Toolcell, orders: Dict[str, Any]
) -> None:
    agent = make_agent(tc, [orders["tool"]], [
        code("""
import os
ids = ["A-1", "A-2", "A-3"]
total = sum(get_order(i)["total"] for i in ids)
print("kernel pid", os.getpid(), "total", total)
final_answer(total)
"""),
    ])
    try:
        answer = agent.run("What do orders A-1, A-2 and A-3 cost together?")
        assert answer == 164.75
        assert orders["calls"] == ["A-1", "A-2", "A-3"]
        # The tool ran in this process (on the client's pool threads), the cell in another one.
        assert all(name != "MainThread" for name in orders["threads"])
        step = agent.memory.steps[-1]
        assert step.is_final_answer
        assert "total 164.75" in step.observations
        kernel_pid = int(step.observations.split("kernel pid ")[1].split()[0])
        assert kernel_pid != os.getpid()
        assert agent.python_executor.last_result.tool_calls_made == 4  # 3 orders + final_answer
    finally:
        agent.cleanup()


def test_a_variable_from_step_one_is_used_in_step_two(tc: Toolcell, orders: Dict[str, Any]) -> None:
    agent = make_agent(tc, [orders["tool"]], [
        code('order = get_order("A-2")\nprint("got", order["id"])'),
        code('final_answer(order["total"] * 2)'),
    ])
    try:
        assert agent.run("Double the total of order A-2.") == 71.0
        assert orders["calls"] == ["A-2"]
        # The model read step one's output before writing step two.
        assert "got A-2" in text_of(agent.model.requests[1])
    finally:
        agent.cleanup()


def test_a_failing_tool_gives_a_tool_error_the_model_reads_and_the_run_goes_on(
    tc: Toolcell, orders: Dict[str, Any]
) -> None:
    agent = make_agent(tc, [orders["tool"]], [
        code('print("before")\nget_order("Z-9")'),
        code('final_answer(get_order("A-1")["total"])'),
    ])
    try:
        assert agent.run("Look up Z-9, else A-1.") == 120.0
        seen = text_of(agent.model.requests[1])
        assert "ToolError: get_order: KeyError: 'no order Z-9'" in seen
        assert "before" in seen  # the output printed before the failure too
        assert "Now let's retry" in seen  # smolagents' own error framing: it took it as an execution error
        assert orders["calls"] == ["Z-9", "A-1"]
    finally:
        agent.cleanup()


# ---- final_answer


def test_final_answer_ends_the_cell_even_inside_except_exception(tc: Toolcell, orders: Dict[str, Any]) -> None:
    agent = make_agent(tc, [orders["tool"]], [
        code("""
print("start")
try:
    final_answer({"ids": ("A-1", "A-2"), "ok": True})
except Exception:
    print("swallowed")
print("after")
get_order("A-3")
"""),
    ])
    try:
        answer = agent.run("Answer.")
        assert answer == {"ids": ("A-1", "A-2"), "ok": True}  # the tuple survives the trip
        step = agent.memory.steps[-1]
        assert step.is_final_answer
        assert step.observations.startswith("Execution logs:\nstart\nLast output from code snippet:")
        assert "Traceback" not in step.observations and "swallowed" not in step.observations
        assert orders["calls"] == []
        assert len(agent.model.requests) == 1
    finally:
        agent.cleanup()


def test_final_answer_of_an_object_json_cannot_carry(tc: Toolcell) -> None:
    script = [code("import fractions\nfinal_answer(fractions.Fraction(1, 3))")]
    plain = make_agent(tc, [], list(script))
    pickled = make_agent(tc, [], list(script), allow_pickle=True)
    try:
        assert plain.run("A third.") == "Fraction(1, 3)"  # its repr, without allow_pickle
        assert pickled.run("A third.") == fractions.Fraction(1, 3)
    finally:
        plain.cleanup()
        pickled.cleanup()


def test_a_custom_final_answer_tool_runs_in_the_host_and_its_error_reaches_the_model(tc: Toolcell) -> None:
    class StrictFinal(Tool):
        name = "final_answer"
        description = "Gives the final answer, a number of EUR."
        inputs = {"answer": {"type": "number", "description": "The amount."}}
        output_type = "string"

        def forward(self, answer: float) -> str:
            if answer < 0:
                raise ValueError("a total cannot be negative")
            return f"{answer:.2f} EUR"

    agent = make_agent(tc, [StrictFinal()], [
        code("final_answer(-1)"),
        code("final_answer(12.5 + extra)\nprint('after')"),
    ])
    try:
        # additional_args makes the kernel ready before send_tools brings the custom tool
        assert agent.run("Total?", additional_args={"extra": 0.5}) == "13.00 EUR"
        assert "after" not in agent.memory.steps[-1].observations  # the kernel's final_answer ended the cell
        assert "a total cannot be negative" in text_of(agent.model.requests[1])
    finally:
        agent.cleanup()


# ---- variables, state and runs


def test_additional_args_become_kernel_variables(tc: Toolcell) -> None:
    agent = make_agent(tc, [], [
        code("print(type(when).__name__, when.year, sorted(tags), raw[:2], limits)\n"
             "final_answer(when.isoformat())"),
    ])
    import datetime

    try:
        answer = agent.run("Use the inputs.", additional_args={
            "when": datetime.date(2024, 5, 17), "tags": {"b", "a"}, "raw": b"\x00\x01\x02",
            "limits": {"max": 3, "unit": "EUR"},
        })
        assert answer == "2024-05-17"
        assert "date 2024 ['a', 'b'] b'\\x00\\x01' {'max': 3, 'unit': 'EUR'}" in agent.memory.steps[-1].observations
    finally:
        agent.cleanup()


def test_a_variable_that_cannot_be_sent_is_named_in_the_error(tc: Toolcell) -> None:
    executor = ToolcellExecutor(tc)
    try:
        with pytest.raises(ValueError, match=r"agent variable 'lock' \(lock\)"):
            executor.send_variables({"fine": 1, "lock": threading.Lock()})
    finally:
        executor.cleanup()


def test_state_persists_across_runs_with_reset_false(tc: Toolcell, orders: Dict[str, Any]) -> None:
    agent = make_agent(tc, [orders["tool"]], [
        code('seen = [get_order("A-1")["total"]]\nfinal_answer(len(seen))'),
        code('seen.append(get_order("A-3")["total"])\nfinal_answer(sum(seen))'),
    ])
    try:
        assert agent.run("First.") == 1
        assert agent.run("Second, same session.", reset=False) == 129.25
        assert orders["calls"] == ["A-1", "A-3"]
    finally:
        agent.cleanup()


def test_cleanup_ends_the_session_and_an_owned_server(orders: Dict[str, Any]) -> None:
    executor = ToolcellExecutor()  # starts its own server
    with CodeAgent(tools=[orders["tool"]], model=ScriptedModel([code('x = get_order("A-1")\nfinal_answer(x["id"])')]),
                   executor=executor, verbosity_level=0) as agent:
        assert agent.run("Which id?") == "A-1"
        assert executor.session in live_sessions(executor.toolcell)
    # the `with` block called agent.cleanup()
    assert executor.toolcell._conn.proc.poll() is not None, "the executor's own server should have exited"
    with pytest.raises(RuntimeError, match="was cleaned up"):
        executor("print(1)")


def test_cleanup_with_a_shared_server_ends_only_its_session(tc: Toolcell) -> None:
    executor = ToolcellExecutor(tc)
    executor.send_tools({})
    other = tc.execute("y = 1", session="someone-else")
    assert other.ok
    assert executor.session in live_sessions(tc)
    executor.cleanup()
    assert executor.session not in live_sessions(tc)
    assert "someone-else" in live_sessions(tc)
    assert not [name for name in tc.tools if name.startswith(executor.session + "/")]
    assert tc.execute("print(y)", session="someone-else").output == "1\n"
    tc.shutdown_session("someone-else")


def test_a_kernel_killed_between_steps_is_replaced_and_final_answer_still_works(tc: Toolcell) -> None:
    def kill_kernel_then(reply: str) -> Callable[[List[ChatMessage]], str]:
        def script(messages: List[ChatMessage]) -> str:
            session = agent.python_executor.session
            pid = next(s["pid"] for s in tc.sessions() if s["session"] == session)
            os.kill(pid, 9)
            wait_until_dead(pid)
            return reply
        return script

    agent = make_agent(tc, [], [
        code("big = 1"),
        kill_kernel_then(code("print(big)")),
        code("final_answer(('fresh', 1))"),  # a tuple: needs the kernel's own final_answer again
        kill_kernel_then(code("final_answer(42)")),
    ])
    try:
        assert agent.run("Answer.") == ("fresh", 1)
        seen = text_of(agent.model.requests[2])
        assert "NameError: name 'big' is not defined" in seen
        assert "ended between cells" in seen  # toolcell told the model its state is gone
        # Killed right before the cell: the plain final_answer tool still ends the step.
        assert agent.run("Again.", reset=False) == 42
    finally:
        agent.cleanup()


def test_rebinding_final_answer_in_a_cell_does_not_break_the_next_step(tc: Toolcell) -> None:
    agent = make_agent(tc, [], [
        code("n = n + 10\ndef final_answer(x):\n    return 'mine'\nprint(final_answer(1))"),
        code("final_answer(('real', n))"),  # a tuple: the kernel's own final_answer is back
    ])
    try:
        # ... and the agent's variable `n` keeps the value the model gave it
        assert agent.run("Answer.", additional_args={"n": 1}) == ("real", 11)
        assert "mine" in text_of(agent.model.requests[1])
    finally:
        agent.cleanup()


# ---- errors, streaming, MCP, managed agents


def test_a_timeout_is_reported_to_the_model(tc: Toolcell) -> None:
    agent = make_agent(tc, [], [code("import time\nprint('working')\ntime.sleep(30)"),
                                code("final_answer('gave up')")], timeout=1)
    try:
        assert agent.run("Sleep.") == "gave up"
        seen = text_of(agent.model.requests[1])
        assert "status: timeout" in seen and "1s timeout" in seen
        assert "working" in seen
    finally:
        agent.cleanup()


def test_a_syntax_error_reaches_the_model(tc: Toolcell) -> None:
    agent = make_agent(tc, [], [code("x = (1,"), code("final_answer('fixed')")])
    try:
        assert agent.run("Oops.") == "fixed"
        assert "SyntaxError" in text_of(agent.model.requests[1])
    finally:
        agent.cleanup()


def test_stream_gets_the_output_while_the_cell_runs(tc: Toolcell) -> None:
    chunks: List[Chunk] = []
    agent = make_agent(tc, [], [code("for i in range(3):\n    print('line', i, flush=True)\nfinal_answer(i)")],
                       stream=chunks.append)
    try:
        assert agent.run("Count.") == 2
        streamed = "".join(c.text for c in chunks if c.stream == "stdout")
        assert streamed == "line 0\nline 1\nline 2\n"
        assert {c.session for c in chunks} == {agent.python_executor.session}
    finally:
        agent.cleanup()


def test_an_mcp_tool_from_tool_collection_is_called_from_the_cell(tc: Toolcell, tmp_path: Path) -> None:
    from mcp import StdioServerParameters

    log = tmp_path / "mcp-calls.txt"
    params = StdioServerParameters(
        command=sys.executable, args=[str(DATA / "orders_mcp_server.py")],
        env={**os.environ, "ORDERS_MCP_LOG": str(log)},
    )
    with ToolCollection.from_mcp(params, trust_remote_code=True, structured_output=False) as collection:
        agent = make_agent(tc, [*collection.tools], [
            code("costs = [float(shipping_cost(weight_kg=w)) for w in (1, 2, 4)]\nfinal_answer(sum(costs))"),
        ])
        try:
            assert agent.run("Ship three parcels.") == 5.5 + 7.0 + 10.0
        finally:
            agent.cleanup()
    assert log.read_text().split() == ["1.0", "2.0", "4.0"]


def test_a_managed_agent_is_called_from_the_cell(tc: Toolcell) -> None:
    helper = CodeAgent(tools=[], model=ScriptedModel([code("final_answer('helper says 7')")]),
                       name="helper", description="Answers questions about numbers.", verbosity_level=0)
    agent = CodeAgent(tools=[], managed_agents=[helper], verbosity_level=0, max_steps=3,
                      model=ScriptedModel([code("report = helper(task='What is 3 + 4?')\n"
                                                "final_answer('7' if 'helper says 7' in report else report)")]),
                      executor=ToolcellExecutor(tc))
    try:
        assert agent.run("Ask the helper.") == "7"
    finally:
        agent.cleanup()


def test_tool_inputs_become_a_json_schema_the_server_checks(tc: Toolcell) -> None:
    calls: List[Dict[str, Any]] = []

    class Convert(Tool):
        name = "convert"
        description = "Converts an amount."
        inputs = {
            "amount": {"type": "number", "description": "The amount."},
            "currency": {"type": "string", "description": "Target currency.", "enum": ["EUR", "USD"]},
            "note": {"type": "string", "description": "A note.", "nullable": True},
        }
        output_type = "number"

        def forward(self, amount: float, currency: str, note: Optional[str] = None) -> float:
            calls.append({"amount": amount, "currency": currency, "note": note})
            return amount * (1.1 if currency == "USD" else 1.0)

    executor = ToolcellExecutor(tc)
    try:
        executor.send_tools({"convert": Convert()})
        out = executor("print(convert(10, 'USD'), convert(amount=2, currency='EUR', note='n'))")
        assert out.logs == "11.0 2.0\n" and not out.is_final_answer
        with pytest.raises(InterpreterError) as err:
            executor("convert(10, 'GBP')")
        assert "bad arguments" in str(err.value) and "GBP" in str(err.value)
        assert calls == [{"amount": 10, "currency": "USD", "note": None},
                         {"amount": 2, "currency": "EUR", "note": "n"}]
    finally:
        executor.cleanup()


def test_a_kernel_evicted_between_steps_gets_the_agents_variables_again() -> None:
    with Toolcell(config={"tools": {"enabled": []}, "kernels": {"max_kernels": 1, "warm_pool": 0}}) as small:
        def evict_then(reply: str) -> Callable[[List[ChatMessage]], str]:
            def script(messages: List[ChatMessage]) -> str:
                assert small.execute("1", session="intruder").ok  # takes the only kernel slot
                return reply
            return script

        agent = make_agent(small, [], [
            code("x = base + 1\nprint(x)"),
            evict_then(code("print(base, 'x' in globals())")),
            code("final_answer((base, 'x' in globals()))"),
        ])
        try:
            assert agent.run("Go.", additional_args={"base": 5}) == (5, False)
            # the step that ran in the new kernel said so (without asking the server before each step)
            seen = text_of(agent.model.requests[2])
            assert "this step ran in a new kernel" in seen and "defined again" in seen
        finally:
            agent.cleanup()


# ---- lifecycle and cost per step


def test_a_step_asks_the_server_nothing_but_its_cell(tc: Toolcell, orders: Dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    asked: List[str] = []
    real = tc.sessions
    monkeypatch.setattr(tc, "sessions", lambda: asked.append("sessions") or real())
    agent = make_agent(tc, [orders["tool"]], [
        code("a = get_order('A-1')['total']"),
        code("b = get_order('A-2')['total']"),
        code("final_answer(a + b)"),
    ])
    try:
        assert agent.run("Sum A-1 and A-2.") == 155.5
    finally:
        agent.cleanup()
    assert asked == []  # whether the kernel is the prepared one comes from the last cell's result


def test_a_dropped_executor_ends_the_server_it_started_or_its_session() -> None:
    import gc

    executor = ToolcellExecutor()
    executor.send_tools({})
    assert executor("print(2)").logs == "2\n"
    pid = executor.toolcell.pid
    del executor
    gc.collect()
    assert gone(pid), f"toolcell serve (pid {pid}) still runs"

    with Toolcell(config={"tools": {"enabled": []}}) as shared:
        executor = ToolcellExecutor(shared)
        executor.send_tools({})
        executor("x = 1")
        session = executor.session
        assert any(name.startswith(session + "/") for name in shared.tools)
        del executor
        gc.collect()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (any(name.startswith(session + "/") for name in shared.tools)
                                               or session in live_sessions(shared)):
            time.sleep(0.05)
        assert not any(name.startswith(session + "/") for name in shared.tools)
        assert session not in live_sessions(shared)


def test_the_error_and_hint_lines_reach_the_model(tc: Toolcell) -> None:
    agent = make_agent(tc, [], [code("from toolcell_tools import no_such_tool"), code("final_answer('done')")])
    try:
        assert agent.run("Go.") == "done"
        lines = text_of(agent.model.requests[1]).splitlines()
        assert "status: error" in lines
        assert any(line.startswith("error: ImportError: cannot import name 'no_such_tool'") for line in lines)
        assert any(line.startswith("hint: toolcell_tools has no `no_such_tool`") for line in lines)
    finally:
        agent.cleanup()
