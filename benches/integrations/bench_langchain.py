"""Overhead of toolcell.integrations.langchain over a plain `tc.execute`.

One cell makes 100 calls to a host-side tool, run (a) the way LangGraph's
ToolNode runs a tool call (`ToolcellTool.invoke(tool_call, config)`, the
nested tool a LangChain `@tool`, called with `tool.invoke`) and (b) as
`tc.execute` with the same function registered by `@tc.tool`. Both on one
server, interleaved (alternating which goes first), after a warm-up; prints
one JSON line with the medians.
Run: python3 benches/integrations/bench_langchain.py [runs]
"""

import json
import statistics
import sys
import time
from typing import Dict, List

import langchain_core
from langchain_core.tools import tool

from toolcell import Toolcell
from toolcell.integrations.langchain import ToolcellTool

CODE = "total = 0\nfor i in range(100):\n    total += lookup(i)['n']\nprint(total)"
EXPECTED = "4950"


def main(runs: int = 21) -> None:
    with Toolcell(config={"tools": {"enabled": []}, "execution": {"max_tool_calls": 500}}) as tc:
        @tc.tool(session="plain")
        def lookup(i: int) -> dict:
            """Look a number up."""
            return {"n": i}

        @tool("lookup")
        def lookup_tool(i: int) -> dict:
            """Look a number up."""
            return {"n": i}

        code_tool = ToolcellTool([lookup_tool], tc, session="integration")
        call = {"type": "tool_call", "id": "call-1", "name": "execute_code", "args": {"code": CODE}}
        config = {"configurable": {"thread_id": "bench"}}

        def plain() -> None:
            result = tc.execute(CODE, session="plain")
            assert result.output.strip() == EXPECTED, result.output

        def integration() -> None:
            msg = code_tool.invoke(call, config)
            assert msg.content == EXPECTED, msg.content

        for _ in range(3):
            plain()
            integration()
        times: Dict[str, List[float]] = {"plain": [], "integration": []}
        sides = [("plain", plain), ("integration", integration)]
        for r in range(runs):
            # alternate which side goes first, so that machine load and warm caches hit both alike
            for name, fn in (sides if r % 2 == 0 else sides[::-1]):
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1000)
        code_tool.close()
    plain_ms = statistics.median(times["plain"])
    integration_ms = statistics.median(times["integration"])
    print(json.dumps({
        "framework": "langchain", "version": langchain_core.__version__,
        "plain_ms": round(plain_ms, 2), "integration_ms": round(integration_ms, 2),
        "ratio": round(integration_ms / plain_ms, 3), "runs": runs,
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
