# A pydantic-ai agent whose tools are Python functions in a toolcell kernel, behind one run_code tool.
# ci-expect: Orders over 100 EUR: A-1, A-3 (1110.0 EUR)
"""
`script` stands in for an LLM (FunctionModel, no network): it answers with the
code a model would write. Step 1 loops over the agent's own tools in one cell;
step 2 uses the variable step 1 left in the kernel; step 3 answers.
Run: pip install "toolcell[pydantic-ai]"; python3 examples/pydantic_ai_agent.py
"""
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from toolcell.integrations.pydantic_ai import ToolcellCodeMode

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}
STEPS = [
    "big = [o for o in list_orders() if order_total(id=o) > 100]",
    "print(f\"{', '.join(big)} ({sum(order_total(id=o) for o in big)} EUR)\")",
]


def script(messages, info):  # a real agent calls its LLM here
    (tool,) = info.function_tools
    assert "order_total(id: str) -> " in tool.description  # the tools, as Python functions
    step = sum(isinstance(p, ToolCallPart) for m in messages for p in getattr(m, "parts", []))
    if step < len(STEPS):
        return ModelResponse(parts=[ToolCallPart(tool.name, {"code": STEPS[step]})])
    return ModelResponse(parts=[TextPart("Orders over 100 EUR: " + messages[-1].parts[0].content)])


code_mode = ToolcellCodeMode()
agent = Agent(FunctionModel(script), capabilities=[code_mode])


@agent.tool_plain
def list_orders() -> list:
    """The ids of all orders."""
    return sorted(ORDERS)


@agent.tool_plain
def order_total(id: str) -> float:
    """One order's total, in EUR."""
    return ORDERS[id]


print(agent.run_sync("Which orders are over 100 EUR, and what do they come to?").output)
code_mode.toolcell.close()  # the toolcell server the capability started (also closed at exit)
