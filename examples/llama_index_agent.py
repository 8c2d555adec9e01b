# A LlamaIndex CodeActAgent whose code runs in a toolcell kernel; its tools stay in this process.
# ci-expect: Orders over 100 EUR: A-1, A-3 (1110.0 EUR)
"""
`Model` (a LlamaIndex MockLLM) stands in for an LLM (no network): it answers
with the <execute> blocks a model would write. Turn 1 loops over the agent's
own tools in one cell; turn 2, in the same conversation, reuses the variable
`big` that turn 1 left in the kernel.
Run: pip install "toolcell[llama-index]"; python3 examples/llama_index_agent.py
"""
import asyncio

from llama_index.core.llms import ChatMessage, ChatResponse, MockLLM
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.workflow import Context

from toolcell.integrations.llama_index import ToolcellCodeExecutor

ORDERS = {"A-1": 120.0, "A-2": 35.5, "A-3": 990.0}
REPLIES = [
    "<execute>\nbig = [o for o in list_orders() if order_total(o) > 100]\nprint(', '.join(big))\n</execute>",
    "done",
    "<execute>\nprint(sum(order_total(o) for o in big))\n</execute>",
    "done",
]


def list_orders() -> list:
    """Ids of all orders."""
    return sorted(ORDERS)


def order_total(id: str) -> float:
    """One order's total, in EUR."""
    return ORDERS[id]


class Model(MockLLM):
    @llm_chat_callback()
    def stream_chat(self, messages, **kwargs):  # CodeActAgent streams its replies
        text = REPLIES.pop(0)

        def reply():
            yield ChatResponse(message=ChatMessage(role="assistant", content=text), delta=text)

        return reply()


async def main() -> None:
    async with ToolcellCodeExecutor([list_orders, order_total]) as executor:  # starts toolcell serve
        agent = executor.agent(llm=Model())
        ctx = Context(agent)  # one conversation: its memory here, its variables in the kernel
        outputs = []
        for question in ["Which orders are over 100 EUR?", "And their sum?"]:
            await agent.run(question, ctx=ctx)
            outputs.append(executor.last_result.output.strip())
        print(f"Orders over 100 EUR: {outputs[0]} ({outputs[1]} EUR)")


asyncio.run(main())
