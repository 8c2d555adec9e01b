# A LangGraph ReAct agent with one tool, execute_code: its cells call the agent's LangChain tools.
# ci-expect: Orders over 100 EUR: A-1, A-3 (1110.0 EUR)
"""
`GenericFakeChatModel` (LangChain's test double) stands in for an LLM (no
network): it answers with the tool calls a model would make. Turn 1 loops over
the agent's own tools in one cell; turn 2, in the same thread, reuses the
variable `big` that turn 1 left in the kernel.
Run: pip install "toolcell[langchain]"; python3 examples/langchain_agent.py
"""
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import MemorySaver
from langgraph.prebuilt import create_react_agent

from toolcell.integrations.langchain import ToolcellTool

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}


@tool
def list_orders() -> list:
    """Ids of all orders."""
    return sorted(ORDERS)


@tool
def order_total(id: str) -> float:
    """One order's total, in EUR."""
    return ORDERS[id]


def code(source: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "execute_code", "args": {"code": source}, "id": source[:8]}])


class Model(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):  # the fake model takes tools as they are
        return self


model = Model(messages=iter([
    code("big = [o for o in list_orders() if order_total(o) > 100]\nprint(', '.join(big))"),
    AIMessage(content="done"),
    code("print(sum(order_total(o) for o in big))"),
    AIMessage(content="done"),
]))
with ToolcellTool([list_orders, order_total]) as execute_code:  # starts toolcell serve
    agent = create_react_agent(model, [execute_code], checkpointer=MemorySaver())
    thread = {"configurable": {"thread_id": "customer-42"}}
    first = agent.invoke({"messages": [("user", "Which orders are over 100 EUR?")]}, thread)
    second = agent.invoke({"messages": [("user", "And their sum?")]}, thread)
    print(f"Orders over 100 EUR: {first['messages'][-2].content} ({second['messages'][-2].content} EUR)")
