"""An agent loop with toolcell: the model writes code that calls your functions.

`model()` stands in for an LLM API call (no network): it gets the `execute_code`
tool, whose description lists `list_orders` and `order_total`, and answers with code.
Run: pip install toolcell (or the built wheel); python3 examples/python_agent.py
"""
from toolcell import Toolcell

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


def model(messages, tools):  # a stub: a real host calls its LLM here
    if messages[-1]["role"] == "user":
        assert "order_total(id: str)" in tools[0]["description"]
        code = "big = [o for o in list_orders() if order_total(o) > 100]\nprint(', '.join(big))"
        return {"type": "tool_use", "name": tools[0]["name"], "input": {"code": code}}
    return {"type": "text", "text": "Orders over 100: " + messages[-1]["content"].strip()}


with Toolcell() as tc:
    @tc.tool
    def list_orders() -> list:
        """Ids of all orders."""
        return sorted(ORDERS)

    @tc.tool
    def order_total(id: str) -> float:
        """One order's total, in EUR.

        Args:
            id: The order id, like "A-1".
        """
        return ORDERS[id]

    tools = [tc.schema(format="anthropic")]
    messages = [{"role": "user", "content": "Which orders are over 100 EUR?"}]
    while (reply := model(messages, tools))["type"] == "tool_use":
        result = tc.execute(reply["input"]["code"])
        messages.append({"role": "tool", "content": result.output if result.ok else result.error})
    print(reply["text"])
