"""Overhead of toolcell.integrations.pydantic_ai over a plain `tc.execute`.

One cell makes 100 calls to a host-side tool, run (a) the way pydantic-ai
runs it: a whole `agent.run` whose scripted model (FunctionModel) calls
`run_code` once, the tool an agent tool (`@agent.tool_plain`) behind the
`ToolcellCodeMode` capability, every nested call going through the agent
toolset's `call_tool`; and (b) as `tc.execute` with the same function registered by
`@tc.tool`. Both on one server (an `AsyncToolcell`), each in a session of
its own kept warm, interleaved (the order reversed every other round), after
a warm-up; prints one JSON line with the medians. `--detail` also prints, to
stderr, the median of the `run_code` call alone
(`ToolcellCodeModeToolset.call_tool`, as the agent's tool manager calls it),
which leaves out the two model requests of the run, for the tool as a plain
function and as an `async def` one; and of the whole run with a capability
that has a tool hook (`before_tool_execute`), which sends every nested call
through the run's tool manager on the event loop instead of calling the
plain function on the thread the call arrived on.
Run: python3 benches/integrations/bench_pydantic_ai.py [runs] [--detail]
"""

import asyncio
import json
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List

import pydantic_ai
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from toolcell import AsyncToolcell
from toolcell.integrations.pydantic_ai import RUN_CODE_TOOL_NAME, ToolcellCodeMode, ToolcellCodeModeToolset

CODE = "total = 0\nfor i in range(100):\n    total += lookup(i=i)['n']\nprint(total)"
EXPECTED = "4950\n"


def lookup(i: int) -> dict:
    """Look a number up."""
    return {"n": i}


async def alookup(i: int) -> dict:
    """Look a number up."""
    return {"n": i}


alookup.__name__ = "lookup"


class PassThrough(AbstractCapability[Any]):
    """A capability with a tool hook that lets every call through (an audit log, say)."""

    async def before_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Dict[str, Any]) -> Dict[str, Any]:
        return args


def model(messages: List[Any], info: Any) -> ModelResponse:
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(str(last.content))])
    return ModelResponse(parts=[ToolCallPart(RUN_CODE_TOOL_NAME, {"code": CODE})])


async def bench(runs: int, detail: bool) -> Dict[str, Any]:
    # one kernel per case, all kept warm (the default keeps 4)
    config = {"tools": {"enabled": []}, "execution": {"max_tool_calls": 500}, "kernels": {"max_kernels": 8}}
    async with AsyncToolcell(config=config) as tc:
        tc.tool(lookup, session="plain")
        agent = Agent(FunctionModel(model), capabilities=[ToolcellCodeMode(toolcell=tc, session="integration")])
        agent.tool_plain(lookup)
        hooked = Agent(FunctionModel(model), capabilities=[ToolcellCodeMode(toolcell=tc, session="hooked"),
                                                          PassThrough()])
        hooked.tool_plain(lookup)
        direct = ToolcellCodeModeToolset(lookup, toolcell=tc, session="direct")
        direct_async = ToolcellCodeModeToolset(alookup, toolcell=tc, session="direct-async")
        ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())

        async def plain() -> None:
            result = await tc.execute(CODE, session="plain")
            assert result.output == EXPECTED, result.output

        async def integration() -> None:
            result = await agent.run("sum them")
            assert result.output == EXPECTED.strip(), result.output

        async def integration_hooked() -> None:
            result = await hooked.run("sum them")
            assert result.output == EXPECTED.strip(), result.output

        async def call_tool(toolset: ToolcellCodeModeToolset) -> None:
            tools = await toolset.get_tools(ctx)
            out = await toolset.call_tool(RUN_CODE_TOOL_NAME, {"code": CODE}, ctx, tools[RUN_CODE_TOOL_NAME])
            assert out.return_value == EXPECTED.strip(), out.return_value

        cases: Dict[str, Callable[[], Awaitable[None]]] = {"plain": plain, "integration": integration}
        if detail:
            cases["call_tool"] = lambda: call_tool(direct)
            cases["call_tool_async"] = lambda: call_tool(direct_async)
            cases["integration_hooked"] = integration_hooked
        for _ in range(3):
            for fn in cases.values():
                await fn()
        times: Dict[str, List[float]] = {name: [] for name in cases}
        for i in range(runs):
            order = list(cases.items())
            for name, fn in order if i % 2 == 0 else reversed(order):  # plain first, then last
                t = time.perf_counter()
                await fn()
                times[name].append((time.perf_counter() - t) * 1000)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    runs = int(args[0]) if args else 21
    detail = "--detail" in sys.argv
    med = asyncio.run(bench(runs, detail))
    print(json.dumps({
        "framework": "pydantic-ai", "version": pydantic_ai.__version__,
        "plain_ms": round(med["plain"], 2), "integration_ms": round(med["integration"], 2),
        "ratio": round(med["integration"] / med["plain"], 3), "runs": runs,
    }))
    if detail:
        for name, what in (
            ("call_tool", "run_code via toolset.call_tool alone, the tool a plain def (pydantic-ai runs it on a "
                          "worker thread)"),
            ("call_tool_async", "run_code via toolset.call_tool alone, the tool an async def (run on the event loop)"),
            ("integration_hooked", "the whole agent.run with a capability that has a tool hook"),
        ):
            print(f"{what}: {med[name]:.2f} ms (ratio {med[name] / med['plain']:.3f})", file=sys.stderr)


if __name__ == "__main__":
    main()
