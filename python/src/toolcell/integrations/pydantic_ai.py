"""toolcell for pydantic-ai: the agent's tools behind one ``run_code`` tool.

The model gets one tool, ``run_code(code, restart=False)``, whose
description lists the wrapped tools as Python functions with their
signatures. The code runs in a persistent Python kernel (variables survive
from one ``run_code`` call to the next) and calls the tools as plain
functions; each such call comes back to this process and goes through the
run's tool manager with the run's context, as a tool call the model made
directly would: argument validation, the capabilities' tool hooks
(``before_tool_validate`` … ``wrap_tool_execute``, ``on_tool_execute_error``:
a policy capability blocks, defers or rewrites a call from code as it does
a direct one), the wrapped toolset's ``call_tool``, the run's usage and its
``UsageLimits(tool_calls_limit=...)``. A call that fails, is refused or is
deferred (approval, ``CallDeferred``: code cannot wait for those) raises
``ToolError`` in the cell. It is the shape of pydantic-ai-harness's
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

Threads and event loops: one agent (one capability, one toolcell server)
serves runs in several threads at once (``run_sync`` from a web server's
worker threads, one ``asyncio.run`` per thread) and outlives an
``asyncio.run``; each nested call runs on the loop of the run whose cell
made it, and one session runs one cell at a time, whichever thread asks.
"""

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import copy
import dataclasses
import inspect
import itertools
import json
import logging
import threading
import uuid
import weakref
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
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

try:  # usage counted for the run and for the span of the run that made the call (recent pydantic-ai)
    from pydantic_ai._usage_attribution import record_tool_call as _record_tool_call
except ImportError:  # pragma: no cover - depends on the pydantic-ai version

    def _record_tool_call(usage: Any) -> None:
        usage.tool_calls += 1


try:  # custom events in the run's event stream (recent pydantic-ai)
    from pydantic_ai.messages import CustomEvent as _CustomEvent
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _CustomEvent = None  # type: ignore[assignment,misc]

try:  # the tool manager: validation and the capabilities' tool hooks around a call
    from pydantic_ai.tool_manager import ToolManager as _ToolManager
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    try:
        from pydantic_ai._tool_manager import ToolManager as _ToolManager  # type: ignore[no-redef]
    except ImportError:
        _ToolManager = None  # type: ignore[assignment,misc]

try:  # capabilities that hold others (they pass the tool hooks on to them)
    from pydantic_ai.capabilities import CombinedCapability as _CombinedCapability
    from pydantic_ai.capabilities import WrapperCapability as _WrapperCapability
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _CombinedCapability = None  # type: ignore[assignment,misc]
    _WrapperCapability = None  # type: ignore[assignment,misc]

from .._client import AsyncToolcell, Chunk, current_tool_call
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
_RETURN_HAS_METADATA = "metadata" in _RETURN_PART_FIELDS


_MISSING = object()
_PLAIN_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})


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


def _calls_like(toolset: AbstractToolset[Any], base: type) -> bool:
    """`toolset` is a `base` whose ``call_tool`` is `base`'s own (a subclass
    such as the agent's own function toolset that calls as its base does)."""
    return isinstance(toolset, base) and getattr(type(toolset), "call_tool", None) is getattr(base, "call_tool", None)


def _plain_function(toolset: AbstractToolset[Any], tool: ToolsetTool[Any]) -> Optional[Any]:
    """The function schema of `tool` when calling it through `toolset` only
    calls a plain (sync) function: reached through ``CombinedToolset``s
    alone, held by a ``FunctionToolset`` with no timeout. Such a call can run
    on the thread the cell's call arrived on — where pydantic-ai would run it
    on a worker thread of its own anyway — instead of hopping to the event
    loop and on to that worker thread and back (three thread switches per
    call). Anything else (an ``async def`` tool, a wrapper that could change
    the call, an MCP tool): ``None``, and the call goes through the run's
    tool manager on the run's loop. Used only when the run has no capability
    with tool hooks (`_tool_hooks`) and the self-check (`_FAST_PATH`) passed.
    """
    if _CombinedToolsetTool is None or _FunctionToolsetTool is None:
        return None  # pragma: no cover - depends on the pydantic-ai version
    for _ in range(16):
        if isinstance(tool, _CombinedToolsetTool) and _calls_like(toolset, CombinedToolset):
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


# The context a tool call gets, as the tool manager builds it (`ToolManager._build_tool_context`).
_NESTED_CTX_FIELDS = tuple(
    f for f in ("tool_name", "_dispatched_tool_name", "tool_call_id", "retry", "max_retries",
                "tool_call_approved", "tool_call_metadata", "partial_output")
    if f in _CTX_FIELDS
)

try:  # pydantic-ai marks the context of a sync tool it runs, so `run_sync` inside one fails fast
    from pydantic_ai._utils import _in_sync_callback as _IN_SYNC_CALLBACK
except ImportError:  # pragma: no cover - depends on the pydantic-ai version
    _IN_SYNC_CALLBACK = None


def _nested_ctx(ctx: RunContext[Any], name: str, call_id: str, tool: ToolsetTool[Any],
                manager: Any = None) -> RunContext[Any]:
    """The run's context as the tool manager hands it to a tool: its name, its call id, its retries,
    and (given `manager`, the manager of the sandboxed tools) the manager its ``tools``,
    ``is_tool_available`` and ``emit`` look tools up in."""
    retries = getattr(ctx, "retries", None) or {}
    values = {"tool_name": name, "_dispatched_tool_name": name, "tool_call_id": call_id,
              "retry": retries.get(name, 0), "max_retries": tool.max_retries, "tool_call_approved": False,
              "tool_call_metadata": None, "partial_output": False}
    fields = _NESTED_CTX_FIELDS
    if manager is not None and hasattr(ctx, "tool_manager"):
        values["tool_manager"] = manager
        fields = fields + ("tool_manager",)
    state = getattr(ctx, "__dict__", None)
    if state is None:  # pragma: no cover - a RunContext with slots
        nested = copy.copy(ctx)
        for field in fields:
            setattr(nested, field, values[field])
        return nested
    # a shallow copy, as copy.copy makes it but 3x faster (dataclasses.replace re-runs the init: 10x slower)
    nested = object.__new__(type(ctx))
    state = state.copy()
    for field in fields:
        state[field] = values[field]
    nested.__dict__.update(state)
    return nested


def _sync_tool(function: Callable[..., Any], pos: Any, kw: Any) -> Any:
    if _IN_SYNC_CALLBACK is not None:
        _IN_SYNC_CALLBACK.set(True)  # in the call's own context copy
    return function(*pos, **kw)


def _call_plain(schema: Any, args: Dict[str, Any], ctx: RunContext[Any], context: contextvars.Context) -> Any:
    """Call a plain function tool (`_plain_function`) here, as pydantic-ai's ``FunctionSchema.call`` would."""
    pos, kw = schema._call_args(args, ctx)
    return context.run(_sync_tool, schema.function, pos, kw)


def _managed_calls() -> bool:
    """This pydantic-ai's tool manager can run a call from code through the
    capabilities' tool hooks and hand back the raw error
    (``validate_tool_call`` / ``execute_tool_call`` with ``wrap_validation_errors=False``)."""
    if _ToolManager is None:
        return False  # pragma: no cover - depends on the pydantic-ai version
    try:
        return (
            {"toolset", "root_capability", "ctx", "tools"} <= _fields(_ToolManager)
            and "wrap_validation_errors" in inspect.signature(_ToolManager.validate_tool_call).parameters
            and "wrap_validation_errors" in inspect.signature(_ToolManager.execute_tool_call).parameters
        )
    except (TypeError, ValueError, AttributeError):  # pragma: no cover - depends on the pydantic-ai version
        return False


_MANAGED = _managed_calls()
_TM_FIELDS = _fields(_ToolManager) if _MANAGED else frozenset()

_TOOL_HOOKS = (
    "before_tool_validate", "after_tool_validate", "wrap_tool_validate", "on_tool_validate_error",
    "before_tool_execute", "after_tool_execute", "wrap_tool_execute", "on_tool_execute_error",
)


def _tool_hooks(root: Any) -> List[str]:
    """The tool hooks the run's capabilities implement (``Capability.hook``): each call from code goes
    through them, so none may be skipped by the direct call of a plain function."""
    found: List[str] = []
    if root is None:
        return found
    todo, seen = [root], set()
    while todo:
        cap = todo.pop()
        if id(cap) in seen:
            continue
        seen.add(id(cap))
        if len(seen) > 1000:  # pragma: no cover - a cycle or a giant tree: assume hooks
            return ["(too many capabilities to check)"]
        base: Any = AbstractCapability
        if _CombinedCapability is not None and isinstance(cap, _CombinedCapability):
            base = _CombinedCapability  # its hooks pass the call on to its children
            todo.extend(getattr(cap, "capabilities", None) or ())
            todo.extend(getattr(cap, "_dispatch", None) or ())
        elif _WrapperCapability is not None and isinstance(cap, _WrapperCapability):
            base = _WrapperCapability  # its hooks pass the call on to the capability it wraps
            todo.append(cap.wrapped)
        found += [f"{type(cap).__name__}.{hook}" for hook in _TOOL_HOOKS
                  if getattr(type(cap), hook, None) is not getattr(base, hook, None)]
    return found


async def _probe_calls(model: Any) -> Optional[Tuple[Any, Any]]:
    """A probe tool called through pydantic-ai (its tool manager, or the toolset's ``call_tool``) and as the
    direct call of a plain function; the two results (None when the direct call would not be used)."""
    from pydantic_ai.usage import RunUsage

    def probe(ctx: RunContext[Any], a: int, /, b: str, c: float = 1.5, d: Optional[str] = None) -> Any:
        """A probe."""
        return {"deps": ctx.deps, "tool": ctx.tool_name, "id": ctx.tool_call_id, "retry": ctx.retry,
                "max_retries": ctx.max_retries, "args": [a, b, c, d]}

    toolset = CombinedToolset([FunctionToolset([probe], max_retries=3)])
    ctx = RunContext(**_only(_CTX_FIELDS, deps={"probe": 1}, model=model, usage=RunUsage(),
                             retries={"probe": 2}, tool_name="run_code", tool_call_id="outer"))
    raw = {"a": 1, "b": "two", "d": "five"}
    tools = await toolset.get_tools(ctx)
    tool = tools["probe"]
    schema = _plain_function(toolset, tool)
    if schema is None:
        return None
    if _MANAGED:
        manager = _ToolManager(**_only(_TM_FIELDS, toolset=toolset, ctx=ctx, tools=tools))
        part = ToolCallPart(tool_name="probe", args=dict(raw), tool_call_id="inner")
        validated = await manager.validate_tool_call(part, wrap_validation_errors=False)
        want = await manager.execute_tool_call(validated, wrap_validation_errors=False)
    else:
        args = tool.args_validator.validate_python(dict(raw))
        want = await toolset.call_tool("probe", args, _nested_ctx(ctx, "probe", "inner", tool), tool)
    args = tool.args_validator.validate_python(dict(raw), context=ctx.validation_context)
    got = _call_plain(schema, args, _nested_ctx(ctx, "probe", "inner", tool), contextvars.copy_context())
    return got, want


def _fast_path_self_check(model: Any = None) -> bool:
    """The direct call of a plain function tool (`_plain_function`,
    `_nested_ctx`, `_call_plain`) relies on private parts of pydantic-ai: it
    is used only when a probe tool called both ways gives the same answer.
    Run at import, on an event loop of its own (in a thread of its own when
    the importing thread is running a loop)."""
    if _CombinedToolsetTool is None or _FunctionToolsetTool is None:
        return False  # pragma: no cover - depends on the pydantic-ai version
    try:
        from pydantic_ai._utils import disable_threads  # sync tools inline: no worker thread for the probe
    except ImportError:  # pragma: no cover - depends on the pydantic-ai version
        disable_threads = contextlib.nullcontext  # type: ignore[assignment]

    async def probe() -> Optional[Tuple[Any, Any]]:
        with disable_threads():
            return await _probe_calls(model)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            outcome = loop.run_until_complete(probe())
        finally:
            loop.close()
    else:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="toolcell-self-check") as pool:
            outcome = pool.submit(asyncio.run, probe()).result(timeout=60)
    if outcome is None:
        return False  # pragma: no cover - depends on the pydantic-ai version
    got, want = outcome
    expected = {"deps": {"probe": 1}, "tool": "probe", "id": "inner", "retry": 2, "max_retries": 3,
                "args": [1, "two", 1.5, "five"]}
    return bool(got == want == expected)


def _fast_path_works() -> bool:
    try:
        return _fast_path_self_check()
    except Exception:  # pragma: no cover - depends on the pydantic-ai version
        pass
    try:  # a pydantic-ai that needs a model in the run context (a 30 ms import: only then)
        from pydantic_ai.models.test import TestModel

        return _fast_path_self_check(TestModel())
    except Exception:  # pragma: no cover - depends on the pydantic-ai version
        log.debug("toolcell: the self-check of the direct call of plain function tools failed", exc_info=True)
        return False


_FAST_PATH = _fast_path_works()
if not _FAST_PATH:  # pragma: no cover - depends on the pydantic-ai version
    log.debug("toolcell: plain function tools called from code go through pydantic-ai's tool manager")


class _SessionLock:
    """Lets one cell of a session run at a time, across event loops and
    threads (an ``asyncio.Lock`` serves one loop): ``async with lock:``.
    Waiters are served in order; a cancelled waiter leaves the queue (or
    passes the lock on, when it was handed over as it was cancelled).

    The lock belongs to an event loop (the holder's); a holder whose loop
    closed can never give it back, so a waiter takes it over, and a waiter
    whose holder's loop has not run for ``STALLED`` seconds gives up with a
    ``UserError`` instead of waiting forever (``run_until_complete`` can
    return with a run still holding it, e.g. after ``asyncio.wait``)."""

    POLL = 1.0
    STALLED = 30.0

    def __init__(self, name: str = "") -> None:
        self._name = name
        self._mutex = threading.Lock()
        self._held = False
        self._holder: Optional[asyncio.AbstractEventLoop] = None
        self._waiters: Deque[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]] = collections.deque()

    async def __aenter__(self) -> "_SessionLock":
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._held:
                self._held = True
                self._holder = loop
                return self
            waiter = (loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await self._wait(waiter)
        except BaseException:
            with self._mutex:
                try:
                    self._waiters.remove(waiter)
                    handed = False
                except ValueError:
                    handed = True  # the lock was ours already
            if handed:
                self._release()
            raise
        return self

    async def _wait(self, waiter: Tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]) -> None:
        loop, fut = waiter
        stalled = 0.0
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.POLL)
                return
            except asyncio.TimeoutError:
                pass
            with self._mutex:
                holder = self._holder
                if fut.done() or waiter not in self._waiters:
                    continue  # handed over meanwhile: the next wait returns at once
                if holder is not None and holder.is_closed():
                    # its holder's loop is gone and with it the release: the lock is this waiter's
                    self._waiters.remove(waiter)
                    self._holder = loop
                    log.warning("toolcell: session %r was held by a run whose event loop closed; taken over", self._name)
                    return
            stalled = stalled + self.POLL if holder is not None and not holder.is_running() else 0.0
            if stalled >= self.STALLED:
                raise UserError(
                    f"ToolcellCodeMode: toolcell session {self._name!r} is held by a run whose event loop has "
                    f"not run for {int(stalled)} s (a run left pending when its loop stopped?); "
                    "finish or cancel that run, or use another session"
                )

    async def __aexit__(self, *exc: Any) -> None:
        self._release()

    def _release(self) -> None:
        with self._mutex:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_wake, fut)
                    self._holder = loop
                    return  # the lock passes to that waiter
                except RuntimeError:  # its loop is closed: the next one
                    continue
            self._held = False
            self._holder = None


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


# The toolcell sessions whose cells the current code runs inside: (client id, session).
_IN_CELL: "contextvars.ContextVar[Tuple[Tuple[int, str], ...]]" = contextvars.ContextVar(
    "toolcell_pydantic_ai_in_cell", default=()
)

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
        self._ids = itertools.count(1)
        self.tool_calls: Dict[str, ToolCallPart] = {}
        self.tool_returns: Dict[str, ToolReturnPart] = {}
        self.tool_errors: Dict[str, str] = {}
        self.user_content: List[Any] = []
        self.emits: "set[asyncio.Future[Any]]" = set()  # the pending ones only: a chatty cell piles none up
        self.emit_events = True
        # Calls may come from several threads of the cell at once.
        self._lock = threading.Lock()
        self._plain: Dict[str, Any] = {}
        manager = getattr(ctx, "tool_manager", None)
        self.root = getattr(manager, "root_capability", None) or getattr(ctx, "root_capability", None)
        self.default_max_retries = getattr(manager, "default_max_retries", 1)
        hooks = _tool_hooks(self.root)
        self.hooked = bool(hooks)
        if hooks and not _MANAGED:  # pragma: no cover - depends on the pydantic-ai version
            log.warning(
                "toolcell: this pydantic-ai has no tool manager to run calls from code through, so the "
                "capabilities' tool hooks (%s) do not see them; upgrade pydantic-ai", ", ".join(hooks)
            )
        self._manager: Any = None
        limits = getattr(ctx, "usage_limits", None)
        self.usage_limits = limits if getattr(limits, "tool_calls_limit", None) is not None else None
        self._in_flight = 0
        self._uncounted = 0  # direct calls done, counted in the run's usage by `finish`
        self._waiting: "set[concurrent.futures.Future[Any]]" = set()
        self._done = False

    # ---- the way in: a client pool thread, for every call of the cell

    def call(self, name: str, arguments: Dict[str, Any]) -> Any:
        """Run one nested call. A plain function reached directly (`_plain_function`) runs on this (a client
        pool) thread; any other call, or any call when a capability has tool hooks, on the run's loop,
        through the run's tool manager, and this thread waits for it."""
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"{name}: this tool is not available in this step of the run")
        schema = self._plain.get(name, _MISSING)
        if schema is _MISSING:  # judged once per tool and run_code call
            schema = self._plain[name] = self._direct(tool)
        if schema is None:
            return self._on_loop(self._run(name, tool, arguments))
        call_id = self._begin(name, arguments)
        try:
            counted = self._count_in()
            try:
                args = tool.args_validator.validate_python(arguments, context=self.ctx.validation_context)
                nested = _nested_ctx(self.ctx, name, call_id, tool, self._nested_manager())
                result = _call_plain(schema, args, nested, self.context.copy())
                if type(result) not in _PLAIN_TYPES and inspect.isawaitable(result):  # a def returning an awaitable
                    result = self._on_loop(_settle(result))
            finally:
                if counted:
                    self._count_out()
        except BaseException as e:
            err = self._failed(call_id, name, e)
            if err is e:
                raise
            raise err from e
        return self._returned(call_id, name, result, count=True)

    def _direct(self, tool: ToolsetTool[Any]) -> Optional[Any]:
        """The function schema when the call may be made directly (`_plain_function`), else None."""
        if not _FAST_PATH or self.hooked or getattr(tool, "args_validator_func", None) is not None:
            return None
        if not _MANAGED and not isinstance(self.ctx.tracer, NoOpTracer):
            return None  # pragma: no cover - old pydantic-ai: the span is made in `_legacy`
        return _plain_function(self.toolset, tool)

    def _on_loop(self, coro: Any) -> Any:
        """Run `coro` on the run's event loop, in the ``run_code`` call's context, and wait for it here
        (a client pool thread) for as long as the cell waits for the call."""
        try:
            # run_coroutine_threadsafe makes the task in the context it is called in: a copy of the call's
            fut = self.context.copy().run(asyncio.run_coroutine_threadsafe, coro, self.loop)
        except RuntimeError:  # the run's loop is closed
            coro.close()
            raise ToolError("the agent run this cell belongs to has ended") from None
        with self._lock:
            if self._done:
                fut.cancel()
            self._waiting.add(fut)
        served = current_tool_call()
        deadline = served.deadline_ms if served is not None else None
        try:
            # past the cell's deadline the server has cancelled the call: cancel it here too
            return fut.result(timeout=None if deadline is None else deadline / 1000 + 1)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise ToolError("the call ran past the time the cell had left, and was cancelled") from None
        except concurrent.futures.CancelledError:
            raise ToolError("the call was cancelled: the run_code call it belongs to ended") from None
        finally:
            with self._lock:
                self._waiting.discard(fut)

    def finish(self) -> None:
        """The cell is over (on the run's loop, in the ``run_code`` call's context): count the direct calls
        in the run's usage (and its span's), cancel the nested calls still running on the loop (nobody
        waits for them)."""
        with self._lock:
            self._done = True
            waiting = list(self._waiting)
            uncounted, self._uncounted = self._uncounted, 0
        for _ in range(uncounted):
            _record_tool_call(self.ctx.usage)
        for fut in waiting:
            fut.cancel()

    # ---- bookkeeping

    def _begin(self, name: str, arguments: Dict[str, Any]) -> str:
        """Counts and records the call; its id."""
        call_id = f"{self.parent_id}__{next(self._ids)}"  # (itertools.count: atomic)
        part = ToolCallPart(tool_name=name, args=dict(arguments), tool_call_id=call_id)
        with self._lock:
            self.tool_calls[call_id] = part
        return call_id

    def _count_in(self) -> bool:
        """Checks the run's ``UsageLimits(tool_calls_limit=...)`` before a nested call, as the agent checks
        it before the model's calls (raises ``UsageLimitExceeded``); True when it counts the call."""
        limits = self.usage_limits
        if limits is None:
            return False
        with self._lock:
            projected = copy.copy(self.ctx.usage)
            # the calls under way or not counted yet, this one, and run_code's own (counted when it returns)
            projected.tool_calls += self._in_flight + self._uncounted + 2
            limits.check_before_tool_call(projected)
            self._in_flight += 1
        return True

    def _count_out(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _failed(self, call_id: str, name: str, e: BaseException) -> BaseException:
        """The exception a failed nested call raises in the host (a ToolError the cell sees)."""
        message = self._error_text(name, e)
        if message is None:
            return e
        with self._lock:
            self.tool_errors[call_id] = message
        return ToolError(message)

    def _returned(self, call_id: str, name: str, result: Any, count: bool) -> Any:
        """Records a nested call's result; the value the cell gets. `count`: add it to the run's usage
        (the tool manager counts the calls it makes itself)."""
        metadata = None
        if isinstance(result, ToolReturn):
            metadata = result.metadata
            if result.content:
                with self._lock:
                    self.user_content.extend([result.content] if isinstance(result.content, str) else result.content)
            result = result.return_value
        if _RETURN_HAS_METADATA:
            part = ToolReturnPart(tool_name=name, content=result, tool_call_id=call_id, metadata=metadata)
        else:  # pragma: no cover - depends on the pydantic-ai version
            part = ToolReturnPart(tool_name=name, content=result, tool_call_id=call_id)
        with self._lock:
            self.tool_returns[call_id] = part
            if count and hasattr(self.ctx.usage, "tool_calls"):
                # added to the run's usage when the cell ends, on the run's loop (`finish`): the usage is
                # the loop's to change, and waking the loop for each call would cost a thread switch
                self._uncounted += 1
        return to_jsonable_python(result, serialize_unknown=True)

    # ---- a call on the run's loop

    async def _run(self, name: str, tool: ToolsetTool[Any], arguments: Dict[str, Any]) -> Any:
        call_id = self._begin(name, arguments)
        try:
            counted = self._count_in()
            try:
                if _MANAGED:
                    result = await self._managed(name, call_id, arguments)
                else:  # pragma: no cover - depends on the pydantic-ai version
                    result = await self._legacy(name, call_id, tool, arguments)
            finally:
                if counted:
                    self._count_out()
        except BaseException as e:
            err = self._failed(call_id, name, e)
            if err is e:
                raise
            raise err from e
        return self._returned(call_id, name, result, count=not _MANAGED)

    def _nested_manager(self) -> Any:
        """The tool manager of the sandboxed tools with the run's root capability (made once per
        ``run_code`` call; None on a pydantic-ai without one)."""
        manager = self._manager
        if manager is None and _MANAGED:
            with self._lock:
                if self._manager is None:
                    self._manager = _ToolManager(**_only(
                        _TM_FIELDS, toolset=self.toolset, root_capability=self.root, ctx=self.ctx, tools=self.tools,
                        default_max_retries=self.default_max_retries,
                    ))
                manager = self._manager
        return manager

    async def _managed(self, name: str, call_id: str, arguments: Dict[str, Any]) -> Any:
        """The call through a tool manager of the sandboxed tools with the run's root capability: its
        validation, availability check, the capabilities' tool hooks (``before_tool_validate`` …
        ``on_tool_execute_error``), the toolset's ``call_tool``, its usage count; errors come back raw."""
        manager = self._nested_manager()
        part = ToolCallPart(tool_name=name, args=dict(arguments), tool_call_id=call_id)
        validated = await manager.validate_tool_call(part, wrap_validation_errors=False)
        return await manager.execute_tool_call(validated, wrap_validation_errors=False)

    async def _legacy(self, name: str, call_id: str, tool: ToolsetTool[Any],
                      arguments: Dict[str, Any]) -> Any:  # pragma: no cover - depends on the pydantic-ai version
        """The call on a pydantic-ai whose tool manager cannot make it (no capability hooks)."""
        ctx = self.ctx
        args = tool.args_validator.validate_python(arguments, context=ctx.validation_context)
        nested_ctx = _nested_ctx(ctx, name, call_id, tool)
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
            return await (asyncio.wait_for(pending, timeout) if timeout else pending)

    @staticmethod
    def _error_text(name: str, e: BaseException) -> Optional[str]:
        """The message the cell's ``ToolError`` carries, or None to let the exception through as it is."""
        if isinstance(e, ToolError):
            return e.message
        if isinstance(e, ModelRetry) or (_ToolFailed is not None and isinstance(e, _ToolFailed)):
            return str(getattr(e, "message", e))
        if _DEFERRALS and isinstance(e, _DEFERRALS):
            return (
                f"{type(e).__name__}: this call needs approval or runs outside the agent (deferred, by the tool "
                "or a capability), which code cannot wait for; it was not made"
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

    # ---- output

    def on_chunk(self, chunk: Chunk, on_output: Optional[Callable[[Chunk], Any]]) -> None:
        """Pass a piece of output on, to ``on_output`` and into the run's event stream.

        Called on the loop awaiting the cell (the run's); everything it starts runs on the run's loop.
        """
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # pragma: no cover - the client always calls it on a loop
            same_loop = False
        if same_loop:
            self._deliver(chunk, on_output)
        else:  # pragma: no cover - the client calls it on the loop awaiting the cell
            self.loop.call_soon_threadsafe(self._deliver, chunk, on_output)

    def _deliver(self, chunk: Chunk, on_output: Optional[Callable[[Chunk], Any]]) -> None:
        if on_output is not None:
            try:
                out = self.context.run(on_output, chunk)
                if inspect.isawaitable(out):
                    self._pending(asyncio.ensure_future(out))
            except Exception:
                log.exception("toolcell: the on_output callback raised")
        if _CustomEvent is None or not self.emit_events or not chunk.text:
            return
        event = ToolcellOutputEvent(session=chunk.session, stream=chunk.stream, text=chunk.text)
        self._pending(asyncio.ensure_future(self._emit(event)))

    def _pending(self, fut: "asyncio.Future[Any]") -> None:
        """Keeps `fut` until it is done (the end of the cell waits for the ones left)."""
        if not fut.done():
            self.emits.add(fut)
            fut.add_done_callback(self.emits.discard)

    async def _emit(self, event: Any) -> None:
        try:
            await self.ctx.emit(event)
        except UserError:  # this run has no event stream to emit into
            self.emit_events = False


async def _settle(awaitable: Any) -> Any:
    return await awaitable


_Wanted = Dict[str, Tuple[str, ToolDefinition, Optional[Dict[str, Any]]]]


class _Session:
    """A toolcell session as this adapter keeps it: its tools, its description, its running call.

    One per (client, session name), whatever the number of toolsets using it (see `_session_of`):
    they share the lock, so one cell of the session runs at a time and `active` is always the call
    whose cell the server runs, and the registrations, which each ``run_code`` call brings to its
    own toolset's tools (under the lock) before its cell.
    """

    def __init__(self, name: str):
        self.name = name
        self.registered: Dict[str, str] = {}  # tool name -> fingerprint of its definition
        self.description: Optional[Tuple[Any, str]] = None  # (the registrations it was made for, the text)
        self.active: Optional[_Call] = None
        self.lock = _SessionLock(name)  # one cell (and one registration) at a time, whichever thread or loop asks


# client -> session name -> _Session: shared by every toolset (and capability) on that client
_SESSIONS: "weakref.WeakKeyDictionary[AsyncToolcell, Dict[str, _Session]]" = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def _session_of(client: AsyncToolcell, name: str) -> _Session:
    with _SESSIONS_LOCK:
        by_name = _SESSIONS.get(client)
        if by_name is None:
            by_name = _SESSIONS[client] = {}
        s = by_name.get(name)
        if s is None:
            s = by_name[name] = _Session(name)
        return s


def _forget_session(client: AsyncToolcell, name: str) -> Optional[_Session]:
    with _SESSIONS_LOCK:
        return (_SESSIONS.get(client) or {}).pop(name, None)


def _forget_client(client: AsyncToolcell) -> None:
    with _SESSIONS_LOCK:
        _SESSIONS.pop(client, None)


def _registrations_key(wanted: _Wanted) -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted((n, fp) for n, (fp, _, _) in wanted.items()))


def _wanted(tools: Mapping[str, ToolsetTool[Any]]) -> _Wanted:
    """The definitions to register for `tools`: name -> (fingerprint, tool definition, output schema)."""
    wanted: _Wanted = {}
    for name, tool in tools.items():
        td = tool.tool_def
        output_schema = _output_schema(tool)
        fp = json.dumps([td.description or "", td.parameters_json_schema, output_schema],
                        sort_keys=True, default=str)
        wanted[name] = (fp, td, output_schema)
    return wanted


class _Shared:
    """What every copy of one toolset (and every run of one capability) shares: the client, the sessions.

    Used from any thread and event loop: nothing here is tied to a loop (the
    nested calls are plain functions run on the client's pool threads, which
    hand them to the loop of the run whose cell made them), so one client
    serves runs in several threads (``run_sync`` from a thread pool), and
    outlives an ``asyncio.run``.
    """

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
        self._lock = threading.Lock()  # guards `owned` (runs in several threads)

    def client(self) -> AsyncToolcell:
        """The client: the one given, else the one this toolset started on first use."""
        if self.given is not None:
            return self.given
        owned = self.owned
        if owned is None:
            with self._lock:
                if self.owned is None:
                    self.owned = AsyncToolcell(config=self.config)
                owned = self.owned
        return owned

    def drop_owned(self) -> None:
        """Forget the server this toolset started (it exited): the next call starts a new one."""
        with self._lock:
            old, self.owned = self.owned, None
        if old is not None:
            _forget_client(old)
            try:
                old.close(timeout=5)
            except Exception:  # pragma: no cover - best effort
                log.debug("toolcell: closing the old server failed", exc_info=True)

    def session(self, name: str) -> _Session:
        """The session's bookkeeping, shared with every toolset on the same client."""
        return _session_of(self.client(), name)

    async def prepare(self, session: _Session, tools: Mapping[str, ToolsetTool[Any]]) -> str:
        """Register the tools of this step with the session (those new or changed), drop the rest; the
        description of ``run_code`` for them."""
        wanted = _wanted(tools)
        key = _registrations_key(wanted)
        described = session.description
        if described is not None and described[0] == key and self._registered_key(session) == key:
            return described[1]  # nothing changed (every step of a run, mostly)
        if (id(self.client()), session.name) in _IN_CELL.get():
            # asked from inside a cell of this session (a nested agent sharing it), which holds the
            # session's lock: leave the registrations of the running cell alone
            if described is not None:
                return described[1]
            return _description_for_run_code(await self.client().schema(format="openai", session=session.name))
        async with session.lock:
            await self.sync_tools(session, wanted)
            return await self.description(session)

    @staticmethod
    def _registered_key(session: _Session) -> Tuple[Tuple[str, str], ...]:
        return tuple(sorted(session.registered.items()))

    async def sync_tools(self, session: _Session, wanted: _Wanted) -> None:
        """Bring the session's registrations to `wanted` (the caller holds the session's lock)."""
        if self._registered_key(session) == _registrations_key(wanted):
            return
        tc = self.client()
        gone = [n for n in session.registered if n not in wanted]
        if gone:
            await tc.unregister(*gone, session=session.name)
            for n in gone:
                session.registered.pop(n, None)
        for name, (fp, td, output_schema) in wanted.items():
            if session.registered.get(name) == fp:
                continue
            try:
                await tc.register_tool(
                    name,
                    self._dispatcher(session, name),
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

    @staticmethod
    def _dispatcher(session: _Session, name: str) -> Callable[..., Any]:
        # A plain function, whatever the tool: the client runs it on a pool
        # thread, and the call goes on from there to the run whose cell
        # made it (`_Call.call`), on that run's own thread and loop.
        def call(**arguments: Any) -> Any:
            active = session.active
            if active is None:
                raise ToolError(f"{name}: no run_code call is running in this session, so the tool cannot run")
            return active.call(name, arguments)

        call.__name__ = name
        return call

    async def description(self, session: _Session) -> str:
        """The ``run_code`` description for the session's registrations (the caller holds its lock)."""
        key = self._registered_key(session)
        if session.description is None or session.description[0] != key:
            schema = await self.client().schema(format="openai", session=session.name)
            session.description = (key, _description_for_run_code(schema))
        return session.description[1]

    async def end_session(self, name: str) -> None:
        """Shut the session's kernel down and forget its tools."""
        tc = self.given if self.given is not None else self.owned
        if tc is None:
            return
        s = _forget_session(tc, name)
        try:
            await tc.shutdown_session(name)
            if s is not None and s.registered:
                await tc.unregister(*s.registered, session=name)
        except (ServerExited, RPCError) as e:
            log.debug("toolcell: ending session %s failed: %s", name, e)

    async def aclose(self) -> None:
        with self._lock:
            tc, self.owned = self.owned, None
        if tc is not None:
            _forget_client(tc)
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
        toolcell: An ``AsyncToolcell`` to run the cells in (runs in any
            thread and event loop may use it). Without it the toolset starts
            its own on first use, with toolcell's built-in tools disabled and
            ``max_tool_calls`` nested calls per cell, and keeps it (across
            ``asyncio.run`` calls and threads) until ``aclose()`` or the end
            of the process.
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
        description = await shared.prepare(session, sandboxed)
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
        client = shared.client()
        inside = _IN_CELL.get()
        key = (id(client), tool.session)
        if key in inside:
            # the session's lock is held by the cell this code runs in: waiting would never end
            raise UserError(
                f"ToolcellCodeMode: run_code was called from inside a cell of the same toolcell session "
                f"{tool.session!r} (a sub-agent sharing the outer agent's session?); that cell waits for this "
                "call, so this one would wait forever. Give the nested agent a session of its own."
            )
        async with session.lock:
            # the session's registrations may be another toolset's (sharing the client and the
            # session): this call's own, now that no other cell of the session can run
            await shared.sync_tools(session, _wanted(tool.sandboxed))
            token = _IN_CELL.set(inside + (key,))
            try:
                call = _Call(self.wrapped, ctx, tool.sandboxed, tool.session)  # (keeps the context it is made in)
            finally:
                _IN_CELL.reset(token)
            session.active = call
            try:
                result = await client.execute(
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
                call.finish()
                if call.emits:
                    await asyncio.gather(*list(call.emits), return_exceptions=True)
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
