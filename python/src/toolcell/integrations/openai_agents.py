"""toolcell for the OpenAI Agents SDK: one ``execute_code`` tool over the agent's function tools.

Instead of handing the model every tool and paying a model round trip per
call, give the agent one :class:`~agents.FunctionTool`, ``execute_code``:
the model writes a Python cell, and the cell calls your tools as plain
Python functions (in loops, with ``if``, summing, filtering) inside a
persistent kernel whose variables survive from one call to the next::

    from agents import Agent, Runner, function_tool
    from toolcell import Toolcell
    from toolcell.integrations.openai_agents import execute_code_tool

    @function_tool
    def get_order(id: str) -> dict:
        \"\"\"One order, by id.\"\"\"
        return {"id": id, "total": 120.0}

    tc = Toolcell(config={"tools": {"enabled": []}})   # one `toolcell serve`, shared
    code = execute_code_tool([get_order], toolcell=tc)  # without toolcell=: starts its own
    agent = Agent(name="shop", instructions="Use execute_code.", tools=[code])
    result = await Runner.run(agent, "Sum the totals of orders A-1 to A-9.")
    code.close()                                 # or `with` / `async with`

What the adapter does with your tools
-------------------------------------
Each :class:`~agents.FunctionTool` you pass (a plain function is wrapped
with :func:`agents.function_tool` first; a tool whose ``allowed_callers``
leaves out ``"programmatic"`` is skipped) becomes a toolcell *client tool*
of the same name, registered once on the client for every session (a call
finds its cell by the calling session), with its ``params_json_schema`` as the schema (arguments
a strict schema marks required only because strict mode demands it, those
with a default or that accept null, may be left out in the cell). When a
cell calls it, the call runs here, in the agent's process: on the event
loop of the run, or, for a plain ``function_tool`` over a sync function
(which the SDK runs in a worker thread), on the worker thread the call
arrived on, saving the hops through the loop. The adapter builds a
:class:`~agents.tool_context.ToolContext` for the nested call from the
``execute_code`` call's context
(``ToolContext.from_agent_context``: the same ``context`` object, usage and
agent, its own ``tool_name``, ``tool_arguments`` and a ``tool_call_id`` of
``<execute_code call id>-<n>``) and awaits the tool's ``on_invoke_tool``
with the JSON arguments. The cell gets the tool's return value (a pydantic
model as its JSON, :class:`~agents.ToolOutputText` as its text). What the
SDK does around a direct call is done here too: ``is_enabled`` (a disabled
tool raises ``ToolError`` in the cell), a ``needs_approval`` policy (a cell
cannot wait for a human: a tool with ``needs_approval=True`` is refused when
you build the tool, a callable policy that asks for approval makes the call
raise ``ToolError``), ``timeout_seconds`` (``timeout_behavior="raise_exception"``
stops the cell and fails the run with ``ToolTimeoutError``), tool input and output guardrails
(``reject_content`` raises ``ToolError`` with the guardrail's message; a
tripwire stops further calls, interrupts the cell, and
``ToolInputGuardrailTripwireTriggered`` / ``ToolOutputGuardrailTripwireTriggered``
is raised from ``execute_code`` so the run fails as it would have), and a
tracing ``function_span`` per nested call under the ``execute_code`` span.
Nested calls are not SDK tool calls: they produce no ``ToolCallItem``, and
``RunHooks`` / ``AgentHooks`` ``on_tool_start`` / ``on_tool_end`` fire for
``execute_code`` only. A run of ``execute_code`` asked for from inside a
cell of the same session (a nested tool that runs a sub-agent sharing it)
returns an error at once instead of waiting for that cell.

Errors
------
A nested tool that raises makes its call raise ``ToolError`` in the cell
(the model reads it in the cell's output, and the code can catch it):

- by default ``"<tool>: <ExceptionType>: <message>"``, toolcell's usual
  text. (The SDK's own default, ``default_tool_error_function``, hides the
  exception from the model; a code-writing model needs it to fix its code.
  A ``RunConfig(tool_error_formatter=...)`` is applied to this text, as the
  SDK applies it to a direct call's.)
- a tool created with its own ``failure_error_function`` gets that
  function's text: ``"<tool>: <text>"``.
- a tool created with ``failure_error_function=None`` (which fails a run on
  a direct call) also raises ``ToolError`` in the cell; the run goes on.

A cell that fails is a result, not an exception: ``execute_code`` returns
:func:`toolcell.integrations.result_text` (the output, then ``status:``,
``error:``, ``hint:`` lines), so the model sees tracebacks and
``ToolError`` texts. A failure of toolcell itself (the server exited)
raises, and the SDK fails the run with it.

Sessions
--------
Each toolcell *session* is one kernel (its variables). The SDK does not make
the run's :class:`~agents.memory.Session` (``SQLiteSession`` ...) reachable
from a tool's context, so the session comes from, in this order:

1. ``session=`` given to :func:`execute_code_tool`: a string (fixed), an SDK
   ``Session`` object (its ``session_id``, read at each call: give the same
   object you pass to ``Runner.run(session=...)``), or a function
   ``(ToolContext) -> str`` (may be ``async``), e.g.
   ``lambda ctx: ctx.context.conversation_id``;
2. else ``RunConfig.group_id`` of the run, the SDK's identifier for a
   conversation ("a chat thread ID"), when set;
3. else one session per tool instance (``openai-agents-<random>``): every
   run using this tool shares it.

A conversation's kernel lives until :meth:`ExecuteCodeTool.end_session`
(the SDK has no end-of-conversation hook; call it when you clear or drop a
conversation), or :meth:`ExecuteCodeTool.close`.

Streaming
---------
A tool cannot add events to ``Runner.run_streamed``'s stream, so, like the
SDK's ``Agent.as_tool(on_stream=...)``, ``on_stream=`` takes a callback
(plain or ``async``) that receives an :class:`ExecuteCodeStreamEvent` for
each piece of output while a cell runs, in order, on the run's event loop;
``execute_code`` returns after the last one was handled.

Structured result
-----------------
The SDK keeps tool metadata that the model never sees in
``ToolCallOutputItem.custom_data``; the ``execute_code`` output item gets
``{"toolcell": {"session": ..., "result": {...}}}``, the whole result
object (status, tool_calls_made, kernel, files, ...) as toolcell sent it.

The toolcell client
-------------------
By default the tool starts its own ``toolcell serve`` with toolcell's
built-in tools (files, terminal, web) switched off, so cells can call the
tools you passed and nothing else; pass ``config=`` (sections of a
toolcell.toml, e.g. ``{"execution": {"max_tool_calls": 500}}``; a ``tools``
section of your own chooses built-in tools) and ``cwd=``, or an existing
``toolcell=Toolcell(...)`` to share one server. Cells run on threads of the
adapter, so the tool works from any event loop (``Runner.run``,
``Runner.run_sync``, ``Runner.run_streamed``).
"""

import asyncio
import concurrent.futures
import contextlib
import contextvars
import copy
import dataclasses
import enum
import inspect
import itertools
import json
import logging
import threading
import types
import uuid
import weakref
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Set,
    Tuple,
    Union,
)

try:
    from agents import FunctionTool, ToolOutputText, function_tool
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseFunctionToolCall
    from pydantic import BaseModel
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "toolcell.integrations.openai_agents needs the OpenAI Agents SDK (module `agents`): "
        'pip install "toolcell[openai-agents]"'
    ) from e

_default_policy: Optional[Callable[..., Any]] = None
_resolve_policy: Optional[Callable[..., Any]] = None
_set_policy: Optional[Callable[..., Any]] = None
try:  # SDK >= 0.11: failure policies live on the tool, and a copy can switch them off
    from agents.tool import (
        default_tool_error_function as _default_policy,
        resolve_function_tool_failure_error_function as _resolve_policy,
        set_function_tool_failure_error_function as _set_policy,
    )
except ImportError:  # pragma: no cover - older SDK
    pass
# before SDK 0.20 the resolver takes the tool alone
_RESOLVE_TAKES_CONTEXT = _resolve_policy is not None and len(inspect.signature(_resolve_policy).parameters) > 1

try:
    from agents import (
        ToolInputGuardrailData,
        ToolInputGuardrailTripwireTriggered,
        ToolOutputGuardrailData,
        ToolOutputGuardrailTripwireTriggered,
    )
except ImportError:  # pragma: no cover - older SDK
    ToolInputGuardrailData = ToolOutputGuardrailData = None  # type: ignore[assignment,misc]
    ToolInputGuardrailTripwireTriggered = ToolOutputGuardrailTripwireTriggered = None  # type: ignore[assignment,misc]

_function_span: Optional[Callable[..., Any]] = None
_SpanError: Optional[Callable[..., Any]] = None
_NoOpSpan: Any = ()
try:
    from agents.tracing import SpanError as _SpanError, function_span as _function_span
    from agents.tracing.spans import NoOpSpan as _NoOpSpan
except ImportError:  # pragma: no cover - older SDK
    pass

_sdk_function_schema: Optional[Callable[..., Any]] = None
_ModelBehaviorError: Any = None
try:  # what function_tool validates a call's arguments with
    from agents.exceptions import ModelBehaviorError as _ModelBehaviorError
    from agents.function_schema import function_schema as _sdk_function_schema
    from pydantic import ValidationError as _ValidationError
except ImportError:  # pragma: no cover - another SDK layout: every call goes through the SDK's invoker
    pass

_ToolTimeoutError: Any = None
try:
    from agents.exceptions import ToolTimeoutError as _ToolTimeoutError
except ImportError:  # pragma: no cover - older SDK
    pass

_FormatterArgs: Optional[Callable[..., Any]] = None
_formatter_fields: Set[str] = set()
try:
    from agents.run_config import ToolErrorFormatterArgs

    _FormatterArgs = ToolErrorFormatterArgs
    _formatter_fields = {f.name for f in dataclasses.fields(ToolErrorFormatterArgs)}
except ImportError:  # pragma: no cover - older SDK
    pass

from .._client import Chunk, Config, PathLike, Toolcell, _current_call
from .._errors import ToolcellError, ToolError
from .._result import ExecuteResult
from ._common import CellJob, ToolDef, ToolSet, _plain, finalize_adapter, reentrance_message, reentrant, result_text

log = logging.getLogger("toolcell")

__all__ = ["ExecuteCodeTool", "ExecuteCodeStreamEvent", "SessionSpec", "execute_code_tool"]

SessionSpec = Union[None, str, Any, Callable[[ToolContext], Union[str, Awaitable[str]]]]
"""How the adapter names a run's toolcell session: see "Sessions" in the module docs."""

_FUNCTION_TOOL_FIELDS = {f.name for f in dataclasses.fields(FunctionTool)}
_MAX_CELL_THREADS = 64


@dataclasses.dataclass(frozen=True)
class ExecuteCodeStreamEvent:
    """A piece of a running cell's output, for ``execute_code_tool(on_stream=...)``.

    ``stream`` is ``"stdout"`` or ``"stderr"``; ``text`` is the piece
    (cleaned like the final output); ``session`` the toolcell session;
    ``tool_context`` the context of the ``execute_code`` call (its
    ``tool_call_id``, and your ``context`` object).
    """

    stream: str
    text: str
    session: str
    tool_context: ToolContext


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _to_cell_value(value: Any) -> Any:
    """A tool's return value as JSON the cell receives (never fails: a last resort is ``str``)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if type(value) in (dict, list) and _plain(value, [64]):  # plain JSON already: the client serializes it
        return value
    if isinstance(value, ToolOutputText):
        return value.text
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _to_cell_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_to_cell_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_cell_value(dataclasses.asdict(value))
    if isinstance(value, enum.Enum):
        return _to_cell_value(value.value)
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _accepts_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping):
        return False
    t = schema.get("type")
    if t == "null" or (isinstance(t, list) and "null" in t):
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf") or schema.get("oneOf") or [])


def _relax_required(schema: Any) -> None:
    """In place: drop from each object's ``required`` the properties with a default or accepting null."""
    if isinstance(schema, list):
        for s in schema:
            _relax_required(s)
        return
    if not isinstance(schema, dict):
        return
    props = schema.get("properties")
    required = schema.get("required")
    if isinstance(props, dict) and isinstance(required, list):
        keep = []
        for name in required:
            p = props.get(name)
            if isinstance(p, dict) and ("default" in p or _accepts_null(p)):
                if "default" not in p:
                    props[name] = dict(p, default=None)
                continue
            keep.append(name)
        schema["required"] = keep
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            for s in sub.values():
                _relax_required(s)
    for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
        _relax_required(schema.get(key))


def _cell_schema(tool: FunctionTool) -> Dict[str, Any]:
    """The schema the cell sees: a strict schema's forced ``required`` relaxed where a value can be left out.

    Strict mode makes every property required, including those with a
    default and those that accept null (in nested objects too); in a cell
    those read best as optional arguments: the kernel passes a top-level
    argument's default (or None), and the SDK's argument model fills a
    nested one's.
    """
    schema = copy.deepcopy(tool.params_json_schema or {"type": "object", "properties": {}})
    if tool.strict_json_schema:
        _relax_required(schema)
    return schema


def _raising_invoker(tool: FunctionTool) -> Callable[[ToolContext, str], Awaitable[Any]]:
    """``on_invoke_tool`` of a copy of `tool` whose failure policy is "raise".

    Tools made by ``function_tool`` turn an exception into a string for the
    model; in a cell it must become a ``ToolError`` instead, so the adapter
    calls a copy that lets the exception through and applies the policy
    itself (see ``_Runner._error_text``).
    """
    if _set_policy is None:
        return tool.on_invoke_tool
    inner = copy.copy(tool)  # FunctionTool.__copy__ rebinds the failure handler to the copy
    _set_policy(inner, None)
    return inner.on_invoke_tool


class _InlineLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``run_in_executor`` (so ``asyncio.to_thread``) runs the function at once, here."""

    def run_in_executor(  # type: ignore[override]  # typeshed spells it with TypeVarTuple
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> "asyncio.Future[Any]":
        future: "asyncio.Future[Any]" = self.create_future()
        # as in a worker thread, no loop runs while the function does (it may call asyncio.run itself)
        asyncio.events._set_running_loop(None)
        try:
            future.set_result(func(*args))
        except Exception as e:  # delivered to the awaiting coroutine, like an executor's result
            future.set_exception(e)
        finally:
            asyncio.events._set_running_loop(self)
        return future


_thread_state = threading.local()


def _inline_loop() -> asyncio.AbstractEventLoop:
    """This pool thread's own :class:`_InlineLoop`."""
    loop: Optional[asyncio.AbstractEventLoop] = getattr(_thread_state, "loop", None)
    if loop is None:
        loop = _thread_state.loop = _InlineLoop()
    return loop


@types.coroutine
def _go_on(coro: Any, waiting: Any) -> Any:
    """The rest of `coro`, which suspended on `waiting`, as an awaitable (``yield from`` by hand)."""
    while True:
        try:
            sent = yield waiting
        except BaseException as e:  # thrown in by the task (cancellation)
            try:
                waiting = coro.throw(e)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def _finish(coro: Any, waiting: Any) -> Any:
    return await _go_on(coro, waiting)


def _drive(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    """Run `coro` to its end on this thread's inline `loop`: by hand while it does not suspend.

    The SDK's invoker of a sync function tool never suspends here (its
    ``to_thread`` is done at once): no task, no loop iteration, no
    selector call. A coroutine that does suspend goes on as a task on the
    loop, which runs until it ends.
    """
    asyncio.events._set_running_loop(loop)
    try:
        try:
            waiting = coro.send(None)
        except StopIteration as stop:
            return stop.value
    finally:
        asyncio.events._set_running_loop(None)
    return loop.run_until_complete(_finish(coro, waiting))


def _tracing_on() -> bool:
    """Whether a function span made now (in the run's context) would be recorded."""
    if _function_span is None:
        return False
    try:
        return not isinstance(_function_span("toolcell"), _NoOpSpan)  # made, never started: not exported
    except Exception:
        return True


def _plain_function(tool: FunctionTool) -> Optional[Tuple[Callable[..., Any], Any]]:
    """The function and SDK schema of a plain ``function_tool`` over a sync function, else None.

    Such a tool's invoker validates the JSON arguments with the function's
    argument model and calls the function; a call from a cell (its
    arguments already a dict, checked by the server against the schema)
    does that directly, without the invoker's coroutine, the JSON round
    trip and, unless the function takes it, the ToolContext. Tools with
    guardrails, approval, a timeout, an ``is_enabled`` function or a typed
    output validation go through the SDK's invoker.
    """
    if _sdk_function_schema is None or not _runs_inline(tool):
        return None
    if getattr(tool, "_output_type_adapter", None) is not None:
        return None
    try:
        fn = tool.__wrapped__  # SDK 0.24+: the function given to function_tool
    except AttributeError:
        fn = tool.__dict__.get("_toolcell_function")  # a plain function this adapter wrapped
    if not inspect.isfunction(fn) or inspect.iscoroutinefunction(fn):
        return None
    try:
        return fn, _sdk_function_schema(fn, strict_json_schema=False)
    except Exception:  # a signature the SDK reads otherwise: leave it to the invoker
        return None


def _runs_inline(tool: FunctionTool) -> bool:
    """A ``function_tool`` over a plain (sync) function, with no callback that could need the run's loop.

    The SDK runs such a tool's function in a worker thread (``asyncio.to_thread``);
    a call from a cell already arrives on a worker thread, so the adapter runs
    the SDK's invoker there, on a private :class:`_InlineLoop` whose
    ``to_thread`` runs the function at once (in the run's context variables),
    instead of taking three more thread hops through the run's event loop
    and its executor. (A plain one, see `_plain_function`, is called without
    the invoker at all.)
    """
    return (
        bool(getattr(tool.on_invoke_tool, "__agents_sync_function_tool__", False))
        and not getattr(tool, "tool_input_guardrails", None)
        and not getattr(tool, "tool_output_guardrails", None)
        and isinstance(tool.is_enabled, bool)
        and tool.needs_approval is False
        and not getattr(tool, "timeout_seconds", None)
    )


class _Wrapped:
    """One of the agent's tools, as the cells call it."""

    def __init__(self, tool: FunctionTool):
        self.tool = tool
        self.name = tool.name
        self.invoke = _raising_invoker(tool)
        self.inline = _runs_inline(tool)
        self.plain = _plain_function(tool)
        self.input_schema = _cell_schema(tool)
        out = getattr(tool, "output_json_schema", None)
        self.output_schema: Optional[Dict[str, Any]] = dict(out) if isinstance(out, Mapping) else None


class _Cell:
    """The execute_code call whose cell is running in a session (one at a time per session)."""

    def __init__(self, ctx: ToolContext, loop: asyncio.AbstractEventLoop, session: str):
        self.ctx = ctx
        self.loop = loop
        self.session = session
        self.pycontext = contextvars.copy_context()  # the run's tracing span, the caller's context variables
        self.counter = itertools.count(1)
        self.tasks: Set["asyncio.Task[Any]"] = set()
        self.fatal: Optional[BaseException] = None
        # started once the session's turn is this cell's; dropped (none of its code runs) when the
        # execute_code call is cancelled before that, else only this cell is interrupted
        self.job = CellJob()
        self.traced = self.pycontext.run(_tracing_on)  # nested calls get spans only when recorded


def _as_function_tool(t: Any) -> FunctionTool:
    if isinstance(t, FunctionTool):
        return t
    if callable(t) and not isinstance(t, type):
        ft = function_tool(t)
        ft.__dict__["_toolcell_function"] = t  # older SDKs do not tell the function back
        return ft
    raise TypeError(
        f"execute_code_tool: {t!r} is not a function tool. Pass FunctionTools (from @function_tool) or "
        "plain functions; keep hosted tools (WebSearchTool, FileSearchTool, ...), handoffs and MCP servers "
        "on the Agent itself, next to the execute_code tool."
    )


class _Runner:
    """The state behind one ExecuteCodeTool: the client, the wrapped tools, the live cells."""

    def __init__(
        self,
        tools: Iterable[Any],
        *,
        toolcell: Optional[Toolcell],
        config: Config,
        cwd: Optional[PathLike],
        session: SessionSpec,
        name: str,
        timeout: Optional[float],
        on_stream: Optional[Callable[[ExecuteCodeStreamEvent], Any]],
    ):
        wrapped: Dict[str, _Wrapped] = {}
        for t in tools:
            ft = _as_function_tool(t)
            if ft.name in wrapped:
                raise ValueError(f"execute_code_tool: two tools are named {ft.name!r}; tool names must be distinct")
            if ft.name == name:
                raise ValueError(
                    f"execute_code_tool: a tool is named {name!r} like the code tool itself; "
                    "rename one (function_tool(name_override=...) or execute_code_tool(name=...))"
                )
            if ft.needs_approval is True:
                raise ValueError(
                    f"execute_code_tool: tool {ft.name!r} has needs_approval=True, and a cell cannot pause for "
                    "a human's approval. Give that tool to the Agent directly (Agent(tools=[code_tool, "
                    f"{ft.name}])) instead of to execute_code_tool."
                )
            if ft.is_enabled is False:
                log.info("execute_code_tool: tool %r is disabled (is_enabled=False); cells cannot call it", ft.name)
                continue
            callers = getattr(ft, "allowed_callers", None)
            if callers is not None and "programmatic" not in callers:
                log.info("execute_code_tool: tool %r does not allow programmatic callers (allowed_callers=%r); "
                         "cells cannot call it", ft.name, callers)
                continue
            wrapped[ft.name] = _Wrapped(ft)
        if on_stream is not None and not callable(on_stream):
            raise TypeError("execute_code_tool: on_stream must be a function taking an ExecuteCodeStreamEvent")
        if not (session is None or isinstance(session, str) or callable(session) or _is_sdk_session(session)):
            raise TypeError(
                "execute_code_tool: session= must be a string, an agents Session (with a session_id), "
                f"or a function (ToolContext) -> str; got {session!r}"
            )
        self.tools = wrapped
        self.name = name
        self.timeout = timeout
        self.on_stream = on_stream
        self.session_spec = session
        self.default_session = f"openai-agents-{uuid.uuid4().hex[:12]}"

        if toolcell is not None:
            if config is not None or cwd is not None:
                raise ValueError("execute_code_tool: pass either toolcell= (a running client) or config=/cwd=, not both")
            if not isinstance(toolcell, Toolcell):
                raise TypeError(
                    "execute_code_tool: toolcell= must be a toolcell.Toolcell (the synchronous client: the adapter "
                    f"runs cells on its own threads, so the tool works from any event loop); got {toolcell!r}"
                )
            self.tc = toolcell
            self.owns_client = False
        else:
            self.tc = Toolcell(config=_default_config(config), cwd=cwd)
            self.owns_client = True

        self.lock = threading.Lock()
        # session -> [its lock, the users holding or waiting for it]: dropped when nobody does
        self.session_locks: Dict[str, List[Any]] = {}
        self.used: Set[str] = set()  # sessions that ran a cell
        self.cells: Dict[str, _Cell] = {}
        # id(ToolContext) -> (a weak reference to it, session, result), for custom_data (ToolContext may be unhashable)
        self.results: Dict[int, Tuple["weakref.ReferenceType[Any]", str, ExecuteResult]] = {}
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=_MAX_CELL_THREADS, thread_name_prefix="toolcell-openai-agents"
        )
        self.closed = False
        self.tools_registered: Optional[ToolSet] = None
        try:
            self.tools_registered = self._register()
            schema = self.tools_registered.schema(self.default_session)
        except BaseException:
            self.close()
            raise
        # dropped without close(): end the server it started, or release its tools
        self._finalizer = finalize_adapter(self, self.tc, self.owns_client, self.tools_registered)
        fn = schema.get("function", schema)
        self.description: str = fn.get("description", "")
        props = (fn.get("parameters") or {}).get("properties") or {}
        self.params_json_schema = _code_params_schema(props)

    # ---- registration

    def _register(self) -> ToolSet:
        """Register the wrapped tools once for every session of the client (all or none); calls find their cell."""
        defs = [ToolDef(w.name, self._cell_function(w), w.input_schema, w.tool.description or "", w.output_schema)
                for w in self.tools.values()]
        try:
            return ToolSet(self.tc, defs)
        except ToolcellError as e:
            raise ValueError(
                f"execute_code_tool: toolcell refused the tools: {e}. A name must not be one of toolcell's "
                "enabled built-in tools (rename it with function_tool(name_override=...), or leave built-ins "
                "off: the default config)"
            ) from e

    def _cell_function(self, w: _Wrapped) -> Callable[..., Any]:
        def call(**arguments: Any) -> Any:
            return self._call_from_cell(w, arguments)

        call.__name__ = w.name
        return call

    # ---- sessions

    async def session_for(self, ctx: Any) -> str:
        spec = self.session_spec
        if spec is None:
            group = getattr(getattr(ctx, "run_config", None), "group_id", None)
            return str(group) if group else self.default_session
        if isinstance(spec, str):
            return spec
        if _is_sdk_session(spec):  # read now: an OpenAIConversationsSession gets its id on first use
            return _session_name(getattr(spec, "session_id", None), spec)
        value = await _maybe_await(spec(ctx))
        return _session_name(value, spec)

    @contextlib.contextmanager
    def session_lock(self, session: str) -> Iterator[None]:
        """Holds the session's lock (one cell of this tool per session); the lock is forgotten when unused."""
        with self.lock:
            entry = self.session_locks.get(session)
            if entry is None:
                entry = self.session_locks[session] = [threading.Lock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self.lock:
                entry[1] -= 1
                if entry[1] == 0 and self.session_locks.get(session) is entry:
                    del self.session_locks[session]

    # ---- running a cell

    async def invoke(self, ctx: ToolContext, input_json: str) -> str:
        """``on_invoke_tool`` of execute_code: run the cell, return the text the model reads."""
        try:
            args = json.loads(input_json) if input_json else {}
        except ValueError as e:
            return f"error: the arguments of {self.name} are not JSON ({e}); send {{\"code\": \"...\", \"reset\": false}}"
        code = args.get("code") if isinstance(args, dict) else None
        if not isinstance(code, str) or not code.strip():
            return f"error: {self.name} needs `code`, a non-empty string of Python source"
        reset = args.get("reset") is True
        if self.closed:
            raise RuntimeError(f"{self.name}: this tool was closed; create a new one with execute_code_tool(...)")
        session = await self.session_for(ctx)
        if reentrant(self.tc, session):  # a sub-agent of a running cell, in its session: it would wait forever
            return "error: " + reentrance_message(self.name, session)
        loop = asyncio.get_running_loop()
        cell = _Cell(ctx, loop, session)

        on_chunk: Optional[Callable[[Chunk], None]] = None
        queue: "Optional[asyncio.Queue[Optional[ExecuteCodeStreamEvent]]]" = None
        consumer: "Optional[asyncio.Task[None]]" = None
        if self.on_stream is not None:
            q: "asyncio.Queue[Optional[ExecuteCodeStreamEvent]]" = asyncio.Queue()
            queue = q
            consumer = asyncio.ensure_future(self._deliver(q))

            def forward(chunk: Chunk) -> None:  # on the client's reader thread: hand over to the loop
                event = ExecuteCodeStreamEvent(stream=chunk.stream, text=chunk.text, session=session, tool_context=ctx)
                try:
                    loop.call_soon_threadsafe(q.put_nowait, event)
                except RuntimeError:  # the loop is closed: nobody is listening any more
                    pass

            on_chunk = forward

        fut = self.executor.submit(self._run_cell, cell, code, reset, on_chunk)
        try:
            result = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            if not fut.cancel():  # on its way: drop it before its cell starts, else interrupt that cell only
                threading.Thread(target=cell.job.stop, args=(lambda: self._interrupt(session),),
                                 name="toolcell-stop", daemon=True).start()
            raise
        finally:
            for task in list(cell.tasks):  # nested calls the cell no longer waits for
                task.cancel()
            if queue is not None and consumer is not None:
                queue.put_nowait(None)
                await asyncio.shield(consumer)
        if cell.fatal is not None:
            raise cell.fatal
        self._remember(ctx, session, result)
        return result_text(result)

    def _remember(self, ctx: Any, session: str, result: ExecuteResult) -> None:
        """Keep the result until the SDK asks for the output item's custom_data (or the context is gone)."""
        if "custom_data_extractor" not in _FUNCTION_TOOL_FIELDS:
            return  # an SDK without custom_data would never ask
        key = id(ctx)
        try:
            ref = weakref.ref(ctx, lambda _r: self.results.pop(key, None))
        except TypeError:
            return
        self.results[key] = (ref, session, result)

    def _run_cell(self, cell: _Cell, code: str, reset: bool, on_chunk: Optional[Callable[[Chunk], None]]) -> ExecuteResult:
        s = cell.session
        assert self.tools_registered is not None
        with self.session_lock(s):
            with self.lock:
                self.used.add(s)
            # the job starts once the session's turn is this cell's (another adapter's cell there runs
            # first), and is finished before the turn passes on: a cancel never interrupts the next cell
            with self.tools_registered.running(s, cell.job):
                self.cells[s] = cell
                try:
                    return self.tc.execute(code, session=s, timeout=self.timeout, stream=on_chunk, reset=reset)
                finally:
                    self.cells.pop(s, None)

    def _interrupt(self, session: str) -> None:
        try:
            self.tc.interrupt(session)
        except Exception as e:  # the server is gone: nothing left to interrupt
            log.debug("toolcell: interrupting session %r failed: %s", session, e)

    async def _deliver(self, queue: "asyncio.Queue[Optional[ExecuteCodeStreamEvent]]") -> None:
        assert self.on_stream is not None
        while True:
            event = await queue.get()
            if event is None:
                return
            try:
                await _maybe_await(self.on_stream(event))
            except Exception:
                log.exception("toolcell: the on_stream callback of %s raised", self.name)

    def custom_data(self, data: Any) -> Optional[Dict[str, Any]]:
        """``custom_data_extractor``: the structured result, kept beside the output item (never sent to the model)."""
        ctx = getattr(data, "tool_context", None)
        found = self.results.pop(id(ctx), None) if ctx is not None else None
        if found is None or found[0]() is not ctx:
            return None
        _, session, result = found
        return {"toolcell": {"session": session, "result": result.raw}}

    # ---- a nested call, from a cell

    def _call_from_cell(self, w: _Wrapped, arguments: Dict[str, Any]) -> Any:
        """Runs on a toolcell pool thread: run the call here (a plain sync tool), or on the run's loop, and wait."""
        call = _current_call.get()
        session = call.session if call is not None else None
        cell = self.cells.get(session) if session is not None else None
        if cell is None:
            raise ToolError(
                f"no OpenAI Agents run is using this toolcell session now: {w.name} can be called only from a "
                f"cell that the {self.name} tool runs"
            )
        if cell.fatal is not None:
            raise ToolError("a tool guardrail or timeout stopped this run; no more tool calls are made")
        # the run's context variables, with this call as the current one (a nested run of the same
        # session is told, not deadlocked)
        pycontext = cell.pycontext.copy()
        pycontext.run(_current_call.set, call)
        if w.plain is not None and not cell.traced:
            return pycontext.run(self._call_plain, cell, w, arguments)
        if w.inline:
            return pycontext.run(_drive, _inline_loop(), self._nested(cell, w, arguments))
        done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

        def start() -> None:  # on the loop, in the run's context
            task = asyncio.ensure_future(self._nested(cell, w, arguments))
            cell.tasks.add(task)

            def finished(t: "asyncio.Task[Any]") -> None:
                cell.tasks.discard(t)
                if done.cancelled():
                    return
                if t.cancelled():
                    done.cancel()
                elif t.exception() is not None:
                    done.set_exception(t.exception())
                else:
                    done.set_result(t.result())

            task.add_done_callback(finished)

        try:
            cell.loop.call_soon_threadsafe(start, context=pycontext)
        except RuntimeError as e:  # the run's loop has closed
            raise ToolError(f"the agent run that started this cell has ended ({e})") from None
        return done.result()

    def _tool_context(self, cell: _Cell, w: _Wrapped, arguments: Dict[str, Any], call_id: str
                      ) -> Tuple[ToolContext, str]:
        """The nested call's ToolContext (made from the execute_code call's) and its JSON arguments."""
        args_json = json.dumps(arguments, ensure_ascii=False)
        tool_call = ResponseFunctionToolCall(type="function_call", call_id=call_id, name=w.name, arguments=args_json)
        return ToolContext.from_agent_context(cell.ctx, call_id, tool_call=tool_call), args_json

    @staticmethod
    def _call_id(cell: _Cell) -> str:
        return f"{getattr(cell.ctx, 'tool_call_id', None) or 'toolcell'}-{next(cell.counter)}"

    def _call_plain(self, cell: _Cell, w: _Wrapped, arguments: Dict[str, Any]) -> Any:
        """A plain sync function tool (see `_plain_function`), called here as its SDK invoker would."""
        assert w.plain is not None
        fn, schema = w.plain
        call_id = self._call_id(cell)
        ctx: Optional[ToolContext] = None
        try:
            try:
                parsed = schema.params_pydantic_model(**arguments) if arguments else schema.params_pydantic_model()
            except _ValidationError as e:
                raise _ModelBehaviorError(f"Invalid JSON input for tool {w.name}: {e}") from e
            args, kwargs = schema.to_call_args(parsed)
            if schema.takes_context:
                ctx, _ = self._tool_context(cell, w, arguments, call_id)
                output = fn(ctx, *args, **kwargs)
            else:
                output = fn(*args, **kwargs)
        except ToolError:
            raise
        except Exception as e:
            if ctx is None:
                ctx, _ = self._tool_context(cell, w, arguments, call_id)
            try:  # the failure policy and the run's formatter, on the run's loop (they may be async)
                text = asyncio.run_coroutine_threadsafe(self._error_text(w, ctx, e), cell.loop).result()
            except Exception:
                log.exception("toolcell: wording the error of %s failed", w.name)
                text = f"{type(e).__name__}: {e}"
            raise ToolError(text) from None
        return _to_cell_value(output)

    async def _nested(self, cell: _Cell, w: _Wrapped, arguments: Dict[str, Any]) -> Any:
        tool = w.tool
        outer = cell.ctx
        call_id = self._call_id(cell)
        ctx, args_json = self._tool_context(cell, w, arguments, call_id)
        agent: Any = getattr(ctx, "agent", None) or getattr(outer, "agent", None)

        enabled = tool.is_enabled
        if callable(enabled):
            if not await _maybe_await(enabled(outer, agent)):
                raise ToolError("this tool is disabled for this run (its is_enabled says no)")
        approval = tool.needs_approval
        if callable(approval) and await _maybe_await(approval(outer, arguments, call_id)):
            raise ToolError(
                "this call needs a human's approval (needs_approval), which a cell cannot wait for; "
                "the call was not made"
            )
        await self._input_guardrails(cell, tool, ctx, agent)

        sensitive = getattr(getattr(outer, "run_config", None), "trace_include_sensitive_data", True)
        span: Any = None
        if cell.traced and _function_span is not None:
            span = _function_span(tool.name, input=args_json if sensitive else None)
            span.start(mark_as_current=True)
        try:
            try:
                output = await self._invoke_with_timeout(cell, w, ctx, args_json)
            except ToolError:
                raise
            except Exception as e:
                try:
                    wording = self._error_text(w, ctx, e)
                    if asyncio.get_running_loop() is not cell.loop:  # an inline call: the policy runs on the run's loop
                        text = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(wording, cell.loop))
                    else:
                        text = await wording
                except Exception:
                    log.exception("toolcell: wording the error of %s failed", tool.name)
                    text = f"{type(e).__name__}: {e}"
                if span is not None and _SpanError is not None:
                    span.set_error(_SpanError(message="Error running tool", data={"tool_name": tool.name}))
                raise ToolError(text) from None
            if span is not None and sensitive:
                span.span_data.output = str(output)
        finally:
            if span is not None:
                span.finish(reset_current=True)
        output = await self._output_guardrails(cell, tool, ctx, agent, output)
        return _to_cell_value(output)

    async def _invoke_with_timeout(self, cell: _Cell, w: _Wrapped, ctx: ToolContext, args_json: str) -> Any:
        limit = getattr(w.tool, "timeout_seconds", None)
        if not limit:
            return await w.invoke(ctx, args_json)
        task = asyncio.ensure_future(w.invoke(ctx, args_json))
        finished, _ = await asyncio.wait({task}, timeout=limit)
        if finished:
            return task.result()
        task.cancel()
        text = f"Tool '{w.name}' timed out after {limit:g} seconds."
        if getattr(w.tool, "timeout_behavior", "error_as_result") == "raise_exception" and _ToolTimeoutError is not None:
            # as on a direct call, the run fails (once the cell, stopped now, has ended)
            self._trip(cell, _ToolTimeoutError(tool_name=w.name, timeout_seconds=limit))
            raise ToolError(text)
        formatter = getattr(w.tool, "timeout_error_function", None)
        if formatter is not None:
            try:
                from agents import ToolTimeoutError

                text = str(await _maybe_await(formatter(ctx, ToolTimeoutError(tool_name=w.name, timeout_seconds=limit))))
            except Exception:
                log.exception("toolcell: the timeout_error_function of %s raised", w.name)
        raise ToolError(text)

    async def _error_text(self, w: _Wrapped, ctx: ToolContext, error: Exception) -> str:
        """What the cell's ToolError says after the tool raised `error` (see "Errors" in the module docs)."""
        details = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if _resolve_policy is None:
            return details
        policy = _resolve_policy(w.tool, ctx) if _RESOLVE_TAKES_CONTEXT else _resolve_policy(w.tool)
        if policy is not None and policy is not _default_policy:
            try:
                return str(await _maybe_await(policy(ctx, error)))
            except Exception:
                log.exception("toolcell: the failure_error_function of %s raised", w.name)
                return details
        if policy is None:
            return details
        formatter = getattr(getattr(ctx, "run_config", None), "tool_error_formatter", None)
        if formatter is None or _FormatterArgs is None:
            return details
        values: Dict[str, Any] = dict(kind="tool_exception", tool_type="function", tool_name=w.name,
                                      call_id=ctx.tool_call_id, default_message=details, run_context=ctx, error=error)
        try:
            args = _FormatterArgs(**{k: v for k, v in values.items() if k in _formatter_fields})
            message = await _maybe_await(formatter(args))
        except Exception:
            log.exception("toolcell: the run's tool_error_formatter raised")
            return details
        return message if isinstance(message, str) else details

    async def _input_guardrails(self, cell: _Cell, tool: FunctionTool, ctx: ToolContext, agent: Any) -> None:
        for guardrail in getattr(tool, "tool_input_guardrails", None) or []:
            out = await guardrail.run(ToolInputGuardrailData(context=ctx, agent=agent))
            kind = out.behavior.get("type")
            if kind == "raise_exception":
                self._trip(cell, ToolInputGuardrailTripwireTriggered(guardrail=guardrail, output=out))
                raise ToolError(f"the tool input guardrail {guardrail.get_name()} stopped the run")
            if kind == "reject_content":
                raise ToolError(str(out.behavior.get("message", "")))

    async def _output_guardrails(self, cell: _Cell, tool: FunctionTool, ctx: ToolContext, agent: Any, output: Any) -> Any:
        for guardrail in getattr(tool, "tool_output_guardrails", None) or []:
            out = await guardrail.run(ToolOutputGuardrailData(context=ctx, agent=agent, output=output))
            kind = out.behavior.get("type")
            if kind == "raise_exception":
                self._trip(cell, ToolOutputGuardrailTripwireTriggered(guardrail=guardrail, output=out))
                raise ToolError(f"the tool output guardrail {guardrail.get_name()} stopped the run")
            if kind == "reject_content":
                raise ToolError(str(out.behavior.get("message", "")))
        return output

    def _trip(self, cell: _Cell, error: BaseException) -> None:
        """A tripwire: no more calls from this cell, stop it, and fail the run when it ends."""
        if cell.fatal is None:
            cell.fatal = error
            threading.Thread(target=cell.job.interrupt, args=(lambda: self._interrupt(cell.session),),
                             daemon=True).start()

    # ---- the end

    def end_session(self, session: str) -> None:
        with self.session_lock(session):
            with self.lock:
                self.used.discard(session)
            self.tc.shutdown_session(session)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()
        try:
            if self.owns_client:
                self.tc.close()
            else:
                for s in sorted(self.used):
                    try:
                        self.end_session(s)
                    except Exception as e:
                        log.warning("toolcell: ending session %r failed: %s", s, e)
                try:
                    if self.tools_registered is not None:
                        self.tools_registered.close()
                except Exception as e:
                    log.warning("toolcell: unregistering the tools of %s failed: %s", self.name, e)
        finally:
            self.executor.shutdown(wait=False)


def _is_sdk_session(obj: Any) -> bool:
    """An agents ``Session`` (SQLiteSession, ...), told by its methods: its ``session_id`` may not exist yet."""
    return not isinstance(obj, str) and callable(getattr(obj, "get_items", None)) and callable(
        getattr(obj, "add_items", None)
    )


def _session_name(value: Any, spec: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"execute_code_tool: the session from {spec!r} must be a non-empty string, got {value!r}")
    return value


def _default_config(config: Config) -> Config:
    """The user's config, with toolcell's built-in tools off unless it has a [tools] section."""
    if config is None:
        return {"tools": {"enabled": []}}
    if isinstance(config, Mapping):
        merged = dict(config)
        merged.setdefault("tools", {"enabled": []})
        return merged
    return config  # a toolcell.toml path: the user's file decides


def _code_params_schema(server_props: Mapping[str, Any]) -> Dict[str, Any]:
    """``{"code", "reset"}``, both required, no extra keys: what strict mode accepts."""
    code_desc = (server_props.get("code") or {}).get("description") or "Python source to run as one cell."
    reset_desc = (server_props.get("reset") or {}).get("description") or (
        "Discard the kernel and its state first, and run in a fresh one."
    )
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": code_desc},
            "reset": {"type": "boolean", "description": reset_desc + " Pass false to keep the variables."},
        },
        "required": ["code", "reset"],
        "additionalProperties": False,
    }


class ExecuteCodeTool(FunctionTool):
    """The ``execute_code`` :class:`~agents.FunctionTool`; build it with :func:`execute_code_tool`.

    Put it in ``Agent(tools=[...])`` like any tool. Beyond a FunctionTool it
    owns the toolcell client and the sessions: :meth:`end_session` ends one
    conversation's kernel, :meth:`close` (or ``with`` / ``async with``) ends
    them all and, for a client the tool started, the server.
    """

    _toolcell_runner: _Runner

    @property
    def toolcell(self) -> Toolcell:
        """The toolcell client the cells run on."""
        return self._toolcell_runner.tc

    @property
    def wrapped_tools(self) -> Dict[str, FunctionTool]:
        """The agent's tools the cells can call, by name."""
        return {n: w.tool for n, w in self._toolcell_runner.tools.items()}

    async def session_for(self, ctx: Any) -> str:
        """The toolcell session a call with this context runs in (see "Sessions" in the module docs)."""
        return await self._toolcell_runner.session_for(ctx)

    def end_session(self, session: Any) -> None:
        """End a conversation's kernel: `session` is a session name or an agents ``Session``.

        Its variables are gone; the next cell of that conversation starts a
        fresh kernel. Blocks while a cell of that session runs.
        """
        name = session.session_id if _is_sdk_session(session) else session
        self._toolcell_runner.end_session(_session_name(name, session))

    async def aend_session(self, session: Any) -> None:
        """:meth:`end_session` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.end_session, session)

    def close(self) -> None:
        """End every session this tool used and, if the tool started it, the toolcell server."""
        self._toolcell_runner.close()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> "ExecuteCodeTool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "ExecuteCodeTool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def execute_code_tool(
    tools: Iterable[Any],
    *,
    toolcell: Optional[Toolcell] = None,
    config: Config = None,
    cwd: Optional[PathLike] = None,
    session: SessionSpec = None,
    name: str = "execute_code",
    timeout: Optional[float] = None,
    on_stream: Optional[Callable[[ExecuteCodeStreamEvent], Any]] = None,
) -> ExecuteCodeTool:
    """The ``execute_code`` FunctionTool whose cells can call `tools`.

    `tools`: the agent's function tools (``FunctionTool``, or plain
    functions, wrapped with ``function_tool``); cells call each by its name
    with keyword or positional arguments. `toolcell`: a running
    :class:`toolcell.Toolcell` to share, else one is started with `config`
    (built-in tools off unless `config` has a ``tools`` section) and `cwd`.
    `session`: which kernel a run uses (a name, an agents ``Session``, or a
    function of the ``ToolContext``; default: the run's
    ``RunConfig.group_id``, else one per tool). `name`: the tool's name.
    `timeout`: seconds per cell (default: the server's, 300). `on_stream`:
    called with each :class:`ExecuteCodeStreamEvent` while a cell runs.

    The tool's description is toolcell's ``execute_code`` description,
    listing each tool's Python signature; its parameters are ``code`` and
    ``reset``, valid in strict mode. The module docstring tells the rest
    (errors, sessions, streaming, the structured result).
    """
    runner = _Runner(
        tools,
        toolcell=toolcell,
        config=config,
        cwd=cwd,
        session=session,
        name=name,
        timeout=timeout,
        on_stream=on_stream,
    )
    kwargs: Dict[str, Any] = dict(
        name=name,
        description=runner.description,
        params_json_schema=runner.params_json_schema,
        on_invoke_tool=runner.invoke,
        strict_json_schema=True,
    )
    if "custom_data_extractor" in _FUNCTION_TOOL_FIELDS:
        kwargs["custom_data_extractor"] = runner.custom_data
    try:
        tool = ExecuteCodeTool(**kwargs)
    except BaseException:
        runner.close()
        raise
    tool._toolcell_runner = runner
    return tool
