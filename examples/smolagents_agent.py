# A smolagents CodeAgent whose code runs in a toolcell kernel; its tools stay in this process.
# ci-expect: Orders over 100 EUR: A-1, A-3 (1110.0 EUR)
"""
`ScriptedModel` stands in for an LLM (no network): it answers with the code a
model would write. Step 1 loops over the agent's own tools in one cell; step 2
reuses the variable `big` that step 1 left in the kernel.
Run: pip install "toolcell[smolagents]"; python3 examples/smolagents_agent.py
"""
from smolagents import CodeAgent, tool
from smolagents.models import ChatMessage, MessageRole, Model

from toolcell.integrations.smolagents import ToolcellExecutor

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


@tool
def list_orders() -> list:
    """Ids of all orders."""
    return sorted(ORDERS)


@tool
def order_total(id: str) -> float:
    """One order's total, in EUR.

    Args:
        id: The order id, like "A-1".
    """
    return ORDERS[id]


class ScriptedModel(Model):  # a stub: use InferenceClientModel, LiteLLMModel, ... for a real LLM
    def __init__(self):
        super().__init__(model_id="scripted")
        self.replies = iter([
            "<code>\nbig = {o: order_total(o) for o in list_orders() if order_total(o) > 100}\nprint(big)\n</code>",
            "<code>\nfinal_answer(f\"Orders over 100 EUR: {', '.join(big)} ({sum(big.values())} EUR)\")\n</code>",
        ])

    def generate(self, messages, **kwargs):
        return ChatMessage(role=MessageRole.ASSISTANT, content=next(self.replies))


with CodeAgent(tools=[list_orders, order_total], model=ScriptedModel(), executor=ToolcellExecutor(),
               verbosity_level=0) as agent:
    print(agent.run("Which orders are over 100 EUR, and what do they total?"))
