"""toolcell for LangChain and LangGraph: a code tool over the agent's tools, and an ``eval_fn`` for CodeAct.

Instead of handing the model every tool and paying a model round trip per
call, give it one tool, ``execute_code``: the model writes a Python cell,
and the cell calls your LangChain tools as plain Python functions (in
loops, with ``if``, summing, filtering) inside a persistent kernel whose
variables survive from one call to the next::

    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.prebuilt import create_react_agent
    from toolcell import Toolcell
    from toolcell.integrations.langchain import ToolcellTool

    @tool
    def get_order(id: str) -> dict:
        \"\"\"One order, by id.\"\"\"
        return {"id": id, "total": 120.0}

    tc = Toolcell(config={"tools": {"enabled": []}})  # one `toolcell serve`, shared
    code = ToolcellTool([get_order], tc)      # without tc: starts its own server
    agent = create_react_agent(model, [code], checkpointer=MemorySaver())
    agent.invoke({"messages": [("user", "Sum orders A-1 to A-9")]},
                 {"configurable": {"thread_id": "t-1"}})
    code.close()                              # or use it as a context manager

For `langgraph-codeact <https://github.com/langchain-ai/langgraph-codeact>`_,
:func:`make_eval_fn` gives the ``eval_fn`` that runs the model's code in a
toolcell kernel: ``create_codeact(model, tools, make_eval_fn(tools))``.

What the adapter does with your tools
-------------------------------------
Each tool you pass (a :class:`~langchain_core.tools.BaseTool`, a ``@tool``
function, a :class:`~langchain_core.tools.StructuredTool`, or a plain
function, which is wrapped with :func:`langchain_core.tools.tool` first)
becomes a toolcell *client tool* of the same name, registered once on the
client for every session (see :class:`~toolcell.integrations._common.ToolSet`:
the number of tools the server holds does not grow with the number of
conversations; a call goes to the run whose cell is running in the calling
session). Its JSON Schema is the
one LangChain gives a model for it (``convert_to_openai_tool``: the
``tool_call_schema``, so injected arguments are left out); the description
is the tool's, its ``Args:`` section moved onto the parameters; a
function's return annotation becomes the result shape the model is shown.
When a cell calls it, the call runs here, in the agent's process:
``tool.invoke(arguments, config)`` on a pool thread, with the config of the
``execute_code`` run (its ``configurable``, so ``thread_id`` and your own
keys reach tools that take a ``RunnableConfig``; its callbacks, so every
nested call is traced as a child run of ``execute_code``). A tool with a
native coroutine (``async def`` / ``coroutine=``) is awaited with
``tool.ainvoke`` on the event loop of the run when ``execute_code`` was
awaited (``ainvoke``, ``astream``), so it can use the loop's resources; a
coroutine-only tool called from a synchronous run gets a loop of its own.
The cell gets the tool's return value (a pydantic model as its JSON,
anything else that is not JSON as its ``str()``, as LangChain would show it
to a model). When no callback handler observes the run, a plain
``StructuredTool`` (that class itself, not a subclass; no
``handle_tool_error``, no callbacks of its own) is called directly: its arguments validated by its schema, the config added,
its function called with the config as the current one, which is what
``invoke`` does without handlers, minus about a millisecond of
bookkeeping per call; any other tool, or any run with handlers, goes
through ``invoke`` / ``ainvoke``. A tool with an ``InjectedToolCallId``
argument gets ``<execute_code call id>-<n>`` (through ``invoke`` it is
given a full ``ToolCall``), and a ``ToolMessage`` or ``Command`` it returns
gives the cell the message's content; a tool whose required arguments come
from the graph (``InjectedState``, ``InjectedStore``) is refused when the
adapter is built, as a cell cannot provide them.

The server checks the arguments against the schema before the call; a
tool that raises makes the call raise ``ToolError("<tool>: <Type>:
<message>")`` in the cell, which the model reads in the cell's output and
the code can catch. (A tool created with ``handle_tool_error`` returns its
error text instead, as it does for a direct call.)

Sessions
--------
A toolcell *session* is one kernel and its variables. ``ToolcellTool``
keeps one per conversation: a run whose config has
``configurable.thread_id`` (a LangGraph thread: ``invoke(...,
{"configurable": {"thread_id": "t-1"}})``) uses the session
``f"{session_prefix}{thread_id}"``, so each thread has its own kernel and a
thread's second turn sees the variables of its first; a run without one
uses the session fixed when the tool was built (``session=``, else a new
unique name). LangChain has no hook for the end of a conversation: call
:meth:`ToolcellTool.close_session` when a thread is done, and
:meth:`ToolcellTool.close` (or leave the ``with`` block) at the end, which
ends the sessions this tool used and, when the tool started its own server,
the server. A run of the code tool asked for from inside a cell of the
same session (a tool that cell called started a sub-agent sharing the
tool and the thread) raises ``ToolException`` at once, instead of waiting
for the running cell until its timeout. A tool dropped without
:meth:`ToolcellTool.close` ends the server it started (or releases its
tools) when it is garbage collected.

Asynchronous runs
-----------------
``ainvoke`` runs the cell on a worker thread with the synchronous
:class:`toolcell.Toolcell` client instead of using
:class:`toolcell.AsyncToolcell`. One LangChain tool serves both ``invoke``
(LangGraph runs sync tools in threads that have no event loop) and
``ainvoke``, and an ``AsyncToolcell`` serves async code only, running async
tools on one loop at a time (its own); the synchronous client serves both,
and the adapter runs each cell's async tools on the loop awaiting that very
cell. The worker thread keeps that loop free: async tools called by the
cell run on it (see above), and the cell's output is streamed from it.
Cancelling the task that awaits ``ainvoke`` interrupts the cell; a run
cancelled while it waits behind another cell of the session is dropped
(none of its code runs).

Streaming
---------
While a cell runs, each piece of its output is sent as it comes:

- to LangChain callbacks, as a custom event ``"toolcell_output"`` with the
  data ``{"type": "toolcell_output", "session", "stream", "text"}``
  (``astream_events(version="v2")`` yields it as ``on_custom_event``;
  a handler gets it in ``on_custom_event``), when the run has handlers;
- inside a LangGraph graph, to the graph's stream writer, the same dict
  (``graph.stream(..., stream_mode="custom")``).

Pass ``stream=False`` to turn both off. The whole output is in the tool's
result either way.

What the model gets
-------------------
``execute_code`` has ``response_format="content_and_artifact"``: the
``ToolMessage`` content is :func:`toolcell.integrations.result_text` (the
output, then ``status:``, ``error:``, ``hint:`` and ``warning:`` lines), and
its ``artifact`` is the result object as a JSON dict (``status``,
``output``, ``tool_calls_made``, ``kernel``, ``files``, ...; see the
result reference, or ``toolcell.ExecuteResult.from_dict(msg.artifact)``).
A cell that fails is a result, not an exception. A failure of toolcell
itself (the server exited, a refused request) raises ``ToolException``,
which LangGraph's ``ToolNode`` shows to the model by default.

The description of ``execute_code`` is the server's (``tc.schema()``): it
lists every tool the cells can call, with signatures. A tool that starts
its own server offers only your tools (``{"tools": {"enabled": []}}``);
pass ``client=Toolcell(...)`` to choose the configuration, with the
built-in tools (``read_file``, ``terminal``, ...) or without.

LangGraph CodeAct
-----------------
:func:`make_eval_fn` / :class:`ToolcellCodeAct`: see their docstrings.
"""

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import itertools
import json
import logging
import queue
import sys
import threading
import uuid
from dataclasses import dataclass, field
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generic,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    get_type_hints,
)

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForToolRun,
        CallbackManagerForToolRun,
        adispatch_custom_event,
        dispatch_custom_event,
    )
    from langchain_core.messages import ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.config import ensure_config, patch_config, var_child_runnable_config
    from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException
    from langchain_core.tools import tool as _make_lc_tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import BaseModel, Field, PrivateAttr
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        'toolcell.integrations.langchain needs LangChain (langchain-core): pip install "toolcell[langchain]"'
    ) from _e

_get_annotations: Optional[Callable[..., Dict[str, Any]]] = None
try:  # how LangChain itself finds injected arguments (InjectedToolCallId, InjectedState, ...)
    from langchain_core.tools.base import _is_injected_arg_type as _is_injected
    from langchain_core.tools.base import get_all_basemodel_annotations as _get_annotations
except ImportError:  # pragma: no cover - another langchain-core layout: no injected arguments known
    pass

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

__all__ = ["OUTPUT_EVENT", "ExecuteCodeArgs", "ToolcellCodeAct", "ToolcellTool", "make_eval_fn"]

#: The name of the custom event (and the ``type`` of the stream item) carrying a cell's output.
OUTPUT_EVENT = "toolcell_output"

#: The configuration of a server the adapter starts itself: only the agent's tools.
_OWN_CONFIG: Dict[str, Dict[str, Any]] = {"tools": {"enabled": []}}

ToolLike = Union[BaseTool, Callable[..., Any]]
T = TypeVar("T")


# ---------------------------------------------------------------- values


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return list(value)
    content = getattr(value, "content", None)  # a LangChain message
    if isinstance(content, (str, list)):
        return content
    return str(value)


def _jsonable(value: Any) -> Any:
    """A tool's return value as JSON: as is when it is, else converted (pydantic, messages, ``str()``)."""
    return jsonable(value, _json_default)


# ---------------------------------------------------------------- tools


def _as_tool(t: ToolLike) -> BaseTool:
    if isinstance(t, BaseTool):
        return t
    if callable(t):
        return _make_lc_tool(t)
    raise TypeError(
        f"toolcell: expected a LangChain tool (BaseTool, @tool or StructuredTool) or a function, got {t!r}"
    )


def _has_native_async(t: BaseTool) -> bool:
    if isinstance(t, StructuredTool):
        return t.coroutine is not None
    return type(t)._arun is not BaseTool._arun


def _has_sync(t: BaseTool) -> bool:
    if isinstance(t, StructuredTool):
        return t.func is not None
    return True


def _output_schema(t: BaseTool) -> Optional[Dict[str, Any]]:
    fn = getattr(t, "func", None) or getattr(t, "coroutine", None)
    if fn is None:
        return None
    try:
        ret = get_type_hints(fn).get("return")
    except Exception:  # unresolvable annotations: no result shape, that is all
        return None
    if ret is None or ret is type(None):
        return None
    schema = type_schema(ret)
    return schema or None


def _config_param(fn: Optional[Callable[..., Any]]) -> Optional[str]:
    """The parameter of `fn` that LangChain fills with the run's ``RunnableConfig``, if any."""
    if fn is None:
        return None
    try:
        hints = get_type_hints(fn)
    except Exception:
        return None
    return next((name for name, hint in hints.items() if hint is RunnableConfig), None)


def _direct_call_ok(t: BaseTool) -> bool:
    """Whether a call may skip ``invoke``'s callback machinery when no callback handler observes the run.

    True for a plain ``StructuredTool`` (that very class: a subclass may
    override ``_run``, ``invoke`` or the argument parsing, with a permission
    check say, so its calls go through ``invoke``): no error handlers, no
    callbacks or verbosity of its own, content responses, and a function
    that does not take ``callbacks``. Its call is then what ``invoke`` would
    do without handlers: validate, add the config, call (``tool.invoke``
    costs about a millisecond per call in callback and signature
    bookkeeping).
    """
    if type(t) is not StructuredTool:
        return False
    try:  # the validation step `run` uses; its signature varies across langchain-core versions
        if list(inspect.signature(t._to_args_and_kwargs).parameters) != ["tool_input", "tool_call_id"]:
            return False
    except (AttributeError, TypeError, ValueError):
        return False
    if t.handle_tool_error or t.handle_validation_error or t.callbacks or t.verbose:
        return False
    if t.response_format != "content":
        return False
    for fn in (t.func, t.coroutine):
        if fn is not None:
            try:
                if "callbacks" in inspect.signature(fn).parameters:
                    return False
            except (TypeError, ValueError):
                return False
    return True


def _injected_args(t: BaseTool) -> Tuple[Optional[str], List[str]]:
    """The tool's ``InjectedToolCallId`` argument, and its other required injected arguments (``InjectedState``, ...)."""
    schema = getattr(t, "args_schema", None)
    if _get_annotations is None or not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return None, []
    call_id: Optional[str] = None
    others: List[str] = []
    try:
        annotations = _get_annotations(schema)
    except Exception:  # an exotic schema: no injected arguments known
        return None, []
    for name, hint in annotations.items():
        if _is_injected(hint, injected_type=InjectedToolCallId):
            call_id = name
        elif _is_injected(hint):
            field_info = schema.model_fields.get(name)
            if field_info is None or field_info.is_required():
                others.append(name)
    return call_id, others


@dataclass
class _ToolSpec:
    tool: BaseTool
    name: str
    description: str
    parameters: Dict[str, Any]
    output_schema: Optional[Dict[str, Any]]
    native_async: bool
    has_sync: bool
    direct: bool
    config_param: Optional[str]
    aconfig_param: Optional[str]
    # the argument validation of a direct call, read once: the args model (pydantic v2) and its fields
    model: Optional[Type[BaseModel]] = None
    fields: frozenset = frozenset()
    no_args: bool = False
    # the argument LangChain fills with the tool call's id (InjectedToolCallId)
    call_id_arg: Optional[str] = None


def _spec(t: BaseTool, who: str) -> _ToolSpec:
    call_id_arg, injected = _injected_args(t)
    if injected:
        raise ValueError(
            f"{who}: tool {t.name!r} takes the injected argument(s) {', '.join(injected)} (InjectedState, "
            "InjectedStore, ...), which LangGraph's ToolNode fills from the graph; a cell cannot provide them. "
            "Give this tool to the agent directly, beside execute_code, or give the arguments defaults."
        )
    fn = convert_to_openai_tool(t)["function"]
    parameters: Dict[str, Any] = dict(fn.get("parameters") or {"type": "object", "properties": {}})
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    summary, arg_docs = parse_docstring(fn.get("description") or t.description or "")
    if arg_docs:  # a docstring's Args: section goes onto the parameters that have no description
        props = {k: dict(v) if isinstance(v, Mapping) else v for k, v in parameters["properties"].items()}
        for name, doc in arg_docs.items():
            if isinstance(props.get(name), dict) and not props[name].get("description"):
                props[name]["description"] = doc
        parameters["properties"] = props
    spec = _ToolSpec(
        tool=t,
        name=t.name,
        description=summary or (t.description or ""),
        parameters=parameters,
        output_schema=_output_schema(t),
        native_async=_has_native_async(t),
        has_sync=_has_sync(t),
        direct=_direct_call_ok(t),
        config_param=_config_param(getattr(t, "func", None)),
        aconfig_param=_config_param(getattr(t, "coroutine", None)),
        call_id_arg=call_id_arg,
    )
    schema = getattr(t, "args_schema", None)
    if spec.direct and isinstance(schema, type) and issubclass(schema, BaseModel):
        spec.model = schema
        spec.fields = frozenset(schema.model_fields)
        spec.no_args = not spec.fields
    return spec


def _direct_args(spec: _ToolSpec, arguments: Dict[str, Any], call_id: Optional[str]) -> Tuple[Any, Dict[str, Any]]:
    """What ``_to_args_and_kwargs`` gives for a dict input, with the args model read once (not per call)."""
    model = spec.model
    if model is None:
        return spec.tool._to_args_and_kwargs(arguments, call_id)  # type: ignore[attr-defined]
    if spec.no_args:
        return (), {}
    if spec.call_id_arg is not None:
        arguments = {**arguments, spec.call_id_arg: call_id}
    m = model.model_validate(arguments)
    return (), {k: getattr(m, k) for k in arguments if k in spec.fields}


def _call_direct(spec: _ToolSpec, arguments: Dict[str, Any], scope: "_Scope", call_id: Optional[str]) -> Any:
    """What ``StructuredTool.invoke`` does when no handler observes the run, without its bookkeeping."""
    t: Any = spec.tool
    args, kwargs = _direct_args(spec, arguments, call_id)
    cfg = scope.cfg
    if spec.config_param:
        kwargs[spec.config_param] = cfg
    token = var_child_runnable_config.set(cfg)  # get_config() inside the tool sees the run
    try:
        return t.func(*args, **kwargs)
    finally:
        var_child_runnable_config.reset(token)


async def _acall_direct(spec: _ToolSpec, arguments: Dict[str, Any], scope: "_Scope", call_id: Optional[str]) -> Any:
    t: Any = spec.tool
    args, kwargs = _direct_args(spec, arguments, call_id)
    cfg = scope.cfg
    if spec.aconfig_param:
        kwargs[spec.aconfig_param] = cfg
    var_child_runnable_config.set(cfg)  # this task's own context
    return await t.coroutine(*args, **kwargs)


def _unwrap(out: Any) -> Any:
    """A tool's result as the cell gets it, from a call made with a ToolCall (a ToolMessage, or a Command)."""
    if isinstance(out, ToolMessage):
        return out.content
    update = getattr(out, "update", None)  # LangGraph's Command(update={"messages": [ToolMessage(...)]})
    if isinstance(update, Mapping):
        messages = [m for m in (update.get("messages") or []) if isinstance(m, ToolMessage)]
        if messages:
            return messages[-1].content
        return {k: v for k, v in update.items() if k != "messages"}
    return out


# ---------------------------------------------------------------- sessions and cells

# The id of the ``execute_code`` tool call being run (when it was invoked with a ToolCall).
_outer_call_id: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("toolcell_lc_call", default=None)


class _Scope:
    """What the tool calls of the cell now running need: the run's config, loop, and the ids of nested calls."""

    def __init__(self, config: Optional[RunnableConfig] = None, loop: Optional[asyncio.AbstractEventLoop] = None):
        self.config = config
        self.loop = loop
        self.cfg = ensure_config(config)  # once per cell, not per call
        self.direct = not _has_handlers((config or {}).get("callbacks"))
        self.parent = _outer_call_id.get() or f"toolcell-{uuid.uuid4().hex[:8]}"
        self.counter = itertools.count(1)

    def next_call_id(self) -> str:
        return f"{self.parent}-{next(self.counter)}"


@dataclass
class _Session:
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    scope: Optional[_Scope] = None
    # the CodeAct eval: JSON of the variables the kernel is known to hold, and its kernel
    known: Dict[str, str] = field(default_factory=dict)
    kernel_id: Optional[str] = None
    # the CodeAct eval: the nonce the running collect cell sends, and the variables it sent (checked)
    collect_nonce: Optional[str] = None
    collected: Optional[Dict[str, Any]] = None


class _Job(CellJob, Generic[T]):
    """`work(on_chunk)` in the session's cell (see `_Runtime.cell`): dropped if stopped before it starts,
    else only its own cell is interrupted (see :class:`~toolcell.integrations._common.CellJob`)."""

    def __init__(self, rt: "_Runtime", st: _Session, scope: _Scope,
                 work: Callable[[Optional[Callable[[Chunk], Any]]], T], on_chunk: Optional[Callable[[Chunk], Any]]):
        super().__init__()
        self.rt, self.st, self.scope, self.work, self.on_chunk = rt, st, scope, work, on_chunk

    def __call__(self) -> T:
        with self.st.lock:
            with self.rt.cell(self.st, self.scope, self):
                return self.work(self.on_chunk)


class _Runtime:
    """The toolcell side shared by `ToolcellTool` and `ToolcellCodeAct`.

    Holds the client, the tool specs (registered once on the client, for
    every session: see :class:`~toolcell.integrations._common.ToolSet`),
    and one `_Session` per session name; runs cells with streaming. A call
    from a cell finds its run by the calling session.
    """

    def __init__(
        self,
        tools: Iterable[ToolLike],
        client: Optional[Toolcell],
        timeout: Optional[float],
        execute_params: Optional[Mapping[str, Any]],
        who: str,
        extra: Sequence[ToolDef] = (),
    ):
        if client is not None and not isinstance(client, Toolcell):
            raise TypeError(
                f"{who}: client must be a toolcell.Toolcell (it is used from threads and from any "
                f"event loop); got {type(client).__name__}. Build one with toolcell.Toolcell(...)."
            )
        specs = [_spec(_as_tool(t), who) for t in tools]
        seen: Dict[str, BaseTool] = {}
        for s in specs:
            if s.name in seen:
                raise ValueError(f"{who}: two tools are named {s.name!r}; tool names must be unique")
            seen[s.name] = s.tool
        self.who = who
        self.specs = specs
        self.owns_client = client is None
        self.client: Toolcell = client if client is not None else Toolcell(config=_OWN_CONFIG)
        self.timeout = timeout
        self.execute_params = dict(execute_params or {})
        self._sessions: Dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._closed = False
        defs = [ToolDef(s.name, self._tool_fn(s), s.parameters, s.description, s.output_schema) for s in specs]
        try:
            self.tools = ToolSet(self.client, defs + list(extra))
        except BaseException as e:
            if self.owns_client:
                self.client.close()
            if isinstance(e, RPCError):
                raise ValueError(
                    f"{who}: toolcell refused the tools: {e.message}. A tool's name must not be one of toolcell's "
                    "enabled built-in tools (rename it, or leave built-ins off: the default config)"
                ) from e
            raise
        # dropped without close() (the tool, and any copy of it, gone): end the server it started,
        # or release its tools
        self._finalizer = finalize_adapter(self, self.client, self.owns_client, self.tools)

    # ---- sessions

    def session(self, name: str) -> _Session:
        """The session `name` (its tools are the client's, registered once)."""
        with self._lock:
            if self._closed:
                raise ToolcellError("this toolcell adapter is closed")
            st = self._sessions.get(name)
            if st is None:
                st = self._sessions[name] = _Session(name)
        return st

    def check_not_reentrant(self, name: str) -> None:
        """Refuse a cell of session `name` asked for from inside a call that a cell of `name` made."""
        if reentrant(self.client, name):
            raise ToolException(reentrance_message(self.who, name))

    def session_names(self) -> List[str]:
        with self._lock:
            return list(self._sessions)

    def close_session(self, name: str) -> bool:
        """End the session's kernel and forget it; whether this adapter had it."""
        with self._lock:
            st = self._sessions.pop(name, None)
        if st is None:
            return False
        try:
            self.client.shutdown_session(name)
        except ToolcellError as e:  # the server is gone: nothing left to end
            log.debug("toolcell: ending session %s: %s", name, e)
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            names = list(self._sessions)
        self._finalizer.detach()
        for name in names:
            self.close_session(name)
        with self._lock:
            self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self.owns_client:
            self.client.close()
        else:
            try:
                self.tools.close()
            except ToolcellError as e:
                log.debug("toolcell: unregistering the tools of %s: %s", self.who, e)

    # ---- the tool calls of a cell

    def _scope_session(self) -> _Session:
        """The session whose cell (run by this adapter) made the call being served."""
        call = _current_call.get()
        st = self._sessions.get(call.session) if call is not None and call.session is not None else None
        if st is None or st.scope is None:
            raise ToolError(f"no run of this {self.who} is using this session now")
        return st

    def _tool_fn(self, spec: _ToolSpec) -> Callable[..., Any]:
        t = spec.tool
        call_id_arg = spec.call_id_arg

        def call(**arguments: Any) -> Any:
            scope: _Scope = self._scope_session().scope  # type: ignore[assignment]
            loop = scope.loop
            if loop is not None and loop.is_closed():
                loop = None
            call_id = scope.next_call_id() if call_id_arg is not None else None
            direct = spec.direct and scope.direct
            if spec.native_async and (loop is not None or not spec.has_sync):
                # the coroutine, on the run's loop when it was awaited, else on a loop of its own
                if direct:
                    coro = _acall_direct(spec, arguments, scope, call_id)
                elif call_id is not None:
                    coro = t.ainvoke(_tool_call(spec.name, arguments, call_id), config=scope.config)
                else:
                    coro = t.ainvoke(arguments, config=scope.config)
                if loop is not None:  # the call stays the current one there (re-entrance is told)
                    out = _on_loop(coro, loop)
                else:
                    out = asyncio.run(coro)
            elif direct:
                out = _call_direct(spec, arguments, scope, call_id)
            elif call_id is not None:
                out = t.invoke(_tool_call(spec.name, arguments, call_id), config=scope.config)
            else:
                out = t.invoke(arguments, config=scope.config)
            if call_id is not None:
                out = _unwrap(out)
            return _jsonable(out)

        call.__name__ = spec.name
        return call

    # ---- running cells

    @contextlib.contextmanager
    def cell(self, st: _Session, scope: _Scope, job: Optional[CellJob] = None) -> Iterator[None]:
        """Around one cell of `st` (the caller holds `st.lock`): once the session's turn is this cell's
        (`job` started then), its scope set and its calls routed here."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.tools.running(st.name, job))
            except ToolcellError as e:
                raise ToolException(f"toolcell could not register the tools for this cell: {e}") from e
            st.scope = scope
            try:
                yield
            finally:
                st.scope = None

    def execute(self, st: _Session, code: str, *, reset: bool = False,
                on_chunk: Optional[Callable[[Chunk], Any]] = None) -> ExecuteResult:
        """One cell in `st` (the caller is inside `cell(st, ...)`)."""
        try:
            return self.client.execute(
                code, session=st.name, timeout=self.timeout, stream=on_chunk, reset=reset, **self.execute_params
            )
        except ToolcellError as e:
            raise ToolException(
                f"toolcell could not run the cell: {e}. The kernel's server is not usable; "
                "check the server's stderr, or build a new tool."
            ) from e

    def _workers(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix="toolcell-cell")
            return self._pool

    def run(self, st: _Session, scope: _Scope, work: Callable[[Optional[Callable[[Chunk], Any]]], T],
            emit: Optional[Callable[[Chunk], None]]) -> T:
        """`work(on_chunk)` in a cell of the session; chunks go to `emit` on this thread.

        Without `emit` the work runs here. With it, the work runs on a
        worker thread and this thread delivers the chunks (in order, in
        this thread's context: LangChain callbacks and LangGraph's writer
        expect the run's thread).
        """
        if emit is None:
            with st.lock:
                with self.cell(st, scope):
                    return work(None)
        chunks: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        job = _Job(self, st, scope, work, chunks.put)
        fut = self._workers().submit(job)
        fut.add_done_callback(lambda _f: chunks.put(DONE))
        try:
            while True:
                item = chunks.get()
                if item is DONE:
                    break
                try:
                    emit(item)
                except Exception:
                    log.exception("toolcell: forwarding a cell's output failed")
        except BaseException:  # Ctrl-C while waiting: stop the cell too
            self._stop(job)
            raise
        return fut.result()

    async def arun(self, st: _Session, scope: _Scope, work: Callable[[Optional[Callable[[Chunk], Any]]], T],
                   aemit: Optional[Callable[[Chunk], Awaitable[None]]]) -> T:
        """`work(on_chunk)` on a worker thread in a cell of the session; chunks go to `aemit` on this loop.

        The loop is free meanwhile: async tools the cell calls run on it.
        Cancelling the awaiting task interrupts the cell (or, when it waits
        behind another run's cell of the session, drops it).
        """
        loop = asyncio.get_running_loop()
        scope.loop = loop
        chunks: "asyncio.Queue[Any]" = asyncio.Queue()

        def on_chunk(chunk: Chunk) -> None:
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)

        job = _Job(self, st, scope, work, on_chunk if aemit is not None else None)
        afut = asyncio.wrap_future(self._workers().submit(job))
        # chunks are queued before the result is set, and the future's callback runs after them
        afut.add_done_callback(lambda _f: chunks.put_nowait(DONE))
        try:
            if aemit is not None:
                while True:
                    item = await chunks.get()
                    if item is DONE:
                        break
                    try:
                        await aemit(item)
                    except Exception:
                        log.exception("toolcell: forwarding a cell's output failed")
            return await afut
        except asyncio.CancelledError:
            # on a thread of its own: the workers may all be busy with cells
            threading.Thread(target=self._stop, args=(job,), name="toolcell-stop", daemon=True).start()
            raise

    def _stop(self, job: "_Job[Any]") -> None:
        """The caller stopped waiting: drop the job if it has not started, else interrupt its own cell
        (never the session's next one: see :class:`~toolcell.integrations._common.CellJob`)."""
        job.stop(lambda: self._interrupt(job.st.name))

    def _interrupt(self, session: str) -> None:
        try:
            self.client.interrupt(session)
        except ToolcellError:
            pass

    def description(self, session: str) -> str:
        """The server's execute_code description for `session` (with this adapter's own definitions)."""
        schema = self.tools.schema(session)
        return str(schema["function"]["description"])


def _on_loop(coro: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """Run `coro` on the run's `loop`, the tool call served staying the current one there, and wait for
    it here for as long as the cell waits for the call (a loop that stopped must not pin this thread)."""
    call = _current_call.get()
    fut = asyncio.run_coroutine_threadsafe(_serving(call, coro), loop)
    deadline = call.deadline_ms if call is not None else None
    try:
        return fut.result(timeout=None if deadline is None else deadline / 1000 + 1)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise ToolError("the call ran past the time the cell had left, and was cancelled") from None


def _tool_call(name: str, arguments: Dict[str, Any], call_id: str) -> Dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "args": arguments}


def _chunk_data(chunk: Chunk) -> Dict[str, Any]:
    return {"type": OUTPUT_EVENT, "session": chunk.session, "stream": chunk.stream, "text": chunk.text}


def _langgraph_writer() -> Optional[Callable[[Any], None]]:
    """The running LangGraph node's stream writer, or None outside a graph."""
    if "langgraph" not in sys.modules:  # no graph is running (and LangGraph is optional)
        return None
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except (ImportError, RuntimeError, KeyError, AttributeError):
        return None
    if getattr(writer, "__name__", "") == "_no_op_stream_writer":
        return None
    return writer


def _has_handlers(callbacks: Any) -> bool:
    """Whether `callbacks` (a config's: a manager, a list of handlers, or None) has a handler."""
    if callbacks is None:
        return False
    if isinstance(callbacks, (list, tuple)):
        return bool(callbacks)
    return bool(getattr(callbacks, "handlers", None))


def _emitter(callbacks_config: Optional[RunnableConfig], writer: Optional[Callable[[Any], None]]
             ) -> Optional[Callable[[Chunk], None]]:
    if callbacks_config is None and writer is None:
        return None

    def emit(chunk: Chunk) -> None:
        data = _chunk_data(chunk)
        if writer is not None:
            writer(data)
        if callbacks_config is not None:
            dispatch_custom_event(OUTPUT_EVENT, data, config=callbacks_config)

    return emit


def _aemitter(callbacks_config: Optional[RunnableConfig], writer: Optional[Callable[[Any], None]]
              ) -> Optional[Callable[[Chunk], Awaitable[None]]]:
    if callbacks_config is None and writer is None:
        return None

    async def aemit(chunk: Chunk) -> None:
        data = _chunk_data(chunk)
        if writer is not None:
            writer(data)
        if callbacks_config is not None:
            await adispatch_custom_event(OUTPUT_EVENT, data, config=callbacks_config)

    return aemit


def _call_id_of(input: Any) -> Optional[str]:
    """The id of a ToolCall input (``{"type": "tool_call", "id": ..., "args": ...}``), else None."""
    if isinstance(input, dict) and input.get("type") == "tool_call" and isinstance(input.get("id"), str):
        return input["id"]
    return None


def _thread_id(config: Optional[Mapping[str, Any]]) -> Optional[str]:
    if not config:
        return None
    tid = (config.get("configurable") or {}).get("thread_id")
    return None if tid is None else str(tid)


# ---------------------------------------------------------------- the BaseTool


class ExecuteCodeArgs(BaseModel):
    """The arguments of ``execute_code``."""

    code: str = Field(description="Python source to run as one cell.")
    reset: bool = Field(
        default=False, description="Discard the kernel and its state first, and run in a fresh one."
    )


class ToolcellTool(BaseTool):
    """``execute_code``: a LangChain tool that runs Python cells calling the agent's tools.

    ``ToolcellTool(tools, client=None, *, session=None, session_prefix="langgraph-",
    timeout=None, stream=True, execute_params=None, **base_tool_fields)``

    - `tools`: the agent's tools (``BaseTool`` / ``@tool`` / ``StructuredTool``
      or plain functions), callable from every cell by name.
    - `client`: a :class:`toolcell.Toolcell` to run on (it stays open when
      the tool is closed); by default the tool starts its own server
      offering the model only `tools`, and closes it in :meth:`close`.
    - `session`: the session of runs without a ``configurable.thread_id``
      (default: a new unique name); `session_prefix`: put before a
      thread id to make its session name.
    - `timeout`: seconds per cell (default: the server's, 300);
      `execute_params`: more ``execute`` parameters (``mode``, ``cwd``).
    - `stream`: send the output of a running cell to callbacks
      (custom event ``"toolcell_output"``) and to LangGraph's stream writer.
    - other keyword arguments are fields of ``BaseTool`` (``name``,
      ``description``, ``tags``, ``metadata``, ``callbacks``, ...).

    Returns ``(text, result dict)``: the ToolMessage content is what the
    model reads, its ``artifact`` the structured result.
    """

    name: str = "execute_code"
    description: str = ""
    args_schema: Type[BaseModel] = ExecuteCodeArgs
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"

    _rt: _Runtime = PrivateAttr()
    _session: str = PrivateAttr()
    _session_prefix: str = PrivateAttr()
    _stream: bool = PrivateAttr()

    def __init__(
        self,
        tools: Sequence[ToolLike] = (),
        client: Optional[Toolcell] = None,
        *,
        session: Optional[str] = None,
        session_prefix: str = "langgraph-",
        timeout: Optional[float] = None,
        stream: bool = True,
        execute_params: Optional[Mapping[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        rt = _Runtime(tools, client, timeout, execute_params, "ToolcellTool")
        default_session = session or f"langchain-{uuid.uuid4().hex[:12]}"
        try:
            rt.session(default_session)
            description = kwargs.pop("description", None) or rt.description(default_session)
        except BaseException:
            rt.close()
            raise
        super().__init__(description=description, **kwargs)
        self._rt = rt
        self._session = default_session
        self._session_prefix = session_prefix
        self._stream = stream

    # ---- what users call

    @property
    def client(self) -> Toolcell:
        """The toolcell client the cells run on."""
        return self._rt.client

    @property
    def default_session(self) -> str:
        """The session of runs without a ``configurable.thread_id``."""
        return self._session

    def session_for(self, config: Optional[Mapping[str, Any]] = None) -> str:
        """The toolcell session of a run with this config (``configurable.thread_id``, else the default)."""
        tid = _thread_id(config)
        return self._session if tid is None else f"{self._session_prefix}{tid}"

    @property
    def sessions(self) -> List[str]:
        """The sessions this tool has used (and not closed)."""
        return self._rt.session_names()

    def close_session(self, thread_id: Optional[str] = None) -> bool:
        """End the kernel of thread `thread_id` (default: the default session); whether it had one."""
        name = self._session if thread_id is None else f"{self._session_prefix}{thread_id}"
        return self._rt.close_session(name)

    def close(self) -> None:
        """End every session this tool used, and the server if the tool started it."""
        self._rt.close()

    def __enter__(self) -> "ToolcellTool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "ToolcellTool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # ---- BaseTool

    def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        token = _outer_call_id.set(_call_id_of(input))  # nested calls' ids derive from it
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _outer_call_id.reset(token)

    async def ainvoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        token = _outer_call_id.set(_call_id_of(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _outer_call_id.reset(token)

    def _scope_and_callbacks(self, run_manager: Any, config: Optional[RunnableConfig]
                             ) -> Tuple[_Scope, Optional[RunnableConfig]]:
        child = run_manager.get_child() if run_manager is not None else None
        nested = patch_config(config, callbacks=child) if child is not None else config
        callbacks = {"callbacks": child} if self._stream and _has_handlers(child) else None
        return _Scope(config=nested), callbacks  # type: ignore[return-value]

    def _run(
        self,
        code: str,
        reset: bool = False,
        run_manager: Optional[CallbackManagerForToolRun] = None,
        *,
        config: RunnableConfig,
    ) -> Tuple[str, Dict[str, Any]]:
        name = self.session_for(config)
        self._rt.check_not_reentrant(name)
        st = self._rt.session(name)
        scope, callbacks = self._scope_and_callbacks(run_manager, config)
        emit = _emitter(callbacks, _langgraph_writer() if self._stream else None)
        result = self._rt.run(st, scope, lambda on_chunk: self._rt.execute(st, code, reset=reset, on_chunk=on_chunk),
                              emit)
        return result_text(result), result.raw

    async def _arun(
        self,
        code: str,
        reset: bool = False,
        run_manager: Optional[AsyncCallbackManagerForToolRun] = None,
        *,
        config: RunnableConfig,
    ) -> Tuple[str, Dict[str, Any]]:
        name = self.session_for(config)
        self._rt.check_not_reentrant(name)
        st = self._rt.session(name)
        scope, callbacks = self._scope_and_callbacks(run_manager, config)
        aemit = _aemitter(callbacks, _langgraph_writer() if self._stream else None)
        result = await self._rt.arun(
            st, scope, lambda on_chunk: self._rt.execute(st, code, reset=reset, on_chunk=on_chunk), aemit
        )
        return result_text(result), result.raw


# ---------------------------------------------------------------- LangGraph CodeAct

# The client tool the collect cell hands the kernel's variables to: a tool call's
# arguments reach this process whole (no output caps, folding or redaction).
_VARS_TOOL = "_toolcell_codeact_vars"
_VARS_SCHEMA: Dict[str, Any] = {
    "type": "object", "properties": {"payload": {"type": "string"}, "nonce": {"type": "string"}},
    "required": ["payload", "nonce"], "additionalProperties": False,
}
# All the variables a collect cell may hand over, in characters of JSON (the per-variable cap is the
# evaluator's `max_variable_chars`), and how deeply a value may nest.
_VARS_BUDGET = 40_000
_VARS_DEPTH = 100

# Run in the kernel as ``exec(_COLLECT, {"_g": globals(), ...})``: it sends `_send`, as
# one JSON object's text, the user's top-level variables that are JSON (names not starting
# with "_"; str, int, float, bool, None, list, dict), skipping one whose JSON is over `_per`
# chars and stopping at `_budget` chars in all. Its own names stay out of the user's globals.
_COLLECT = r"""
import json as _json
_out, _used = [], 0
for _k, _v in list(_g.items()):
    if _k.startswith("_") or not isinstance(_v, (str, int, float, bool, type(None), list, dict)):
        continue
    _parts, _n = [], 0
    try:
        for _p in _json.JSONEncoder(ensure_ascii=False).iterencode(_v):
            _n += len(_p)
            if _n > _per:
                break
            _parts.append(_p)
        else:
            if _used + _n + len(_k) + 4 <= _budget:
                _out.append(_json.dumps(_k) + ":" + "".join(_parts))
                _used += _n + len(_k) + 4
    except (TypeError, ValueError, RecursionError):
        pass
getattr(__import__("toolcell_tools"), _tool)(payload="{" + ",".join(_out) + "}", nonce=_nonce)
"""


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _nests_within(value: Any, limit: int) -> bool:
    """Whether `value` (decoded JSON) nests at most `limit` lists/dicts deep (looked at without recursion)."""
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict):
            items: Iterable[Any] = v.values()
        elif isinstance(v, list):
            items = v
        else:
            continue
        if depth > limit:
            return False
        todo.extend((x, depth + 1) for x in items)
    return True


def _checked_variables(payload: Any, per: int, budget: int) -> Dict[str, Any]:
    """The collect cell's payload, checked here (the kernel runs the model's code, which may have replaced
    the collect snippet's call): a JSON object of variables, names not starting with ``_``, each at most
    `per` characters of JSON and `budget` in all, nesting at most ``_VARS_DEPTH`` deep. A payload that is
    not such an object raises ``ToolError``; a variable over a limit is left out."""
    if not isinstance(payload, str):
        raise ToolError("the variables must come as the text of a JSON object")
    if len(payload) > 2 * budget + 1024:
        raise ToolError(f"the variables' JSON is {len(payload)} characters, over the limit")
    try:
        values = json.loads(payload)
    except (ValueError, RecursionError) as e:
        raise ToolError(f"the variables are not JSON ({type(e).__name__})") from None
    if not isinstance(values, dict):
        raise ToolError(f"the variables must be a JSON object of names, not {type(values).__name__}")
    out: Dict[str, Any] = {}
    used = 0
    for k, v in values.items():
        if not isinstance(k, str) or not k or k.startswith("_"):
            continue
        if not _nests_within(v, _VARS_DEPTH):
            log.debug("toolcell: variable %s nests too deeply to return", k)
            continue
        n = len(_canon(v))
        if n > per or used + n + len(k) > budget:
            log.debug("toolcell: variable %s is over the size limit to return", k)
            continue
        used += n + len(k)
        out[k] = v
    return out


class ToolcellCodeAct:
    """The ``eval_fn`` of ``langgraph_codeact.create_codeact``, running the code in a toolcell kernel.

    ``create_codeact(model, tools, ToolcellCodeAct(tools))`` (or
    :func:`make_eval_fn`). CodeAct calls ``eval_fn(code, _locals)`` in its
    ``sandbox`` node, where `_locals` is the state's ``context`` merged with
    ``{tool.name: tool.func}`` for its tools, and expects ``(output, new_vars)``
    back: the output becomes a user message to the model, and ``new_vars``
    is merged into ``state["context"]`` (``{**context, **new_vars}``: a
    merge only adds and overwrites, it never removes).

    What this one does:

    - **Tools.** `tools` (the list you give ``create_codeact``: functions,
      ``@tool``s or ``StructuredTool``s) become client tools of the kernel,
      called as in :class:`ToolcellTool` (``tool.invoke`` with the node's
      config). The tool functions codeact puts in `_locals` are skipped:
      the kernel has its own callables for them.
    - **Sessions.** The kernel is the session of the graph's
      ``configurable.thread_id`` (``f"{session_prefix}{thread_id}"``), else
      the one fixed at construction; variables live there from one step and
      one turn to the next, whatever is returned.
    - **The other locals** (the state's ``context``) that are JSON are set in
      the kernel before the cell when the kernel does not have that value
      yet: at a thread's first step in this process (a ``context`` given
      with the input, or a thread resumed from a checkpoint after a
      restart), and after the kernel lost its state. Values that are not
      JSON are left out (the kernel cannot receive them).
    - **What is returned.** The cell's text (:func:`toolcell.integrations.result_text`)
      and, with ``return_variables=True`` (the default), the cell's new or
      changed top-level variables that are JSON (str, numbers, bools, None,
      lists, dicts; names not starting with ``_``; each at most
      `max_variable_chars` characters of JSON, at most 40 000 in all). So
      ``state["context"]`` mirrors the kernel's JSON variables: you can read
      results from it after the run, and a checkpointed thread gets them
      back in a fresh kernel. Reading them costs one more short cell per
      step (a few milliseconds); ``return_variables=False`` returns ``{}``
      and the state lives in the kernel alone. The variables come back as
      the argument of an internal tool call (``_toolcell_codeact_vars``),
      whole: not through the cell's output, which toolcell caps, folds and
      redacts.

    Call it from the graph's sync run (``invoke``, ``stream``, and also
    ``ainvoke``: LangGraph runs a sync node in a thread) or pass
    :meth:`acall` to ``create_codeact`` for an async node (then async tools
    run on the graph's loop). Output is streamed to the graph's writer
    (``stream_mode="custom"``) and to callbacks as ``"toolcell_output"``
    events, as :class:`ToolcellTool` does. :meth:`close` ends the sessions
    (and the server, when it started it); :meth:`close_session` one thread's.
    """

    def __init__(
        self,
        tools: Sequence[ToolLike] = (),
        client: Optional[Toolcell] = None,
        *,
        session: Optional[str] = None,
        session_prefix: str = "codeact-",
        timeout: Optional[float] = None,
        return_variables: bool = True,
        max_variable_chars: int = 20_000,
        stream: bool = True,
        execute_params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        vars_tool = ToolDef(_VARS_TOOL, self._receive_variables, _VARS_SCHEMA,
                            "Internal to toolcell's LangGraph CodeAct adapter: takes the kernel's variables.")
        self._rt = _Runtime(tools, client, timeout, execute_params, "ToolcellCodeAct", extra=[vars_tool])
        self._tool_names = {s.name for s in self._rt.specs}
        self._session = session or f"codeact-{uuid.uuid4().hex[:12]}"
        self._session_prefix = session_prefix
        self._return_variables = return_variables
        self._max_variable_chars = max_variable_chars
        self._collect_lock = threading.Lock()
        self._stream = stream
        #: the result of the last user cell run (any session)
        self.last_result: Optional[ExecuteResult] = None

    # ---- what users call

    @property
    def client(self) -> Toolcell:
        """The toolcell client the cells run on."""
        return self._rt.client

    def session_for(self, config: Optional[Mapping[str, Any]] = None) -> str:
        """The toolcell session of a run with this config (``configurable.thread_id``, else the default)."""
        tid = _thread_id(config)
        return self._session if tid is None else f"{self._session_prefix}{tid}"

    @property
    def sessions(self) -> List[str]:
        """The sessions this eval_fn has used (and not closed)."""
        return self._rt.session_names()

    def close_session(self, thread_id: Optional[str] = None) -> bool:
        """End the kernel of thread `thread_id` (default: the default session); whether it had one."""
        name = self._session if thread_id is None else f"{self._session_prefix}{thread_id}"
        return self._rt.close_session(name)

    def close(self) -> None:
        """End every session used, and the server if this started it."""
        self._rt.close()

    def __enter__(self) -> "ToolcellCodeAct":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the eval_fn

    def __call__(self, code: str, _locals: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """Run `code` in the thread's kernel; ``(output text, new or changed JSON variables)``."""
        config = var_child_runnable_config.get()
        name = self.session_for(config)
        self._rt.check_not_reentrant(name)
        st = self._rt.session(name)
        callbacks = self._callbacks(config)
        emit = _emitter(callbacks, _langgraph_writer() if self._stream else None)
        return self._rt.run(st, _Scope(config=config), lambda on_chunk: self._step(st, code, _locals, on_chunk),
                            emit)

    async def acall(self, code: str, _locals: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """The async ``eval_fn`` (``create_codeact(model, tools, evaluator.acall)``).

        It finds the graph's ``thread_id`` through the run's context, which
        an async node has on Python 3.11 and newer only; on older Pythons
        every thread uses the default session (use the sync ``eval_fn``).
        """
        config = var_child_runnable_config.get()
        if config is None and sys.version_info < (3, 11):
            log.warning("toolcell: an async CodeAct node cannot see its thread on Python < 3.11; "
                        "using the session %s for every thread (pass the evaluator itself, not .acall)",
                        self._session)
        name = self.session_for(config)
        self._rt.check_not_reentrant(name)
        st = self._rt.session(name)
        callbacks = self._callbacks(config)
        aemit = _aemitter(callbacks, _langgraph_writer() if self._stream else None)
        return await self._rt.arun(st, _Scope(config=config),
                                   lambda on_chunk: self._step(st, code, _locals, on_chunk), aemit)

    def _callbacks(self, config: Optional[RunnableConfig]) -> Optional[RunnableConfig]:
        if not self._stream or not config:
            return None
        manager = config.get("callbacks")
        if not _has_handlers(manager) or getattr(manager, "parent_run_id", None) is None:
            return None
        return {"callbacks": manager}

    # ---- one step, under the session's lock

    def _pushable(self, _locals: Mapping[str, Any]) -> Dict[str, Tuple[Any, str]]:
        """The locals to mirror into the kernel: name -> (value, canonical JSON)."""
        out: Dict[str, Tuple[Any, str]] = {}
        for k, v in _locals.items():
            if not isinstance(k, str) or k.startswith("_") or k in self._tool_names or callable(v):
                continue
            try:
                out[k] = (v, _canon(v))
            except (TypeError, ValueError):
                log.debug("toolcell: context variable %s is not JSON; not set in the kernel", k)
        return out

    def _push(self, st: _Session, values: Mapping[str, Tuple[Any, str]]) -> ExecuteResult:
        payload = json.dumps({k: v for k, (v, _) in values.items()}, ensure_ascii=False)
        r = self._rt.execute(st, f"globals().update(__import__('json').loads({payload!r}))")
        if not r.ok:
            log.warning("toolcell: setting the context variables %s in the kernel failed: %s",
                        ", ".join(values), r.error or r.status)
        return r

    def _note_kernel(self, st: _Session, r: ExecuteResult) -> None:
        """Track the session's kernel: a new one holds none of what the old one was known to hold."""
        kid = r.kernel.id or None  # None: no kernel was reached (the cell never started)
        if kid is not None:
            if st.kernel_id is not None and kid != st.kernel_id:
                st.known.clear()
            st.kernel_id = kid
        if r.kernel.ended:  # the next cell starts a fresh kernel
            st.known.clear()
            st.kernel_id = None

    def _step(self, st: _Session, code: str, _locals: Mapping[str, Any],
              on_chunk: Optional[Callable[[Chunk], Any]]) -> Tuple[str, Dict[str, Any]]:
        values = self._pushable(_locals)
        missing = {k: vt for k, vt in values.items() if st.known.get(k) != vt[1]}
        if missing:
            r = self._push(st, missing)
            replaced = st.kernel_id is not None and bool(r.kernel.id) and r.kernel.id != st.kernel_id
            if r.ok and replaced:  # the kernel was replaced since the last step: restore all of it
                rest = {k: vt for k, vt in values.items() if k not in missing}
                if rest:
                    r = self._push(st, rest)
                missing = values
            self._note_kernel(st, r)
            if r.ok:
                st.known.update({k: text for k, (_, text) in missing.items()})

        result = self._rt.execute(st, code, on_chunk=on_chunk)
        self.last_result = result
        self._note_kernel(st, result)
        text = result_text(result)
        if not self._return_variables:
            return text, {}
        return text, self._collect(st)

    def _receive_variables(self, payload: str, nonce: str) -> None:
        """The collect cell's tool call: check the variables and keep them for `_collect`.

        Taken once per collect cell, from a call that carries that cell's nonce: a call from a
        user cell, or a second one, is refused with a ``ToolError`` in the kernel.
        """
        st = self._rt._scope_session()
        with self._collect_lock:
            expected = st.collect_nonce
            if expected is None or nonce != expected:
                raise ToolError("this internal tool takes the variables from toolcell's own collect cell only")
            st.collect_nonce = None  # once
        st.collected = _checked_variables(payload, int(self._max_variable_chars), _VARS_BUDGET)

    def _collect(self, st: _Session) -> Dict[str, Any]:
        """The kernel's new or changed JSON variables (never raises: ``{}`` when they cannot be read)."""
        try:
            return self._collect_changed(st)
        except Exception as e:
            if isinstance(e, ToolException):  # toolcell itself failed: as for the user's cell
                raise
            log.warning("toolcell: reading the kernel's variables failed: %s: %s", type(e).__name__, e)
            return {}

    def _collect_changed(self, st: _Session) -> Dict[str, Any]:
        nonce = uuid.uuid4().hex
        st.collected = None
        st.collect_nonce = nonce
        try:
            r = self._rt.execute(
                st,
                f"exec({_COLLECT!r}, {{'_g': globals(), '_per': {int(self._max_variable_chars)}, "
                f"'_budget': {_VARS_BUDGET}, '_tool': {_VARS_TOOL!r}, '_nonce': {nonce!r}}})",
            )
        finally:
            with self._collect_lock:
                st.collect_nonce = None
        self._note_kernel(st, r)
        values, st.collected = st.collected, None
        if not r.ok or values is None:
            log.warning("toolcell: reading the kernel's variables failed: %s", r.error or r.status)
            return {}
        changed: Dict[str, Any] = {}
        for k, v in values.items():
            text = _canon(v)
            if st.known.get(k) != text:
                changed[k] = v
                st.known[k] = text
        return changed


def make_eval_fn(tools: Sequence[ToolLike] = (), client: Optional[Toolcell] = None, **kwargs: Any) -> ToolcellCodeAct:
    """An ``eval_fn`` for ``create_codeact(model, tools, eval_fn)`` running in toolcell kernels.

    The same as ``ToolcellCodeAct(tools, client, **kwargs)``: see
    :class:`ToolcellCodeAct` for what it does with the tools, the sessions
    and the returned variables. For an async graph node pass
    ``make_eval_fn(tools).acall``.
    """
    return ToolcellCodeAct(tools, client, **kwargs)
