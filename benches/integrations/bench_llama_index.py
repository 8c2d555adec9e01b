"""Overhead of toolcell.integrations.llama_index over a plain `tc.execute`.

One cell makes 100 calls to a host-side tool, run (a) the way CodeActAgent
runs its code (`await FunctionTool.from_defaults(executor.execute,
name="execute").acall(code=..., ctx=None)`, the nested tool a LlamaIndex
`FunctionTool`, called with `tool.call`) and (b) as `tc.execute` with the
same function registered by `@tc.tool`. Both on one server, interleaved,
after a warm-up; prints one JSON line with the medians.
Run: python3 benches/integrations/bench_llama_index.py [runs]
"""

import asyncio
import json
import statistics
import sys
import time
from importlib.metadata import version
from typing import Dict, List

from llama_index.core.tools import FunctionTool

from toolcell import Toolcell
from toolcell.integrations.llama_index import ToolcellCodeExecutor

CODE = "total = 0\nfor i in range(100):\n    total += lookup(i)['n']\nprint(total)"
EXPECTED = "4950"


def lookup(i: int) -> dict:
    """Look a number up."""
    return {"n": i}


async def main(runs: int = 21) -> None:
    with Toolcell(config={"tools": {"enabled": []}, "execution": {"max_tool_calls": 500}}) as tc:
        tc.tool(lookup, session="plain")
        executor = ToolcellCodeExecutor([FunctionTool.from_defaults(lookup)], tc, session="integration")
        execute = FunctionTool.from_defaults(executor.execute, name="execute")  # as CodeActAgent wraps it

        async def plain() -> None:
            result = tc.execute(CODE, session="plain")
            assert result.output.strip() == EXPECTED, result.output

        async def integration() -> None:
            out = await execute.acall(code=CODE, ctx=None)  # the agent passes its Context (for streaming)
            assert out.content == EXPECTED, out.content

        for _ in range(3):
            await plain()
            await integration()
        times: Dict[str, List[float]] = {"plain": [], "integration": []}
        for _ in range(runs):
            for name, fn in (("plain", plain), ("integration", integration)):
                t = time.perf_counter()
                await fn()
                times[name].append((time.perf_counter() - t) * 1000)
        executor.close()
    plain_ms = statistics.median(times["plain"])
    integration_ms = statistics.median(times["integration"])
    print(json.dumps({
        "framework": "llama_index", "version": version("llama-index-core"),
        "plain_ms": round(plain_ms, 2), "integration_ms": round(integration_ms, 2),
        "ratio": round(integration_ms / plain_ms, 3), "runs": runs,
    }))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 21))
