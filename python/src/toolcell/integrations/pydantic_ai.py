"""toolcell for pydantic-ai: the agent's tools behind one ``run_code`` tool.

The model gets one tool, ``run_code(code, restart=False)``, whose
description lists the wrapped tools as Python functions with their
signatures. The code runs in a persistent Python kernel (variables survive
from one ``run_code`` call to the next) and calls the tools as plain
functions; each such call comes back to this process and goes through the
wrapped toolset's ``call_tool`` with the run's context, exactly as a tool
call the model made directly would. It is the shape of pydantic-ai-harness's
``CodeMode``, with a real CPython kernel (any package, files, the network)
instead of the Monty sandbox.

Two ways in, as with ``CodeMode``::

    from pydantic_ai import Agent
    from toolcell.integrations.pydantic_ai import ToolcellCodeMode, ToolcellCodeModeToolset

    # a capability: every tool of the agent goes behind run_code
    agent = Agent("openai:gpt-5", capabilities=[ToolcellCodeMode()])

    # or a toolset: only the tools and toolsets you hand it
    agent = Agent("openai:gpt-5", toolsets=[ToolcellCodeModeToolset(get_order, mcp_server)])

Sessions: each agent run gets a fresh toolcell session (one kernel), ended
when the run ends; pass ``session="conversation-42"`` to keep one kernel,
and its variables, across the runs of a conversation. ``restart=True``
starts the session's kernel afresh.

The ``run_code`` result the model reads is
:func:`toolcell.integrations.result_text` of the cell; the tool return's
``metadata`` holds the structured result (``metadata["result"]``, the
result object as a dict: ``ExecuteResult.from_dict`` turns it back into
one) and a record of the nested calls (``tool_calls`` / ``tool_returns`` /
``tool_errors``, keyed by the nested call's id), as ``CodeMode`` records
them.

Output streams, while the cell runs, as :class:`ToolcellOutputEvent`
custom events in the run's event stream (``agent.run_stream_events``,
``event_stream_handler``, the UI adapters) on pydantic-ai versions that
have custom events, and to an ``on_output`` callback on every version.
"""

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import inspect
import json
import logging
import sys
import threading
import uuid
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    FrozenSet,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

try:
    import pydantic
    from opentelemetry.trace import NoOpTracer
    from pydantic_core import to_jsonable_python
    from typing_extensions import Annotated, NotRequired, TypedDict

    from pydantic_ai import exceptions as _pai_exceptions
    from pydantic_ai.messages import ToolCallPart, ToolReturn, ToolReturnPart
    from pydantic_ai.tools import RunContext, Tool, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"toolcell.integrations.pydantic_ai needs pydantic-ai ({_e}); "
        'install it with: pip install "toolcell[pydantic-ai]"'
    ) from _e

try:
    from pydantic_ai.capabilities import AbstractCapability
except ImportError as _e:  # pragma: no cover - pydantic-ai older than 1.71
    raise ImportError(
        "toolcell.integrations.pydantic_ai needs pydantic-ai 1.71 or newer (it has no capabilities); "
        'upgrade it with: pip install -U "toolcell[pydantic-ai]"'
    ) from _e

try:  # capability ordering (recent pydantic-ai)
    from pydantic_ai.capabilities import CapabilityOrdering as _CapabilityOrdering
    from pydantic_ai.capabilities import ToolSearch as _ToolSearch
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _CapabilityOrdering = None  # type: ignore[assignment,misc]
    _ToolSearch = None  # type: ignore[assignment,misc]

try:  # what a call through combined toolsets to a plain function tool is made of
    from pydantic_ai.toolsets.combined import _CombinedToolsetTool
    from pydantic_ai.toolsets.function import FunctionToolsetTool as _FunctionToolsetTool
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _CombinedToolsetTool = None  # type: ignore[assignment,misc]
    _FunctionToolsetTool = None  # type: ignore[assignment,misc]

try:  # tool search's toolset: it passes every call but its own tool's on
    from pydantic_ai.toolsets._tool_search import ToolSearchToolset as _ToolSearchToolset
    from pydantic_ai.toolsets._tool_search import _SearchTool
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _ToolSearchToolset = None  # type: ignore[assignment,misc]
    _SearchTool = None  # type: ignore[assignment,misc]

try:  # custom events in the run's event stream (recent pydantic-ai)
    from pydantic_ai.messages import CustomEvent as _CustomEvent
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _CustomEvent = None  # type: ignore[assignment,misc]

from .._client import AsyncToolcell, Chunk
from .._errors import RPCError, ServerExited, ToolError
from .._result import ExecuteResult
from ._common import result_text

__all__ = [
    "RUN_CODE_TOOL_NAME",
    "ToolcellCodeMode",
    "ToolcellCodeModeToolset",
    "ToolcellOutputEvent",
]

log = logging.getLogger("toolcell")

RUN_CODE_TOOL_NAME = "run_code"
"""The name of the one tool the model gets (``CodeMode``'s name for it)."""

ModelRetry = _pai_exceptions.ModelRetry
UserError = _pai_exceptions.UserError
_ToolFailed: Optional[type] = getattr(_pai_exceptions, "ToolFailed", None)
_DEFERRALS: Tuple[type, ...] = tuple(
    t for t in (getattr(_pai_exceptions, "CallDeferred", None), getattr(_pai_exceptions, "ApprovalRequired", None))
    if isinstance(t, type)
)

ToolSelector = Union[
    str,
    Sequence[str],
    Mapping[str, Any],
    Callable[[RunContext[Any], ToolDefinition], Union[bool, Awaitable[bool]]],
]
"""Which wrapped tools go behind ``run_code``: ``"all"``, a list of names,
metadata to match (``{"code_mode": True}``), or ``(ctx, tool_def) -> bool``."""

ToolOrToolset = Union[AbstractToolset[Any], Tool[Any], Callable[..., Any]]

_FRAMEWORK_CONTROL_KINDS = frozenset({"tool-search", "capability-load"})
_DEFAULT_MAX_TOOL_CALLS = 100  # CodeMode's default budget of nested calls per run_code


if _CustomEvent is not None:

    @dataclasses.dataclass(kw_only=True)
    class ToolcellOutputEvent(_CustomEvent):
        """A piece of a cell's output, emitted into the run's event stream while the cell runs.

        ``tool_call_id`` / ``tool_name`` name the ``run_code`` call. The text
        is cleaned (ANSI stripped, secrets redacted) and follows no line
        boundaries; the whole output is in the tool's result as well.
        """

        session: str
        """The toolcell session the cell runs in."""
        stream: str
        """``"stdout"`` or ``"stderr"``."""
        text: str
        """The chunk of output."""

else:  # pragma: no cover - pydantic-ai without custom events

    @dataclasses.dataclass
    class ToolcellOutputEvent:  # type: ignore[no-redef]
        """Not emitted: this pydantic-ai has no custom events (use ``on_output=``)."""

        session: str
        stream: str
        text: str


class _RunCodeArgs(TypedDict):
    code: Annotated[str, pydantic.Field(description="Python source to run as one cell.")]
    restart: NotRequired[
        Annotated[
            bool,
            pydantic.Field(
                description="Discard the kernel and its state first, and run the code in a fresh one."
            ),
        ]
    ]


_RUN_CODE_ADAPTER: "pydantic.TypeAdapter[_RunCodeArgs]" = pydantic.TypeAdapter(_RunCodeArgs)
_RUN_CODE_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "description": "Python source to run as one cell."},
        "restart": {
            "type": "boolean",
            "default": False,
            "description": "Discard the kernel and its state first, and run the code in a fresh one.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


def _fields(cls: Any) -> FrozenSet[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


_TOOL_DEF_FIELDS = _fields(ToolDefinition)
_RETURN_PART_FIELDS = _fields(ToolReturnPart)
_CTX_FIELDS = _fields(RunContext)


def _only(fields: FrozenSet[str], **kw: Any) -> Dict[str, Any]:
    return {k: v for k, v in kw.items() if k in fields}


def _description_for_run_code(schema: Mapping[str, Any]) -> str:
    """The description of toolcell's ``execute_code``, with ``run_code``'s parameter name."""
    inner = schema.get("function")
    fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else schema
    text = str(fn.get("description", ""))
    if "reset=true" in text:
        return text.replace("reset=true", "restart=true")
    return text + "\n\nPass restart=true to start over in a fresh kernel."


def _deep_merge(base: Dict[str, Any], over: Mapping[str, Any]) -> Dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _output_schema(tool: ToolsetTool[Any]) -> Optional[Dict[str, Any]]:
    """The shape of the value the code gets back from the tool (its return schema, when it has one).

    An MCP server wraps a tool's plain result as ``{"result": value}`` and says
    so in its output schema; pydantic-ai's MCP toolset hands back the value
    itself, so the schema shown to the model is unwrapped the same way.
    """
    schema = getattr(tool.tool_def, "return_schema", None)
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if (
        type(tool.toolset).__module__.startswith("pydantic_ai.mcp")
        and schema.get("type") == "object"
        and isinstance(props, Mapping)
        and set(props) == {"result"}
        and isinstance(props["result"], Mapping)
    ):
        inner = dict(props["result"])
        inner.pop("title", None)
        if "$defs" in schema:
            inner["$defs"] = schema["$defs"]
        return inner
    return dict(schema)


def _loop_alive(loop: Optional[asyncio.AbstractEventLoop]) -> bool:
    return loop is not None and not loop.is_closed()


def _calls_like(toolset: AbstractToolset[Any], base: type) -> bool:
    """`toolset` is a `base` whose ``call_tool`` is `base`'s own (a subclass
    such as the agent's own function toolset that calls as its base does)."""
    return isinstance(toolset, base) and getattr(type(toolset), "call_tool", None) is getattr(base, "call_tool", None)


def _plain_function(toolset: AbstractToolset[Any], tool: ToolsetTool[Any], strict: bool = True) -> Optional[Any]:
    """The function schema of `tool` when calling it through `toolset` only
    calls a plain (sync) function: reached through ``CombinedToolset``s
    alone, held by a ``FunctionToolset`` with no timeout. Such a call can run
    on the thread the cell's call arrived on — where pydantic-ai would run it
    on a worker thread of its own anyway — instead of hopping to the event
    loop and on to that worker thread and back (three thread switches per
    call). Anything else (an ``async def`` tool, a wrapper that could change
    the call, an MCP tool): ``None``, and the call takes the toolset's
    ``call_tool`` on the run's loop. `strict=False` (when registering, before
    the toolset a call goes through is known) judges by the tool alone.
    """
    if _CombinedToolsetTool is None or _FunctionToolsetTool is None:
        return None  # pragma: no cover - depends on the pydantic-ai version
    for _ in range(16):
        if isinstance(tool, _CombinedToolsetTool) and (not strict or _calls_like(toolset, CombinedToolset)):
            toolset, tool = tool.source_toolset, tool.source_tool
        elif _calls_like(toolset, WrapperToolset):
            toolset = toolset.wrapped  # passes calls on as they are
        elif (
            _ToolSearchToolset is not None
            and _calls_like(toolset, _ToolSearchToolset)
            and not isinstance(tool, _SearchTool)
        ):
            toolset = toolset.wrapped  # passes every call but its search tool's on
        else:
            break
    if not _calls_like(toolset, FunctionToolset) or type(tool) is not _FunctionToolsetTool:
        return None
    if tool.is_async or getattr(toolset, "timeout", None) is not None or getattr(tool.tool_def, "timeout", None):
        return None
    call = getattr(tool, "call_func", None)
    schema = getattr(call, "__self__", None)
    if schema is None or getattr(call, "__func__", None) is not getattr(type(schema), "call", None):
        return None
    if getattr(schema, "is_async", True) or not callable(getattr(schema, "function", None)):
        return None
    if not callable(getattr(schema, "_call_args", None)):
        return None  # pragma: no cover - depends on the pydantic-ai version
    return schema


# ---------------------------------------------------------------- shared state


class _Call:
    """One ``run_code`` call in progress: where its nested calls go and what they did."""

    def __init__(self, toolset: AbstractToolset[Any], ctx: RunContext[Any], tools: Dict[str, ToolsetTool[Any]],
                 session: str):
        self.toolset = toolset
        self.ctx = ctx
        self.tools = tools
        self.session = session
        self.loop = asyncio.get_running_loop()
        self.context = contextvars.copy_context()
        self.parent_id = ctx.tool_call_id or RUN_CODE_TOOL_NAME
        self.count = 0
        self.tool_calls: Dict[str, ToolCallPart] = {}
        self.tool_returns: Dict[str, ToolReturnPart] = {}
        self.tool_errors: Dict[str, str] = {}
        self.user_content: List[Any] = []
        self.emits: List["asyncio.Future[Any]"] = []
        self.emit_events = True
        # Calls may come from several threads of the cell at once.
        self._lock = threading.Lock()
        self._plain: Dict[str, Any] = {}

    async def run(self, name: str, arguments: Dict[str, Any]) -> Any:
        """Run one nested call on the run's loop, in the ``run_code`` call's context."""
        coro = self._run(name, arguments)
        if sys.version_info >= (3, 11):
            return await asyncio.get_running_loop().create_task(coro, context=self.context.copy())
        return await coro  # pragma: no cover - Python 3.10: no task context

    def run_here(self, name: str, arguments: Dict[str, Any]) -> Any:
        """Run one nested call on this (a client pool) thread when the tool is a
        plain function reached directly (`_plain_function`), else on the run's loop."""
        tool = self.tools.get(name)
        try:
            schema = self._plain[name]
        except KeyError:  # judged once per tool and run_code call
            schema = self._plain[name] = _plain_function(self.toolset, tool) if tool is not None else None
        if (
            schema is None
            or getattr(tool, "args_validator_func", None) is not None
            or not isinstance(self.ctx.tracer, NoOpTracer)
        ):
            return asyncio.run_coroutine_threadsafe(self.run(name, arguments), self.loop).result()
        assert tool is not None
        call_id, args, nested_ctx = self._begin(name, tool, arguments)
        try:
            pos, kw = schema._call_args(args, nested_ctx)
            result = self.context.copy().run(schema.function, *pos, **kw)
            if inspect.isawaitable(result):  # a plain def that returned an awaitable

                async def settle(awaitable: Any = result) -> Any:
                    return await awaitable

                result = asyncio.run_coroutine_threadsafe(settle(), self.loop).result()
        except BaseException as e:
            err = self._failed(call_id, name, e)
            if err is e:
                raise
            raise err from e
        return self._returned(call_id, name, result)

    def _begin(self, name: str, tool: ToolsetTool[Any], arguments: Dict[str, Any]) -> Tuple[str, Any, RunContext[Any]]:
        """Counts and records the call, validates its arguments, makes its context."""
        with self._lock:
            self.count += 1
            call_id = f"{self.parent_id}__{self.count}"
            self.tool_calls[call_id] = ToolCallPart(tool_name=name, args=dict(arguments), tool_call_id=call_id)
        ctx = self.ctx
        try:
            args = tool.args_validator.validate_python(arguments, context=ctx.validation_context)
        except BaseException as e:
            err = self._failed(call_id, name, e)
            if err is e:
                raise
            raise err from e
        # the run's context, as the tool manager gives it to a tool: its name, its call id
        nested_ctx = copy.copy(ctx)  # (dataclasses.replace re-runs RunContext's init: 10x slower)
        for field, value in (("tool_name", name), ("tool_call_id", call_id), ("retry", 0),
                             ("max_retries", tool.max_retries)):
            if field in _CTX_FIELDS:
                setattr(nested_ctx, field, value)
        return call_id, args, nested_ctx

    def _failed(self, call_id: str, name: str, e: BaseException) -> BaseException:
        """The exception a failed nested call raises in the host (a ToolError the cell sees)."""
        message = self._error_text(name, e)
        if message is None:
            return e
        with self._lock:
            self.tool_errors[call_id] = message
        return ToolError(message)

    def _returned(self, call_id: str, name: str, result: Any) -> Any:
        """Records a nested call's result; the value the cell gets."""
        metadata = None
        if isinstance(result, ToolReturn):
            metadata = result.metadata
            if result.content:
                with self._lock:
                    self.user_content.extend([result.content] if isinstance(result.content, str) else result.content)
            result = result.return_value
        part = ToolReturnPart(
            **_only(_RETURN_PART_FIELDS, tool_name=name, content=result, tool_call_id=call_id, metadata=metadata)
        )
        with self._lock:
            self.tool_returns[call_id] = part
            if hasattr(self.ctx.usage, "tool_calls"):
                self.ctx.usage.tool_calls += 1
        return to_jsonable_python(result, serialize_unknown=True)

    async def _run(self, name: str, arguments: Dict[str, Any]) -> Any:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"{name}: this tool is not available in this step of the run")
        call_id, args, nested_ctx = self._begin(name, tool, arguments)
        ctx = self.ctx
        try:
            check = getattr(tool, "args_validator_func", None)
            if check is not None:
                checked = check(nested_ctx, **args)
                if inspect.isawaitable(checked):
                    await checked
            span = (
                contextlib.nullcontext()
                if isinstance(ctx.tracer, NoOpTracer)
                else ctx.tracer.start_as_current_span(
                    f"execute_tool {name}",
                    attributes={"gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                                "toolcell.session": self.session},
                )
            )
            with span:
                pending = self.toolset.call_tool(name, args, nested_ctx, tool)
                timeout = getattr(tool.tool_def, "timeout", None)
                result = await (asyncio.wait_for(pending, timeout) if timeout else pending)
        except BaseException as e:
            err = self._failed(call_id, name, e)
            if err is e:
                raise
            raise err from e
        return self._returned(call_id, name, result)

    @staticmethod
    def _error_text(name: str, e: BaseException) -> Optional[str]:
        """The message the cell's ``ToolError`` carries, or None to let the exception through as it is."""
        if isinstance(e, ToolError):
            return e.message
        if isinstance(e, ModelRetry) or (_ToolFailed is not None and isinstance(e, _ToolFailed)):
            return str(getattr(e, "message", e))
        if _DEFERRALS and isinstance(e, _DEFERRALS):
            return (
                f"{type(e).__name__}: this tool needs approval or runs outside the agent (deferred), "
                "which code cannot wait for; ask for it with a direct tool call instead"
            )
        if isinstance(e, pydantic.ValidationError):
            errs = "; ".join(
                f"{'.'.join(str(x) for x in err.get('loc', ())) or '(arguments)'}: {err.get('msg')}"
                for err in e.errors()
            )
            return f"invalid arguments: {errs}"
        if isinstance(e, asyncio.TimeoutError):
            return "TimeoutError: the tool ran past its timeout"
        if isinstance(e, Exception):
            text = str(e)
            return f"{type(e).__name__}: {text}" if text else type(e).__name__
        return None  # cancellation, KeyboardInterrupt, ...: not the tool's answer

    def on_chunk(self, chunk: Chunk, on_output: Optional[Callable[[Chunk], Any]]) -> None:
        """Pass a piece of output on, to ``on_output`` and into the run's event stream.

        Called on the client's event loop; everything it starts runs on the run's loop.
        """
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # pragma: no cover - the client always calls it on a loop
            same_loop = False
        if same_loop:
            self._deliver(chunk, on_output)
        else:
            self.loop.call_soon_threadsafe(self._deliver, chunk, on_output)

    def _deliver(self, chunk: Chunk, on_output: Optional[Callable[[Chunk], Any]]) -> None:
        if on_output is not None:
            try:
                out = self.context.run(on_output, chunk)
                if inspect.isawaitable(out):
                    self.emits.append(asyncio.ensure_future(out))
            except Exception:
                log.exception("toolcell: the on_output callback raised")
        if _CustomEvent is None or not self.emit_events or not chunk.text:
            return
        event = ToolcellOutputEvent(session=chunk.session, stream=chunk.stream, text=chunk.text)
        self.emits.append(asyncio.ensure_future(self._emit(event)))

    async def _emit(self, event: Any) -> None:
        try:
            await self.ctx.emit(event)
        except UserError:  # this run has no event stream to emit into
            self.emit_events = False


class _Session:
    """A toolcell session as this adapter keeps it: its tools, its description, its running call."""

    def __init__(self, name: str):
        self.name = name
        self.registered: Dict[str, str] = {}  # tool name -> fingerprint of its definition
        self.description: Optional[str] = None
        self.active: Optional[_Call] = None
        self._lock: Optional[Tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = None

    def lock(self) -> asyncio.Lock:
        """The lock that runs one cell of this session at a time (made for the current loop)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]


class _Shared:
    """What every copy of one toolset (and every run of one capability) shares: the client, the sessions."""

    def __init__(self, toolcell: Optional[AsyncToolcell], config: Optional[Mapping[str, Any]],
                 max_tool_calls: Optional[int]):
        if toolcell is not None and (config is not None or max_tool_calls is not None):
            raise TypeError(
                "ToolcellCodeMode: `config` and `max_tool_calls` configure the client the toolset starts; "
                "with `toolcell=` pass them to your AsyncToolcell instead "
                "(AsyncToolcell(config={'execution': {'max_tool_calls': 100}}))"
            )
        if toolcell is not None and not isinstance(toolcell, AsyncToolcell):
            raise TypeError(
                f"ToolcellCodeMode: `toolcell` must be a toolcell.AsyncToolcell (pydantic-ai is async), got {toolcell!r}"
            )
        self.given = toolcell
        base: Dict[str, Any] = {
            "tools": {"enabled": []},  # the model gets the agent's tools only, not toolcell's built-ins
            "execution": {"max_tool_calls": max_tool_calls or _DEFAULT_MAX_TOOL_CALLS},
        }
        self.config = _deep_merge(base, config or {})
        self.owned: Optional[AsyncToolcell] = None
        self.owned_loop: Optional[asyncio.AbstractEventLoop] = None
        self.sessions: Dict[str, _Session] = {}

    def client(self) -> AsyncToolcell:
        """The client: the one given, else the one this toolset started (in the running loop)."""
        if self.given is not None:
            return self.given
        loop = asyncio.get_running_loop()
        if self.owned is not None and not _loop_alive(self.owned_loop):
            # a new asyncio.run(): the old client's loop is gone, and its async tools with it
            (log.warning if self.sessions else log.debug)(
                "toolcell: the event loop the toolcell server was started in is closed; starting a new "
                "server (sessions of the old one lose their state: %s)", ", ".join(self.sessions) or "none"
            )
            self.drop_owned()
        if self.owned is None:
            self.owned = AsyncToolcell(config=self.config)
            self.owned_loop = loop
        return self.owned

    def drop_owned(self) -> None:
        old, self.owned, self.owned_loop = self.owned, None, None
        self.sessions.clear()
        if old is not None:
            try:
                old.close(timeout=5)
            except Exception:  # pragma: no cover - best effort
                log.debug("toolcell: closing the old server failed", exc_info=True)

    def session(self, name: str) -> _Session:
        """The session's bookkeeping (after `client()`, which forgets every session when it restarts the server)."""
        self.client()
        s = self.sessions.get(name)
        if s is None:
            s = self.sessions[name] = _Session(name)
        return s

    async def sync_tools(self, session: _Session, tools: Mapping[str, ToolsetTool[Any]]) -> None:
        """Register the tools of this step with the session (only those new or changed), drop the rest."""
        tc = self.client()
        wanted: Dict[str, Tuple[str, ToolDefinition, Optional[Dict[str, Any]], bool]] = {}
        for name, tool in tools.items():
            td = tool.tool_def
            output_schema = _output_schema(tool)
            plain = _plain_function(getattr(tool, "toolset", None), tool, strict=False) is not None
            fp = json.dumps([td.description or "", td.parameters_json_schema, output_schema, plain],
                            sort_keys=True, default=str)
            wanted[name] = (fp, td, output_schema, plain)
        gone = [n for n in session.registered if n not in wanted]
        if gone:
            await tc.unregister(*gone, session=session.name)
            for n in gone:
                del session.registered[n]
            session.description = None
        for name, (fp, td, output_schema, plain) in wanted.items():
            if session.registered.get(name) == fp:
                continue
            try:
                await tc.register_tool(
                    name,
                    self._dispatcher(session.name, name, plain),
                    td.parameters_json_schema or {"type": "object", "properties": {}},
                    description=td.description or "",
                    output_schema=output_schema,
                    session=session.name,
                )
            except RPCError as e:
                raise UserError(
                    f"ToolcellCodeMode could not offer the tool {name!r} to code: {e.message}. "
                    "Rename it (toolset.renamed({...}) or .prefixed('x')), or keep it out of run_code "
                    "with the tool selector."
                ) from e
            session.registered[name] = fp
            session.description = None

    def _dispatcher(self, session: str, name: str, plain: bool = False) -> Callable[..., Any]:
        if plain:
            # A plain function tool: called on the client's pool thread the
            # call arrives on (see `_plain_function`), the loop only when
            # the tool turns out to need it.
            def call_here(**arguments: Any) -> Any:
                s = self.sessions.get(session)
                active = s.active if s is not None else None
                if active is None:
                    raise ToolError(f"{name}: no run_code call is running in this session, so the tool cannot run")
                return active.run_here(name, arguments)

            call_here.__name__ = name
            return call_here

        async def call(**arguments: Any) -> Any:
            s = self.sessions.get(session)
            active = s.active if s is not None else None
            if active is None:
                raise ToolError(f"{name}: no run_code call is running in this session, so the tool cannot run")
            if asyncio.get_running_loop() is active.loop:
                return await active.run(name, arguments)
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(active.run(name, arguments), active.loop))

        call.__name__ = name
        return call

    async def description(self, session: _Session) -> str:
        if session.description is None:
            schema = await self.client().schema(format="openai", session=session.name)
            session.description = _description_for_run_code(schema)
        return session.description

    async def end_session(self, name: str) -> None:
        """Shut the session's kernel down and forget its tools."""
        s = self.sessions.pop(name, None)
        tc = self.given if self.given is not None else self.owned
        if tc is None:
            return
        if tc is self.owned and not _loop_alive(self.owned_loop):
            return
        try:
            await tc.shutdown_session(name)
            if s is not None and s.registered:
                await tc.unregister(*s.registered, session=name)
        except (ServerExited, RPCError) as e:
            log.debug("toolcell: ending session %s failed: %s", name, e)

    async def aclose(self) -> None:
        if self.owned is not None:
            tc, self.owned, self.owned_loop = self.owned, None, None
            self.sessions.clear()
            await tc.aclose()


# ---------------------------------------------------------------- the toolset


@dataclasses.dataclass(kw_only=True)
class _RunCodeTool(ToolsetTool[Any]):
    """The ``run_code`` tool of one step, with the tools its code may call in that step."""

    sandboxed: Dict[str, ToolsetTool[Any]]
    session: str


class _Run:
    def __init__(self, session: str, owned: bool):
        self.session = session
        self.owned = owned  # a session made for this run: ended with it


def _as_toolset(items: Sequence[ToolOrToolset]) -> AbstractToolset[Any]:
    toolsets: List[AbstractToolset[Any]] = []
    functions: List[Any] = []
    for item in items:
        if isinstance(item, AbstractToolset):
            toolsets.append(item)
        elif isinstance(item, Tool) or callable(item):
            functions.append(item)
        else:
            raise TypeError(
                f"ToolcellCodeModeToolset: expected tools (functions, pydantic_ai.Tool) or toolsets, got {item!r}"
            )
    if functions:
        toolsets.insert(0, FunctionToolset(functions))
    if len(toolsets) == 1:
        return toolsets[0]
    return CombinedToolset(toolsets)


class ToolcellCodeModeToolset(WrapperToolset[Any]):
    """A toolset offering one ``run_code`` tool over the tools and toolsets you give it.

    ``ToolcellCodeModeToolset(get_order, FunctionToolset([...]), mcp_server)``:
    plain functions and ``pydantic_ai.Tool`` objects become a
    ``FunctionToolset``; toolsets (MCP ones included: their tools are listed
    with ``get_tools`` and called with ``call_tool`` while the run has them
    entered) are combined with it.

    Args:
        *tools_or_toolsets: What the code may call.
        toolcell: An ``AsyncToolcell`` to run the cells in (create it inside
            the event loop the agent runs in). Without it the toolset starts
            its own on first use, with toolcell's built-in tools disabled and
            ``max_tool_calls`` nested calls per cell, and keeps it until
            ``aclose()`` or the end of the process.
        config: More configuration for the client the toolset starts (see
            toolcell's configuration.md), e.g. ``{"execution": {"timeout": 60}}``
            or ``{"tools": {"enabled": ["read_file"]}}`` to offer built-ins too.
        session: A toolcell session name that outlives runs (one per
            conversation): its kernel, variables and tools stay between runs.
            Without it each run gets a fresh session, ended with the run.
        tool_selector: Which tools go behind ``run_code`` (``"all"``, names,
            metadata, or a ``(ctx, tool_def) -> bool`` function); the others
            stay ordinary tools of the model.
        max_retries: Retries of ``run_code`` for arguments the model got wrong.
        max_tool_calls: Nested tool calls allowed per cell (default 100, as
            ``CodeMode``), for the client the toolset starts.
        timeout: Seconds a cell may run (default: the server's, 300).
        on_output: Called with each ``toolcell.Chunk`` of output while a cell
            runs (a plain or ``async`` function, on the event loop).
        id: The toolset's id (needed for durable execution).
    """

    def __init__(
        self,
        *tools_or_toolsets: ToolOrToolset,
        toolcell: Optional[AsyncToolcell] = None,
        config: Optional[Mapping[str, Any]] = None,
        session: Optional[str] = None,
        tool_selector: ToolSelector = "all",
        max_retries: int = 3,
        max_tool_calls: Optional[int] = None,
        timeout: Optional[float] = None,
        on_output: Optional[Callable[[Chunk], Any]] = None,
        id: Optional[str] = None,
        wrapped: Optional[AbstractToolset[Any]] = None,
        _shared: Optional[_Shared] = None,
    ):
        if wrapped is not None and tools_or_toolsets:
            raise TypeError("ToolcellCodeModeToolset: pass the tools positionally or as `wrapped=`, not both")
        if session is not None and (not isinstance(session, str) or not session):
            raise TypeError(f"ToolcellCodeModeToolset: `session` must be a non-empty string, got {session!r}")
        self.wrapped = wrapped if wrapped is not None else _as_toolset(tools_or_toolsets)
        self.tool_selector = tool_selector
        self.max_retries = max_retries
        self.timeout = timeout
        self.on_output = on_output
        self.session = session
        self._id = id
        self._shared = _shared if _shared is not None else _Shared(toolcell, config, max_tool_calls)
        self._run: Optional[_Run] = None
        self._entered = 0

    # ---- identity and copies

    @property
    def id(self) -> Optional[str]:
        return self._id

    @property
    def toolcell(self) -> Optional[AsyncToolcell]:
        """The client cells run in: the one given, or the one started on first use (None before)."""
        return self._shared.given if self._shared.given is not None else self._shared.owned

    def __repr__(self) -> str:
        return f"ToolcellCodeModeToolset({self.wrapped!r}, session={self.session!r})"

    __eq__ = object.__eq__  # not the dataclass comparison of `wrapped` it would inherit
    __hash__ = object.__hash__

    def _copy(self, wrapped: AbstractToolset[Any], run: Optional[_Run]) -> "ToolcellCodeModeToolset":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.wrapped = wrapped
        new._run = run
        new._entered = 0
        return new

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        """A copy for this run, with its own session (or the named one)."""
        wrapped = await self.wrapped.for_run(ctx)
        return self._copy(wrapped, self._new_run())

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        wrapped = await self.wrapped.for_run_step(ctx)
        if wrapped is self.wrapped:
            return self
        new = self._copy(wrapped, self._run)
        new._entered = self._entered
        return new

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return self._copy(self.wrapped.visit_and_replace(visitor), self._run)

    def _new_run(self) -> _Run:
        if self.session is not None:
            return _Run(self.session, owned=False)
        return _Run(f"pydantic-ai-{uuid.uuid4().hex[:12]}", owned=True)

    # ---- lifecycle

    async def __aenter__(self) -> "ToolcellCodeModeToolset":
        await self.wrapped.__aenter__()
        self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> Optional[bool]:
        self._entered -= 1
        try:
            if self._entered == 0 and self._run is not None and self._run.owned:
                run, self._run = self._run, None
                await self._shared.end_session(run.session)
        finally:
            exited = await self.wrapped.__aexit__(*args)
        return exited

    async def aclose(self) -> None:
        """End the toolcell server this toolset started, if any (every session's kernel with it)."""
        await self._shared.aclose()

    async def end_session(self, session: Optional[str] = None) -> None:
        """End a session's kernel now (default: the named ``session=``); its next cell starts afresh."""
        name = session or self.session
        if name is None:
            raise TypeError("end_session: this toolset has no named session; pass one")
        await self._shared.end_session(name)

    # ---- tools

    async def _selected(self, ctx: RunContext[Any], td: ToolDefinition) -> bool:
        if getattr(td, "kind", "function") != "function":
            return False  # output, external and approval-required tools need the framework's own flow
        if getattr(td, "tool_kind", None) in _FRAMEWORK_CONTROL_KINDS or getattr(td, "unless_native", None):
            return False
        if td.metadata and "code_arg_name" in td.metadata:
            return False  # another code tool: it sits beside run_code, not inside it
        available = getattr(ctx, "is_tool_available", None)
        if available is not None and not available(td):
            return False  # deferred and not revealed yet: tool search drives it
        sel = self.tool_selector
        if sel == "all":
            return True
        if isinstance(sel, str):
            return td.name == sel
        if isinstance(sel, Mapping):
            return _metadata_matches(td.metadata or {}, sel)
        if callable(sel):
            out = sel(ctx, td)
            if inspect.isawaitable(out):
                out = await out
            return bool(out)
        return td.name in set(sel)

    async def get_tools(self, ctx: RunContext[Any]) -> Dict[str, ToolsetTool[Any]]:
        """``run_code`` plus the tools the selector leaves native; registers the others with the session."""
        wrapped_tools = await self.wrapped.get_tools(ctx)
        if self._run is None:  # used without for_run (outside an agent run): a session of its own
            self._run = self._new_run()
        sandboxed: Dict[str, ToolsetTool[Any]] = {}
        result: Dict[str, ToolsetTool[Any]] = {}
        for name, tool in wrapped_tools.items():
            if await self._selected(ctx, tool.tool_def):
                sandboxed[name] = tool
            else:
                result[name] = tool
        if RUN_CODE_TOOL_NAME in wrapped_tools:
            raise UserError(
                f"ToolcellCodeModeToolset: a wrapped tool is named {RUN_CODE_TOOL_NAME!r}, the name of the code tool; "
                "rename it"
            )
        shared = self._shared
        session = shared.session(self._run.session)
        await shared.sync_tools(session, sandboxed)
        description = await shared.description(session)
        td = ToolDefinition(
            **_only(
                _TOOL_DEF_FIELDS,
                name=RUN_CODE_TOOL_NAME,
                description=description,
                parameters_json_schema=_RUN_CODE_SCHEMA,
                metadata={"code_arg_name": "code", "code_arg_language": "python"},
                sequential=True,
            )
        )
        result[RUN_CODE_TOOL_NAME] = _RunCodeTool(
            toolset=self,
            tool_def=td,
            max_retries=self.max_retries,
            args_validator=_RUN_CODE_ADAPTER.validator,  # type: ignore[arg-type]
            sandboxed=sandboxed,
            session=self._run.session,
        )
        return result

    async def call_tool(
        self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run ``run_code``'s cell (or pass a native tool's call on to the wrapped toolset)."""
        if not isinstance(tool, _RunCodeTool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        code = tool_args["code"]
        restart = bool(tool_args.get("restart", False))
        shared = self._shared
        session = shared.session(tool.session)
        async with session.lock():
            call = _Call(self.wrapped, ctx, tool.sandboxed, tool.session)
            session.active = call
            try:
                result = await shared.client().execute(
                    code,
                    session=tool.session,
                    timeout=self.timeout,
                    stream=lambda chunk: call.on_chunk(chunk, self.on_output),
                    reset=restart,
                )
            except ServerExited:
                if shared.given is None:
                    shared.drop_owned()  # the next call starts a new server
                raise
            finally:
                session.active = None
                if call.emits:
                    await asyncio.gather(*call.emits, return_exceptions=True)
        return self._tool_return(result, call)

    @staticmethod
    def _tool_return(result: ExecuteResult, call: _Call) -> ToolReturn:
        return ToolReturn(
            return_value=result_text(result),
            content=call.user_content or None,
            metadata={
                "toolcell": True,
                "session": call.session,
                "result": result.raw,
                "tool_calls": call.tool_calls,
                "tool_returns": call.tool_returns,
                "tool_errors": call.tool_errors,
            },
        )


def _metadata_matches(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    for k, v in want.items():
        if k not in have:
            return False
        if isinstance(v, Mapping) and isinstance(have[k], Mapping):
            if not _metadata_matches(have[k], v):
                return False
        elif have[k] != v:
            return False
    return True


# ---------------------------------------------------------------- the capability


class ToolcellCodeMode(AbstractCapability[Any]):
    """A capability putting the agent's tools behind one ``run_code`` tool (``CodeMode``'s shape).

    ``Agent(model, capabilities=[ToolcellCodeMode()])``: every eligible tool
    of the agent (its function tools, its toolsets, MCP servers included)
    becomes a Python function inside ``run_code``; ``tools=`` selects fewer
    (the rest stay ordinary tool calls). Output tools, tools needing approval,
    deferred tools not yet revealed, tool search and other code tools stay
    native, as with ``CodeMode``. The other arguments are those of
    :class:`ToolcellCodeModeToolset`; one capability keeps one client and its
    sessions for all the agent's runs.
    """

    def __init__(
        self,
        tools: ToolSelector = "all",
        *,
        toolcell: Optional[AsyncToolcell] = None,
        config: Optional[Mapping[str, Any]] = None,
        session: Optional[str] = None,
        max_retries: int = 3,
        max_tool_calls: Optional[int] = None,
        timeout: Optional[float] = None,
        on_output: Optional[Callable[[Chunk], Any]] = None,
    ):
        self.tools = tools
        self.max_retries = max_retries
        self.timeout = timeout
        self.on_output = on_output
        self.session = session
        self._shared = _Shared(toolcell, config, max_tool_calls)

    def __repr__(self) -> str:
        return f"ToolcellCodeMode(tools={self.tools!r}, session={self.session!r})"

    __eq__ = object.__eq__  # the base's dataclass comparison would make every instance equal
    __hash__ = object.__hash__

    def get_ordering(self) -> Any:
        """Like ``CodeMode``: outermost, around tool search, so ``search_tools`` stays a native tool."""
        if _CapabilityOrdering is None or _ToolSearch is None:  # pragma: no cover - older pydantic-ai
            return None
        return _CapabilityOrdering(position="outermost", wraps=[_ToolSearch])

    @property
    def toolcell(self) -> Optional[AsyncToolcell]:
        """The client cells run in: the one given, or the one started on first use (None before)."""
        return self._shared.given if self._shared.given is not None else self._shared.owned

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return ToolcellCodeModeToolset(
            wrapped=toolset,
            session=self.session,
            tool_selector=self.tools,
            max_retries=self.max_retries,
            timeout=self.timeout,
            on_output=self.on_output,
            _shared=self._shared,
        )

    async def aclose(self) -> None:
        """End the toolcell server this capability started, if any."""
        await self._shared.aclose()

    async def end_session(self, session: Optional[str] = None) -> None:
        """End a session's kernel now (default: the named ``session=``)."""
        name = session or self.session
        if name is None:
            raise TypeError("end_session: this capability has no named session; pass one")
        await self._shared.end_session(name)
