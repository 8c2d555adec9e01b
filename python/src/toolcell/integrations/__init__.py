"""toolcell inside agent frameworks.

Each submodule adapts toolcell to one framework and imports that framework
only when it is imported itself, so `import toolcell` never needs any of
them. Install the framework with the matching extra, e.g.
``pip install "toolcell[pydantic-ai]"``.

| module | framework | what it gives you |
|---|---|---|
| `toolcell.integrations.pydantic_ai` | pydantic-ai | a toolset offering one `run_code` tool over the agent's tools |
| `toolcell.integrations.smolagents` | smolagents | a `PythonExecutor` for `CodeAgent(executor=...)` |
| `toolcell.integrations.langchain` | LangChain / LangGraph | a `BaseTool`, and an `eval_fn` for langgraph-codeact |
| `toolcell.integrations.openai_agents` | OpenAI Agents SDK | a `FunctionTool` `execute_code` over the agent's function tools |
| `toolcell.integrations.llama_index` | LlamaIndex | a `code_execute_fn` for `CodeActAgent` |

Every adapter keeps one toolcell session per agent run or conversation
(variables survive from one cell to the next), registers the framework's
tools as client tools (their code runs here, in the host process) and
turns a cell's result into the text a model reads with
:func:`toolcell.integrations.result_text`.
"""

from ._common import result_text

__all__ = ["result_text"]
