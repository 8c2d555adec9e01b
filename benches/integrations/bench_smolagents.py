"""Overhead of toolcell.integrations.smolagents over a plain `tc.execute`.

One cell makes 100 calls to a host-side tool, run (a) the way smolagents'
CodeAgent runs a code action (`executor(code)` on a `ToolcellExecutor`,
the tool a smolagents `@tool`) and (b) as `tc.execute` with the same tool
registered by `@tc.tool`. Both on one server, interleaved (alternating
which goes first), after a warm-up; prints one JSON line with the medians.
Run: python3 benches/integrations/bench_smolagents.py [runs]
"""

import json
import statistics
import sys
import time

import smolagents
from smolagents import tool

from toolcell import Toolcell
from toolcell.integrations.smolagents import ToolcellExecutor

CODE = "total = 0\nfor i in range(100):\n    total += lookup(i)['n']\nprint(total)"
EXPECTED = "4950\n"


def main(runs: int = 21) -> None:
    with Toolcell(config={"tools": {"enabled": []}, "execution": {"max_tool_calls": 500}}) as tc:
        @tc.tool(session="plain")
        def lookup(i: int) -> dict:
            """Look a number up."""
            return {"n": i}

        @tool
        def lookup_tool(i: int) -> dict:
            """Look a number up.

            Args:
                i: The number.
            """
            return {"n": i}

        lookup_tool.name = "lookup"
        executor = ToolcellExecutor(tc, session="integration")
        executor.send_tools({"lookup": lookup_tool})

        def plain() -> None:
            result = tc.execute(CODE, session="plain")
            assert result.output == EXPECTED, result.output

        def integration() -> None:
            out = executor(CODE)
            assert out.logs == EXPECTED, out.logs

        for _ in range(3):
            plain()
            integration()
        times = {"plain": [], "integration": []}  # type: dict
        pair = [("plain", plain), ("integration", integration)]
        for i in range(runs):
            for name, fn in pair if i % 2 == 0 else pair[::-1]:  # alternate which goes first
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1000)
        executor.cleanup()
    plain_ms = statistics.median(times["plain"])
    integration_ms = statistics.median(times["integration"])
    print(json.dumps({
        "framework": "smolagents", "version": smolagents.__version__,
        "plain_ms": round(plain_ms, 2), "integration_ms": round(integration_ms, 2),
        "ratio": round(integration_ms / plain_ms, 3), "runs": runs,
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
