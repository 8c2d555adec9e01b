"""Cost of the OpenAI Agents adapter on a cell that makes 100 tool calls.

(a) integration: the ``execute_code`` FunctionTool invoked the way the SDK
    invokes a function tool (``on_invoke_tool`` with a ``ToolContext`` made by
    ``ToolContext.from_agent_context``), its cell calling a ``@function_tool``
    100 times (each call goes cell -> server -> this process -> the run's event
    loop -> the SDK's tool invoker, which runs a sync tool in a thread);
(b) plain: ``tc.execute`` of the same cell, the same function registered with
    ``@tc.tool``.

Warm-up, then the median of RUNS runs each; prints one JSON line.
``--runner`` adds ``runner_ms``: the same cell through a whole
``Runner.run`` (scripted model, two model turns) for comparison.
"""

import asyncio
import json
import statistics
import sys
import time
from typing import Any, Callable, List

from agents import Agent, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from agents.version import __version__ as agents_version
from openai.types.responses import ResponseFunctionToolCall

from toolcell import Toolcell
from toolcell.integrations.openai_agents import execute_code_tool

RUNS = 21
WARMUP = 3
CALLS = 100
CELL = f"s = 0\nfor i in range({CALLS}):\n    s += lookup(i)['v']\nprint(s)"
EXPECTED = str(sum(range(CALLS)))
CONFIG = {"execution": {"max_tool_calls": 500}, "tools": {"enabled": []}}


def medians_ms(*fns: Callable[[], str]) -> List[float]:
    """Median wall time of each function; the runs are interleaved so machine load hits all alike."""
    for _ in range(WARMUP):
        for fn in fns:
            assert fn().strip() == EXPECTED
    times: List[List[float]] = [[] for _ in fns]
    for r in range(RUNS):
        order = list(range(len(fns)))
        if r % 2:
            order.reverse()
        for k in order:
            t0 = time.perf_counter()
            out = fns[k]()
            times[k].append((time.perf_counter() - t0) * 1000)
            assert out.strip() == EXPECTED, out
    return [statistics.median(t) for t in times]


def main() -> None:
    set_tracing_disabled(True)
    with_runner = "--runner" in sys.argv

    @function_tool
    def lookup(i: int) -> dict:
        """A value by index."""
        return {"v": i}

    def plain_lookup(i: int) -> dict:
        """A value by index."""
        return {"v": i}

    args = json.dumps({"code": CELL, "reset": False})
    loop = asyncio.new_event_loop()
    n = [0]
    with execute_code_tool([lookup], config=CONFIG, session="bench") as code, Toolcell(config=CONFIG) as tc:
        tc.tool(plain_lookup, name="lookup")

        def integration() -> str:
            n[0] += 1
            call = ResponseFunctionToolCall(type="function_call", call_id=f"b{n[0]}", name="execute_code", arguments=args)
            ctx = ToolContext.from_agent_context(RunContextWrapper(context=None), call.call_id, tool_call=call)
            return str(loop.run_until_complete(code.on_invoke_tool(ctx, args)))

        def plain() -> str:
            return tc.execute(CELL, session="bench").output

        fns: List[Callable[[], str]] = [plain, integration]
        if with_runner:
            model = ScriptedModel()
            agent = Agent(name="bench", instructions="x", tools=[code], model=model)

            def through_runner() -> str:
                model.extend([[function_call("execute_code", args, call_id="r")], [assistant_message("done")]])
                result = loop.run_until_complete(Runner.run(agent, "go"))
                assert result.final_output == "done"
                return str(result.new_items[1].output)

            fns.append(through_runner)
        ms = medians_ms(*fns)
    loop.close()

    line: Any = {
        "framework": "openai-agents",
        "version": agents_version,
        "plain_ms": round(ms[0], 1),
        "integration_ms": round(ms[1], 1),
        "ratio": round(ms[1] / ms[0], 2),
        "runs": RUNS,
    }
    if with_runner:
        line["runner_ms"] = round(ms[2], 1)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
