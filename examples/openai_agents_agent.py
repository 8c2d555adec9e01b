# An OpenAI Agents SDK agent with one execute_code tool whose cells call the agent's own tools.
# ci-expect: Orders over 100 EUR: A-1, A-3 (1110.0 EUR)
"""
The SDK's `ScriptedModel` stands in for an LLM (no network): it answers with
the code a model would write. Turn 1 loops over the agent's tools in one
cell; turn 2 reuses the variable `big` that turn 1 left in the kernel (the
SQLiteSession names the conversation, and so the kernel).
Run: pip install "toolcell[openai-agents]"; python3 examples/openai_agents_agent.py
"""
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from toolcell.integrations.openai_agents import execute_code_tool

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


@function_tool
def list_orders() -> list:
    """The ids of all orders."""
    return sorted(ORDERS)


@function_tool
def order_total(id: str) -> float:
    """One order's total, in EUR.

    Args:
        id: The order id, like "A-1".
    """
    return ORDERS[id]


def code(source: str, call_id: str) -> list:
    return [function_call("execute_code", {"code": source, "reset": False}, call_id=call_id)]


def answer(call) -> list:  # the model reads the cell's output and answers with it
    out = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return [assistant_message("Orders over 100 EUR: " + out[-1]["output"].strip())]


set_tracing_disabled(True)  # no trace export: this example runs offline
model = ScriptedModel([
    code("big = [o for o in list_orders() if order_total(o) > 100]", "c1"),
    [assistant_message("Found them.")],
    code("print(', '.join(big), f'({sum(order_total(o) for o in big)} EUR)')", "c2"),
    ModelStep.respond(answer),
])
conversation = SQLiteSession("orders-chat")
with execute_code_tool([list_orders, order_total], session=conversation) as execute_code:
    agent = Agent(name="orders", instructions="Answer with execute_code.", tools=[execute_code], model=model)
    Runner.run_sync(agent, "Which orders are over 100 EUR?", session=conversation)
    result = Runner.run_sync(agent, "List them with their sum.", session=conversation)
print(result.final_output)
