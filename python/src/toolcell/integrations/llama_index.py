"""toolcell for LlamaIndex: the ``code_execute_fn`` of a ``CodeActAgent``, running cells in a toolcell kernel.

LlamaIndex's :class:`~llama_index.core.agent.workflow.CodeActAgent` asks the
model for Python in ``<execute>...</execute>`` tags and hands the code to a
``code_execute_fn``; it leaves the running to you. :class:`ToolcellCodeExecutor`
runs it in a persistent toolcell kernel (variables survive from one step
and one turn to the next), where the agent's tools are plain Python
functions that run here, in the agent's process::

    from llama_index.core.agent.workflow import CodeActAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.core.workflow import Context
    from toolcell import Toolcell
    from toolcell.integrations.llama_index import ToolcellCodeExecutor

    def get_order(id: str) -> dict:
        \"\"\"One order, by id.\"\"\"
        return {"id": id, "total": 120.0}

    tools = [FunctionTool.from_defaults(get_order)]
    tc = Toolcell(config={"tools": {"enabled": []}})  # one `toolcell serve`, shared
    executor = ToolcellCodeExecutor(tools, tc)       # one per conversation
    agent = CodeActAgent(code_execute_fn=executor.execute, tools=list(tools), llm=llm)
    ctx = Context(agent)                              # the conversation's memory
    print(await agent.run("Sum orders A-1 to A-9", ctx=ctx))
    await executor.aclose()                           # or `async with` / `with`

Give the agent its own copy of the list (``list(tools)``, or use
:meth:`ToolcellCodeExecutor.agent`): ``CodeActAgent`` appends its
``execute`` tool to the list it is given.

How the pieces fit
------------------
The agent's ``tools`` only describe the functions to the model: the
system prompt lists each one's Python signature and docstring. The
executor makes them callable: each tool given to it (a
:class:`~llama_index.core.tools.FunctionTool`, or a plain function, wrapped
with ``FunctionTool.from_defaults``) becomes a toolcell *client tool* of the
same name, with the JSON Schema ``tool.metadata.get_parameters_dict()``
(the server checks the arguments against it before the call) and the
function's return annotation as the result shape. When a cell calls it,
the call runs here: the function on a pool thread for a sync function, on
the event loop of the workflow for an ``async def`` one (so it can use the
loop's resources). A plain ``FunctionTool`` gets its function called
directly, with what ``FunctionTool.call`` would pass it (its partial
parameters and defaults), skipping the ``ToolOutput`` the cell never sees;
a tool with an output callback, or another tool class, goes through
``tool.call`` / ``tool.acall`` and the cell gets its ``raw_output``. A
tool that takes the workflow ``Context`` gets the context of the
``execute`` call. The cell gets the tool's ``raw_output`` (a pydantic model
as its JSON, anything else that is not JSON as its ``str()``). A tool that
raises makes the call raise ``ToolError("<tool>: <Type>: <message>")`` in
the cell, which the model reads in the cell's output (and the code can
catch). The agent's own ``execute`` and ``handoff`` tools are skipped.

What the agent gets
-------------------
``execute`` returns the text the model should read,
:func:`toolcell.integrations.result_text` (the output, then ``status:``,
``error:``, ``hint:``, ``warning:`` lines): CodeActAgent puts it in the
next request as ``Result of executing the code given: ...``. The value is
a :class:`CellOutput`, a ``str`` whose ``result`` attribute is the
:class:`toolcell.ExecuteResult`; it is the ``raw_output`` of the
``ToolCallResult`` event, so ``ev.tool_output.raw_output.result.files``
(say) tells what the cell changed. (The field's documentation suggests a
dict; a dict would reach the model as its ``repr``.) A cell that fails is a
result, not an exception; a failure of toolcell itself (the server
exited) raises, and the agent reports it as the tool's error.

Sessions
--------
One executor is one toolcell session, so one kernel: use one executor per
conversation (as you use one ``Context`` per conversation), all on one
shared client: an executor given no client starts a server of its own.
The tools are registered once on the client, for every session, however
many executors use them (a call finds its executor by the calling
session). An executor dropped without :meth:`ToolcellCodeExecutor.close`
ends the server it started (or releases its tools) when it is garbage
collected. The session is
``session=``, else a new unique name. LlamaIndex has no hook for the end of
a conversation: :meth:`ToolcellCodeExecutor.close` / :meth:`aclose` (or the
``with`` / ``async with`` block) ends the kernel and, when the executor
started its own server, the server. :meth:`reset` starts the kernel over.

Streaming
---------
While a cell runs, each piece of its output is written to the workflow's
event stream as a :class:`ToolcellOutput` event (``session``, ``stream``,
``text``): ``async for ev in handler.stream_events()`` sees it before the
cell ends. ``stream=False`` turns it off.

A server the executor starts itself offers only your tools
(``{"tools": {"enabled": []}}``); pass ``client=Toolcell(...)`` to choose the
configuration, with the built-in tools or without. The client is the
synchronous :class:`toolcell.Toolcell`, each cell run on a worker thread
(its cost is far below a tool call's): the executor can be built and closed
from sync code, before or after the loop that runs the workflow, and each
cell's async tools run on the loop awaiting that cell, whichever it is (an
:class:`toolcell.AsyncToolcell` runs them on its own loop). Cancelling
``execute`` interrupts its cell; one cancelled while it waits behind
another's cell is dropped (none of its code runs). An ``execute`` asked for
from inside a cell of the executor (a tool that started a sub-agent
sharing it) raises at once instead of waiting for that cell.
"""

import asyncio
import concurrent.futures
import inspect
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union, get_type_hints

try:
    from llama_index.core.agent.workflow import CodeActAgent
    from llama_index.core.bridge.pydantic import BaseModel
    from llama_index.core.tools import BaseTool, FunctionTool
    from llama_index.core.workflow import Context, Event
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        'toolcell.integrations.llama_index needs LlamaIndex (llama-index-core): pip install "toolcell[llama-index]"'
    ) from _e

from .._client import Chunk, Toolcell, _current_call, _serving
from .._errors import RPCError, ToolcellError, ToolError
from .._result import ExecuteResult
from .._schema import parse_docstring, type_schema
from ._common import (
    DONE,
    CellJob,
    ToolDef,
    ToolSet,
    finalize_adapter,
    jsonable,
    reentrance_message,
    reentrant,
    result_text,
)

log = logging.getLogger("toolcell")

__all__ = ["ToolcellCodeExecutor", "ToolcellOutput", "CellOutput"]

#: The configuration of a server the executor starts itself: only the agent's tools.
_OWN_CONFIG: Dict[str, Dict[str, Any]] = {"tools": {"enabled": []}}

#: CodeActAgent's own tools, never registered as client tools.
_AGENT_TOOLS = ("execute", "handoff")

ToolLike = Union[BaseTool, Callable[..., Any]]


class ToolcellOutput(Event):
    """A piece of a running cell's output, written to the workflow's event stream."""

    session: str
    stream: str
    text: str


class CellOutput(str):
    """The text of a cell's result (what the model reads), with the structured result in `result`."""

    result: ExecuteResult

    def __new__(cls, text: str, result: ExecuteResult) -> "CellOutput":
        obj = super().__new__(cls, text)
        obj.result = result
        return obj

    def __reduce__(self) -> Any:  # pickles (and copies) as the plain text
        return (str, (str(self),))


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return list(value)
    get_content = getattr(value, "get_content", None)  # a node or a document
    if callable(get_content):
        return get_content()
    return str(value)


def _jsonable(value: Any) -> Any:
    """A tool's return value as JSON: as is when it is, else converted (pydantic, nodes, ``str()``)."""
    return jsonable(value, _json_default)


@dataclass
class _ToolSpec:
    tool: BaseTool
    name: str
    description: str
    parameters: Dict[str, Any]
    output_schema: Optional[Dict[str, Any]]
    is_async: bool
    ctx_param: Optional[str]
    direct: bool  # a plain FunctionTool: call its function, skip building a ToolOutput


def _direct_call_ok(t: BaseTool) -> bool:
    """Whether a call may go straight to the tool's function and skip ``FunctionTool.call``'s ToolOutput.

    True for a plain ``FunctionTool`` without output callbacks: the cell
    gets the function's return value, as ``call(...).raw_output`` would be
    (``call`` spends ~0.2 ms per call building a ToolOutput the cell never
    sees).
    """
    return (
        type(t) is FunctionTool
        and getattr(t, "_callback", True) is None
        and getattr(t, "_async_callback", True) is None
        and isinstance(getattr(t, "_field_defaults", None), dict)
    )


def _real_fn(t: BaseTool) -> Optional[Callable[..., Any]]:
    if isinstance(t, FunctionTool):
        try:
            return t.real_fn
        except ValueError:
            return None
    return None


def _spec(t: BaseTool) -> _ToolSpec:
    meta = t.metadata
    name = meta.get_name()
    fn = _real_fn(t)
    description = meta.description or ""
    if description.startswith(f"{name}("):  # FunctionTool's own: "name(signature)\ndocstring"
        description = description.split("\n", 1)[1] if "\n" in description else ""
    summary, _ = parse_docstring(inspect.cleandoc(description) if description else "")
    output: Optional[Dict[str, Any]] = None
    if fn is not None:
        try:
            ret = get_type_hints(fn).get("return")
        except Exception:  # unresolvable annotations: no result shape
            ret = None
        if ret is not None and ret is not type(None):
            output = type_schema(ret) or None
    parameters = dict(meta.get_parameters_dict())
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    is_async = fn is not None and inspect.iscoroutinefunction(fn)
    ctx_param = None
    if isinstance(t, FunctionTool) and t.requires_context:
        ctx_param = t.ctx_param_name
    return _ToolSpec(t, name, summary or description, parameters, output, is_async, ctx_param, _direct_call_ok(t))


_Job = CellJob  # one ``execute``: dropped if its caller stops waiting before the cell starts


def _as_tool(t: ToolLike) -> BaseTool:
    if isinstance(t, BaseTool):
        return t
    if callable(t):
        return FunctionTool.from_defaults(t)
    raise TypeError(f"ToolcellCodeExecutor: expected a LlamaIndex tool (FunctionTool) or a function, got {t!r}")


class ToolcellCodeExecutor:
    """Runs a CodeActAgent's code in a toolcell kernel: ``CodeActAgent(code_execute_fn=executor.execute, ...)``.

    ``ToolcellCodeExecutor(tools=(), client=None, *, session=None,
    timeout=None, stream=True, execute_params=None)``

    - `tools`: the agent's tools (``FunctionTool``\\ s or plain functions),
      callable from every cell by name.
    - `client`: a :class:`toolcell.Toolcell` to run on (left open by
      :meth:`close`); by default the executor starts its own server
      offering only `tools`, and closes it in :meth:`close`.
    - `session`: the toolcell session (default: a new unique name): one
      executor, one kernel, one conversation.
    - `timeout`: seconds per cell (default: the server's, 300);
      `execute_params`: more ``execute`` parameters (``mode``, ``cwd``).
    - `stream`: write :class:`ToolcellOutput` events while a cell runs.
    """

    def __init__(
        self,
        tools: Sequence[ToolLike] = (),
        client: Optional[Toolcell] = None,
        *,
        session: Optional[str] = None,
        timeout: Optional[float] = None,
        stream: bool = True,
        execute_params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        if client is not None and not isinstance(client, Toolcell):
            raise TypeError(
                "ToolcellCodeExecutor: client must be a toolcell.Toolcell (it is used from a worker thread, "
                f"with any event loop); got {type(client).__name__}. Build one with toolcell.Toolcell(...)."
            )
        specs = [_spec(_as_tool(t)) for t in tools]
        specs = [s for s in specs if s.name not in _AGENT_TOOLS]
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"ToolcellCodeExecutor: two tools are named {dup[0]!r}; tool names must be unique")
        self._specs = specs
        self._tools = [s.tool for s in specs]
        self._owns_client = client is None
        self._client = client if client is not None else Toolcell(config=_OWN_CONFIG)
        self._session = session or f"llamaindex-{uuid.uuid4().hex[:12]}"
        self._timeout = timeout
        self._stream = stream
        self._params = dict(execute_params or {})
        self._lock = threading.Lock()  # one cell at a time (the session's cells queue anyway)
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # of the cell now running
        self._ctx: Optional[Context] = None
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="toolcell-cell")
        self._closed = False
        #: the result of the last cell run
        self.last_result: Optional[ExecuteResult] = None
        self._registered: Optional[ToolSet] = None
        try:  # once for every session of the client (all or none); a call finds its executor by session
            self._registered = ToolSet(self._client, [
                ToolDef(spec.name, self._tool_fn(spec), spec.parameters, spec.description, spec.output_schema)
                for spec in specs
            ])
        except BaseException as e:
            self.close()
            if isinstance(e, RPCError):
                raise ValueError(
                    f"ToolcellCodeExecutor: toolcell refused the tools: {e.message}. A tool's name must not be one "
                    "of toolcell's enabled built-in tools (rename it, or leave built-ins off: the default config)"
                ) from e
            raise
        # dropped without close(): end the server it started, or release its tools
        self._finalizer = finalize_adapter(self, self._client, self._owns_client, self._registered)

    # ---- what users call

    @property
    def client(self) -> Toolcell:
        """The toolcell client the cells run on."""
        return self._client

    @property
    def session(self) -> str:
        """The toolcell session (kernel) of this executor."""
        return self._session

    @property
    def tools(self) -> List[BaseTool]:
        """The tools the cells can call (give the agent these, or use :meth:`agent`)."""
        return list(self._tools)

    def agent(self, **kwargs: Any) -> CodeActAgent:
        """A ``CodeActAgent`` running its code here, with this executor's tools: ``executor.agent(llm=llm)``."""
        return CodeActAgent(code_execute_fn=self.execute, tools=list(self._tools), **kwargs)

    def description(self) -> str:
        """The server's ``execute_code`` description for this session (lists the tools with signatures).

        CodeActAgent writes its own prompt; pass this as ``system_prompt=``
        to tell the model about toolcell's limits and helpers too.
        """
        assert self._registered is not None
        schema = self._registered.schema(self._session)
        return str(schema["function"]["description"])

    async def execute(self, code: str, ctx: Context = None) -> CellOutput:  # type: ignore[assignment]
        """Run `code` in the kernel; the text the model reads (its ``result`` the structured result).

        The ``code_execute_fn`` of CodeActAgent, which calls it with the
        workflow's context as `ctx` (output is streamed there as
        :class:`ToolcellOutput` events).
        """
        return await self._execute(code, ctx, reset=False)

    async def reset(self) -> None:
        """Start the kernel over: the next cell runs in a fresh one, without the variables."""
        await self._execute("pass", None, reset=True)

    def close(self) -> None:
        """End the kernel, and the server if the executor started it."""
        if self._closed:
            return
        self._closed = True
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()
        try:
            self._client.shutdown_session(self._session)
            if self._registered is not None and not self._owns_client:
                self._registered.close()
        except ToolcellError as e:  # the server is gone: nothing left to end
            log.debug("toolcell: ending session %s: %s", self._session, e)
        self._pool.shutdown(wait=False)
        if self._owns_client:
            self._client.close()

    async def aclose(self) -> None:
        """:meth:`close` from async code (without blocking the loop)."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> "ToolcellCodeExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "ToolcellCodeExecutor":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---- the tool calls of a cell

    def _tool_fn(self, spec: _ToolSpec) -> Callable[..., Any]:
        t = spec.tool
        ft: Any = t  # a FunctionTool when spec.direct

        def call(**arguments: Any) -> Any:
            loop, ctx = self._loop, self._ctx
            if spec.ctx_param is not None:
                if ctx is None:
                    raise ToolcellError(f"{spec.name} needs the workflow Context, and this cell has none")
                arguments = {**arguments, spec.ctx_param: ctx}
            if spec.direct:  # what FunctionTool.call passes the function
                arguments = {**ft._field_defaults, **ft.partial_params, **arguments}
            if spec.is_async:
                coro = ft.async_fn(**arguments) if spec.direct else ft.acall(**arguments)
                if loop is not None and not loop.is_closed():  # the call stays the current one there
                    call_ = _current_call.get()
                    fut = asyncio.run_coroutine_threadsafe(_serving(call_, coro), loop)
                    deadline = call_.deadline_ms if call_ is not None else None
                    try:  # no longer than the cell waits for it: a loop that stopped must not pin this thread
                        out = fut.result(timeout=None if deadline is None else deadline / 1000 + 1)
                    except concurrent.futures.TimeoutError:
                        fut.cancel()
                        raise ToolError("the call ran past the time the cell had left, and was cancelled") from None
                else:
                    out = asyncio.run(coro)
            elif spec.direct:
                out = ft.fn(**arguments)
            else:
                out = ft.call(**arguments) if hasattr(ft, "call") else ft(**arguments)
            if not spec.direct:
                out = getattr(out, "raw_output", out)
            return _jsonable(out)

        call.__name__ = spec.name
        return call

    # ---- running a cell

    def _run_cell(self, job: _Job, code: str, reset: bool, on_chunk: Optional[Callable[[Chunk], Any]],
                  loop: asyncio.AbstractEventLoop, ctx: Optional[Context]) -> ExecuteResult:
        assert self._registered is not None
        with self._lock:  # one cell at a time: the tool calls of the cell find its loop and context here
            # the job starts once the session's turn is its own (another executor on the session may
            # run first), and is finished (after a pending interrupt went out) before the turn passes on
            with self._registered.running(self._session, job):
                self._loop, self._ctx = loop, ctx
                try:
                    return self._client.execute(code, session=self._session, timeout=self._timeout,
                                                stream=on_chunk, reset=reset, **self._params)
                finally:
                    self._loop, self._ctx = None, None

    def _stop(self, job: _Job) -> None:
        """The caller stopped waiting: drop the job if it has not started, else interrupt its own cell."""
        job.stop(self._interrupt)

    async def _execute(self, code: str, ctx: Optional[Context], reset: bool) -> CellOutput:
        if self._closed:
            raise ToolcellError("this ToolcellCodeExecutor is closed; build a new one for a new conversation")
        if reentrant(self._client, self._session):
            raise ToolcellError(reentrance_message("ToolcellCodeExecutor.execute", self._session))
        loop = asyncio.get_running_loop()
        stream_to = ctx if (self._stream and ctx is not None) else None
        chunks: "asyncio.Queue[Any]" = asyncio.Queue()

        def on_chunk(chunk: Chunk) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)

        job = _Job()
        fut = asyncio.wrap_future(
            self._pool.submit(self._run_cell, job, code, reset, on_chunk if stream_to is not None else None, loop, ctx)
        )
        # chunks are queued before the result is set, and the future's callback runs after them
        fut.add_done_callback(lambda _f: chunks.put_nowait(DONE))
        try:
            if stream_to is not None:
                while True:
                    item = await chunks.get()
                    if item is DONE:
                        break
                    try:
                        stream_to.write_event_to_stream(
                            ToolcellOutput(session=item.session, stream=item.stream, text=item.text))
                    except Exception:
                        log.exception("toolcell: writing a cell's output to the event stream failed")
            result = await fut
        except asyncio.CancelledError:
            threading.Thread(target=self._stop, args=(job,), name="toolcell-stop", daemon=True).start()
            raise
        except ToolcellError as e:
            raise ToolcellError(
                f"toolcell could not run the cell: {e}. The kernel's server is not usable; "
                "check the server's stderr, or build a new executor."
            ) from e
        self.last_result = result
        return CellOutput(result_text(result), result)

    def _interrupt(self) -> None:
        try:
            self._client.interrupt(self._session)
        except ToolcellError:
            pass
